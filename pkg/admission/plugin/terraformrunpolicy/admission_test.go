package terraformrunpolicy

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/terrarun/terrarun/pkg/admission/initializer"
	"github.com/terrarun/terrarun/pkg/admission/policy"
	"github.com/terrarun/terrarun/pkg/apis/terrarun"
	"github.com/terrarun/terrarun/pkg/runner/oci/ocitest"
)

const testPolicy = `
apiVersion: admission.terrarun.dev/v1alpha1
kind: TerraformRunPolicy
allowedGitHosts: ["github.com", "*.corp.example.com"]
manualApprovalNamespaceSelector: {matchLabels: {env: prod}}
maxTimeouts: {plan: 2h, apply: 4h, approval: 72h}
`

var (
	alice   = &user.DefaultInfo{Name: "alice", UID: "u-alice", Groups: []string{"devs", "system:authenticated"}}
	bob     = &user.DefaultInfo{Name: "bob", UID: "u-bob", Groups: []string{"ops", "system:authenticated"}}
	runsGVR = terrarun.SchemeGroupVersion.WithResource("terraformruns")
	runGVK  = terrarun.SchemeGroupVersion.WithKind("TerraformRun")
)

func dur(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }

func creatorOf(u user.Info) *terrarun.Creator {
	return &terrarun.Creator{Username: u.GetName(), UID: u.GetUID(), Groups: u.GetGroups()}
}

// newRun returns a run as the registry strategy leaves it before validating
// admission: namespaced, with the creator recorded from the requesting user.
func newRun(ns string, mutate func(*terrarun.TerraformRun)) *terrarun.TerraformRun {
	run := &terrarun.TerraformRun{
		ObjectMeta: metav1.ObjectMeta{Name: "run", Namespace: ns},
		Spec: terrarun.TerraformRunSpec{
			Source:   terrarun.Source{Git: &terrarun.GitSource{URL: "https://github.com/example/infra.git", Ref: "main"}},
			Approval: terrarun.Approval{Mode: terrarun.ApprovalModeManual},
			Creator:  creatorOf(alice),
		},
	}
	if mutate != nil {
		mutate(run)
	}
	return run
}

func createAttrs(run *terrarun.TerraformRun, u user.Info) admission.Attributes {
	return admission.NewAttributesRecord(run, nil, runGVK, run.Namespace, run.Name, runsGVR, "", admission.Create, &metav1.CreateOptions{}, false, u)
}

func updateAttrs(run, old *terrarun.TerraformRun, sub string, u user.Info) admission.Attributes {
	return admission.NewAttributesRecord(run, old, runGVK, run.Namespace, run.Name, runsGVR, sub, admission.Update, &metav1.UpdateOptions{}, false, u)
}

func namespace(name string, lbls map[string]string) *corev1.Namespace {
	l := map[string]string{corev1.LabelMetadataName: name}
	for k, v := range lbls {
		l[k] = v
	}
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l}}
}

func fakeLister(t *testing.T, nss ...*corev1.Namespace) corev1listers.NamespaceLister {
	t.Helper()
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, ns := range nss {
		if err := idx.Add(ns); err != nil {
			t.Fatal(err)
		}
	}
	return corev1listers.NewNamespaceLister(idx)
}

func clusterLabeler(t *testing.T) *initializer.InformerNamespaceLabeler {
	return initializer.NewInformerNamespaceLabeler(fakeLister(t,
		namespace("prod", map[string]string{"env": "prod"}),
		namespace("dev", map[string]string{"env": "dev"}),
		namespace("unlabeled", nil),
	))
}

func newPlugin(t *testing.T, cfgText string, l NamespaceLabeler) *Plugin {
	t.Helper()
	cfg, err := policy.Load(strings.NewReader(cfgText))
	if err != nil {
		t.Fatalf("policy.Load: %v", err)
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if l != nil {
		initializer.NewInitializer(l, nil).Initialize(p)
	}
	if err := admission.ValidateInitialization(p); err != nil {
		t.Fatalf("ValidateInitialization: %v", err)
	}
	return p
}

// checkResult asserts that err is nil when wantErr is empty, and otherwise a
// Forbidden error whose message contains every line of wantErr.
func checkResult(t *testing.T, err error, wantErr ...string) {
	t.Helper()
	if len(wantErr) == 0 {
		if err != nil {
			t.Fatalf("want allowed, got %v", err)
		}
		return
	}
	if err == nil {
		t.Fatalf("want denied with %q, got allowed", wantErr)
	}
	if !apierrors.IsForbidden(err) {
		t.Errorf("want Forbidden, got %T %v", err, err)
	}
	for _, w := range wantErr {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error\n  %s\ndoes not contain\n  %s", err, w)
		}
	}
}

