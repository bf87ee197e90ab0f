package terraformrunpolicy

import (
	"context"
	"errors"
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/terrarun/terrarun/pkg/admission/initializer"
	"github.com/terrarun/terrarun/pkg/apis/terrarun"
	"github.com/terrarun/terrarun/pkg/runner/oci/ocitest"
)

// grants is an authorizer that allows alice exactly the listed
// "verb resource/name" (name "*": any), records every question, and fails
// for user "broken".
type grants struct {
	allowed map[string]bool
	asked   []string
}

func (g *grants) Authorize(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	if a.GetUser().GetName() == "broken" {
		return authorizer.DecisionNoOpinion, "", errors.New("the SubjectAccessReview timed out")
	}
	res := a.GetResource()
	if a.GetSubresource() != "" {
		res += "/" + a.GetSubresource()
	}
	q := fmt.Sprintf("%s %s %s/%s", a.GetUser().GetName(), a.GetVerb(), res, a.GetName())
	g.asked = append(g.asked, a.GetNamespace()+": "+q)
	if g.allowed[q] || g.allowed[fmt.Sprintf("%s %s %s/*", a.GetUser().GetName(), a.GetVerb(), a.GetResource())] {
		return authorizer.DecisionAllow, "", nil
	}
	return authorizer.DecisionNoOpinion, "no RBAC policy matched", nil
}

const minimalPolicy = "apiVersion: admission.terrarun.dev/v1alpha1\nkind: TerraformRunPolicy\n"

// referencing is a run that references one of everything.
func referencing(r *terrarun.TerraformRun) {
	r.Spec.Variables = []terrarun.Variable{
		{Name: "plain", Value: "x"},
		{Name: "password", ValueFrom: &terrarun.VariableSource{SecretKeyRef: &terrarun.KeySelector{Name: "db", Key: "password"}}},
		{Name: "region", ValueFrom: &terrarun.VariableSource{ConfigMapKeyRef: &terrarun.KeySelector{Name: "settings", Key: "region"}}},
		{Name: "vpc", ValueFrom: &terrarun.VariableSource{RunOutput: &terrarun.OutputSelector{Name: "network", Output: "id"}}},
	}
	r.Spec.Backend = &terrarun.Backend{Type: "s3", ConfigSecret: "state-creds"}
	r.Spec.Source.Git.CredentialsSecret = "git-creds"
	r.Spec.OutputsSecret = "infra-outputs"
	r.Spec.Executor = &terrarun.ExecutorSpec{ServiceAccountName: "deployer"}
}

