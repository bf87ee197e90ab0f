package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/executor"
	"github.com/terrarun/terrarun/pkg/ociregistry"
	"github.com/terrarun/terrarun/pkg/sandbox"
	"github.com/terrarun/terrarun/pkg/stage"
	"github.com/terrarun/terrarun/pkg/stagelimits"
)

// gitCredentialKeys are copied from spec.source.git.credentialsSecret, when present.
var gitCredentialKeys = []string{"host", "username", "password", "identity", "known_hosts", "ca.crt"}

// prepare creates p's work directory with everything the stage needs, and
// returns the command to start, its output going to p.output. The caller
// closes the command's ExtraFiles once it started. On error, the caller
// removes the directory and revokes the token.
func (e *Executor) prepare(ctx context.Context, p *proc, ex executor.Execution) (*exec.Cmd, error) {
	run := ex.Run
	ns := run.Namespace
	dir := p.dir
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return nil, err
	}
	// A directory left by an execution that failed to start is stale: the
	// record, which this Start now holds, did not exist.
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, err
	}
	for _, sub := range []string{"tmp", "work"} {
		if err := os.Mkdir(filepath.Join(dir, sub), 0o700); err != nil {
			return nil, err
		}
	}

	spec := executor.StageSpec(ex)
	spec.Server = e.opts.ServerURL
	spec.CAFile = e.opts.CAFile
	spec.WorkDir = filepath.Join(dir, "work")
	if path, rec := e.engines.lookup(ctx, spec.Binary); path != "" {
		spec.Binary, spec.EngineVersion = path, rec
	}
	if !safeSegment(spec.Workspace) {
		return nil, fmt.Errorf("invalid workspace %q", spec.Workspace)
	}

	// Source: the plan stage only; the apply stage downloads the planned configuration.
	if ex.Stage == v1alpha1.StagePlan {
		src, err := e.writeSource(ctx, p, run)
		if err != nil {
			return nil, referenceError(err)
		}
		spec.Source = src
	}
	registry, err := e.writeRegistryAccess(ctx, p, run.Namespace, run.Spec.Source)
	if err != nil {
		return nil, referenceError(err)
	}
	spec.Registry = registry

	// Variables (executor.Variables), each value a private file: a
	// Secret's or a ConfigMap's key read from the values directory, another
	// run's output (a secret, as every output is) in the plan stage.
	vars, err := executor.Variables(ex)
	if err != nil {
		return nil, err
	}
	for _, v := range vars {
		if err := v.CheckInput(run); err != nil {
			return nil, err
		}
		var val []byte
		file := true
		switch {
		case v.SecretKeyRef != nil:
			if val, err = e.values.SecretValue(ctx, ns, v.SecretKeyRef.Name, v.SecretKeyRef.Key); err != nil {
				return nil, referenceError(fmt.Errorf("variable %q: %w", v.Name, err))
			}
		case v.ConfigMapKeyRef != nil:
			if val, err = e.values.ConfigMapValue(ctx, ns, v.ConfigMapKeyRef.Name, v.ConfigMapKeyRef.Key); err != nil {
				return nil, referenceError(fmt.Errorf("variable %q: %w", v.Name, err))
			}
		case v.NeedsInput:
			val = v.Input
		default:
			file = false // a literal, or an output the apply stage does not read
		}
		if file {
			if v.Secret {
				p.addSecret(val)
			}
			if v.File, err = writeVariable(dir, v.Name, val); err != nil {
				return nil, err
			}
		}
		spec.Variables = append(spec.Variables, v.Variable)
	}

	// Backend.
	backend, err := e.backend(ctx, p, run, spec.Workspace)
	if err != nil {
		return nil, referenceError(err)
	}
	spec.Backend = backend

	// The provider plugin cache of the run's creator in its namespace: shared
	// by those runs only, so that no run can plant a provider that a run of
	// another creator executes (see executor.PluginCacheKey).
	if cache := e.pluginCache(run); cache != "" {
		if err := os.MkdirAll(cache, 0o700); err != nil {
			return nil, fmt.Errorf("creating the plugin cache: %w", err)
		}
		spec.PluginCacheDir = cache
	}

	// Token: a file only the server reads, handed to the stage as descriptor
	// tokenFD. In a sandbox the file is hidden, so that terraform and its
	// children, which run as the stage's user, cannot read it.
	tok, err := e.tokens.Issue(p.id)
	if err != nil {
		return nil, err
	}
	tokenFile := filepath.Join(dir, "token")
	if err := writePrivate(tokenFile, []byte(tok)); err != nil {
		return nil, err
	}
	spec.TokenFD = tokenFD

	stageFile := filepath.Join(dir, "stage.json")
	js, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := writePrivate(stageFile, append(js, '\n')); err != nil {
		return nil, err
	}

	args := []string{e.opts.ExecutorBinary, "--stage-file", stageFile}
	// Its limits: cgroups of its own, and the budget of what it writes.
	// The cgroups are named by the run's UID, not its name: a run made
	// again under the name of a deleted one is another run, and the
	// deleted one's stage, ending, kills what is left in its cgroups. The
	// UID also keeps the name within the 255 bytes a cgroup's name has.
	if p.cgroup, err = e.limits.NewGroup(fmt.Sprintf("%s.%s.%d", p.id.UID, p.id.Stage, p.id.Attempt)); err != nil {
		return nil, err
	}
	nsState := filepath.Join(e.opts.StateRoot, run.Namespace)
	if p.budget, err = stagelimits.NewBudget(e.opts.Limits, e.opts.LimitFlags, dir, nsState, filepath.Join(nsState, spec.Workspace), e.pluginCache(run)); err != nil {
		return nil, err
	}
	p.removesNew = ex.Stage == v1alpha1.StagePlan && !spec.ApplyAfterPlan
	var cmd *exec.Cmd
	tmpDir := sandboxTmp
	if e.opts.Sandbox.Disabled {
		// A short directory of its own (random, 0700) in the host's
		// temporary directory: under the work directory, TMPDIR could be
		// too long for provider plugins' Unix sockets.
		if tmpDir, err = os.MkdirTemp("", "terrarun-stage-"); err != nil {
			return nil, err
		}
		p.tmpDir = tmpDir
		cmd = exec.Command(args[0], args[1:]...)
		cmd.Dir = dir
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	} else {
		cfg, err := e.stageSandbox(p, run, spec.Workspace)
		if err != nil {
			return nil, err
		}
		cfg.Hide = []string{tokenFile}
		cfg.ExtraFiles = 1
		if p.cgroup != nil {
			cfg.Cgroups = p.cgroup.ProcsFiles()
		}
		// Hidden, and the server's besides, not handed to the stage's user.
		if err := os.Lchown(tokenFile, os.Getuid(), os.Getgid()); err != nil {
			return nil, err
		}
		if cmd, err = sandbox.Command(e.opts.ExecutorBinary, cfg, args); err != nil {
			return nil, err
		}
	}
	cmd.Env = append(append([]string(nil), e.env...), "HOME="+dir, "TMPDIR="+tmpDir)
	// Its output comes through a pipe the server made, and is read by the
	// server as it comes: a path the stage can write is never opened.
	p.output = newOutputTail(logTailBytes, p.secrets)
	cmd.Stdout = p.output
	cmd.Stderr = p.output
	// A process that outlives the stage and keeps the pipe open (a daemon,
	// unsandboxed) does not hold up the stage's end.
	cmd.WaitDelay = outputWaitDelay
	// Its own process group, so that a kill reaches terraform and its
	// providers (in a sandbox, the end of its init ends them all).
	cmd.SysProcAttr.Setpgid = true
	// A dying server takes its executors along, gracefully: SIGTERM is
	// forwarded to terraform, which releases its state lock.
	cmd.SysProcAttr.Pdeathsig = syscall.SIGTERM
	tf, err := os.Open(tokenFile)
	if err != nil {
		return nil, err
	}
	cmd.ExtraFiles = []*os.File{tf}
	return cmd, nil
}