func TestOCISources(t *testing.T) {
	p := newPlugin(t, minimalPolicy+"allowedOCIRegistries: [ghcr.io, \"*.registry.example.com\"]\nrequireVerifiedSources: true\n", clusterLabeler(t))
	verified := &terrarun.OCIVerification{KeysSecret: "keys"}
	for _, tc := range []struct {
		url     string
		verify  *terrarun.OCIVerification
		wantErr []string
	}{
		{url: "oci://ghcr.io/org/infra", verify: verified},
		{url: "oci://eu.registry.example.com:5000/infra", verify: verified},
		{url: "oci://evil.example/infra", verify: verified, wantErr: []string{
			`spec.source.oci.url: registry "evil.example" is not allowed by the cluster policy; allowed registries: ghcr.io, *.registry.example.com`}},
		{url: "oci://ghcr.io/org/infra", wantErr: []string{
			`spec.source.oci.verify: the cluster policy requires every OCI source to be verified (requireVerifiedSources)`}},
	} {
		t.Run(tc.url, func(t *testing.T) {
			run := newRun("dev", func(r *terrarun.TerraformRun) {
				r.Spec.Source = terrarun.Source{OCI: &terrarun.OCISource{URL: tc.url, Verify: tc.verify}}
			})
			checkResult(t, p.Validate(context.Background(), createAttrs(run, alice), nil), tc.wantErr...)
		})
	}
	t.Run("without the policy any registry, unverified", func(t *testing.T) {
		p := newPlugin(t, minimalPolicy, nil)
		run := newRun("dev", func(r *terrarun.TerraformRun) {
			r.Spec.Source = terrarun.Source{OCI: &terrarun.OCISource{URL: "oci://evil.example/infra"}}
		})
		checkResult(t, p.Validate(context.Background(), createAttrs(run, alice), nil))
	})
}

// TestTrustedSourceKeys: with the policy's trustedSourceKeys, an OCI source
// needs no keys Secret of its own to meet requireVerifiedSources, and must
// carry exactly the policy's keys (which TerraformRunDefaults copies); a
// workspace's would-be runs carry none yet and pass.
func TestTrustedSourceKeys(t *testing.T) {
	key := ocitest.NewKey(t)
	p := newPlugin(t, minimalPolicy+fmt.Sprintf("requireVerifiedSources: true\ntrustedSourceKeys: %q\n", key.PublicPEM), clusterLabeler(t))
	for _, tc := range []struct {
		name    string
		verify  *terrarun.OCIVerification
		wantErr []string
	}{
		{name: "the policy's keys", verify: &terrarun.OCIVerification{TrustedKeys: string(key.PublicPEM)}},
		{name: "the policy's keys and a Secret's", verify: &terrarun.OCIVerification{KeysSecret: "keys", TrustedKeys: string(key.PublicPEM)}},
		{name: "not copied", wantErr: []string{"spec.source.oci.verify.trustedKeys: the cluster policy's trustedSourceKeys were not applied to the run"}},
		{name: "other keys", verify: &terrarun.OCIVerification{TrustedKeys: string(ocitest.NewKey(t).PublicPEM)}, wantErr: []string{
			"spec.source.oci.verify.trustedKeys: is copied by the server from the cluster policy's trustedSourceKeys, and these are not they"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := newRun("dev", func(r *terrarun.TerraformRun) {
				r.Spec.Source = terrarun.Source{OCI: &terrarun.OCISource{URL: "oci://ghcr.io/org/infra", Verify: tc.verify}}
			})
			checkResult(t, p.Validate(context.Background(), createAttrs(run, alice), nil), tc.wantErr...)
		})
	}
	t.Run("keys without the policy's", func(t *testing.T) {
		p := newPlugin(t, minimalPolicy, nil)
		run := newRun("dev", func(r *terrarun.TerraformRun) {
			r.Spec.Source = terrarun.Source{OCI: &terrarun.OCISource{URL: "oci://ghcr.io/org/infra", Verify: &terrarun.OCIVerification{TrustedKeys: string(key.PublicPEM)}}}
		})
		checkResult(t, p.Validate(context.Background(), createAttrs(run, alice), nil), "spec.source.oci.verify.trustedKeys: is copied by the server")
	})
}

func TestGitHosts(t *testing.T) {
	p := newPlugin(t, testPolicy, clusterLabeler(t))
	const allowed = "allowed hosts: github.com, *.corp.example.com"
	cases := []struct {
		url     string
		wantErr []string
	}{
		{url: "https://github.com/example/infra.git"},
		{url: "https://GitHub.COM/example/infra.git"},
		{url: "https://github.com:443/example/infra.git"},
		{url: "ssh://git@github.com/example/infra.git"},
		{url: "ssh://git@github.com:2222/example/infra.git"},
		{url: "git@github.com:example/infra.git"},
		{url: "https://git.corp.example.com/team/infra.git"},
		{url: "https://a.b.corp.example.com:8443/team/infra.git"},
		{url: "ssh://git@GIT.CORP.EXAMPLE.COM:22/team/infra.git"},
		{url: "https://evil.example/x.git", wantErr: []string{
			`spec.source.git.url: host "evil.example" is not allowed by the cluster policy; allowed hosts: github.com, *.corp.example.com`}},
		{url: "https://evil.example:443/x.git", wantErr: []string{`host "evil.example" is not allowed`}},
		{url: "https://corp.example.com/x.git", wantErr: []string{`host "corp.example.com" is not allowed`, allowed}},
		{url: "https://evilcorp.example.com/x.git", wantErr: []string{`host "evilcorp.example.com" is not allowed`}},
		{url: "https://github.com.evil.example/x.git", wantErr: []string{`host "github.com.evil.example" is not allowed`}},
		{url: "https://api.github.com/x.git", wantErr: []string{`host "api.github.com" is not allowed`}},
		{url: "https://github.com@evil.example/x.git", wantErr: []string{`host "evil.example" is not allowed`}},
		{url: "git@evil.example:x.git", wantErr: []string{`host "evil.example" is not allowed`}},
		{url: `https://evil.example\@github.com/x.git`, wantErr: []string{"spec.source.git.url: cannot determine the host", allowed}},
		{url: "/srv/git/infra.git", wantErr: []string{"spec.source.git.url: cannot determine the host", allowed}},
		{url: "", wantErr: []string{"spec.source.git.url: the URL is empty"}},
	}
	for _, tc := range cases {
		t.Run(tc.url, func(t *testing.T) {
			run := newRun("dev", func(r *terrarun.TerraformRun) { r.Spec.Source.Git.URL = tc.url })
			checkResult(t, p.Validate(context.Background(), createAttrs(run, alice), nil), tc.wantErr...)
		})
	}

	t.Run("no allowed hosts allows any host", func(t *testing.T) {
		p := newPlugin(t, "apiVersion: admission.terrarun.dev/v1alpha1\nkind: TerraformRunPolicy\n", nil)
		run := newRun("dev", func(r *terrarun.TerraformRun) { r.Spec.Source.Git.URL = "https://evil.example/x.git" })
		checkResult(t, p.Validate(context.Background(), createAttrs(run, alice), nil))
	})
	t.Run("non-git sources are not checked", func(t *testing.T) {
		run := newRun("dev", func(r *terrarun.TerraformRun) {
			r.Spec.Source = terrarun.Source{ConfigMap: &terrarun.ConfigMapSource{Name: "tf"}}
		})
		checkResult(t, p.Validate(context.Background(), createAttrs(run, alice), nil))
	})
}