func TestCreatorMayUseWhatTheRunReferences(t *testing.T) {
	everything := map[string]bool{
		"alice get secrets/db": true, "alice get configmaps/settings": true, "alice get secrets/state-creds": true,
		"alice get secrets/git-creds": true, "alice create secrets/infra-outputs": true, "alice create pods/*": true,
		"alice get terraformruns/outputs/network": true,
	}
	for _, tc := range []struct {
		name    string
		revoke  string
		user    string
		wantErr []string
	}{
		{name: "she may use everything"},
		{name: "a Secret she may not get", revoke: "alice get secrets/db", wantErr: []string{
			`spec.variables[1].valueFrom.secretKeyRef.name: user "alice" may not get secrets "db" in namespace "dev" (no RBAC policy matched), and a run may use only what its creator may: the run would use Secret "db" with the server's authority`}},
		{name: "a ConfigMap she may not get", revoke: "alice get configmaps/settings", wantErr: []string{
			`spec.variables[2].valueFrom.configMapKeyRef.name: user "alice" may not get configmaps "settings"`}},
		{name: "a run's outputs she may not read", revoke: "alice get terraformruns/outputs/network", wantErr: []string{
			`spec.variables[3].valueFrom.runOutput.name: user "alice" may not get terraformruns/outputs "network"`, `the outputs of run "network"`}},
		{name: "a backend Secret", revoke: "alice get secrets/state-creds", wantErr: []string{`spec.backend.configSecret: user "alice" may not get secrets "state-creds"`}},
		{name: "git credentials", revoke: "alice get secrets/git-creds", wantErr: []string{`spec.source.git.credentialsSecret: user "alice" may not get secrets "git-creds"`}},
		{name: "the outputs Secret", revoke: "alice create secrets/infra-outputs", wantErr: []string{`spec.outputsSecret: user "alice" may not create secrets "infra-outputs"`}},
		{name: "a ServiceAccount she may not use", revoke: "alice create pods/*", wantErr: []string{
			`spec.executor.serviceAccountName: user "alice" may not create pods in namespace "dev"`, `ServiceAccount "deployer" (running as it takes creating pods)`}},
		{name: "the check fails", user: "broken", wantErr: []string{`(the check failed: the SubjectAccessReview timed out; retry)`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := &grants{allowed: map[string]bool{}}
			for k := range everything {
				g.allowed[k] = k != tc.revoke
			}
			p := newPlugin(t, minimalPolicy, clusterLabeler(t))
			p.SetAuthorizer(authorizer.AuthorizerFunc(g.Authorize))
			u := alice
			if tc.user != "" {
				u = &user.DefaultInfo{Name: tc.user}
			}
			run := newRun("dev", referencing)
			run.Spec.Creator = creatorOf(u)
			checkResult(t, p.Validate(context.Background(), createAttrs(run, u), nil), tc.wantErr...)
			if tc.user == "" && len(g.asked) != len(everything) {
				t.Errorf("asked %q, want one question per reference", g.asked)
			}
		})
	}

	t.Run("a ConfigMap source", func(t *testing.T) {
		g := &grants{allowed: map[string]bool{}}
		p := newPlugin(t, minimalPolicy, clusterLabeler(t))
		p.SetAuthorizer(authorizer.AuthorizerFunc(g.Authorize))
		run := newRun("dev", func(r *terrarun.TerraformRun) {
			r.Spec.Source = terrarun.Source{ConfigMap: &terrarun.ConfigMapSource{Name: "module"}}
		})
		checkResult(t, p.Validate(context.Background(), createAttrs(run, alice), nil),
			`spec.source.configMap.name: user "alice" may not get configmaps "module"`)
	})

	t.Run("an OCI source's Secrets", func(t *testing.T) {
		g := &grants{allowed: map[string]bool{"alice get secrets/pull": true}}
		p := newPlugin(t, minimalPolicy, clusterLabeler(t))
		p.SetAuthorizer(authorizer.AuthorizerFunc(g.Authorize))
		run := newRun("dev", func(r *terrarun.TerraformRun) {
			r.Spec.Source = terrarun.Source{OCI: &terrarun.OCISource{URL: "oci://ghcr.io/org/infra", CredentialsSecret: "pull", CertSecret: "registry-ca",
				Verify: &terrarun.OCIVerification{KeysSecret: "cosign-keys"}}}
		})
		checkResult(t, p.Validate(context.Background(), createAttrs(run, alice), nil),
			`spec.source.oci.certSecret: user "alice" may not get secrets "registry-ca"`,
			`spec.source.oci.verify.keysSecret: user "alice" may not get secrets "cosign-keys"`)
		if len(g.asked) != 3 {
			t.Errorf("asked %q, want one question per Secret", g.asked)
		}
	})

	t.Run("a keyless OCI source's trusted root", func(t *testing.T) {
		g := &grants{allowed: map[string]bool{}}
		p := newPlugin(t, minimalPolicy, clusterLabeler(t))
		p.SetAuthorizer(authorizer.AuthorizerFunc(g.Authorize))
		run := newRun("dev", func(r *terrarun.TerraformRun) {
			r.Spec.Source = terrarun.Source{OCI: &terrarun.OCISource{URL: "oci://ghcr.io/org/infra",
				Verify: &terrarun.OCIVerification{TrustedRootSecret: "sigstore", MatchOIDCIdentity: []terrarun.OIDCIdentityMatch{{Issuer: "i", Subject: "s"}}}}}
		})
		checkResult(t, p.Validate(context.Background(), createAttrs(run, alice), nil),
			`spec.source.oci.verify.trustedRootSecret: user "alice" may not get secrets "sigstore"`)
	})

	t.Run("a Flux source", func(t *testing.T) {
		fromSource := func(kind string) func(*terrarun.TerraformRun) {
			return func(r *terrarun.TerraformRun) {
				r.Spec.Source = terrarun.Source{SourceRef: &terrarun.SourceReference{Kind: kind, Name: "infra"}}
			}
		}
		g := &grants{allowed: map[string]bool{"alice get ocirepositories/infra": true}}
		p := newPlugin(t, minimalPolicy, clusterLabeler(t))
		p.SetAuthorizer(authorizer.AuthorizerFunc(g.Authorize))
		checkResult(t, p.Validate(context.Background(), createAttrs(newRun("dev", fromSource("GitRepository")), alice), nil),
			`spec.source.sourceRef: user "alice" may not get gitrepositories "infra" in namespace "dev"`, `the artifact of GitRepository "infra"`)
		checkResult(t, p.Validate(context.Background(), createAttrs(newRun("dev", fromSource("OCIRepository")), alice), nil))

		// requireVerifiedSources: terrarun cannot tell that source-controller
		// verified an OCIRepository.
		strict := newPlugin(t, minimalPolicy+"requireVerifiedSources: true\n", clusterLabeler(t))
		strict.SetAuthorizer(authorizer.AuthorizerFunc(g.Authorize))
		checkResult(t, strict.Validate(context.Background(), createAttrs(newRun("dev", fromSource("OCIRepository")), alice), nil),
			`spec.source.sourceRef.kind: the cluster policy requires every OCI artifact to be verified by terrarun`)

		// Standalone mode has no cluster and no source-controller.
		standalone := newPlugin(t, minimalPolicy, clusterLabeler(t))
		checkResult(t, standalone.Validate(context.Background(), createAttrs(newRun("dev", fromSource("GitRepository")), alice), nil),
			`spec.source.sourceRef: Flux sources need cluster mode`)
	})

	t.Run("a workspace's run is checked as the workspace's creator", func(t *testing.T) {
		// The server creates a workspace's runs with its own loopback
		// identity (system:masters), naming the workspace's creator: her
		// rights, not the server's, decide what the run may use.
		g := &grants{allowed: map[string]bool{}}
		for k := range everything {
			g.allowed[k] = k != "alice get secrets/db"
		}
		p := newPlugin(t, minimalPolicy, clusterLabeler(t))
		p.SetAuthorizer(authorizer.AuthorizerFunc(g.Authorize))
		server := &user.DefaultInfo{Name: user.APIServerUser, Groups: []string{user.SystemPrivilegedGroup}}
		run := newRun("dev", referencing)
		run.Spec.Creator = creatorOf(alice)
		checkResult(t, p.Validate(context.Background(), createAttrs(run, server), nil),
			`spec.variables[1].valueFrom.secretKeyRef.name: user "alice" may not get secrets "db"`)
	})

	t.Run("only the server names another creator", func(t *testing.T) {
		g := &grants{allowed: map[string]bool{}}
		p := newPlugin(t, minimalPolicy, clusterLabeler(t))
		p.SetAuthorizer(authorizer.AuthorizerFunc(g.Authorize))
		for _, u := range []user.Info{
			&user.DefaultInfo{Name: "mallory", Groups: []string{user.SystemPrivilegedGroup}},
			&user.DefaultInfo{Name: user.APIServerUser},
		} {
			run := newRun("dev", func(*terrarun.TerraformRun) {})
			run.Spec.Creator = creatorOf(alice)
			checkResult(t, p.Validate(context.Background(), createAttrs(run, u), nil),
				`spec.creator: is set by the server from the creating user and cannot be chosen by the client`)
		}
	})

	t.Run("standalone mode has no authorizer and no host cluster", func(t *testing.T) {
		p := newPlugin(t, minimalPolicy, clusterLabeler(t))
		checkResult(t, p.Validate(context.Background(), createAttrs(newRun("dev", referencing), alice), nil))
	})
}

