package terraformrundefaults

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/terrarun/terrarun/pkg/admission/initializer"
	"github.com/terrarun/terrarun/pkg/admission/policy"
	"github.com/terrarun/terrarun/pkg/apis/terrarun"
)

const testPolicy = `
apiVersion: admission.terrarun.dev/v1alpha1
kind: TerraformRunPolicy
defaults:
  engine: {binary: tofu, image: registry.example.com/terrarun-executor:v1}
  approval: {mode: Manual, timeout: 24h, requiredApprovals: 2}
  timeouts: {plan: 30m, apply: 1h}
`

var (
	alice   = &user.DefaultInfo{Name: "alice", UID: "u-alice", Groups: []string{"system:authenticated"}}
	runsGVR = terrarun.SchemeGroupVersion.WithResource("terraformruns")
	runGVK  = terrarun.SchemeGroupVersion.WithKind("TerraformRun")
)

func dur(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }

func newRun(mutate func(*terrarun.TerraformRun)) *terrarun.TerraformRun {
	run := &terrarun.TerraformRun{
		ObjectMeta: metav1.ObjectMeta{Name: "run", Namespace: "dev"},
		Spec: terrarun.TerraformRunSpec{
			Source: terrarun.Source{Inline: map[string]string{"main.tf": ""}},
		},
	}
	if mutate != nil {
		mutate(run)
	}
	return run
}

func attrs(obj, old runtime.Object, gvr schema.GroupVersionResource, sub string, op admission.Operation) admission.Attributes {
	var opts runtime.Object
	switch op {
	case admission.Create:
		opts = &metav1.CreateOptions{}
	case admission.Update:
		opts = &metav1.UpdateOptions{}
	}
	return admission.NewAttributesRecord(obj, old, runGVK, "dev", "run", gvr, sub, op, opts, false, alice)
}

func loadPolicy(t *testing.T, s string) *policy.Config {
	t.Helper()
	cfg, err := policy.Load(strings.NewReader(s))
	if err != nil {
		t.Fatalf("policy.Load: %v", err)
	}
	return cfg
}

func TestAdmitDefaults(t *testing.T) {
	p := New(loadPolicy(t, testPolicy))
	cases := []struct {
		name string
		in   func(*terrarun.TerraformRun)
		want terrarun.TerraformRunSpec
	}{
		{
			name: "every field empty gets the default",
			want: terrarun.TerraformRunSpec{
				Engine:   terrarun.Engine{Binary: terrarun.EngineTofu, Image: "registry.example.com/terrarun-executor:v1"},
				Approval: terrarun.Approval{Mode: terrarun.ApprovalModeManual, Timeout: dur(24 * time.Hour), RequiredApprovals: 2},
				Timeouts: terrarun.Timeouts{Plan: dur(30 * time.Minute), Apply: dur(time.Hour)},
			},
		},
		{
			name: "user values are kept",
			in: func(r *terrarun.TerraformRun) {
				r.Spec.Engine = terrarun.Engine{Binary: terrarun.EngineTerraform, Image: "my/image:1"}
				r.Spec.Approval = terrarun.Approval{Mode: terrarun.ApprovalModeAuto, Timeout: dur(time.Hour)}
				r.Spec.Timeouts = terrarun.Timeouts{Plan: dur(5 * time.Minute), Apply: dur(10 * time.Minute)}
			},
			want: terrarun.TerraformRunSpec{
				Engine:   terrarun.Engine{Binary: terrarun.EngineTerraform, Image: "my/image:1"},
				Approval: terrarun.Approval{Mode: terrarun.ApprovalModeAuto, Timeout: dur(time.Hour)},
				Timeouts: terrarun.Timeouts{Plan: dur(5 * time.Minute), Apply: dur(10 * time.Minute)},
			},
		},
		{
			name: "only the empty fields are filled",
			in: func(r *terrarun.TerraformRun) {
				r.Spec.Engine.Image = "my/image:1"
				r.Spec.Approval.Mode = terrarun.ApprovalModeAuto
				r.Spec.Timeouts.Apply = dur(2 * time.Hour)
			},
			want: terrarun.TerraformRunSpec{
				Engine:   terrarun.Engine{Binary: terrarun.EngineTofu, Image: "my/image:1"},
				Approval: terrarun.Approval{Mode: terrarun.ApprovalModeAuto, Timeout: dur(24 * time.Hour)},
				Timeouts: terrarun.Timeouts{Plan: dur(30 * time.Minute), Apply: dur(2 * time.Hour)},
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			run := newRun(tc.in)
			if err := p.Admit(context.Background(), attrs(run, nil, runsGVR, "", admission.Create), nil); err != nil {
				t.Fatalf("Admit: %v", err)
			}
			got := run.Spec
			if got.Engine != tc.want.Engine || got.Approval.Mode != tc.want.Approval.Mode || got.Approval.RequiredApprovals != tc.want.Approval.RequiredApprovals ||
				*got.Approval.Timeout != *tc.want.Approval.Timeout ||
				*got.Timeouts.Plan != *tc.want.Timeouts.Plan || *got.Timeouts.Apply != *tc.want.Timeouts.Apply {
				t.Errorf("spec = %+v / %+v / %+v, want %+v / %+v / %+v",
					got.Engine, got.Approval, got.Timeouts, tc.want.Engine, tc.want.Approval, tc.want.Timeouts)
			}
		})
	}
}

