package runner

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/terrarun/terrarun/pkg/ociregistry"
	"github.com/terrarun/terrarun/pkg/runner/oci"
	"github.com/terrarun/terrarun/pkg/runner/tarball"
	"github.com/terrarun/terrarun/pkg/stage"
)

// subdirRecord is the PAX record of the tarball's global header that names
// the directory, relative to the tarball's root, in which terraform runs (a
// git source's path). The rest of the tree is there for relative module
// sources such as "../modules/x".
const subdirRecord = "TERRARUN.subdir"

// skipDirs are never part of the configuration tarball.
var skipDirs = map[string]bool{".git": true, ".terraform": true}

// copyDir copies the regular files below src into dst (created), following
// symbolic links to files. Names starting with ".." (the bookkeeping of
// Kubernetes volume mounts) are skipped.
func copyDir(src, dst string) error {
	if err := os.MkdirAll(dst, 0o700); err != nil {
		return err
	}
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		if rel == "." {
			return nil
		}
		if strings.HasPrefix(d.Name(), "..") || skipDirs[d.Name()] {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o700)
		}
		info, err := os.Stat(p) // follows links
		if err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		return copyFile(p, target, info.Mode().Perm()&0o700|0o600)
	})
}

func copyFile(src, dst string, mode fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// inside joins rel to root and checks that the result, symbolic links
// resolved, is root or below it.
func inside(root, rel string) (string, error) {
	if filepath.IsAbs(rel) {
		return "", fmt.Errorf("path %q must be relative", rel)
	}
	p := filepath.Join(root, rel)
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return "", err
	}
	realP, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", fmt.Errorf("path %q: %w", rel, errors.Unwrap(err))
	}
	r, err := filepath.Rel(realRoot, realP)
	if err != nil || r == ".." || strings.HasPrefix(r, ".."+string(filepath.Separator)) {
		return "", fmt.Errorf("path %q escapes the source", rel)
	}
	info, err := os.Stat(realP)
	if err != nil {
		return "", err
	}
	if !info.IsDir() {
		return "", fmt.Errorf("path %q is not a directory", rel)
	}
	return p, nil
}

// tarConfig writes root as a deterministic tar.gz: entries sorted, times,
// owners and modes normalized, .git and .terraform left out, symbolic links
// to files inside root stored as the files they point to. subdir, when set,
// is recorded in a PAX global header.
func tarConfig(root, subdir string) ([]byte, error) {
	var buf bytes.Buffer
	gz, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	tw := tar.NewWriter(gz)
	if subdir != "" && subdir != "." {
		if err := tw.WriteHeader(&tar.Header{
			Typeflag:   tar.TypeXGlobalHeader,
			PAXRecords: map[string]string{subdirRecord: filepath.ToSlash(subdir)},
		}); err != nil {
			return nil, err
		}
	}
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return nil, err
	}
	var walk func(dir, rel string) error
	walk = func(dir, rel string) error {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return err
		}
		sort.Slice(entries, func(i, j int) bool { return entries[i].Name() < entries[j].Name() })
		for _, e := range entries {
			name := e.Name()
			p := filepath.Join(dir, name)
			r := path.Join(rel, name)
			info, err := os.Lstat(p)
			if err != nil {
				return err
			}
			if info.Mode()&fs.ModeSymlink != 0 {
				real, err := filepath.EvalSymlinks(p)
				if err != nil {
					continue // dangling
				}
				if x, err := filepath.Rel(realRoot, real); err != nil || x == ".." || strings.HasPrefix(x, ".."+string(filepath.Separator)) {
					continue // points outside the configuration
				}
				if info, err = os.Stat(real); err != nil {
					return err
				}
				if !info.Mode().IsRegular() {
					continue // links to directories are not followed
				}
			}
			switch {
			case info.IsDir():
				if skipDirs[name] {
					continue
				}
				if err := tw.WriteHeader(&tar.Header{
					Typeflag: tar.TypeDir, Name: r + "/", Mode: 0o755, ModTime: time.Unix(0, 0),
				}); err != nil {
					return err
				}
				if err := walk(p, r); err != nil {
					return err
				}
			case info.Mode().IsRegular():
				mode := int64(0o644)
				if info.Mode()&0o100 != 0 {
					mode = 0o755
				}
				if err := tw.WriteHeader(&tar.Header{
					Typeflag: tar.TypeReg, Name: r, Mode: mode, Size: info.Size(), ModTime: time.Unix(0, 0),
				}); err != nil {
					return err
				}
				f, err := os.Open(p)
				if err != nil {
					return err
				}
				_, err = io.CopyN(tw, f, info.Size())
				f.Close()
				if err != nil {
					return fmt.Errorf("archiving %s: %w", r, err)
				}
			}
		}
		return nil
	}
	if err := walk(root, ""); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// untarConfig extracts a tarball written by tarConfig into dst (created)