// tokenFD is the descriptor on which a stage gets its token: the first of
// exec.Cmd.ExtraFiles.
const tokenFD = 3

// referenceError marks an error of resolving what the run references as
// executor.ErrInvalidReference, unless starting again may fix it: an error
// of the host's file system, of the cluster's API, or a canceled context.
func referenceError(err error) error {
	var pathErr *fs.PathError
	var status apierrors.APIStatus
	switch {
	case errors.Is(err, ErrNotFound), apierrors.IsNotFound(err):
	case errors.As(err, &pathErr), errors.As(err, &status), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	}
	return executor.InvalidReference(err)
}

func (p *proc) addSecret(val []byte) {
	s := strings.TrimSpace(string(val))
	if len(s) >= 4 { // shorter values would mask ordinary words
		p.secrets = append(p.secrets, s)
	}
}

func (e *Executor) writeSource(ctx context.Context, p *proc, run *v1alpha1.TerraformRun) (stage.Source, error) {
	src := run.Spec.Source
	n := 0
	for _, set := range []bool{src.Inline != nil, src.ConfigMap != nil, src.Git != nil, src.OCI != nil, src.SourceRef != nil} {
		if set {
			n++
		}
	}
	if n != 1 {
		return stage.Source{}, errors.New("spec.source must set exactly one of inline, configMap, git, oci and sourceRef")
	}
	switch {
	case src.SourceRef != nil:
		a, err := executor.PinnedArtifact(run)
		if err != nil {
			return stage.Source{}, err
		}
		return stage.Source{Artifact: a}, nil
	case src.OCI != nil:
		return e.writeOCISource(ctx, p, run.Namespace, src.OCI)
	case src.Git != nil:
		g := &stage.GitSource{URL: src.Git.URL, Ref: src.Git.Ref, Path: src.Git.Path}
		if src.Git.CredentialsSecret != "" {
			credDir := filepath.Join(p.dir, "git-credentials")
			if err := os.Mkdir(credDir, 0o700); err != nil {
				return stage.Source{}, err
			}
			found := 0
			for _, key := range gitCredentialKeys {
				val, err := e.values.SecretValue(ctx, run.Namespace, src.Git.CredentialsSecret, key)
				if errors.Is(err, ErrNotFound) {
					continue
				}
				if err != nil {
					return stage.Source{}, fmt.Errorf("git credentials: %w", err)
				}
				if key == "username" || key == "password" {
					p.addSecret(val)
				}
				if err := writePrivate(filepath.Join(credDir, key), val); err != nil {
					return stage.Source{}, err
				}
				found++
			}
			if found == 0 {
				keys := strings.Join(gitCredentialKeys, ", ")
				fv, ok := e.values.(FileValues)
				if !ok {
					return stage.Source{}, fmt.Errorf("git credentials: secret %q has none of the keys %s", src.Git.CredentialsSecret, keys)
				}
				dir := filepath.Dir(fv.SecretPath(run.Namespace, src.Git.CredentialsSecret, "x"))
				if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
					return stage.Source{}, fmt.Errorf("git credentials (spec.source.git.credentialsSecret): %w", &NotFoundError{Kind: "secret", Namespace: run.Namespace,
						Name: src.Git.CredentialsSecret, Hint: "in standalone mode create the directory " + dir + " with a file per key (" + keys + ")"})
				}
				return stage.Source{}, fmt.Errorf("git credentials: secret %q has none of the keys %s: in standalone mode create files in %s",
					src.Git.CredentialsSecret, keys, dir)
			}
			g.CredentialsDir = credDir
		}
		return stage.Source{Git: g}, nil
	case src.ConfigMap != nil:
		data, err := e.values.ConfigMapData(ctx, run.Namespace, src.ConfigMap.Name)
		if err != nil {
			return stage.Source{}, fmt.Errorf("source: %w", err)
		}
		if len(data) == 0 {
			return stage.Source{}, fmt.Errorf("source: configmap %q holds no files", src.ConfigMap.Name)
		}
		return e.writeFiles(p, data)
	default:
		return e.writeFiles(p, src.Inline)
	}
}

