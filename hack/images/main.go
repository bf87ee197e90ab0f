// Command images builds terrarun's container images without a container
// runtime, with go-containerregistry: `make images` runs it. It writes each
// image as an OCI image layout (a directory that `crane push`, `skopeo copy
// oci:…` and `oras` take) and as an image tarball (for `docker load`, `kind
// load image-archive` and `ctr images import`):
//
//	terrarun-apiserver  the static server binary on a minimal base
//	terrarun-executor   the static executor, OpenTofu, optionally terraform
//	                    (-terraform: its licence, the BUSL, may not let you
//	                    ship it), and the userland its stages need: sh and a
//	                    few utilities for local-exec and the git askpass
//	                    script, git with its https helper, and ssh
//
// With -static NAME=PATH (repeatable) it builds only single-binary images
// instead, each the static binary PATH at /ko-app/NAME on the same base,
// as ko lays out Tekton Pipelines' images: hack/tekton.sh builds Tekton's
// entrypoint, nop and workingdirinit images so.
//
// Each engine's version is asked once, here, and recorded in the executor
// image (package engineversion), so that no stage asks it again.
//
// The userland is taken from the build host's Debian packages, with every
// shared library the binaries load (found with ldd), and each package's
// copyright file; the image's packages label names each package and
// version. The base holds /etc/passwd and /etc/group with the nonroot user
// 65532 the images run as, the host's CA bundle and a /tmp of mode 1777.
//
// Files and layers are stamped with -epoch (SOURCE_DATE_EPOCH by default, else
// the last commit's time), so two builds of one commit on one host make the
// same digests.
package main

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/terrarun/terrarun/pkg/engineversion"
)

// nonroot is the user and group the images run as.
const nonroot = 65532

// executorPath is where the executor image holds terrarun-executor.
const executorPath = "/usr/local/bin/terrarun-executor"

// userland is what the executor's stages run besides the engine: sh and the
// utilities of the git askpass script (cat, tr) and of typical local-exec
// provisioners, git with its https remote helper, and ssh for ssh git
// sources. Paths are as on a merged-/usr Debian host.
var userland = []string{
	"/usr/bin/sh", "/usr/bin/dash", "/usr/bin/cat", "/usr/bin/tr", "/usr/bin/false", "/usr/bin/true",
	"/usr/bin/env", "/usr/bin/echo", "/usr/bin/printf", "/usr/bin/ls", "/usr/bin/mkdir", "/usr/bin/rm",
	"/usr/bin/cp", "/usr/bin/mv", "/usr/bin/sleep", "/usr/bin/date", "/usr/bin/head", "/usr/bin/tail",
	"/usr/bin/wc", "/usr/bin/sort", "/usr/bin/grep", "/usr/bin/sed",
	"/usr/bin/git", "/usr/bin/git-upload-pack", "/usr/lib/git-core/git-remote-http", "/usr/lib/git-core/git-remote-https",
	"/usr/bin/ssh",
	// The paths scripts name (#!/bin/sh, GIT_ASKPASS=/bin/false): with them
	// come the host's merged-/usr links, as the loader's /lib64 comes with
	// the libraries.
	"/bin/sh", "/bin/false",
}

type options struct {
	out, version, registry, epoch string
	apiserver, executor, tofu     string
	terraform                     string
	static                        staticImages
}

// staticImages are the -static flags: image name to static binary.
type staticImages map[string]string

func (s staticImages) String() string { return fmt.Sprint(map[string]string(s)) }

func (s staticImages) Set(v string) error {
	name, file, ok := strings.Cut(v, "=")
	if !ok || name == "" || file == "" || strings.ContainsAny(name, "/:@ ") {
		return fmt.Errorf("want NAME=PATH (NAME an image name without / or :), not %q", v)
	}
	s[name] = file
	return nil
}