// and returns the recorded subdirectory ("" for the root). It accepts
// directories and regular files only, and refuses absolute names and names
// with ".." elements.
func untarConfig(r io.Reader, dst string) (string, error) {
	gz, err := gzip.NewReader(r)
	if err != nil {
		return "", fmt.Errorf("reading the configuration archive: %w", err)
	}
	defer gz.Close()
	if err := os.MkdirAll(dst, 0o700); err != nil {
		return "", err
	}
	tr := tar.NewReader(gz)
	subdir := ""
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return "", fmt.Errorf("reading the configuration archive: %w", err)
		}
		if h.Typeflag == tar.TypeXGlobalHeader {
			if s, ok := h.PAXRecords[subdirRecord]; ok {
				clean, err := safeRel(s)
				if err != nil {
					return "", fmt.Errorf("configuration archive: subdirectory: %w", err)
				}
				subdir = clean
			}
			continue
		}
		name, err := safeRel(strings.TrimSuffix(h.Name, "/"))
		if err != nil {
			return "", fmt.Errorf("configuration archive: entry %q: %w", h.Name, err)
		}
		if name == "." {
			continue
		}
		target := filepath.Join(dst, filepath.FromSlash(name))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o700); err != nil {
				return "", err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(target), 0o700); err != nil {
				return "", err
			}
			mode := fs.FileMode(0o600)
			if h.Mode&0o100 != 0 {
				mode = 0o700
			}
			f, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
			if err != nil {
				return "", err
			}
			if _, err := io.Copy(f, tr); err != nil {
				f.Close()
				return "", err
			}
			if err := f.Close(); err != nil {
				return "", err
			}
		default:
			return "", fmt.Errorf("configuration archive: entry %q has unsupported type %q", h.Name, h.Typeflag)
		}
	}
	return subdir, nil
}

// safeRel cleans a slash-separated relative name and refuses absolute names
// and ".." elements.
func safeRel(name string) (string, error) {
	if name == "" {
		return ".", nil
	}
	if strings.HasPrefix(name, "/") || filepath.IsAbs(name) || strings.Contains(name, "\\") {
		return "", errors.New("absolute or non-portable path")
	}
	for _, el := range strings.Split(name, "/") {
		if el == ".." {
			return "", errors.New(`path contains ".."`)
		}
	}
	return path.Clean(name), nil
}

// digestOf returns "sha256:<hex>" of b.
func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// lockFileFromPlan returns the dependency lock file recorded in a saved plan
// (a zip archive), or nil.
func lockFileFromPlan(planPath string) []byte {
	zr, err := zip.OpenReader(planPath)
	if err != nil {
		return nil
	}
	defer zr.Close()
	for _, f := range zr.File {
		if f.Name != ".terraform.lock.hcl" {
			continue
		}
		rc, err := f.Open()
		if err != nil {
			return nil
		}
		defer rc.Close()
		b, err := io.ReadAll(io.LimitReader(rc, 16<<20))
		if err != nil {
			return nil
		}
		return b
	}
	return nil
}

// gitCredentials are the contents of a git source's credential files.
type gitCredentials struct {
	dir string
	// host is the host (optionally host:port) the credentials are for: they
	// are offered to no other.
	host                   string
	username, password     string
	identity, knownHosts   string
	hasIdentity, hasKnowns bool
	// hasCA says the Secret has a "ca.crt": the CA certificates an https
	// server of the host is verified with, besides the system's.
	hasCA bool
}

func readGitCredentials(dir string) (*gitCredentials, error) {
	if dir == "" {
		return nil, nil
	}
	c := &gitCredentials{dir: dir}
	read := func(name string) (string, bool, error) {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if errors.Is(err, fs.ErrNotExist) {
			return "", false, nil
		}
		if err != nil {
			return "", false, fmt.Errorf("reading git credentials: %w", err)
		}
		return string(b), true, nil
	}
	host, hasHost, err := read("host")
	if err != nil {
		return nil, err
	}
	if c.host = strings.ToLower(strings.TrimSpace(host)); !hasHost || c.host == "" || strings.ContainsAny(c.host, "/@ \t\n") {
		return nil, fmt.Errorf(`git credentials: the credentials Secret needs a "host" key naming the one host they are for, such as "github.com" (or "git.example.com:8443"); they are offered to no other host`)
	}
	if c.username, _, err = read("username"); err != nil {
		return nil, err
	}
	if c.password, _, err = read("password"); err != nil {
		return nil, err
	}
	if c.identity, c.hasIdentity, err = read("identity"); err != nil {
		return nil, err
	}
	if c.knownHosts, c.hasKnowns, err = read("known_hosts"); err != nil {
		return nil, err
	}
	if _, c.hasCA, err = read("ca.crt"); err != nil {
		return nil, err
	}
	return c, nil
}