func TestDefaultsAreCopies(t *testing.T) {
	cfg := loadPolicy(t, testPolicy)
	p := New(cfg)
	run := newRun(nil)
	if err := p.Admit(context.Background(), attrs(run, nil, runsGVR, "", admission.Create), nil); err != nil {
		t.Fatal(err)
	}
	run.Spec.Timeouts.Plan.Duration = time.Second
	run.Spec.Approval.Timeout.Duration = time.Second
	if cfg.Defaults.Timeouts.Plan.Duration != 30*time.Minute || cfg.Defaults.Approval.Timeout.Duration != 24*time.Hour {
		t.Errorf("mutating a run changed the policy defaults: %+v", cfg.Defaults)
	}
}

func TestZeroPolicyChangesNothing(t *testing.T) {
	for _, cfg := range []*policy.Config{nil, {}} {
		p := New(cfg)
		run := newRun(nil)
		before := run.DeepCopy()
		if err := p.Admit(context.Background(), attrs(run, nil, runsGVR, "", admission.Create), nil); err != nil {
			t.Fatal(err)
		}
		if run.Spec.Engine != before.Spec.Engine || run.Spec.Approval != before.Spec.Approval || run.Spec.Timeouts != before.Spec.Timeouts {
			t.Errorf("zero policy changed the run: %+v", run.Spec)
		}
	}
}

func TestIgnoresOtherRequests(t *testing.T) {
	p := New(loadPolicy(t, testPolicy))
	other := schema.GroupVersionResource{Group: "terrarun.dev", Version: runtime.APIVersionInternal, Resource: "widgets"}
	core := schema.GroupVersionResource{Version: "v1", Resource: "terraformruns"}
	cases := []struct {
		name string
		a    func(*terrarun.TerraformRun) admission.Attributes
	}{
		{"other resource", func(r *terrarun.TerraformRun) admission.Attributes {
			return attrs(r, nil, other, "", admission.Create)
		}},
		{"same resource name in another group", func(r *terrarun.TerraformRun) admission.Attributes {
			return attrs(r, nil, core, "", admission.Create)
		}},
		{"status subresource", func(r *terrarun.TerraformRun) admission.Attributes {
			return attrs(r, r.DeepCopy(), runsGVR, "status", admission.Update)
		}},
		{"approve subresource", func(r *terrarun.TerraformRun) admission.Attributes {
			return attrs(r, nil, runsGVR, "approve", admission.Create)
		}},
		{"update", func(r *terrarun.TerraformRun) admission.Attributes {
			return attrs(r, r.DeepCopy(), runsGVR, "", admission.Update)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			run := newRun(nil)
			if err := p.Admit(context.Background(), tc.a(run), nil); err != nil {
				t.Fatalf("Admit: %v", err)
			}
			if run.Spec.Engine.Binary != "" || run.Spec.Timeouts.Plan != nil {
				t.Errorf("run was defaulted: %+v", run.Spec)
			}
		})
	}
	// Update only for workspaces, whose template may change.
	if !p.Handles(admission.Update) || p.Handles(admission.Delete) || !p.Handles(admission.Create) {
		t.Errorf("plugin must handle Create and Update only")
	}
}