func main() {
	o := options{static: staticImages{}}
	flag.Var(o.static, "static", "NAME=PATH: build only single-binary images, each the static binary PATH at /ko-app/NAME (as ko lays out Tekton's images); repeatable")
	flag.StringVar(&o.out, "out", "bin/images", "directory to write <image>/ (OCI layout) and <image>.tar into")
	flag.StringVar(&o.version, "version", "dev", "the images' tag and org.opencontainers.image.version")
	flag.StringVar(&o.registry, "registry", "ghcr.io/terrarun", "the repository prefix of the images' names")
	flag.StringVar(&o.epoch, "epoch", os.Getenv("SOURCE_DATE_EPOCH"), "Unix time stamped on files, layers and images (default: the last commit's time)")
	flag.StringVar(&o.apiserver, "apiserver", "bin/terrarun-apiserver", "the terrarun-apiserver binary (static)")
	flag.StringVar(&o.executor, "executor", "bin/terrarun-executor", "the terrarun-executor binary (static)")
	flag.StringVar(&o.tofu, "tofu", "", "the tofu binary for the executor image (required; hack/engine.sh --build makes one)")
	flag.StringVar(&o.terraform, "terraform", "", "a terraform binary to add to the executor image, where its licence lets you ship it")
	flag.Parse()
	if err := build(o); err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
}

func build(o options) error {
	if o.tofu == "" && len(o.static) == 0 {
		return errors.New("-tofu is required: the executor image ships OpenTofu (hack/engine.sh --build prints one)")
	}
	if runtime.GOOS != "linux" {
		return fmt.Errorf("the images hold the build host's binaries, so they are built on linux, not %s", runtime.GOOS)
	}
	created, err := epoch(o.epoch)
	if err != nil {
		return err
	}
	b := &builder{created: created}
	base, err := b.base()
	if err != nil {
		return err
	}
	if len(o.static) > 0 {
		return b.static(o, base)
	}

	apiserver, err := b.files("terrarun-apiserver", map[string]string{"/usr/local/bin/terrarun-apiserver": o.apiserver}, nil)
	if err != nil {
		return err
	}
	if err := b.write(o, "terrarun-apiserver", "/usr/local/bin/terrarun-apiserver", nil, base, apiserver); err != nil {
		return err
	}

	land, packages, err := b.userland()
	if err != nil {
		return err
	}
	engines := map[string]string{"/usr/local/bin/tofu": o.tofu}
	if o.terraform != "" {
		engines["/usr/local/bin/terraform"] = o.terraform
	}
	recordsPath, records, err := b.engineRecords(engines)
	if err != nil {
		return err
	}
	engine, err := b.files("engines", engines, map[string][]byte{recordsPath: records})
	if err != nil {
		return err
	}
	executor, err := b.files("terrarun-executor", map[string]string{executorPath: o.executor}, nil)
	if err != nil {
		return err
	}
	labels := map[string]string{"dev.terrarun.image.packages": strings.Join(packages, " ")}
	return b.write(o, "terrarun-executor", executorPath, labels, base, land, engine, executor)
}

// static builds the -static images: base, and the binary at /ko-app/NAME,
// its entrypoint.
func (b *builder) static(o options, base layer) error {
	for _, name := range slices.Sorted(maps.Keys(o.static)) {
		at := "/ko-app/" + name
		bin, err := b.files(name, map[string]string{at: o.static[name]}, nil)
		if err != nil {
			return err
		}
		if err := b.write(o, name, at, nil, base, bin); err != nil {
			return err
		}
	}
	return nil
}

// epoch parses -epoch, or takes the last commit's time.
func epoch(s string) (time.Time, error) {
	if s == "" {
		out, err := exec.Command("git", "log", "-1", "--format=%ct").Output()
		if err != nil {
			return time.Time{}, fmt.Errorf("no -epoch or SOURCE_DATE_EPOCH, and git log could not tell the last commit's time: %w", err)
		}
		s = strings.TrimSpace(string(out))
	}
	sec, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("-epoch %q: want seconds since 1970", s)
	}
	return time.Unix(sec, 0).UTC(), nil
}

// builder makes the layers of the images.
type builder struct {
	created time.Time
}

// layer is one layer and the history entry that says what it holds.
type layer struct {
	v1.Layer
	what string
}

// archive collects the entries of one layer, parents first.
type archive struct {
	b       *builder
	buf     bytes.Buffer
	tw      *tar.Writer
	written map[string]bool
}

func (b *builder) newArchive() *archive {
	a := &archive{b: b, written: map[string]bool{}}
	a.tw = tar.NewWriter(&a.buf)
	return a
}

