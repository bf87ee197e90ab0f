package e2e

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/terrarun/terrarun/pkg/engineversion"
)

// openImage reads the only image of the OCI layout at dir (make images
// writes one per image).
func openImage(dir string) (v1.Image, error) {
	index, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("%s is not an OCI image layout (make images writes it): %w", dir, err)
	}
	manifest, err := index.IndexManifest()
	if err != nil {
		return nil, err
	}
	if len(manifest.Manifests) != 1 {
		return nil, fmt.Errorf("%s holds %d images, want 1", dir, len(manifest.Manifests))
	}
	return index.Image(manifest.Manifests[0].Digest)
}

// extractImage unpacks the image's file system (its layers flattened) into
// dest, with the modes and owners it has in the image. It runs as root, so
// every write goes through an os.Root: no entry, and no symbolic link the
// image holds, can make it write outside dest.
func extractImage(img v1.Image, dest string) error {
	if err := os.MkdirAll(dest, 0o755); err != nil {
		return err
	}
	root, err := os.OpenRoot(dest)
	if err != nil {
		return err
	}
	defer root.Close()
	fs := mutate.Extract(img)
	defer fs.Close()
	tr := tar.NewReader(fs)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := strings.TrimPrefix(filepath.Clean("/"+h.Name), "/")
		if name == "" {
			continue
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := root.MkdirAll(name, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := root.MkdirAll(filepath.Dir(name), 0o755); err != nil {
				return err
			}
			f, err := root.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		case tar.TypeSymlink:
			if err := root.MkdirAll(filepath.Dir(name), 0o755); err != nil {
				return err
			}
			if err := root.Symlink(h.Linkname, name); err != nil {
				return err
			}
			continue
		default:
			return fmt.Errorf("%s: unexpected entry type %c in the image", h.Name, h.Typeflag)
		}
		if err := root.Chown(name, h.Uid, h.Gid); err != nil {
			return err
		}
		if err := root.Chmod(name, os.FileMode(h.Mode).Perm()|modeBits(h.Mode)); err != nil {
			return err
		}
		// As container runtimes do: the engines' version records name
		// their modification times.
		if h.Typeflag == tar.TypeReg {
			if err := root.Chtimes(name, h.ModTime, h.ModTime); err != nil {
				return err
			}
		}
	}
}

// modeBits are the setuid, setgid and sticky bits of a tar mode.
func modeBits(mode int64) os.FileMode {
	var m os.FileMode
	if mode&0o4000 != 0 {
		m |= os.ModeSetuid
	}
	if mode&0o2000 != 0 {
		m |= os.ModeSetgid
	}
	if mode&0o1000 != 0 {
		m |= os.ModeSticky
	}
	return m
}

// TestExecutorImageStandsAlone runs the executor image's own tools as its
// user, chrooted into its file system, so that nothing of the host is
// used: a stage's shell and utilities, git cloning a repository, ssh, the
// engine and the executor. And each image's tarball holds the image of its
// layout.
func TestExecutorImageStandsAlone(t *testing.T) {
	for _, name := range []string{"terrarun-executor", "terrarun-apiserver"} {
		img, err := openImage(filepath.Join(cl.images, name))
		if err != nil {
			t.Fatal(err)
		}
		// The tarball's manifest is Docker's, so compare the configurations
		// (which name every layer by the digest of its content).
		want, _ := img.ConfigName()
		fromTar, err := tarball.ImageFromPath(filepath.Join(cl.images, name+".tar"), nil)
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := fromTar.ConfigName(); got != want {
			t.Errorf("%s.tar holds the image with configuration %s, the layout %s", name, got, want)
		}
		cfg, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Config.User != "65532:65532" || len(cfg.Config.Entrypoint) != 1 || cfg.Config.Entrypoint[0] != "/usr/local/bin/"+name {
			t.Errorf("%s: user %q, entrypoint %q", name, cfg.Config.User, cfg.Config.Entrypoint)
		}
	}

	// What a container runtime gives every container: /dev's null, zero and
	// random devices (git needs them).
	root := t.TempDir()
	img, err := openImage(filepath.Join(cl.images, "terrarun-executor"))
	if err != nil {
		t.Fatal(err)
	}
	if err := extractImage(img, root); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(root, "dev"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, minor := range map[string]int{"null": 3, "zero": 5, "random": 8, "urandom": 9} {
		if err := syscall.Mknod(filepath.Join(root, "dev", name), syscall.S_IFCHR|0o666, 1<<8|minor); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Join(root, "dev", name), 0o666); err != nil {
			t.Fatal(err)
		}
	}
	script := `set -e
git --version
ssh -V 2>&1
tofu version | head -n 1
terrarun-executor 2>&1 | head -n 1 || true
cd /tmp
git init -q -b main src
cd src
echo 'resource "terraform_data" "x" {}' > main.tf
git -c user.name=e2e -c user.email=e2e@example.com add main.tf
git -c user.name=e2e -c user.email=e2e@example.com commit -q -m first
cd /tmp
git clone -q file:///tmp/src dst
cat dst/main.tf | tr a-z A-Z
`
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/home/nonroot"}
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root, Credential: &syscall.Credential{Uid: 65532, Gid: 65532}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the executor image's tools, chrooted: %v\n%s", err, out)
	}
	// The image's record of its engine's version describes the engine, and
	// says what it says.
	bin := filepath.Join(root, "usr", "local", "bin")
	rec, err := engineversion.Installed(filepath.Join(bin, "tofu"))
	if err != nil || rec == nil {
		t.Fatalf("the executor image has no record of its tofu's version: %v", err)
	}
	for _, want := range []string{"git version ", "OpenSSH", "OpenTofu v" + rec.Version + "\n", "usage: terrarun-executor", `RESOURCE "TERRAFORM_DATA" "X" {}`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the executor image's tools did not print %q:\n%s", want, out)
		}
	}
}
