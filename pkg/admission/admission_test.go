package admission_test

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"
	apiserverinstall "k8s.io/apiserver/pkg/apis/apiserver/install"
	"k8s.io/apiserver/pkg/authentication/user"

	tradmission "github.com/terrarun/terrarun/pkg/admission"
	"github.com/terrarun/terrarun/pkg/admission/initializer"
	"github.com/terrarun/terrarun/pkg/admission/plugin/terraformrundefaults"
	"github.com/terrarun/terrarun/pkg/admission/policy"
	"github.com/terrarun/terrarun/pkg/apis/terrarun"
)

// chainPolicy defaults runs to Auto approval but forbids Auto in the prod
// namespace, to show that validation sees the mutating plugin's output.
const chainPolicy = `
apiVersion: admission.terrarun.dev/v1alpha1
kind: TerraformRunPolicy
defaults:
  engine: {binary: tofu, image: registry.example.com/terrarun-executor:v1}
  approval: {mode: Auto, timeout: 24h}
  timeouts: {plan: 30m, apply: 1h}
allowedGitHosts: ["github.com", "*.corp.example.com"]
manualApprovalNamespaceSelector:
  matchExpressions: [{key: kubernetes.io/metadata.name, operator: In, values: [prod]}]
maxTimeouts: {plan: 2h, apply: 4h, approval: 72h}
`

var alice = &user.DefaultInfo{Name: "alice", UID: "u-alice", Groups: []string{"system:authenticated"}}

// configProvider serves the same policy to every plugin, as an
// AdmissionConfiguration pointing both plugins at one file does.
type configProvider struct{ data []byte }

func (p configProvider) ConfigFor(string) (io.Reader, error) {
	if p.data == nil {
		return nil, nil
	}
	return bytes.NewReader(p.data), nil
}

func newChain(t *testing.T, provider admission.ConfigProvider) admission.Interface {
	t.Helper()
	plugins := admission.NewPlugins()
	tradmission.Register(plugins)
	chain, err := plugins.NewFromPlugins(tradmission.PluginOrder, provider,
		admission.PluginInitializers{initializer.NewInitializer(initializer.NameOnlyNamespaceLabeler{}, nil)}, nil)
	if err != nil {
		t.Fatalf("NewFromPlugins: %v", err)
	}
	return chain
}

// admit runs a create through the chain the way the API server does: every
// mutating plugin, then every validating plugin.
func admit(t *testing.T, chain admission.Interface, run *terrarun.TerraformRun) error {
	t.Helper()
	a := admission.NewAttributesRecord(run, nil, terrarun.SchemeGroupVersion.WithKind("TerraformRun"),
		run.Namespace, run.Name, terrarun.SchemeGroupVersion.WithResource("terraformruns"), "",
		admission.Create, &metav1.CreateOptions{}, false, alice)
	ctx := context.Background()
	if m, ok := chain.(admission.MutationInterface); ok && m.Handles(admission.Create) {
		if err := m.Admit(ctx, a, nil); err != nil {
			return err
		}
	}
	if v, ok := chain.(admission.ValidationInterface); ok && v.Handles(admission.Create) {
		return v.Validate(ctx, a, nil)
	}
	return nil
}

func newRun(ns, url string) *terrarun.TerraformRun {
	return &terrarun.TerraformRun{
		ObjectMeta: metav1.ObjectMeta{Name: "run", Namespace: ns},
		Spec: terrarun.TerraformRunSpec{
			Source:  terrarun.Source{Git: &terrarun.GitSource{URL: url, Ref: "main"}},
			Creator: &terrarun.Creator{Username: alice.Name, UID: alice.UID, Groups: alice.Groups},
		},
	}
}

func TestRegisterAndPluginOrder(t *testing.T) {
	plugins := admission.NewPlugins()
	tradmission.Register(plugins)
	got := plugins.Registered()
	for _, name := range tradmission.PluginOrder {
		if !slices.Contains(got, name) {
			t.Errorf("%s not registered (registered: %v)", name, got)
		}
	}
	if want := []string{"TerraformRunDefaults", "TerraformRunPolicy"}; !slices.Equal(tradmission.PluginOrder, want) {
		t.Errorf("PluginOrder = %v, want %v", tradmission.PluginOrder, want)
	}
}