func (a *archive) header(h *tar.Header) error {
	h.Name = strings.TrimPrefix(h.Name, "/")
	h.ModTime, h.Format = a.b.created, tar.FormatPAX
	h.Uname, h.Gname = "root", "root"
	if h.Uid == nonroot {
		h.Uname, h.Gname = "nonroot", "nonroot"
	}
	return a.tw.WriteHeader(h)
}

// dir adds a directory and its missing parents.
func (a *archive) dir(p string, mode int64, uid int) error {
	if p == "/" || a.written[p] {
		return nil
	}
	if err := a.dir(path.Dir(p), 0o755, 0); err != nil {
		return err
	}
	a.written[p] = true
	return a.header(&tar.Header{Typeflag: tar.TypeDir, Name: p + "/", Mode: mode, Uid: uid, Gid: uid})
}

func (a *archive) file(p string, data []byte, mode int64) error {
	if a.written[p] {
		return nil
	}
	if err := a.dir(path.Dir(p), 0o755, 0); err != nil {
		return err
	}
	a.written[p] = true
	if err := a.header(&tar.Header{Typeflag: tar.TypeReg, Name: p, Mode: mode, Size: int64(len(data))}); err != nil {
		return err
	}
	_, err := a.tw.Write(data)
	return err
}

func (a *archive) symlink(p, target string) error {
	if a.written[p] {
		return nil
	}
	if err := a.dir(path.Dir(p), 0o755, 0); err != nil {
		return err
	}
	a.written[p] = true
	return a.header(&tar.Header{Typeflag: tar.TypeSymlink, Name: p, Linkname: target, Mode: 0o777})
}

// hostFile adds the host's file at p, at the same path: every symbolic link
// on the way (a merged-/usr link, a library's soname link) as a link, and the
// regular file it ends at with its mode.
func (a *archive) hostFile(p string) error {
	for hops := 0; hops < 40; hops++ {
		resolved, link, err := firstLink(p)
		if err != nil {
			return err
		}
		if link == "" {
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			info, err := os.Stat(p)
			if err != nil {
				return err
			}
			return a.file(p, data, int64(info.Mode().Perm()))
		}
		if err := a.symlink(link, resolved); err != nil {
			return err
		}
		target := resolved
		if !path.IsAbs(target) {
			target = path.Join(path.Dir(link), target)
		}
		p = path.Join(target, strings.TrimPrefix(p, link))
	}
	return fmt.Errorf("%s: too many symbolic links", p)
}

// firstLink returns the first symbolic link on p's path (p itself included)
// and its target, or "" when there is none.
func firstLink(p string) (target, link string, err error) {
	parts := strings.Split(strings.TrimPrefix(path.Clean(p), "/"), "/")
	cur := ""
	for _, part := range parts {
		cur += "/" + part
		info, err := os.Lstat(cur)
		if err != nil {
			return "", "", err
		}
		if info.Mode()&fs.ModeSymlink != 0 {
			t, err := os.Readlink(cur)
			return t, cur, err
		}
	}
	return "", "", nil
}

// layer closes the archive into a layer.
func (a *archive) layer(what string) (layer, error) {
	if err := a.tw.Close(); err != nil {
		return layer{}, err
	}
	data := a.buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
	if err != nil {
		return layer{}, err
	}
	return layer{Layer: l, what: what}, nil
}

// base is the layer both images start from.
func (b *builder) base() (layer, error) {
	a := b.newArchive()
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%[1]d:%[1]d:nonroot:/home/nonroot:/sbin/nologin\n", nonroot)
	group := fmt.Sprintf("root:x:0:\nnonroot:x:%[1]d:\n", nonroot)
	if err := a.file("/etc/passwd", []byte(passwd), 0o644); err != nil {
		return layer{}, err
	}
	if err := a.file("/etc/group", []byte(group), 0o644); err != nil {
		return layer{}, err
	}
	const bundle = "/etc/ssl/certs/ca-certificates.crt"
	ca, err := os.ReadFile(bundle)
	if err != nil {
		return layer{}, fmt.Errorf("the CA bundle for the images: %w (install ca-certificates)", err)
	}
	if err := a.file(bundle, ca, 0o644); err != nil {
		return layer{}, err
	}
	if err := a.dir("/tmp", 0o1777, 0); err != nil {
		return layer{}, err
	}
	if err := a.dir("/home/nonroot", 0o750, nonroot); err != nil {
		return layer{}, err
	}
	return a.layer("base: /etc/passwd and /etc/group with nonroot (65532), the CA bundle, /tmp")
}