// TestWorkspaceTemplateDefaults: a workspace's template gets the policy's
// defaults, and its runs' approval is spec.approval.
func TestWorkspaceTemplateDefaults(t *testing.T) {
	p := New(loadPolicy(t, testPolicy))
	ws := &terrarun.TerraformWorkspace{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "dev"}}
	gvr := terrarun.SchemeGroupVersion.WithResource("terraformworkspaces")
	for _, op := range []admission.Operation{admission.Create, admission.Update} {
		w := ws.DeepCopy()
		a := admission.NewAttributesRecord(w, ws, terrarun.SchemeGroupVersion.WithKind("TerraformWorkspace"), "dev", "app", gvr, "", op, nil, false, alice)
		if err := p.Admit(context.Background(), a, nil); err != nil {
			t.Fatal(err)
		}
		want := newRun(nil)
		ApplyDefaults(p.cfg, want)
		if w.Spec.Template.Engine != want.Spec.Engine || w.Spec.Approval.Mode != want.Spec.Approval.Mode || w.Spec.Template.Approval != (terrarun.Approval{}) {
			t.Errorf("%s: template engine %+v, approval %+v (template %+v); want the policy's %+v, %+v in spec.approval",
				op, w.Spec.Template.Engine, w.Spec.Approval, w.Spec.Template.Approval, want.Spec.Engine, want.Spec.Approval)
		}
	}
}

func TestWrongObjectType(t *testing.T) {
	p := New(loadPolicy(t, testPolicy))
	a := admission.NewAttributesRecord(&terrarun.TerraformRunApproval{}, nil, runGVK, "dev", "run", runsGVR, "", admission.Create, &metav1.CreateOptions{}, false, alice)
	if err := p.Admit(context.Background(), a, nil); !apierrors.IsBadRequest(err) {
		t.Errorf("want BadRequest, got %v", err)
	}
}