func TestApprovalModeNamespaceSelector(t *testing.T) {
	const byName = `
apiVersion: admission.terrarun.dev/v1alpha1
kind: TerraformRunPolicy
manualApprovalNamespaceSelector:
  matchExpressions: [{key: kubernetes.io/metadata.name, operator: In, values: [prod]}]
`
	cases := []struct {
		name    string
		policy  string
		labeler NamespaceLabeler
		ns      string
		mode    terrarun.ApprovalMode
		wantErr []string
	}{
		{name: "cluster: Auto in prod denied", policy: testPolicy, labeler: clusterLabeler(t), ns: "prod", mode: terrarun.ApprovalModeAuto,
			wantErr: []string{`spec.approval.mode: Auto approval is forbidden in namespace "prod" by the cluster policy; use Manual`}},
		{name: "cluster: Manual in prod allowed", policy: testPolicy, labeler: clusterLabeler(t), ns: "prod", mode: terrarun.ApprovalModeManual},
		{name: "cluster: empty mode in prod allowed", policy: testPolicy, labeler: clusterLabeler(t), ns: "prod", mode: ""},
		{name: "cluster: Auto in dev allowed", policy: testPolicy, labeler: clusterLabeler(t), ns: "dev", mode: terrarun.ApprovalModeAuto},
		{name: "cluster: Auto in unlabeled allowed", policy: testPolicy, labeler: clusterLabeler(t), ns: "unlabeled", mode: terrarun.ApprovalModeAuto},
		{name: "cluster: Auto in missing namespace denied", policy: testPolicy, labeler: clusterLabeler(t), ns: "ghost", mode: terrarun.ApprovalModeAuto,
			wantErr: []string{`spec.approval.mode: Auto approval cannot be checked against the cluster policy in namespace "ghost"`, "not found", "use Manual"}},
		{name: "cluster: name selector matches", policy: byName, labeler: clusterLabeler(t), ns: "prod", mode: terrarun.ApprovalModeAuto,
			wantErr: []string{`Auto approval is forbidden in namespace "prod"`}},
		{name: "standalone: name selector matches", policy: byName, labeler: initializer.NameOnlyNamespaceLabeler{}, ns: "prod", mode: terrarun.ApprovalModeAuto,
			wantErr: []string{`spec.approval.mode: Auto approval is forbidden in namespace "prod" by the cluster policy; use Manual`}},
		{name: "standalone: name selector, other namespace", policy: byName, labeler: initializer.NameOnlyNamespaceLabeler{}, ns: "dev", mode: terrarun.ApprovalModeAuto},
		{name: "standalone: env selector never matches", policy: testPolicy, labeler: initializer.NameOnlyNamespaceLabeler{}, ns: "prod", mode: terrarun.ApprovalModeAuto},
		{name: "standalone: empty selector matches every namespace", labeler: initializer.NameOnlyNamespaceLabeler{}, ns: "anything", mode: terrarun.ApprovalModeAuto,
			policy:  "apiVersion: admission.terrarun.dev/v1alpha1\nkind: TerraformRunPolicy\nmanualApprovalNamespaceSelector: {}\n",
			wantErr: []string{`Auto approval is forbidden in namespace "anything"`}},
		{name: "no selector: Auto allowed anywhere", labeler: nil, ns: "prod", mode: terrarun.ApprovalModeAuto,
			policy: "apiVersion: admission.terrarun.dev/v1alpha1\nkind: TerraformRunPolicy\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := newPlugin(t, tc.policy, tc.labeler)
			run := newRun(tc.ns, func(r *terrarun.TerraformRun) { r.Spec.Approval.Mode = tc.mode })
			checkResult(t, p.Validate(context.Background(), createAttrs(run, alice), nil), tc.wantErr...)
		})
	}
}