// files is a layer of binaries (image path → host path) and of further
// files (image path → content).
func (b *builder) files(what string, files map[string]string, extra map[string][]byte) (layer, error) {
	a := b.newArchive()
	paths := make([]string, 0, len(files)+len(extra))
	for p := range files {
		paths = append(paths, p)
	}
	for p := range extra {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		data, mode := extra[p], int64(0o644)
		if host, ok := files[p]; ok {
			var err error
			if data, err = os.ReadFile(host); err != nil {
				return layer{}, fmt.Errorf("%s for %s: %w", host, p, err)
			}
			mode = 0o755
		}
		if err := a.file(p, data, mode); err != nil {
			return layer{}, err
		}
	}
	return a.layer(what + ": " + strings.Join(paths, " "))
}

// engineRecords asks each engine (image path → host path) its version, and
// returns the image's file of their records (package engineversion), which
// spares every stage asking: in the engines' directory, by file name, with
// the modification time the image gives them.
func (b *builder) engineRecords(engines map[string]string) (string, []byte, error) {
	records := map[string]engineversion.Record{}
	dir := ""
	for p, host := range engines {
		if dir != "" && path.Dir(p) != dir {
			return "", nil, fmt.Errorf("%s: the engines go in one directory, %s", p, dir)
		}
		dir = path.Dir(p)
		rec, err := engineversion.Ask(context.Background(), host)
		if err != nil {
			return "", nil, fmt.Errorf("recording the version of %s for %s: %w", host, p, err)
		}
		rec.ModTime = b.created
		records[path.Base(p)] = rec
	}
	js, err := json.MarshalIndent(records, "", "  ")
	if err != nil {
		return "", nil, err
	}
	return path.Join(dir, engineversion.InstalledFile), append(js, '\n'), nil
}

// userland is the layer of the executor's tools and their libraries, and the
// packages (name=version) they come from.
func (b *builder) userland() (layer, []string, error) {
	need := map[string]bool{}
	for _, p := range userland {
		if _, err := os.Stat(p); err != nil {
			return layer{}, nil, fmt.Errorf("%s, for the executor image: %w (install git, openssh-client and coreutils)", p, err)
		}
		need[p] = true
		libs, err := sharedLibraries(p)
		if err != nil {
			return layer{}, nil, err
		}
		for _, l := range libs {
			need[l] = true
		}
	}
	paths := make([]string, 0, len(need))
	for p := range need {
		paths = append(paths, p)
	}
	sort.Strings(paths)

	pkgs, err := debianPackages(paths)
	if err != nil {
		return layer{}, nil, err
	}
	a := b.newArchive()
	for _, p := range paths {
		if err := a.hostFile(p); err != nil {
			return layer{}, nil, err
		}
	}
	// git init and clone copy templates from here, and warn when it is missing.
	if err := a.dir("/usr/share/git-core/templates", 0o755, 0); err != nil {
		return layer{}, nil, err
	}
	var names []string
	for _, pkg := range pkgs {
		names = append(names, pkg.name+"="+pkg.version)
		copyright := "/usr/share/doc/" + pkg.name + "/copyright"
		if _, err := os.Stat(copyright); err == nil {
			if err := a.hostFile(copyright); err != nil {
				return layer{}, nil, err
			}
		}
	}
	l, err := a.layer("userland from Debian packages: " + strings.Join(names, " "))
	return l, names, err
}

// sharedLibraries lists what ldd says p loads, the dynamic loader included;
// nothing for a static binary.
func sharedLibraries(p string) ([]string, error) {
	out, err := exec.Command("ldd", p).CombinedOutput()
	if err != nil {
		if strings.Contains(string(out), "not a dynamic executable") {
			return nil, nil
		}
		return nil, fmt.Errorf("ldd %s: %v: %s", p, err, out)
	}
	var libs []string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 3 && f[1] == "=>" && path.IsAbs(f[2]):
			libs = append(libs, f[2])
		case len(f) >= 1 && path.IsAbs(f[0]):
			libs = append(libs, f[0]) // the loader
		case strings.Contains(line, "not found"):
			return nil, fmt.Errorf("ldd %s: %s", p, strings.TrimSpace(line))
		}
	}
	return libs, nil
}