// writeOCISource returns the stage's OCI source, with its cosign keys or
// trusted root in a private file of the stage.
func (e *Executor) writeOCISource(ctx context.Context, p *proc, ns string, o *v1alpha1.OCISource) (stage.Source, error) {
	out := &stage.OCISource{URL: o.URL, Path: o.Path, Insecure: o.Insecure}
	if r := o.Ref; r != nil {
		out.Tag, out.Semver, out.Digest = r.Tag, r.Semver, r.Digest
	}
	if v := o.Verify; v != nil {
		out.TrustedKeys = v.TrustedKeys
	}
	if v := o.Verify; v != nil && v.KeysSecret != "" {
		path, err := e.writeSecretKey(ctx, p, ns, "verification keys", v.KeysSecret, v1alpha1.OCICosignKeysKey)
		if err != nil {
			return stage.Source{}, err
		}
		out.KeysFile, out.KeysSecret = path, v.KeysSecret
	}
	if v := o.Verify; v != nil && v.TrustedRootSecret != "" {
		path, err := e.writeSecretKey(ctx, p, ns, "trusted root", v.TrustedRootSecret, v1alpha1.OCITrustedRootKey)
		if err != nil {
			return stage.Source{}, err
		}
		out.TrustedRootFile, out.TrustedRootSecret = path, v.TrustedRootSecret
		out.Identities = stage.Identities(v.MatchOIDCIdentity)
	}
	return stage.Source{OCI: out}, nil
}