func TestLabelers(t *testing.T) {
	ctx := context.Background()
	got, err := initializer.NameOnlyNamespaceLabeler{}.NamespaceLabels(ctx, "team-a")
	if err != nil || len(got) != 1 || got["kubernetes.io/metadata.name"] != "team-a" {
		t.Errorf("NameOnlyNamespaceLabeler = %v, %v", got, err)
	}

	l := clusterLabeler(t)
	got, err = l.NamespaceLabels(ctx, "prod")
	if err != nil || got["env"] != "prod" || got[corev1.LabelMetadataName] != "prod" {
		t.Errorf("informerNamespaceLabeler(prod) = %v, %v", got, err)
	}
	got["env"] = "changed"
	again, _ := l.NamespaceLabels(ctx, "prod")
	if again["env"] != "prod" {
		t.Errorf("labels returned by the labeler alias the cache")
	}
	if _, err := l.NamespaceLabels(ctx, "ghost"); err == nil || !apierrors.IsNotFound(errors.Unwrap(err)) {
		t.Errorf("missing namespace: want a wrapped NotFound, got %v", err)
	}
	var nilLabeler *initializer.InformerNamespaceLabeler
	if _, err := nilLabeler.NamespaceLabels(ctx, "prod"); err == nil {
		t.Errorf("nil labeler must fail")
	}
}

func TestTimeouts(t *testing.T) {
	p := newPlugin(t, testPolicy, clusterLabeler(t))
	cases := []struct {
		name    string
		mutate  func(*terrarun.TerraformRun)
		wantErr []string
	}{
		{name: "unset timeouts allowed", mutate: func(r *terrarun.TerraformRun) {}},
		{name: "at the maximum allowed", mutate: func(r *terrarun.TerraformRun) {
			r.Spec.Timeouts = terrarun.Timeouts{Plan: dur(2 * time.Hour), Apply: dur(4 * time.Hour)}
			r.Spec.Approval.Timeout = dur(72 * time.Hour)
		}},
		{name: "plan over", mutate: func(r *terrarun.TerraformRun) { r.Spec.Timeouts.Plan = dur(150 * time.Minute) },
			wantErr: []string{"spec.timeouts.plan: 2h30m exceeds the cluster policy maximum of 2h (maxTimeouts.plan); use at most 2h"}},
		{name: "apply over", mutate: func(r *terrarun.TerraformRun) { r.Spec.Timeouts.Apply = dur(5 * time.Hour) },
			wantErr: []string{"spec.timeouts.apply: 5h exceeds the cluster policy maximum of 4h (maxTimeouts.apply); use at most 4h"}},
		{name: "approval over", mutate: func(r *terrarun.TerraformRun) { r.Spec.Approval.Timeout = dur(73 * time.Hour) },
			wantErr: []string{"spec.approval.timeout: 73h exceeds the cluster policy maximum of 72h (maxTimeouts.approval); use at most 72h"}},
		{name: "all over, all reported", mutate: func(r *terrarun.TerraformRun) {
			r.Spec.Timeouts = terrarun.Timeouts{Plan: dur(3 * time.Hour), Apply: dur(5 * time.Hour)}
			r.Spec.Approval.Timeout = dur(100 * time.Hour)
		}, wantErr: []string{"spec.timeouts.plan:", "spec.timeouts.apply:", "spec.approval.timeout:"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			run := newRun("dev", tc.mutate)
			checkResult(t, p.Validate(context.Background(), createAttrs(run, alice), nil), tc.wantErr...)
		})
	}
}

func TestMinRequiredApprovals(t *testing.T) {
	p := newPlugin(t, `
apiVersion: admission.terrarun.dev/v1alpha1
kind: TerraformRunPolicy
defaults: {approval: {requiredApprovals: 2}}
minRequiredApprovals: 2
`, clusterLabeler(t))
	for _, tc := range []struct {
		name    string
		mutate  func(*terrarun.TerraformRun)
		wantErr []string
	}{
		{name: "at the minimum", mutate: func(r *terrarun.TerraformRun) { r.Spec.Approval.RequiredApprovals = 2 }},
		{name: "above it", mutate: func(r *terrarun.TerraformRun) { r.Spec.Approval.RequiredApprovals = 3 }},
		{name: "below it", mutate: func(r *terrarun.TerraformRun) { r.Spec.Approval.RequiredApprovals = 1 },
			wantErr: []string{"spec.approval.requiredApprovals: 1 is below the cluster policy's minRequiredApprovals (2); ask for at least 2 approvals, or omit the field"}},
		{name: "Auto is governed by manualApprovalNamespaceSelector", mutate: func(r *terrarun.TerraformRun) {
			r.Spec.Approval.Mode = terrarun.ApprovalModeAuto
			r.Spec.Approval.RequiredApprovals = 0
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := newRun("dev", tc.mutate)
			checkResult(t, p.Validate(context.Background(), createAttrs(run, alice), nil), tc.wantErr...)
		})
	}
}

func TestErrorDetails(t *testing.T) {
	p := newPlugin(t, testPolicy, clusterLabeler(t))
	run := newRun("prod", func(r *terrarun.TerraformRun) {
		r.Spec.Source.Git.URL = "https://evil.example/x.git"
		r.Spec.Approval.Mode = terrarun.ApprovalModeAuto
	})
	err := p.Validate(context.Background(), createAttrs(run, alice), nil)
	var se *apierrors.StatusError
	if !errors.As(err, &se) || se.ErrStatus.Details == nil {
		t.Fatalf("want a StatusError with details, got %v", err)
	}
	if se.ErrStatus.Details.Group != "terrarun.dev" || se.ErrStatus.Details.Kind != "terraformruns" || se.ErrStatus.Details.Name != "run" {
		t.Errorf("details = %+v", se.ErrStatus.Details)
	}
	fields := map[string]bool{}
	for _, c := range se.ErrStatus.Details.Causes {
		fields[c.Field] = true
	}
	if !fields["spec.source.git.url"] || !fields["spec.approval.mode"] {
		t.Errorf("causes = %+v", se.ErrStatus.Details.Causes)
	}
}

