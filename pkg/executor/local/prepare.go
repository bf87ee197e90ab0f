package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"unicode/utf8"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/executor"
	"github.com/terrarun/terrarun/pkg/sandbox"
	"github.com/terrarun/terrarun/pkg/stage"
)

// gitCredentialKeys are copied from spec.source.git.credentialsSecret, when present.
var gitCredentialKeys = []string{"host", "username", "password", "identity", "known_hosts", "ca.crt"}

// prepare creates p's work directory with everything the stage needs, and
// returns the command to start, with its log file open. The caller closes
// the log file and the command's ExtraFiles once it started. On error, the
// caller removes the directory and revokes the token.
func (e *Executor) prepare(ctx context.Context, p *proc, ex executor.Execution) (*exec.Cmd, *os.File, error) {
	run := ex.Run
	ns := run.Namespace
	dir := p.dir
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return nil, nil, err
	}
	// A directory left by an execution that failed to start is stale: the
	// record, which this Start now holds, did not exist.
	if err := os.RemoveAll(dir); err != nil {
		return nil, nil, err
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, nil, err
	}
	for _, sub := range []string{"tmp", "work"} {
		if err := os.Mkdir(filepath.Join(dir, sub), 0o700); err != nil {
			return nil, nil, err
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
		return nil, nil, fmt.Errorf("invalid workspace %q", spec.Workspace)
	}

	// Source: the plan stage only; the apply stage downloads the planned configuration.
	if ex.Stage == v1alpha1.StagePlan {
		src, err := e.writeSource(ctx, p, run)
		if err != nil {
			return nil, nil, referenceError(err)
		}
		spec.Source = src
	}

	// Variables.
	for _, v := range run.Spec.Variables {
		sv := stage.Variable{Name: v.Name, HCL: v.HCL}
		switch {
		case v.ValueFrom == nil:
			sv.Value = v.Value
		case v.ValueFrom.SecretKeyRef != nil:
			ref := v.ValueFrom.SecretKeyRef
			val, err := e.values.SecretValue(ctx, ns, ref.Name, ref.Key)
			if err != nil {
				return nil, nil, referenceError(fmt.Errorf("variable %q: %w", v.Name, err))
			}
			p.addSecret(val)
			if sv.File, err = writeVariable(dir, v.Name, val); err != nil {
				return nil, nil, err
			}
			sv.Secret = true
		case v.ValueFrom.ConfigMapKeyRef != nil:
			ref := v.ValueFrom.ConfigMapKeyRef
			val, err := e.values.ConfigMapValue(ctx, ns, ref.Name, ref.Key)
			if err != nil {
				return nil, nil, referenceError(fmt.Errorf("variable %q: %w", v.Name, err))
			}
			if sv.File, err = writeVariable(dir, v.Name, val); err != nil {
				return nil, nil, err
			}
		case v.ValueFrom.RunOutput != nil:
			// Another run's output is a secret, as every output is: a
			// private file in the plan stage, only its name in the apply
			// stage, which applies the saved plan.
			sv.Secret, sv.JSON = true, true
			if ex.Stage == v1alpha1.StagePlan {
				val, ok := ex.Inputs[v.Name]
				if !ok {
					return nil, nil, fmt.Errorf("variable %q: the value of output %q of run %q was not resolved", v.Name, v.ValueFrom.RunOutput.Output, v.ValueFrom.RunOutput.Name)
				}
				p.addSecret(val)
				var err error
				if sv.File, err = writeVariable(dir, v.Name, val); err != nil {
					return nil, nil, err
				}
			}
		default:
			return nil, nil, fmt.Errorf("variable %q: valueFrom names no source", v.Name)
		}
		spec.Variables = append(spec.Variables, sv)
	}

	// Backend.
	backend, err := e.backend(ctx, p, run, spec.Workspace)
	if err != nil {
		return nil, nil, referenceError(err)
	}
	spec.Backend = backend

	// The provider plugin cache of the run's creator in its namespace: shared
	// by those runs only, so that no run can plant a provider that a run of
	// another creator executes (see executor.PluginCacheKey).
	if cache := e.pluginCache(run); cache != "" {
		if err := os.MkdirAll(cache, 0o700); err != nil {
			return nil, nil, fmt.Errorf("creating the plugin cache: %w", err)
		}
		spec.PluginCacheDir = cache
	}

	// Token: a file only the server reads, handed to the stage as descriptor
	// tokenFD. In a sandbox the file is hidden, so that terraform and its
	// children, which run as the stage's user, cannot read it.
	tok, err := e.tokens.Issue(p.id)
	if err != nil {
		return nil, nil, err
	}
	tokenFile := filepath.Join(dir, "token")
	if err := writePrivate(tokenFile, []byte(tok)); err != nil {
		return nil, nil, err
	}
	spec.TokenFD = tokenFD

	stageFile := filepath.Join(dir, "stage.json")
	js, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return nil, nil, err
	}
	if err := writePrivate(stageFile, append(js, '\n')); err != nil {
		return nil, nil, err
	}

	logFile, err := os.OpenFile(filepath.Join(dir, "executor.log"), os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o600)
	if err != nil {
		return nil, nil, err
	}
	args := []string{e.opts.ExecutorBinary, "--stage-file", stageFile}
	var cmd *exec.Cmd
	tmpDir := sandboxTmp
	if e.opts.Sandbox.Disabled {
		// A short directory of its own (random, 0700) in the host's
		// temporary directory: under the work directory, TMPDIR could be
		// too long for provider plugins' Unix sockets.
		if tmpDir, err = os.MkdirTemp("", "terrarun-stage-"); err != nil {
			logFile.Close()
			return nil, nil, err
		}
		p.tmpDir = tmpDir
		cmd = exec.Command(args[0], args[1:]...)
		cmd.Dir = dir
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	} else {
		cfg, err := e.stageSandbox(p, run, spec.Workspace)
		if err != nil {
			logFile.Close()
			return nil, nil, err
		}
		cfg.Hide = []string{tokenFile}
		cfg.ExtraFiles = 1
		// Hidden, and the server's besides, not handed to the stage's user.
		if err := os.Lchown(tokenFile, os.Getuid(), os.Getgid()); err != nil {
			logFile.Close()
			return nil, nil, err
		}
		if cmd, err = sandbox.Command(e.opts.ExecutorBinary, cfg, args); err != nil {
			logFile.Close()
			return nil, nil, err
		}
	}
	cmd.Env = append(append([]string(nil), e.env...), "HOME="+dir, "TMPDIR="+tmpDir)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	// Its own process group, so that a kill reaches terraform and its
	// providers (in a sandbox, the end of its init ends them all).
	cmd.SysProcAttr.Setpgid = true
	// A dying server takes its executors along, gracefully: SIGTERM is
	// forwarded to terraform, which releases its state lock.
	cmd.SysProcAttr.Pdeathsig = syscall.SIGTERM
	tf, err := os.Open(tokenFile)
	if err != nil {
		logFile.Close()
		return nil, nil, err
	}
	cmd.ExtraFiles = []*os.File{tf}
	return cmd, logFile, nil
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
	for _, set := range []bool{src.Inline != nil, src.ConfigMap != nil, src.Git != nil} {
		if set {
			n++
		}
	}
	if n != 1 {
		return stage.Source{}, errors.New("spec.source must set exactly one of inline, configMap and git")
	}
	switch {
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
				hint := ""
				if fv, ok := e.values.(FileValues); ok {
					hint = ": in standalone mode create files in " + filepath.Dir(fv.SecretPath(run.Namespace, src.Git.CredentialsSecret, "x"))
				}
				return stage.Source{}, fmt.Errorf("git credentials: secret %q has none of the keys %s%s",
					src.Git.CredentialsSecret, strings.Join(gitCredentialKeys, ", "), hint)
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
		if err := os.MkdirAll(filepath.Join(nsState, workspace), 0o700); err != nil {
			return stage.Backend{}, fmt.Errorf("creating the state directory: %w", err)
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
			if err := os.MkdirAll(filepath.Join(nsState, workspace), 0o700); err != nil {
				return stage.Backend{}, fmt.Errorf("creating the state directory: %w", err)
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

// logTail returns about the last limit bytes of a log file, from a line start
// when possible, as valid UTF-8, with the given secret values masked.
func logTail(path string, limit int64, secrets []string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return ""
	}
	// Read a little more so that a secret cut at the start is still masked.
	extra := int64(0)
	for _, s := range secrets {
		extra = max(extra, int64(len(s)))
	}
	off := fi.Size() - limit - extra
	if off < 0 {
		off = 0
	}
	b, err := io.ReadAll(io.NewSectionReader(f, off, fi.Size()-off))
	if err != nil {
		return ""
	}
	s := string(b)
	for _, sec := range secrets {
		s = strings.ReplaceAll(s, sec, "***")
	}
	if int64(len(s)) > limit {
		s = s[int64(len(s))-limit:]
		off = 1 // cut
	}
	if off > 0 {
		if i := strings.IndexByte(s, '\n'); i >= 0 && i < len(s)-1 {
			s = s[i+1:]
		}
		for len(s) > 0 && !utf8.RuneStart(s[0]) {
			s = s[1:]
		}
	}
	return strings.TrimRight(strings.ToValidUTF8(s, "\uFFFD"), "\n")
}