// writeRegistryAccess writes, for both stages, the credentials (their
// passwords and tokens redacted from the stage's output) and the CA of the
// registry of an OCI source into private files of the stage.
func (e *Executor) writeRegistryAccess(ctx context.Context, p *proc, ns string, src v1alpha1.Source) (*stage.RegistryAccess, error) {
	o := src.OCI
	if o == nil || o.CredentialsSecret == "" && o.CertSecret == "" {
		return nil, nil
	}
	access := &stage.RegistryAccess{}
	var err error
	if access.CredentialsFile, err = e.writeSecretKey(ctx, p, ns, "credentials", o.CredentialsSecret, corev1.DockerConfigJsonKey); err != nil {
		return nil, err
	}
	if access.CAFile, err = e.writeSecretKey(ctx, p, ns, "CA", o.CertSecret, v1alpha1.OCICAKey); err != nil {
		return nil, err
	}
	return access, nil
}

// writeSecretKey writes key of Secret secret (none when "") into the
// stage's oci directory and returns its path. A docker config's passwords
// and tokens are redacted from the stage's output.
func (e *Executor) writeSecretKey(ctx context.Context, p *proc, ns, what, secret, key string) (string, error) {
	if secret == "" {
		return "", nil
	}
	val, err := e.values.SecretValue(ctx, ns, secret, key)
	if err != nil {
		return "", fmt.Errorf("OCI source %s: %w", what, err)
	}
	if key == corev1.DockerConfigJsonKey {
		for _, s := range ociregistry.Secrets(val) {
			p.addSecret([]byte(s))
		}
	}
	dir := filepath.Join(p.dir, "oci")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	path := filepath.Join(dir, key)
	return path, writePrivate(path, val)
}