func TestCreator(t *testing.T) {
	p := newPlugin(t, testPolicy, clusterLabeler(t))
	ctx := context.Background()
	const changed = "spec.creator: is set by the server from the creating user and cannot be changed"

	t.Run("create: creator recorded from the requesting user", func(t *testing.T) {
		run := newRun("dev", func(r *terrarun.TerraformRun) { r.Spec.Creator = creatorOf(bob) })
		checkResult(t, p.Validate(ctx, createAttrs(run, bob), nil))
	})
	t.Run("create: no creator", func(t *testing.T) {
		run := newRun("dev", func(r *terrarun.TerraformRun) { r.Spec.Creator = nil })
		checkResult(t, p.Validate(ctx, createAttrs(run, alice), nil))
	})
	t.Run("create: forged creator denied", func(t *testing.T) {
		run := newRun("dev", func(r *terrarun.TerraformRun) { r.Spec.Creator = creatorOf(bob) })
		checkResult(t, p.Validate(ctx, createAttrs(run, alice), nil),
			`spec.creator: is set by the server from the creating user and cannot be chosen by the client: it names "bob" but the request was made by "alice"; omit spec.creator`)
	})
	t.Run("create: no user info", func(t *testing.T) {
		run := newRun("dev", nil)
		a := admission.NewAttributesRecord(run, nil, runGVK, "dev", "run", runsGVR, "", admission.Create, &metav1.CreateOptions{}, false, nil)
		checkResult(t, p.Validate(ctx, a, nil), `the request was made by ""`)
	})
	t.Run("update: metadata change with the same creator allowed", func(t *testing.T) {
		old := newRun("dev", nil)
		run := old.DeepCopy()
		run.Labels = map[string]string{"team": "a"}
		run.Spec.Creator.Groups = append([]string(nil), run.Spec.Creator.Groups...)
		checkResult(t, p.Validate(ctx, updateAttrs(run, old, "", bob), nil))
	})
	t.Run("update: creator changed denied", func(t *testing.T) {
		old := newRun("dev", nil)
		run := old.DeepCopy()
		run.Spec.Creator = creatorOf(bob)
		checkResult(t, p.Validate(ctx, updateAttrs(run, old, "", bob), nil), changed)
	})
	t.Run("update: creator groups changed denied", func(t *testing.T) {
		old := newRun("dev", nil)
		run := old.DeepCopy()
		run.Spec.Creator.Groups = append(run.Spec.Creator.Groups, "system:masters")
		checkResult(t, p.Validate(ctx, updateAttrs(run, old, "", alice), nil), changed)
	})
	t.Run("update: creator removed denied", func(t *testing.T) {
		old := newRun("dev", nil)
		run := old.DeepCopy()
		run.Spec.Creator = nil
		checkResult(t, p.Validate(ctx, updateAttrs(run, old, "", alice), nil), changed)
	})
	t.Run("update: creator added to a run without one denied", func(t *testing.T) {
		old := newRun("dev", func(r *terrarun.TerraformRun) { r.Spec.Creator = nil })
		run := old.DeepCopy()
		run.Spec.Creator = creatorOf(alice)
		checkResult(t, p.Validate(ctx, updateAttrs(run, old, "", alice), nil), changed)
	})
}

func TestUpdate(t *testing.T) {
	p := newPlugin(t, testPolicy, clusterLabeler(t))
	ctx := context.Background()

	t.Run("unchanged spec that the policy now forbids is not re-checked", func(t *testing.T) {
		old := newRun("prod", func(r *terrarun.TerraformRun) {
			r.Spec.Source.Git.URL = "https://evil.example/x.git"
			r.Spec.Approval.Mode = terrarun.ApprovalModeAuto
			r.Spec.Timeouts.Plan = dur(10 * time.Hour)
		})
		run := old.DeepCopy()
		run.Finalizers = nil
		run.Annotations = map[string]string{"note": "x"}
		checkResult(t, p.Validate(ctx, updateAttrs(run, old, "", bob), nil))
	})
	t.Run("changed spec is checked", func(t *testing.T) {
		old := newRun("prod", nil)
		run := old.DeepCopy()
		run.Spec.Source.Git.URL = "https://evil.example/x.git"
		run.Spec.Approval.Mode = terrarun.ApprovalModeAuto
		checkResult(t, p.Validate(ctx, updateAttrs(run, old, "", alice), nil),
			`host "evil.example" is not allowed`, `Auto approval is forbidden in namespace "prod"`)
	})
	t.Run("wrong old object type", func(t *testing.T) {
		run := newRun("dev", nil)
		a := admission.NewAttributesRecord(run, &terrarun.TerraformRunList{}, runGVK, "dev", "run", runsGVR, "", admission.Update, &metav1.UpdateOptions{}, false, alice)
		if err := p.Validate(ctx, a, nil); !apierrors.IsBadRequest(err) {
			t.Errorf("want BadRequest, got %v", err)
		}
	})
}