func TestAllowedLists(t *testing.T) {
	p := newPlugin(t, `
apiVersion: admission.terrarun.dev/v1alpha1
kind: TerraformRunPolicy
defaults: {engine: {image: "registry.example.com/terrarun-executor:v1"}}
allowedImages: ["registry.example.com/terrarun-executor:*", "mirror.example.com/executor:v1"]
allowedServiceAccounts: [deployer]
allowedBackends: [kubernetes, s3]
`, clusterLabeler(t))
	for _, tc := range []struct {
		name    string
		mutate  func(*terrarun.TerraformRun)
		wantErr []string
	}{
		{name: "defaults are allowed"},
		{name: "an image by prefix", mutate: func(r *terrarun.TerraformRun) { r.Spec.Engine.Image = "registry.example.com/terrarun-executor:v2" }},
		{name: "an image exactly", mutate: func(r *terrarun.TerraformRun) { r.Spec.Engine.Image = "mirror.example.com/executor:v1" }},
		{name: "another image", mutate: func(r *terrarun.TerraformRun) { r.Spec.Engine.Image = "evil.example/executor:latest" }, wantErr: []string{
			`spec.engine.image: image "evil.example/executor:latest" is not allowed by the cluster policy; allowed images: registry.example.com/terrarun-executor:*, mirror.example.com/executor:v1, or omit the field`}},
		{name: "an exact entry is not a prefix", mutate: func(r *terrarun.TerraformRun) { r.Spec.Engine.Image = "mirror.example.com/executor:v10" },
			wantErr: []string{`spec.engine.image`}},
		{name: "an allowed ServiceAccount", mutate: func(r *terrarun.TerraformRun) {
			r.Spec.Executor = &terrarun.ExecutorSpec{ServiceAccountName: "deployer"}
		}},
		{name: "another ServiceAccount", mutate: func(r *terrarun.TerraformRun) {
			r.Spec.Executor = &terrarun.ExecutorSpec{ServiceAccountName: "cluster-admin-sa"}
		}, wantErr: []string{`spec.executor.serviceAccountName: ServiceAccount "cluster-admin-sa" is not allowed by the cluster policy; allowed: deployer`}},
		{name: "an allowed backend", mutate: func(r *terrarun.TerraformRun) { r.Spec.Backend = &terrarun.Backend{Type: "s3"} }},
		{name: "another backend", mutate: func(r *terrarun.TerraformRun) { r.Spec.Backend = &terrarun.Backend{Type: "http"} }, wantErr: []string{
			`spec.backend.type: backend "http" is not allowed by the cluster policy; allowed backends: kubernetes, s3, or omit spec.backend`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkResult(t, p.Validate(context.Background(), createAttrs(newRun("dev", tc.mutate), alice), nil), tc.wantErr...)
		})
	}
}