// boundTo reports whether the credentials may be offered to host (a host
// name with an optional port): a bound host without a port matches it on
// any port.
func (c *gitCredentials) boundTo(host string) bool {
	host = strings.ToLower(host)
	if host == c.host {
		return true
	}
	name, _, ok := strings.Cut(host, ":")
	return ok && !strings.Contains(c.host, ":") && name == c.host
}

// gitHost is the host, with its port if it has one, of an https://, ssh://
// or scp-like (user@host:path) git URL.
func gitHost(raw string) (string, error) {
	if u, err := url.Parse(raw); err == nil && u.Scheme != "" && u.Host != "" {
		return u.Host, nil
	}
	if at, rest, ok := strings.Cut(raw, "@"); ok && !strings.Contains(at, "/") {
		if host, _, ok := strings.Cut(rest, ":"); ok && host != "" && !strings.Contains(host, "/") {
			return host, nil
		}
	}
	return "", fmt.Errorf("git URL %q names no host", raw)
}

// secrets returns the values to redact: the password and the private key,
// and the basic authorization header git sends the password in.
func (c *gitCredentials) secrets() []string {
	if c == nil {
		return nil
	}
	// The username is not secret: it names an account, and appears in URLs
	// and commit logs; hiding it would only hide who acted.
	out := []string{c.password, c.identity}
	if c.password != "" {
		out = append(out, base64.StdEncoding.EncodeToString([]byte(c.username+":"+c.password)))
	}
	return out
}

// gitCommand is the git subcommand args run, past the global options.
func gitCommand(args []string) string {
	for i := 0; i < len(args); i++ {
		switch {
		case args[i] == "-c":
			i++
		case !strings.HasPrefix(args[i], "-"):
			return args[i]
		}
	}
	return "git"
}

// lastLine is the last non-blank line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// gitEnv returns the environment for git commands: no prompts, credentials
// only through GIT_ASKPASS (a script in privateDir that prints the contents
// of the credential files) and GIT_SSH_COMMAND.
func gitEnv(creds *gitCredentials, privateDir string) ([]string, error) {
	env := []string{}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "GIT_ASKPASS", "SSH_ASKPASS", "GIT_SSH", "GIT_SSH_COMMAND", "GIT_TERMINAL_PROMPT",
			"GIT_DIR", "GIT_WORK_TREE", "GIT_CONFIG_PARAMETERS", "GIT_CONFIG_COUNT":
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "GIT_TERMINAL_PROMPT=0", "GCM_INTERACTIVE=never", "GIT_LFS_SKIP_SMUDGE=1")
	if creds == nil {
		// Make sure git cannot prompt through some inherited helper.
		return append(env, "GIT_ASKPASS=/bin/false", "SSH_ASKPASS=/bin/false"), nil
	}
	script := filepath.Join(privateDir, "git-askpass.sh")
	// git asks "Username for 'https://HOST': " and
	// "Password for 'https://USER@HOST': ": answer only for the bound host,
	// whatever a redirect or a submodule points git to.
	content := "#!/bin/sh\n" +
		"# Prints a git credential for one host only; git passes the prompt as $1.\n" +
		"url=${1#*\\'}; url=${url%%\\'*}\n" +
		"host=${url#*://}; host=${host%%/*}; host=${host##*@}\n" +
		"host=$(printf '%s' \"$host\" | tr '[:upper:]' '[:lower:]')\n" +
		"case \"$host\" in\n" +
		"  " + shellQuote(creds.host) + "|" + shellQuote(creds.host) + ":*) ;;\n" +
		"  *) echo \"terrarun: git credentials are not offered to $host\" >&2; exit 1 ;;\n" +
		"esac\n" +
		"case \"$1\" in\n" +
		"  Username*|username*) exec cat " + shellQuote(filepath.Join(creds.dir, "username")) + " ;;\n" +
		"  Password*|password*) exec cat " + shellQuote(filepath.Join(creds.dir, "password")) + " ;;\n" +
		"esac\n" +
		"exit 1\n"
	if err := os.WriteFile(script, []byte(content), 0o700); err != nil {
		return nil, fmt.Errorf("writing the askpass script: %w", err)
	}
	env = append(env, "GIT_ASKPASS="+script, "SSH_ASKPASS=/bin/false")
	if creds.hasCA {
		// Only git's own https connections use it; it holds no secret.
		env = append(env, "GIT_SSL_CAINFO="+filepath.Join(creds.dir, "ca.crt"))
	}
	if creds.hasIdentity {
		known := filepath.Join(creds.dir, "known_hosts")
		if !creds.hasKnowns {
			known = "/dev/null" // StrictHostKeyChecking=yes then refuses every host
		}
		env = append(env, "GIT_SSH_COMMAND=ssh -F /dev/null -o IdentitiesOnly=yes -o BatchMode=yes -i "+
			shellQuote(filepath.Join(creds.dir, "identity"))+
			" -o UserKnownHostsFile="+shellQuote(known)+" -o StrictHostKeyChecking=yes")
	}
	return env, nil
}

