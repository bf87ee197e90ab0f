package runner

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/hashicorp/terraform-config-inspect/tfconfig"
	"github.com/hashicorp/terraform-exec/tfexec"

	"github.com/terrarun/terrarun/pkg/stage"
)

// newTerraform returns a tfexec handle for dir whose output goes to the
// redacted log, and logs the engine's version.
func (r *runner) newTerraform(ctx context.Context, dir string) (*tfexec.Terraform, error) {
	tf, err := r.quietTerraform(dir)
	if err != nil {
		return nil, err
	}
	// Learn the version now, quietly: tfexec asks for it before some
	// commands and would print its JSON. With a record, the shim answers.
	v, _, err := tf.Version(ctx, true)
	if err != nil {
		return nil, fmt.Errorf("%s version: %w", r.engine, err)
	}
	tf.SetStdout(r.out)
	if r.recorded {
		r.retireEngineShim()
		r.logf("terrarun: %s %s (version on record)", r.engine, v.String())
	} else {
		r.logf("terrarun: %s %s", r.engine, v.String())
	}
	return tf, nil
}

// quietTerraform returns a tfexec handle for dir with the stage's
// environment, whose stdout is discarded and whose stderr goes to the
// redacted log.
func (r *runner) quietTerraform(dir string) (*tfexec.Terraform, error) {
	tf, err := tfexec.NewTerraform(dir, r.execPath)
	if err != nil {
		return nil, err
	}
	env := map[string]string{}
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	for _, k := range []string{"GIT_ASKPASS", "GIT_SSH_COMMAND", "TF_WORKSPACE"} {
		delete(env, k)
	}
	env = tfexec.CleanEnv(env)
	env["CHECKPOINT_DISABLE"] = "1"
	if r.spec.PluginCacheDir != "" && pluginCacheLocking {
		env["TF_PLUGIN_CACHE_DIR"] = r.spec.PluginCacheDir
	}
	if r.stateProxy != nil {
		maps.Copy(env, r.stateProxy.env())
	}
	if err := r.ociModuleEnv(env); err != nil {
		return nil, err
	}
	if err := tf.SetEnv(env); err != nil {
		return nil, err
	}
	if err := tf.SetWaitDelay(r.cfg.grace); err != nil {
		return nil, err
	}
	tf.SetStdout(io.Discard)
	tf.SetStderr(r.out)
	return tf, nil
}

// step runs one terraform command, announced in the log.
func (r *runner) step(name string, fn func() error) error {
	r.logf("terrarun: running %s %s", r.engine, name)
	err := fn()
	_ = r.out.Flush()
	if err != nil {
		return fmt.Errorf("%s %s: %w", r.engine, name, err)
	}
	return nil
}

// quietly runs fn with terraform's stdout captured into w instead of the log.
func (r *runner) quietly(tf *tfexec.Terraform, w io.Writer, fn func() error) error {
	tf.SetStdout(w)
	defer tf.SetStdout(r.out)
	return fn()
}

// withGroupReaper runs fn, which runs terraform in dir, and if ctx is
// canceled while it runs, kills the process groups terraform left behind
// (provisioners' children) once fn returns.
func withGroupReaper(ctx context.Context, dir string, fn func() error) error {
	stop := watchChildGroups(ctx, dir)
	err := fn()
	stop()
	return err
}

// writeOverrides writes the files the runner adds to the configuration in
// dir: the run's backend, and every variable whose value comes from a Secret
// declared sensitive, so that the engine itself treats the value, and
// everything derived from it, as sensitive: it hides them in plans and logs,
// and refuses a root output derived from one unless the output is
// sensitive too.
func (r *runner) writeOverrides(dir string) error {
	backend := r.spec.Backend.Type
	if backend == stage.ServedBackend {
		// Its addresses and credentials are in the engine's environment.
		backend = "http"
	}
	content := fmt.Sprintf("# Written by terrarun: the run's backend.\nterraform {\n  backend %q {}\n}\n", backend)
	if err := os.WriteFile(filepath.Join(dir, backendOverrideFile), []byte(content), 0o600); err != nil {
		return fmt.Errorf("writing the backend override: %w", err)
	}
	names := r.secretVariableNames()
	if len(names) == 0 {
		return nil
	}
	// The configuration's own errors are the engine's to report; an override
	// of a variable the configuration does not declare would be an error of
	// its own, so only declared ones are overridden.
	mod, _ := tfconfig.LoadModule(dir)
	var b strings.Builder
	b.WriteString("# Written by terrarun: variables whose values come from Secrets are sensitive.\n")
	n := 0
	for _, name := range names {
		if mod == nil || mod.Variables[name] == nil {
			continue
		}
		fmt.Fprintf(&b, "variable %q {\n  sensitive = true\n}\n", name)
		n++
	}
	if n == 0 {
		return nil
	}
	if err := os.WriteFile(filepath.Join(dir, sensitiveOverrideFile), []byte(b.String()), 0o600); err != nil {
		return fmt.Errorf("writing the sensitive variables override: %w", err)
	}
	return nil
}