// TestWorkspaceIsCheckedAsItsRuns: a workspace is refused at create, and at
// a change of spec, for what its runs could not use, with the workspace's
// field paths; an unchanged spec is not checked again.
func TestWorkspaceIsCheckedAsItsRuns(t *testing.T) {
	g := &grants{allowed: map[string]bool{"alice get configmaps/settings": true, "alice get secrets/state-creds": true,
		"alice get secrets/git-creds": true, "alice create pods/*": true, "alice get terraformruns/outputs/network": true}}
	p := newPlugin(t, minimalPolicy, clusterLabeler(t))
	p.SetAuthorizer(authorizer.AuthorizerFunc(g.Authorize))
	run := newRun("dev", referencing)
	ws := &terrarun.TerraformWorkspace{
		ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "dev"},
		Spec:       terrarun.TerraformWorkspaceSpec{Template: run.Spec, OutputsSecret: "infra-outputs"},
	}
	ws.Spec.Template.OutputsSecret = ""
	ws.Spec.Template.Variables[3].ValueFrom = &terrarun.VariableSource{WorkspaceOutput: &terrarun.OutputSelector{Name: "network", Output: "id"}}
	gvr := terrarun.SchemeGroupVersion.WithResource("terraformworkspaces")
	gvk := terrarun.SchemeGroupVersion.WithKind("TerraformWorkspace")
	attrs := func(ws, old *terrarun.TerraformWorkspace, op admission.Operation) admission.Attributes {
		return admission.NewAttributesRecord(ws, old, gvk, ws.Namespace, ws.Name, gvr, "", op, nil, false, alice)
	}
	checkResult(t, p.Validate(context.Background(), attrs(ws, nil, admission.Create), nil),
		`spec.template.variables[1].valueFrom.secretKeyRef.name: user "alice" may not get secrets "db"`,
		`spec.outputsSecret: user "alice" may not create secrets "infra-outputs"`,
		`spec.template.variables[3].valueFrom.workspaceOutput.name: user "alice" may not get terraformruns/outputs in namespace "dev"`)

	// A label change is not a new spec.
	labeled := ws.DeepCopy()
	labeled.Labels = map[string]string{"team": "a"}
	checkResult(t, p.Validate(context.Background(), attrs(labeled, ws, admission.Update), nil))
}