func TestChain(t *testing.T) {
	chain := newChain(t, configProvider{[]byte(chainPolicy)})
	if !chain.Handles(admission.Create) || !chain.Handles(admission.Update) {
		t.Fatalf("chain must handle create and update")
	}

	t.Run("defaults applied, then validated", func(t *testing.T) {
		run := newRun("dev", "https://git.corp.example.com/team/infra.git")
		if err := admit(t, chain, run); err != nil {
			t.Fatalf("admit: %v", err)
		}
		s := run.Spec
		if s.Engine.Binary != terrarun.EngineTofu || s.Engine.Image != "registry.example.com/terrarun-executor:v1" ||
			s.Approval.Mode != terrarun.ApprovalModeAuto || s.Approval.Timeout.Duration != 24*time.Hour ||
			s.Timeouts.Plan.Duration != 30*time.Minute || s.Timeouts.Apply.Duration != time.Hour {
			t.Errorf("defaults not applied: %+v", s)
		}
	})
	t.Run("a defaulted value is validated", func(t *testing.T) {
		run := newRun("prod", "https://github.com/example/infra.git")
		err := admit(t, chain, run)
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(),
			`spec.approval.mode: Auto approval is forbidden in namespace "prod" by the cluster policy; use Manual`) {
			t.Fatalf("want Auto forbidden in prod, got %v", err)
		}
	})
	t.Run("an explicit Manual in prod is kept and allowed", func(t *testing.T) {
		run := newRun("prod", "https://github.com/example/infra.git")
		run.Spec.Approval.Mode = terrarun.ApprovalModeManual
		if err := admit(t, chain, run); err != nil {
			t.Fatalf("admit: %v", err)
		}
	})
	t.Run("host denied", func(t *testing.T) {
		err := admit(t, chain, newRun("dev", "https://evil.example/x.git"))
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `host "evil.example" is not allowed`) {
			t.Fatalf("want host denied, got %v", err)
		}
	})
}

func TestChainWithoutConfig(t *testing.T) {
	chain := newChain(t, configProvider{})
	run := newRun("prod", "https://anywhere.example/x.git")
	run.Spec.Approval.Mode = terrarun.ApprovalModeAuto
	if err := admit(t, chain, run); err != nil {
		t.Fatalf("zero policy must allow: %v", err)
	}
	if run.Spec.Engine.Binary != "" || run.Spec.Timeouts.Plan != nil {
		t.Errorf("zero policy must not default: %+v", run.Spec)
	}
	forged := newRun("dev", "https://anywhere.example/x.git")
	forged.Spec.Creator.Username = "bob"
	if err := admit(t, chain, forged); !apierrors.IsForbidden(err) {
		t.Errorf("forged creator must be denied even without a policy, got %v", err)
	}
}

func TestChainBadConfig(t *testing.T) {
	plugins := admission.NewPlugins()
	tradmission.Register(plugins)
	_, err := plugins.NewFromPlugins(tradmission.PluginOrder,
		configProvider{[]byte("apiVersion: admission.terrarun.dev/v1alpha1\nkind: TerraformRunPolicy\nmaxTimeout: {plan: 1h}\n")},
		admission.PluginInitializers{}, nil)
	if err == nil || !strings.Contains(err.Error(), `unknown field "maxTimeout"`) || !strings.Contains(err.Error(), terraformrundefaults.PluginName) {
		t.Fatalf("want the first plugin to fail on the unknown field, got %v", err)
	}
}

// TestArtifacts loads artifacts/policy/admission-config.yaml the way the
// server's --admission-control-config-file does, and builds the chain from it.
func TestArtifacts(t *testing.T) {
	configFile, err := filepath.Abs(filepath.Join("..", "..", "artifacts", "policy", "admission-config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	apiserverinstall.Install(scheme)
	provider, err := admission.ReadAdmissionConfiguration(tradmission.PluginOrder, configFile, scheme)
	if err != nil {
		t.Fatalf("ReadAdmissionConfiguration: %v", err)
	}
	for _, name := range tradmission.PluginOrder {
		r, err := provider.ConfigFor(name)
		if err != nil || r == nil {
			t.Fatalf("ConfigFor(%s) = %v, %v", name, r, err)
		}
		cfg, err := policy.Load(r)
		if err != nil {
			t.Fatalf("%s: policy.Load: %v", name, err)
		}
		if cfg.Defaults.Engine.Image == "" || len(cfg.AllowedGitHosts) == 0 || cfg.ManualApprovalNamespaceSelector == nil {
			t.Errorf("%s: sample policy looks empty: %+v", name, cfg)
		}
	}

	// The sample policy is also loadable on its own.
	f, err := os.Open(filepath.Join(filepath.Dir(configFile), "terrarun-policy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := policy.Load(f); err != nil {
		t.Fatalf("terrarun-policy.yaml: %v", err)
	}

	chain := newChain(t, provider)
	run := newRun("dev", "https://github.com/example/infra.git")
	if err := admit(t, chain, run); err != nil {
		t.Fatalf("admit: %v", err)
	}
	if run.Spec.Engine.Binary != terrarun.EngineTofu || run.Spec.Approval.Mode != terrarun.ApprovalModeManual {
		t.Errorf("sample defaults not applied: %+v", run.Spec)
	}
}