// cloneGit clones src into dst and checks out src.Ref. It returns the
// resolved commit.
func (r *runner) cloneGit(ctx context.Context, src *stage.GitSource, dst string) (string, error) {
	if strings.HasPrefix(src.URL, "-") || src.URL == "" {
		return "", fmt.Errorf("invalid git URL")
	}
	if strings.HasPrefix(src.Ref, "-") {
		return "", fmt.Errorf("invalid git ref %q", src.Ref)
	}
	creds, err := readGitCredentials(src.CredentialsDir)
	if err != nil {
		return "", err
	}
	r.secrets.add(creds.secrets()...)
	if creds != nil {
		host, err := gitHost(src.URL)
		if err != nil {
			return "", err
		}
		if !creds.boundTo(host) {
			return "", fmt.Errorf("git credentials: the credentials Secret is for host %q, not %q: refusing to offer them; point spec.source.git.url at %s, or use credentials for %s",
				creds.host, host, creds.host, host)
		}
	}
	env, err := gitEnv(creds, r.privateDir)
	if err != nil {
		return "", err
	}
	git := func(dir string, args ...string) (string, error) {
		var out, stderr bytes.Buffer
		cmd := exec.CommandContext(ctx, "git", args...)
		cmd.Dir = dir
		cmd.Env = env
		cmd.Stdout = &out
		cmd.Stderr = io.MultiWriter(r.out, &stderr)
		cmd.WaitDelay = 5 * time.Second
		err := cmd.Run()
		r.out.Flush()
		if err != nil {
			if ctx.Err() != nil {
				return "", ctx.Err()
			}
			// git's own last words say why (a host that does not resolve,
			// a ref that does not exist); they are redacted like its output.
			if last := lastLine(stderr.String()); last != "" {
				return "", fmt.Errorf("git %s: %s (%w)", gitCommand(args), r.secrets.redactString(last), err)
			}
			return "", fmt.Errorf("git %s: %w", gitCommand(args), err)
		}
		return strings.TrimSpace(out.String()), nil
	}

	r.logf("terrarun: running git clone")
	if _, err := git(r.spec.WorkDir, "-c", "core.hooksPath=/dev/null", "clone", "--quiet", "--no-checkout", "--", src.URL, dst); err != nil {
		return "", err
	}
	commit := ""
	if src.Ref == "" {
		commit, err = git(dst, "rev-parse", "--verify", "--quiet", "HEAD^{commit}")
		if err != nil {
			return "", fmt.Errorf("the repository has no default branch: %w", err)
		}
	} else {
		for _, candidate := range []string{"refs/remotes/origin/" + src.Ref, "refs/tags/" + src.Ref, src.Ref} {
			if c, err := git(dst, "rev-parse", "--verify", "--quiet", candidate+"^{commit}"); err == nil && c != "" {
				commit = c
				break
			}
			if ctx.Err() != nil {
				return "", ctx.Err()
			}
		}
		if commit == "" {
			return "", fmt.Errorf("git ref %q not found in the repository", src.Ref)
		}
	}
	r.logf("terrarun: running git checkout %s", commit)
	if _, err := git(dst, "-c", "core.hooksPath=/dev/null", "-c", "advice.detachedHead=false", "checkout", "--quiet", "--detach", commit); err != nil {
		return "", err
	}
	head, err := git(dst, "rev-parse", "HEAD")
	if err != nil {
		return "", err
	}
	return head, nil
}