// TestRunTaskKeyIsTheWritersToRead: whoever writes a TerraformRunTask must be
// allowed to get the Secret of its HMAC key, which the server reads to sign
// the task's calls; a task without a key asks nothing.
func TestRunTaskKeyIsTheWritersToRead(t *testing.T) {
	gvr := terrarun.SchemeGroupVersion.WithResource("terraformruntasks")
	gvk := terrarun.SchemeGroupVersion.WithKind("TerraformRunTask")
	task := &terrarun.TerraformRunTask{
		ObjectMeta: metav1.ObjectMeta{Name: "scanner", Namespace: "dev"},
		Spec: terrarun.TerraformRunTaskSpec{URL: "https://scanner.example", Stages: []terrarun.RunTaskStage{terrarun.RunTaskPostPlan},
			HMACKey: &terrarun.KeySelector{Name: "scanner-hmac", Key: "key"}},
	}
	attrs := func(task *terrarun.TerraformRunTask, op admission.Operation) admission.Attributes {
		return admission.NewAttributesRecord(task, nil, gvk, task.Namespace, task.Name, gvr, "", op, nil, false, alice)
	}
	g := &grants{allowed: map[string]bool{}}
	p := newPlugin(t, minimalPolicy, clusterLabeler(t))
	p.SetAuthorizer(authorizer.AuthorizerFunc(g.Authorize))
	for _, op := range []admission.Operation{admission.Create, admission.Update} {
		checkResult(t, p.Validate(context.Background(), attrs(task, op), nil),
			`spec.hmacKey.name: user "alice" may not get secrets "scanner-hmac" in namespace "dev" (no RBAC policy matched), and a run task may use only what whoever writes it may`)
	}
	g.allowed["alice get secrets/scanner-hmac"] = true
	checkResult(t, p.Validate(context.Background(), attrs(task, admission.Create), nil))
	unsigned := task.DeepCopy()
	unsigned.Spec.HMACKey = nil
	g.asked = nil
	checkResult(t, p.Validate(context.Background(), attrs(unsigned, admission.Create), nil))
	if len(g.asked) != 0 {
		t.Errorf("a task without a key asked %q", g.asked)
	}
}

// TestImageDigestIsTheVerifiersOnly: in cluster mode, a run of an image that
// the policy's imageVerification covers must carry the digest that
// TerraformRunDefaults verified, and no other run may carry one; a workspace
// (whose runs are verified when they are made) carries none.
func TestImageDigestIsTheVerifiersOnly(t *testing.T) {
	const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	key := ocitest.NewKey(t)
	cfg := fmt.Sprintf(`
apiVersion: admission.terrarun.dev/v1alpha1
kind: TerraformRunPolicy
allowedImages: ["registry.example.com/*", "other.example.com/*", "ghcr.io/terrarun/*"]
imageVerification:
  images: ["registry.example.com/*"]
  publicKeys: %q
`, key.PublicPEM)
	g := &grants{allowed: map[string]bool{"alice create pods/*": true}}
	p := newPlugin(t, cfg, clusterLabeler(t))
	p.SetAuthorizer(authorizer.AuthorizerFunc(g.Authorize))
	image := func(img, d string) func(*terrarun.TerraformRun) {
		return func(r *terrarun.TerraformRun) { r.Spec.Engine.Image, r.Spec.Engine.ImageDigest = img, d }
	}
	for _, tc := range []struct {
		name    string
		mutate  func(*terrarun.TerraformRun)
		wantErr []string
	}{
		{name: "a covered image, verified", mutate: image("registry.example.com/executor:v1", digest)},
		{name: "a covered image, not verified", mutate: image("registry.example.com/executor:v1", ""), wantErr: []string{
			`spec.engine.image: image "registry.example.com/executor:v1" must be verified by the cluster policy's imageVerification, and was not: enable the TerraformRunDefaults admission plugin`}},
		{name: "an image it does not cover", mutate: image("other.example.com/executor:v1", "")},
		{name: "a digest for an image it does not cover", mutate: image("other.example.com/executor:v1", digest), wantErr: []string{
			`spec.engine.imageDigest: is set only by the server's image verification`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkResult(t, p.Validate(context.Background(), createAttrs(newRun("dev", tc.mutate), alice), nil), tc.wantErr...)
		})
	}
	t.Run("standalone", func(t *testing.T) {
		sp := newPlugin(t, cfg, initializer.NameOnlyNamespaceLabeler{})
		checkResult(t, sp.Validate(context.Background(), createAttrs(newRun("dev", image("registry.example.com/executor:v1", "")), alice), nil))
		checkResult(t, sp.Validate(context.Background(), createAttrs(newRun("dev", image("registry.example.com/executor:v1", digest)), alice), nil),
			`spec.engine.imageDigest: is set only by the server's image verification`)
	})
}