type debianPackage struct{ name, version string }

// debianPackages names the Debian packages that own paths (dpkg -S), with
// their versions.
func debianPackages(paths []string) ([]debianPackage, error) {
	seen := map[string]bool{}
	for _, p := range paths {
		owner, err := dpkgOwner(p)
		if err != nil {
			return nil, err
		}
		seen[owner] = true
	}
	var pkgs []debianPackage
	for _, name := range sortedKeys(seen) {
		out, err := exec.Command("dpkg-query", "-W", "-f", "${Version}", name).Output()
		if err != nil {
			return nil, fmt.Errorf("dpkg-query -W %s: %w", name, err)
		}
		base, _, _ := strings.Cut(name, ":") // libc6:amd64
		pkgs = append(pkgs, debianPackage{name: base, version: string(out)})
	}
	return pkgs, nil
}

// dpkgOwner is the package that installed p, looked up by p and, on a
// merged-/usr host where dpkg may know the file by its old path, by that.
func dpkgOwner(p string) (string, error) {
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", err
	}
	candidates := []string{p, real}
	for _, c := range []string{p, real} {
		if rest, ok := strings.CutPrefix(c, "/usr"); ok {
			candidates = append(candidates, rest)
		}
	}
	for _, c := range candidates {
		out, err := exec.Command("dpkg", "-S", c).Output()
		if err != nil {
			continue
		}
		line := strings.SplitN(string(out), "\n", 2)[0]
		if owner, _, ok := strings.Cut(line, ": "); ok && !strings.Contains(owner, "diversion") {
			return strings.SplitN(owner, ",", 2)[0], nil
		}
	}
	return "", fmt.Errorf("dpkg -S %s: no Debian package owns it (the images are built from a Debian host's packages)", p)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// write assembles the image and writes it as an OCI layout and a tarball.
func (b *builder) write(o options, image, entrypoint string, labels map[string]string, layers ...layer) error {
	ref, err := name.NewTag(o.registry + "/" + image + ":" + o.version)
	if err != nil {
		return fmt.Errorf("image name: %w (check -registry and -version)", err)
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	for _, l := range layers {
		img, err = mutate.Append(img, mutate.Addendum{
			Layer:     l.Layer,
			MediaType: types.OCILayer,
			History:   v1.History{Created: v1.Time{Time: b.created}, CreatedBy: "hack/images: " + l.what, Comment: "terrarun"},
		})
		if err != nil {
			return err
		}
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cfg = cfg.DeepCopy()
	cfg.Architecture, cfg.OS = runtime.GOARCH, "linux"
	cfg.Created = v1.Time{Time: b.created}
	cfg.Config.Entrypoint = []string{entrypoint}
	cfg.Config.User = fmt.Sprintf("%d:%d", nonroot, nonroot)
	cfg.Config.WorkingDir = "/home/nonroot"
	cfg.Config.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/home/nonroot"}
	cfg.Config.Labels = map[string]string{
		"org.opencontainers.image.title":   image,
		"org.opencontainers.image.version": o.version,
		"org.opencontainers.image.created": b.created.Format(time.RFC3339),
		"org.opencontainers.image.vendor":  "terrarun",
	}
	for k, v := range labels {
		cfg.Config.Labels[k] = v
	}
	img, err = mutate.ConfigFile(img, cfg)
	if err != nil {
		return err
	}

	dir := filepath.Join(o.out, image)
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": ref.String(),
	})); err != nil {
		return fmt.Errorf("writing %s: %w", dir, err)
	}
	if err := tarball.WriteToFile(dir+".tar", ref, img); err != nil {
		return fmt.Errorf("writing %s.tar: %w", dir, err)
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	size := int64(0)
	for _, l := range layers {
		s, _ := l.Size()
		size += s
	}
	fmt.Printf("%s@%s (%d MB compressed): %s/ and %s.tar\n", ref, digest, size>>20, dir, dir)
	return nil
}