// registryAccess reads the stage's registry credentials (kept out of every
// log from then on) and CA certificates; nil for each it has not.
func (r *runner) registryAccess() (creds, ca []byte, err error) {
	a := r.spec.Registry
	if a == nil {
		return nil, nil, nil
	}
	if a.CredentialsFile != "" {
		if creds, err = os.ReadFile(a.CredentialsFile); err != nil {
			return nil, nil, fmt.Errorf("reading the OCI registry's credentials: %w", err)
		}
		r.secrets.add(ociregistry.Secrets(creds)...)
	}
	if a.CAFile != "" {
		if ca, err = os.ReadFile(a.CAFile); err != nil {
			return nil, nil, fmt.Errorf("reading the OCI registry's CA certificates: %w", err)
		}
	}
	return creds, ca, nil
}

// pullOCI fetches src's artifact into dst (created) and returns its
// revision, tag@sha256:<manifest digest> or the digest alone, with the
// stage's registry access; a signature that does not verify is
// ErrVerificationFailed.
func (r *runner) pullOCI(ctx context.Context, src *stage.OCISource, dst string) (string, error) {
	read := func(p, what string) ([]byte, error) {
		if p == "" {
			return nil, nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("reading the OCI source's %s: %w", what, err)
		}
		return b, nil
	}
	creds, ca, err := r.registryAccess()
	if err != nil {
		return "", err
	}
	keys, err := read(src.KeysFile, "cosign keys")
	if err != nil {
		return "", err
	}
	if src.KeysFile != "" && keys == nil {
		keys = []byte{} // present and empty: refused as holding no key, never as unverified
	}
	if err := os.MkdirAll(dst, 0o700); err != nil {
		return "", err
	}
	var verify []oci.KeySet
	if src.TrustedKeys != "" {
		verify = append(verify, oci.KeySet{Keys: []byte(src.TrustedKeys), Name: "the cluster policy's trustedSourceKeys"})
	}
	if keys != nil {
		verify = append(verify, oci.KeySet{Keys: keys, Name: "Secret " + src.KeysSecret})
	}
	if len(src.Identities) > 0 && src.TrustedRootFile == "" {
		return "", fmt.Errorf("%w: the stage has keyless identities to verify %s with but no trusted root", ErrVerificationFailed, src.URL)
	}
	if src.TrustedRootFile != "" {
		trustedRoot, err := read(src.TrustedRootFile, "trusted root")
		if err != nil {
			return "", err
		}
		ids := make([]ociregistry.Identity, len(src.Identities))
		for i, id := range src.Identities {
			ids[i] = ociregistry.Identity{Issuer: id.Issuer, Subject: id.Subject}
		}
		// An empty file is a trusted root that holds nothing, refused as
		// such, never taken for keys.
		verify = append(verify, oci.KeySet{TrustedRoot: append([]byte{}, trustedRoot...), Identities: ids,
			Name: "spec.source.oci.verify.matchOIDCIdentity, trusted root of Secret " + src.TrustedRootSecret})
	}
	art, err := oci.Fetch(ctx, oci.Source{
		URL: src.URL, Tag: src.Tag, Semver: src.Semver, Digest: src.Digest, Insecure: src.Insecure,
		DockerConfig: creds, CA: ca, Verify: verify,
	}, dst, r.logf)
	var verr *oci.VerificationError
	if errors.As(err, &verr) {
		return "", fmt.Errorf("%w: %v", ErrVerificationFailed, err)
	}
	if err != nil {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		return "", err
	}
	return art.Revision(), nil
}

// pullArtifact downloads src, the Flux artifact the server pinned, into dst
// (created), and unpacks it only when its digest is the pinned one; one
// that is not is ErrVerificationFailed.
func (r *runner) pullArtifact(ctx context.Context, src *stage.ArtifactSource, dst string) error {
	if err := os.MkdirAll(dst, 0o700); err != nil {
		return err
	}
	r.logf("terrarun: downloading the artifact of %s at revision %s", src.Source, src.Revision)
	err := tarball.Fetch(ctx, src.URL, src.Digest, dst, tarball.Limits{})
	var derr *tarball.DigestError
	switch {
	case errors.As(err, &derr):
		return fmt.Errorf("%w: the artifact of %s: %v", ErrVerificationFailed, src.Source, err)
	case err != nil && ctx.Err() != nil:
		return ctx.Err()
	case err != nil:
		return fmt.Errorf("the artifact of %s: %w", src.Source, err)
	}
	r.logf("terrarun: the artifact's digest is %s, as %s reported", src.Digest, src.Source)
	return nil
}