func TestIgnoresOtherRequests(t *testing.T) {
	p := newPlugin(t, testPolicy, clusterLabeler(t))
	ctx := context.Background()
	bad := newRun("prod", func(r *terrarun.TerraformRun) {
		r.Spec.Source.Git.URL = "https://evil.example/x.git"
		r.Spec.Approval.Mode = terrarun.ApprovalModeAuto
		r.Spec.Creator = creatorOf(bob)
	})
	old := newRun("prod", nil)
	other := schema.GroupVersionResource{Group: "terrarun.dev", Version: runtime.APIVersionInternal, Resource: "widgets"}
	core := schema.GroupVersionResource{Version: "v1", Resource: "terraformruns"}
	cases := []struct {
		name string
		a    admission.Attributes
	}{
		{"other resource", admission.NewAttributesRecord(bad, nil, runGVK, "prod", "run", other, "", admission.Create, &metav1.CreateOptions{}, false, alice)},
		{"same resource name in another group", admission.NewAttributesRecord(bad, nil, runGVK, "prod", "run", core, "", admission.Create, &metav1.CreateOptions{}, false, alice)},
		{"status subresource update", updateAttrs(bad, old, "status", alice)},
		{"discard subresource", admission.NewAttributesRecord(&terrarun.TerraformRunDiscard{}, nil,
			terrarun.SchemeGroupVersion.WithKind("TerraformRunDiscard"), "prod", "run", runsGVR, "discard", admission.Create, &metav1.CreateOptions{}, false, alice)},
		{"delete", admission.NewAttributesRecord(nil, bad, runGVK, "prod", "run", runsGVR, "", admission.Delete, &metav1.DeleteOptions{}, false, alice)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			checkResult(t, p.Validate(ctx, tc.a, nil))
		})
	}
	if !p.Handles(admission.Create) || !p.Handles(admission.Update) || p.Handles(admission.Delete) || p.Handles(admission.Connect) {
		t.Errorf("plugin must handle Create and Update only")
	}
	a := admission.NewAttributesRecord(&terrarun.TerraformRunApproval{}, nil, runGVK, "prod", "run", runsGVR, "", admission.Create, &metav1.CreateOptions{}, false, alice)
	if err := p.Validate(ctx, a, nil); !apierrors.IsBadRequest(err) {
		t.Errorf("wrong object type: want BadRequest, got %v", err)
	}
}

func TestValidateInitialization(t *testing.T) {
	const noSelector = "apiVersion: admission.terrarun.dev/v1alpha1\nkind: TerraformRunPolicy\n"
	load := func(s string) *Plugin {
		cfg, err := policy.Load(strings.NewReader(s))
		if err != nil {
			t.Fatal(err)
		}
		p, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}

	if err := load(noSelector).ValidateInitialization(); err != nil {
		t.Errorf("no selector needs no labels: %v", err)
	}
	if err := load(testPolicy).ValidateInitialization(); err == nil ||
		!strings.Contains(err.Error(), "manualApprovalNamespaceSelector is configured but namespace labels are unavailable") {
		t.Errorf("want a clear initialization error, got %v", err)
	}
	p := load(testPolicy)
	p.SetNamespaceLabeler(initializer.NameOnlyNamespaceLabeler{})
	if err := p.ValidateInitialization(); err != nil {
		t.Errorf("with a labeler: %v", err)
	}

	// An informer factory alone is not used when no selector is configured:
	// no namespace informer is registered, so no RBAC on namespaces is needed.
	f := informers.NewSharedInformerFactory(fake.NewSimpleClientset(), 0)
	p = load(noSelector)
	p.SetExternalKubeInformerFactory(f)
	if err := p.ValidateInitialization(); err != nil {
		t.Fatal(err)
	}
	if p.labeler != nil {
		t.Errorf("no labeler should be built without a selector")
	}
}

// TestClusterModeInformerFactory wires the plugin the way the server does in
// cluster mode: the generic initializer hands over the Kubernetes informer
// factory, the plugin registers a namespace informer, the server starts the
// factory, and admission waits for the cache to sync.
func TestClusterModeInformerFactory(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewSimpleClientset(
		namespace("prod", map[string]string{"env": "prod"}),
		namespace("dev", map[string]string{"env": "dev"}),
	)
	f := informers.NewSharedInformerFactory(client, 0)

	cfg, err := policy.Load(strings.NewReader(testPolicy))
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	admission.PluginInitializers{
		kubeInformerInitializer{f},
		initializer.NewInitializer(nil, nil), // standalone labeler not configured
	}.Initialize(p)
	if err := admission.ValidateInitialization(p); err != nil {
		t.Fatalf("ValidateInitialization: %v", err)
	}
	if _, ok := p.labeler.(*initializer.InformerNamespaceLabeler); !ok {
		t.Fatalf("labeler = %T, want *initializer.InformerNamespaceLabeler", p.labeler)
	}
	f.Start(ctx.Done())

	run := newRun("prod", func(r *terrarun.TerraformRun) { r.Spec.Approval.Mode = terrarun.ApprovalModeAuto })
	checkResult(t, p.Validate(ctx, createAttrs(run, alice), nil), `Auto approval is forbidden in namespace "prod"`)
	run = newRun("dev", func(r *terrarun.TerraformRun) { r.Spec.Approval.Mode = terrarun.ApprovalModeAuto })
	checkResult(t, p.Validate(ctx, createAttrs(run, alice), nil))
}