func TestRegister(t *testing.T) {
	plugins := admission.NewPlugins()
	Register(plugins)
	if got := plugins.Registered(); len(got) != 1 || got[0] != PluginName {
		t.Fatalf("registered %v", got)
	}
	if _, err := plugins.InitPlugin(PluginName, strings.NewReader("kind: Nope\n"), admission.PluginInitializers{}); err == nil ||
		!strings.Contains(err.Error(), "kind: must be") {
		t.Errorf("want a config error, got %v", err)
	}
	pl, err := plugins.InitPlugin(PluginName, strings.NewReader(testPolicy), admission.PluginInitializers{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := pl.(admission.MutationInterface); !ok {
		t.Errorf("plugin is not mutating")
	}
	if _, ok := pl.(admission.ValidationInterface); ok {
		t.Errorf("plugin must not be validating")
	}
}

// TestTTLDefaults: a run that sets no ttlSecondsAfterFinished gets its
// namespace's retention (the first entry that selects it), else the
// policy's default; a run that sets one keeps it; a workspace's run gets
// none (its history limits keep it); a policy with retention entries needs
// the namespaces' labels.
func TestTTLDefaults(t *testing.T) {
	cfg := loadPolicy(t, `apiVersion: admission.terrarun.dev/v1alpha1
kind: TerraformRunPolicy
defaults:
  ttlSecondsAfterFinished: 2592000
retention:
- namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: dev}}
  ttlSecondsAfterFinished: 3600
- namespaceSelector: {}
  ttlSecondsAfterFinished: 86400
`)
	p := New(cfg)
	if err := p.ValidateInitialization(); err == nil {
		t.Fatal("retention without namespace labels was accepted")
	}
	initializer.NewInitializer(initializer.NameOnlyNamespaceLabeler{}, nil).Initialize(p)
	if err := p.ValidateInitialization(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		namespace string
		mutate    func(*terrarun.TerraformRun)
		want      *int32
	}{
		{"the namespace's retention", "dev", nil, ptr(int32(3600))},
		{"the next entry that selects", "prod", nil, ptr(int32(86400))},
		{"the run's own", "dev", func(r *terrarun.TerraformRun) { r.Spec.TTLSecondsAfterFinished = ptr(int32(5)) }, ptr(int32(5))},
		{"a workspace's run", "dev", func(r *terrarun.TerraformRun) { r.Labels = map[string]string{terrarun.LabelWorkspace: "network"} }, nil},
	} {
		run := newRun(tc.mutate)
		run.Namespace = tc.namespace
		a := admission.NewAttributesRecord(run, nil, runGVK, tc.namespace, "run", runsGVR, "", admission.Create, &metav1.CreateOptions{}, false, alice)
		if err := p.Admit(context.Background(), a, nil); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := run.Spec.TTLSecondsAfterFinished; (got == nil) != (tc.want == nil) || got != nil && *got != *tc.want {
			t.Errorf("%s: ttlSecondsAfterFinished = %v, want %v", tc.name, deref(got), deref(tc.want))
		}
	}
	noRetention := New(loadPolicy(t, "apiVersion: admission.terrarun.dev/v1alpha1\nkind: TerraformRunPolicy\ndefaults: {ttlSecondsAfterFinished: 60}\n"))
	run := newRun(nil)
	if err := noRetention.Admit(context.Background(), attrs(run, nil, runsGVR, "", admission.Create), nil); err != nil || deref(run.Spec.TTLSecondsAfterFinished) != "60" {
		t.Errorf("the policy's default: %v, %s", err, deref(run.Spec.TTLSecondsAfterFinished))
	}
	for _, bad := range []string{"defaults: {ttlSecondsAfterFinished: -1}", "retention: [{namespaceSelector: {}, ttlSecondsAfterFinished: -5}]"} {
		if _, err := policy.Load(strings.NewReader("apiVersion: admission.terrarun.dev/v1alpha1\nkind: TerraformRunPolicy\n" + bad + "\n")); err == nil || !strings.Contains(err.Error(), "ttlSecondsAfterFinished: must be 0 or more seconds") {
			t.Errorf("%s: %v", bad, err)
		}
	}
}

func ptr[T any](v T) *T { return &v }

func deref(p *int32) string {
	if p == nil {
		return "none"
	}
	return fmt.Sprint(*p)
}

// TestTrustedSourceKeys copies the policy's trustedSourceKeys into a new
// run's OCI source, creating its verify, and refuses a run that sets them
// itself; other sources and workspaces' templates are left alone.
func TestTrustedSourceKeys(t *testing.T) {
	const keys = "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n-----END PUBLIC KEY-----\n"
	p := New(&policy.Config{TrustedSourceKeys: keys})
	oci := func(verify *terrarun.OCIVerification) func(*terrarun.TerraformRun) {
		return func(r *terrarun.TerraformRun) {
			r.Spec.Source = terrarun.Source{OCI: &terrarun.OCISource{URL: "oci://registry.example.com/infra", Verify: verify}}
		}
	}
	for _, tc := range []struct {
		name    string
		mutate  func(*terrarun.TerraformRun)
		want    *terrarun.OCIVerification
		wantErr string
	}{
		{name: "no verify", mutate: oci(nil), want: &terrarun.OCIVerification{TrustedKeys: keys}},
		{name: "the tenant's keys too", mutate: oci(&terrarun.OCIVerification{KeysSecret: "mine"}), want: &terrarun.OCIVerification{KeysSecret: "mine", TrustedKeys: keys}},
		{name: "keys of its own", mutate: oci(&terrarun.OCIVerification{TrustedKeys: "-----BEGIN PUBLIC KEY-----\n"}), wantErr: "spec.source.oci.verify.trustedKeys: Forbidden"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := newRun(tc.mutate)
			err := p.Admit(context.Background(), attrs(run, nil, runsGVR, "", admission.Create), nil)
			if tc.wantErr != "" {
				if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := run.Spec.Source.OCI.Verify; got == nil || !reflect.DeepEqual(*got, *tc.want) {
				t.Errorf("verify %+v, want %+v", got, tc.want)
			}
		})
	}
	inline := newRun(nil)
	if err := p.Admit(context.Background(), attrs(inline, nil, runsGVR, "", admission.Create), nil); err != nil || inline.Spec.Source.OCI != nil {
		t.Errorf("an inline run: %v %+v", err, inline.Spec.Source)
	}
	// Without trusted keys in the policy, a run still cannot set them.
	run := newRun(oci(&terrarun.OCIVerification{KeysSecret: "mine", TrustedKeys: keys}))
	if err := New(nil).Admit(context.Background(), attrs(run, nil, runsGVR, "", admission.Create), nil); !apierrors.IsForbidden(err) {
		t.Errorf("a run with trusted keys of its own and no policy keys: %v, want Forbidden", err)
	}
}