// TestNotificationTellsOnlyWhatItsWriterReads: whoever writes a
// notification must be allowed to list the runs it tells about (and the
// workspaces, for Drifted) and to get the Secrets it names; otherwise it
// would read them with the server's authority.
func TestNotificationTellsOnlyWhatItsWriterReads(t *testing.T) {
	gvr := terrarun.SchemeGroupVersion.WithResource("terraformnotifications")
	gvk := terrarun.SchemeGroupVersion.WithKind("TerraformNotification")
	slack := &terrarun.TerraformNotification{
		ObjectMeta: metav1.ObjectMeta{Name: "approvals", Namespace: "dev"},
		Spec: terrarun.TerraformNotificationSpec{Triggers: []terrarun.NotificationTrigger{terrarun.TriggerNeedsApproval, terrarun.TriggerDrifted},
			Slack: &terrarun.SlackDestination{URLFrom: terrarun.KeySelector{Name: "slack", Key: "url"}}},
	}
	attrs := func(n *terrarun.TerraformNotification, op admission.Operation) admission.Attributes {
		return admission.NewAttributesRecord(n, nil, gvk, n.Namespace, n.Name, gvr, "", op, nil, false, alice)
	}
	g := &grants{allowed: map[string]bool{}}
	p := newPlugin(t, minimalPolicy, clusterLabeler(t))
	p.SetAuthorizer(authorizer.AuthorizerFunc(g.Authorize))
	for _, op := range []admission.Operation{admission.Create, admission.Update} {
		checkResult(t, p.Validate(context.Background(), attrs(slack, op), nil),
			`spec.triggers: user "alice" may not list terraformruns in namespace "dev"`,
			`spec.triggers: user "alice" may not list terraformworkspaces in namespace "dev"`,
			`spec.slack.urlFrom.name: user "alice" may not get secrets "slack" in namespace "dev" (no RBAC policy matched), and a notification may use and tell only what whoever writes it may`)
	}
	g.allowed["alice list terraformruns/"] = true
	g.allowed["alice list terraformworkspaces/"] = true
	g.allowed["alice get secrets/slack"] = true
	checkResult(t, p.Validate(context.Background(), attrs(slack, admission.Create), nil))

	hook := &terrarun.TerraformNotification{
		ObjectMeta: metav1.ObjectMeta{Name: "hook", Namespace: "dev"},
		Spec: terrarun.TerraformNotificationSpec{Triggers: []terrarun.NotificationTrigger{terrarun.TriggerFailed},
			CloudEvents: &terrarun.WebhookDestination{URL: "https://events.example", HMACKey: &terrarun.KeySelector{Name: "signing", Key: "key"}}},
	}
	checkResult(t, p.Validate(context.Background(), attrs(hook, admission.Create), nil),
		`spec.cloudEvents.hmacKey.name: user "alice" may not get secrets "signing"`)
}