// writeVarFile writes the variables to a private .tfvars file and returns
// its path, or "" when there are none.
func (r *runner) writeVarFile() (string, error) {
	if len(r.vars) == 0 {
		return "", nil
	}
	p := filepath.Join(r.privateDir, "terrarun.tfvars")
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return "", fmt.Errorf("writing the variables file: %w", err)
	}
	if _, err := f.Write(tfvars(r.vars)); err != nil {
		f.Close()
		return "", fmt.Errorf("writing the variables file: %w", err)
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("writing the variables file: %w", err)
	}
	return p, nil
}

func (r *runner) initAndWorkspace(ctx context.Context, tf *tfexec.Terraform) error {
	var opts []tfexec.InitOption
	keys := make([]string, 0, len(r.spec.Backend.Config))
	for k := range r.spec.Backend.Config {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		opts = append(opts, tfexec.BackendConfig(k+"="+r.spec.Backend.Config[k]))
	}
	if r.spec.Backend.ConfigFile != "" {
		opts = append(opts, tfexec.BackendConfig(r.spec.Backend.ConfigFile))
	}
	if r.usesPluginCache(tf.WorkingDir()) {
		unlock, err := lockPluginCache(ctx, r.spec.PluginCacheDir)
		if err != nil {
			return err
		}
		defer unlock()
	}
	if err := r.step("init", func() error { return tf.Init(ctx, opts...) }); err != nil {
		return err
	}
	if r.spec.Backend.Type == stage.ServedBackend {
		// One state per workspace, chosen by the server: the engine's own
		// workspace stays "default".
		if ws := r.spec.Workspace; ws != "" && ws != "default" {
			r.logf("terrarun: the state of workspace %s, kept by terrarun", ws)
		}
		return nil
	}
	if err := selectWorkspace(tf.WorkingDir(), r.spec.Workspace); err != nil {
		return err
	}
	if ws := r.spec.Workspace; ws != "" && ws != "default" {
		r.logf("terrarun: workspace %s selected", ws)
	}
	return nil
}

// selectWorkspace makes ws the workspace of the initialized configuration in
// dir without starting the engine: it writes the name where `workspace
// select` does, the data directory's environment file, and the backend
// creates a workspace that does not exist yet when the plan first uses its
// state. (TF_WORKSPACE would do the same, but terraform-exec refuses it, and
// init would refuse a workspace that does not exist yet.)
func selectWorkspace(dir, ws string) error {
	if ws == "" || ws == "default" {
		return nil
	}
	dataDir := os.Getenv("TF_DATA_DIR")
	if dataDir == "" {
		dataDir = ".terraform"
	}
	if !filepath.IsAbs(dataDir) {
		dataDir = filepath.Join(dir, dataDir)
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return fmt.Errorf("selecting workspace %q: %w", ws, err)
	}
	if err := os.WriteFile(filepath.Join(dataDir, "environment"), []byte(ws), 0o600); err != nil {
		return fmt.Errorf("selecting workspace %q: %w", ws, err)
	}
	return nil
}

func (r *runner) secretVariableNames() []string {
	var names []string
	for _, v := range r.vars {
		if v.Secret {
			names = append(names, v.Name)
		}
	}
	return names
}

// initTerraform returns the engine for the configuration in dir, initialized
// and with the run's workspace selected.
func (r *runner) initTerraform(ctx context.Context, dir string) (*tfexec.Terraform, error) {
	tf, err := r.newTerraform(ctx, dir)
	if err != nil {
		return nil, err
	}
	if err := withGroupReaper(ctx, dir, func() error { return r.initAndWorkspace(ctx, tf) }); err != nil {
		return nil, err
	}
	return tf, nil
}
