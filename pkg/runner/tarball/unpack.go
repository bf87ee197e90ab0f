// Package tarball unpacks a configuration delivered as a tar+gzip archive
// (an OCI artifact's layer, a Flux artifact) with limits on its size and
// file count, through an os.Root so that no entry reaches outside the
// directory, and fetches such an archive over HTTP against a known digest.
package tarball

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// Limits bound what an archive may hold.
type Limits struct {
	// Size is the most bytes of the archive, compressed and unpacked each.
	Size int64
	// Files is the most entries of the archive.
	Files int
}

// DefaultLimits are the limits of a run's source archive: 64 MiB and
// 10,000 entries.
var DefaultLimits = Limits{Size: 64 << 20, Files: 10000}

// OrDefault returns l with its zero members taken from DefaultLimits.
func (l Limits) OrDefault() Limits {
	if l.Size <= 0 {
		l.Size = DefaultLimits.Size
	}
	if l.Files <= 0 {
		l.Files = DefaultLimits.Files
	}
	return l
}

// Unpack extracts a tar+gzip stream into dst through an os.Root, so that
// no entry reaches outside it whatever its name: directories and regular
// files only (symbolic and hard links, devices and the like are skipped and
// counted), no absolute names and no ".." elements, at most limits.Files
// entries and limits.Size bytes unpacked.
func Unpack(r io.Reader, dst string, limits Limits) error {
	gz, err := gzip.NewReader(r)
	if err != nil {
		return fmt.Errorf("not gzip: %w", err)
	}
	defer gz.Close()
	root, err := os.OpenRoot(dst)
	if err != nil {
		return err
	}
	defer root.Close()
	tr := tar.NewReader(gz)
	var files int
	var size int64
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading the archive: %w", err)
		}
		if files++; files > limits.Files {
			return fmt.Errorf("the archive has more than %d entries", limits.Files)
		}
		name, err := cleanName(h.Name)
		if err != nil {
			return fmt.Errorf("entry %q: %w", h.Name, err)
		}
		if name == "." {
			continue
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := mkdirAll(root, name); err != nil {
				return err
			}
		case tar.TypeReg:
			if size += h.Size; size > limits.Size {
				return fmt.Errorf("the archive unpacks to more than %d bytes", limits.Size)
			}
			if dir := path.Dir(name); dir != "." {
				if err := mkdirAll(root, dir); err != nil {
					return err
				}
			}
			mode := fs.FileMode(0o600)
			if h.Mode&0o100 != 0 {
				mode = 0o700
			}
			f, err := root.OpenFile(filepath.FromSlash(name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
			if err != nil {
				return fmt.Errorf("entry %q: %w", h.Name, err)
			}
			_, err = io.CopyN(f, tr, h.Size)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("entry %q: %w", h.Name, err)
			}
		case tar.TypeXGlobalHeader, tar.TypeXHeader:
		default:
			// Links and special files are not part of a configuration:
			// a link could point anywhere.
		}
	}
}

func mkdirAll(root *os.Root, name string) error {
	if err := root.MkdirAll(filepath.FromSlash(name), 0o700); err != nil {
		return fmt.Errorf("creating %s: %w", name, err)
	}
	return nil
}

// cleanName cleans a slash-separated entry name ("./" prefixes are
// common) and refuses absolute names and ".." elements.
func cleanName(name string) (string, error) {
	name = strings.TrimSuffix(name, "/")
	if strings.HasPrefix(name, "/") || strings.Contains(name, `\`) {
		return "", errors.New("absolute or non-portable name")
	}
	for _, el := range strings.Split(name, "/") {
		if el == ".." {
			return "", errors.New(`name contains ".."`)
		}
	}
	if name == "" {
		return ".", nil
	}
	return path.Clean(name), nil
}