func (e *Executor) writeFiles(p *proc, files map[string]string) (stage.Source, error) {
	dir := filepath.Join(p.dir, "source")
	if err := os.Mkdir(dir, 0o700); err != nil {
		return stage.Source{}, err
	}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		// The names validation lets through; the dependency lock file is
		// the only one that begins with a dot.
		if !safeSegment(name) || strings.HasPrefix(name, ".") && name != terrarun.LockFileName {
			return stage.Source{}, fmt.Errorf("source: invalid file name %q", name)
		}
		if err := writePrivate(filepath.Join(dir, name), []byte(files[name])); err != nil {
			return stage.Source{}, err
		}
	}
	return stage.Source{Dir: dir}, nil
}

func (e *Executor) backend(ctx context.Context, p *proc, run *v1alpha1.TerraformRun, workspace string) (stage.Backend, error) {
	ns := run.Namespace
	nsState := filepath.Join(e.opts.StateRoot, ns)
	defaults := map[string]string{
		// The default workspace's state; the others are <workspace_dir>/<name>/terraform.tfstate.
		"path":          filepath.Join(nsState, "default", "terraform.tfstate"),
		"workspace_dir": nsState,
	}
	b := run.Spec.Backend
	if b == nil {
		if err := e.makeStateDir(ns, workspace); err != nil {
			return stage.Backend{}, err
		}
		return stage.Backend{Type: "local", Config: defaults}, nil
	}
	out := stage.Backend{Type: b.Type}
	if len(b.Config) > 0 {
		out.Config = make(map[string]string, len(b.Config))
		for k, v := range b.Config {
			out.Config[k] = v
		}
	}
	if b.Type == "local" {
		// A relative path would land in the work directory, removed after the stage.
		filled := false
		for k, v := range defaults {
			if _, ok := out.Config[k]; !ok {
				if out.Config == nil {
					out.Config = map[string]string{}
				}
				out.Config[k] = v
				filled = true
			}
		}
		if filled {
			if err := e.makeStateDir(ns, workspace); err != nil {
				return stage.Backend{}, err
			}
		}
	}
	if b.ConfigSecret != "" {
		val, err := e.values.SecretValue(ctx, ns, b.ConfigSecret, "backend.hcl")
		if err != nil {
			return stage.Backend{}, fmt.Errorf("backend configSecret: %w", err)
		}
		out.ConfigFile = filepath.Join(p.dir, "backend.hcl")
		if err := writePrivate(out.ConfigFile, val); err != nil {
			return stage.Backend{}, err
		}
	}
	return out, nil
}

// makeStateDir makes the state directory of a namespace's workspace,
// <StateRoot>/<namespace>/<workspace>. The namespace's directory is the
// stages': every name in it is resolved within it (os.Root), so a link a
// stage left there leads nowhere outside.
func (e *Executor) makeStateDir(namespace, workspace string) error {
	nsState := filepath.Join(e.opts.StateRoot, namespace)
	if err := os.Mkdir(nsState, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("creating the state directory: %w", err)
	}
	root, err := os.OpenRoot(nsState)
	if err != nil {
		return fmt.Errorf("creating the state directory: %w", err)
	}
	defer root.Close()
	if err := root.MkdirAll(workspace, 0o700); err != nil {
		return fmt.Errorf("creating the state directory of workspace %q: %w", workspace, err)
	}
	// The sandbox binds it by path: a link (left by a stage of an older
	// server, which could write the namespace's directory) is not followed.
	if fi, err := root.Lstat(workspace); err != nil || !fi.IsDir() {
		return fmt.Errorf("the state directory of workspace %q in %s is not a directory: remove what is there", workspace, nsState)
	}
	return nil
}

func writeVariable(dir, name string, val []byte) (string, error) {
	if !safeSegment(name) {
		return "", fmt.Errorf("invalid variable name %q", name)
	}
	vdir := filepath.Join(dir, "variables")
	if err := os.MkdirAll(vdir, 0o700); err != nil {
		return "", err
	}
	path := filepath.Join(vdir, name)
	return path, writePrivate(path, val)
}

// writePrivate creates path (which must not exist) with mode 0600.
func writePrivate(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