// TestExplicitLabelerWins checks that a labeler handed over by
// initializer.NewInitializer takes precedence over the informer factory,
// whatever the order of the initializers.
func TestExplicitLabelerWins(t *testing.T) {
	f := informers.NewSharedInformerFactory(fake.NewSimpleClientset(namespace("prod", map[string]string{"env": "prod"})), 0)
	for name, inits := range map[string]admission.PluginInitializers{
		"factory first": {kubeInformerInitializer{f}, initializer.NewInitializer(initializer.NameOnlyNamespaceLabeler{}, nil)},
		"labeler first": {initializer.NewInitializer(initializer.NameOnlyNamespaceLabeler{}, nil), kubeInformerInitializer{f}},
	} {
		t.Run(name, func(t *testing.T) {
			cfg, _ := policy.Load(strings.NewReader(testPolicy))
			p, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			inits.Initialize(p)
			if err := admission.ValidateInitialization(p); err != nil {
				t.Fatal(err)
			}
			if _, ok := p.labeler.(initializer.NameOnlyNamespaceLabeler); !ok {
				t.Fatalf("labeler = %T, want NameOnlyNamespaceLabeler", p.labeler)
			}
			// The name-only labeler knows no env label, so Auto is allowed in
			// prod; the factory was never started, so waiting on it would fail.
			run := newRun("prod", func(r *terrarun.TerraformRun) { r.Spec.Approval.Mode = terrarun.ApprovalModeAuto })
			checkResult(t, p.Validate(context.Background(), createAttrs(run, alice), nil))
		})
	}
}

type kubeInformerInitializer struct {
	f informers.SharedInformerFactory
}

func (i kubeInformerInitializer) Initialize(p admission.Interface) {
	if w, ok := p.(interface {
		SetExternalKubeInformerFactory(informers.SharedInformerFactory)
	}); ok {
		w.SetExternalKubeInformerFactory(i.f)
	}
}

func TestGitURLHost(t *testing.T) {
	cases := []struct {
		in, want string
		wantErr  bool
	}{
		{in: "https://github.com/a/b.git", want: "github.com"},
		{in: "  https://GitHub.com:443/a/b.git  ", want: "github.com"},
		{in: "http://git.example.com/a", want: "git.example.com"},
		{in: "ssh://git@git.example.com:2222/a", want: "git.example.com"},
		{in: "git://git.example.com/a", want: "git.example.com"},
		{in: "git@github.com:a/b.git", want: "github.com"},
		{in: "github.com:a/b.git", want: "github.com"},
		{in: "https://user:pw@github.com/a", want: "github.com"},
		{in: "https://github.com./a", want: "github.com"},
		{in: "ssh://git@[2001:db8::1]:22/a", want: "2001:db8::1"},
		{in: "git@[2001:db8::1]:a", want: "2001:db8::1"},
		{in: "https://10.0.0.1:8443/a", want: "10.0.0.1"},
		{in: "", wantErr: true},
		{in: "https:///a/b", wantErr: true},
		{in: "/srv/git/a.git", wantErr: true},
		{in: "./a.git", wantErr: true},
		{in: "https://evil.example\\@github.com/a", wantErr: true},
		{in: "https://exa mple.com/a", wantErr: true},
		{in: "https://under_score.example.com/a", wantErr: true},
	}
	for _, tc := range cases {
		got, err := gitURLHost(tc.in)
		if tc.wantErr {
			if err == nil {
				t.Errorf("gitURLHost(%q) = %q, want an error", tc.in, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("gitURLHost(%q) = %q, %v, want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestRegister(t *testing.T) {
	plugins := admission.NewPlugins()
	Register(plugins)
	if got := plugins.Registered(); len(got) != 1 || got[0] != PluginName {
		t.Fatalf("registered %v", got)
	}
	pl, err := plugins.InitPlugin(PluginName, strings.NewReader(testPolicy), initializer.NewInitializer(initializer.NameOnlyNamespaceLabeler{}, nil))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := pl.(admission.ValidationInterface); !ok {
		t.Errorf("plugin is not validating")
	}
	if _, ok := pl.(admission.MutationInterface); ok {
		t.Errorf("plugin must not be mutating")
	}
	if _, err := plugins.InitPlugin(PluginName, strings.NewReader(testPolicy), admission.PluginInitializers{}); err == nil ||
		!strings.Contains(err.Error(), "namespace labels are unavailable") {
		t.Errorf("want an initialization error without labels, got %v", err)
	}
	if _, err := plugins.InitPlugin(PluginName, strings.NewReader("apiVersion: v1\n"), admission.PluginInitializers{}); err == nil {
		t.Errorf("want a config error")
	}
}

type fakeRuns map[string]*terrarun.TerraformRun

func (f fakeRuns) GetRun(_ context.Context, namespace, name string) (*terrarun.TerraformRun, error) {
	if r, ok := f[namespace+"/"+name]; ok {
		return r, nil
	}
	return nil, apierrors.NewNotFound(terrarun.Resource("terraformruns"), name)
}

// TestApproveSeparationOfDuties drives the approve subresource through the
// plugin, as the server's admission chain does.
func TestApproveSeparationOfDuties(t *testing.T) {
	ctx := context.Background()
	run := newRun("prod", func(r *terrarun.TerraformRun) { r.Spec.Creator = creatorOf(alice) })
	approve := func(u user.Info) admission.Attributes {
		return admission.NewAttributesRecord(&terrarun.TerraformRunApproval{PlanDigest: "sha256:00"}, nil,
			terrarun.SchemeGroupVersion.WithKind("TerraformRunApproval"), "prod", run.Name, runsGVR, "approve", admission.Create, &metav1.CreateOptions{}, false, u)
	}
	runs := fakeRuns{"prod/" + run.Name: run}

	p := newPlugin(t, testPolicy, clusterLabeler(t))
	initializer.NewInitializer(nil, runs).Initialize(p)
	if err := p.Validate(ctx, approve(alice), nil); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "separation of duties: alice created this run and may not approve it") {
		t.Fatalf("creator approving: %v, want Forbidden for separation of duties", err)
	}
	if err := p.Validate(ctx, approve(bob), nil); err != nil {
		t.Fatalf("another user approving: %v", err)
	}

	disabled := newPlugin(t, "apiVersion: admission.terrarun.dev/v1alpha1\nkind: TerraformRunPolicy\nseparationOfDuties: false\n", clusterLabeler(t))
	initializer.NewInitializer(nil, runs).Initialize(disabled)
	if err := disabled.Validate(ctx, approve(alice), nil); err != nil {
		t.Fatalf("separation of duties disabled: %v", err)
	}

	unwired := newPlugin(t, testPolicy, clusterLabeler(t))
	if err := unwired.Validate(ctx, approve(bob), nil); !apierrors.IsInternalError(err) {
		t.Fatalf("without a run getter: %v, want an internal error rather than an unchecked approval", err)
	}
}

// TestConfigMapAuthorsDoNotApprove: in cluster mode, a user who may change
// the ConfigMap that holds a run's configuration may have written the code
// it plans (a change of it starts a workspace's run on the spec editor's
// behalf), and may not approve it; a user who may not change it may.
func TestConfigMapAuthorsDoNotApprove(t *testing.T) {
	ctx := context.Background()
	run := newRun("prod", func(r *terrarun.TerraformRun) {
		r.Spec.Creator = creatorOf(alice)
		r.Spec.Source = terrarun.Source{ConfigMap: &terrarun.ConfigMapSource{Name: "network-tf"}}
	})
	approve := func(u user.Info) admission.Attributes {
		return admission.NewAttributesRecord(&terrarun.TerraformRunApproval{PlanDigest: "sha256:00"}, nil,
			terrarun.SchemeGroupVersion.WithKind("TerraformRunApproval"), "prod", run.Name, runsGVR, "approve", admission.Create, &metav1.CreateOptions{}, false, u)
	}
	carol := &user.DefaultInfo{Name: "carol"}
	g := &grants{allowed: map[string]bool{"bob patch configmaps/network-tf": true}}
	p := newPlugin(t, testPolicy, clusterLabeler(t))
	initializer.NewInitializer(nil, fakeRuns{"prod/" + run.Name: run}).Initialize(p)
	p.SetAuthorizer(authorizer.AuthorizerFunc(g.Authorize))
	if err := p.Validate(ctx, approve(bob), nil); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `bob may patch ConfigMap "network-tf"`) {
		t.Fatalf("a user who may patch the ConfigMap approving: %v, want Forbidden", err)
	}
	if err := p.Validate(ctx, approve(carol), nil); err != nil {
		t.Fatalf("a user who may not change the ConfigMap approving: %v", err)
	}
	if err := p.Validate(ctx, approve(&user.DefaultInfo{Name: "broken"}), nil); !apierrors.IsServiceUnavailable(err) {
		t.Fatalf("an approval whose check failed: %v, want 503 rather than an unchecked approval", err)
	}
	inline := newRun("prod", func(r *terrarun.TerraformRun) { r.Name = "inline"; r.Spec.Creator = creatorOf(alice) })
	initializer.NewInitializer(nil, fakeRuns{"prod/" + run.Name: inline}).Initialize(p)
	if err := p.Validate(ctx, approve(bob), nil); err != nil {
		t.Fatalf("a run without a ConfigMap source approved by a ConfigMap writer: %v", err)
	}
}

// TestTTLChangeNeedsDelete: in cluster mode, changing a run's
// ttlSecondsAfterFinished, which has the server delete it, takes the right
// to delete it: update alone is refused, naming the field.
func TestTTLChangeNeedsDelete(t *testing.T) {
	ctx := context.Background()
	old := newRun("prod", func(r *terrarun.TerraformRun) { r.Spec.Creator = creatorOf(alice) })
	changed := old.DeepCopy()
	ttl := int32(0)
	changed.Spec.TTLSecondsAfterFinished = &ttl
	update := func(u user.Info) admission.Attributes {
		return admission.NewAttributesRecord(changed, old, terrarun.SchemeGroupVersion.WithKind("TerraformRun"), "prod", old.Name, runsGVR, "", admission.Update, &metav1.UpdateOptions{}, false, u)
	}
	g := &grants{allowed: map[string]bool{"alice delete terraformruns/" + old.Name: true}}
	p := newPlugin(t, testPolicy, clusterLabeler(t))
	p.SetAuthorizer(authorizer.AuthorizerFunc(g.Authorize))
	if err := p.Validate(ctx, update(alice), nil); err != nil {
		t.Fatalf("a user who may delete the run: %v", err)
	}
	if err := p.Validate(ctx, update(bob), nil); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "spec.ttlSecondsAfterFinished") || !strings.Contains(err.Error(), `user "bob" may not delete run`) {
		t.Fatalf("a user who may only update the run: %v", err)
	}
}
