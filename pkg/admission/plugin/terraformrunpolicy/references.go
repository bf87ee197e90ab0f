package terraformrunpolicy

import (
	"context"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
	"github.com/terrarun/terrarun/pkg/fluxsource"
)

// reference is something of the host cluster that a run makes the server use
// on its creator's behalf, and what the creator must be allowed to do with it
// for that: get a Secret or ConfigMap the executor reads, create pods (which
// is what running as a ServiceAccount takes), create the outputs Secret, get
// the outputs of a run whose output a variable reads, get the Flux source
// whose artifact it uses.
type reference struct {
	path        *field.Path
	verb        string
	group       string // empty: the core group
	resource    string
	subresource string
	name        string // empty: any object of the resource in the namespace
	what        string // for the message: "Secret \"db\""
}

// references lists what run makes the server use in the host cluster.
func references(run *terrarun.TerraformRun) []reference {
	spec := field.NewPath("spec")
	var refs []reference
	secret := func(path *field.Path, name, verb string) {
		refs = append(refs, reference{path: path, verb: verb, resource: "secrets", name: name, what: fmt.Sprintf("Secret %q", name)})
	}
	configMap := func(path *field.Path, name string) {
		refs = append(refs, reference{path: path, verb: "get", resource: "configmaps", name: name, what: fmt.Sprintf("ConfigMap %q", name)})
	}
	for i, v := range run.Spec.Variables {
		if v.ValueFrom == nil {
			continue
		}
		p := spec.Child("variables").Index(i).Child("valueFrom")
		if r := v.ValueFrom.SecretKeyRef; r != nil {
			secret(p.Child("secretKeyRef", "name"), r.Name, "get")
		}
		if r := v.ValueFrom.ConfigMapKeyRef; r != nil {
			configMap(p.Child("configMapKeyRef", "name"), r.Name)
		}
		if r := v.ValueFrom.RunOutput; r != nil {
			refs = append(refs, reference{path: p.Child("runOutput", "name"), verb: "get", group: terrarun.GroupName,
				resource: "terraformruns", subresource: "outputs", name: r.Name, what: fmt.Sprintf("the outputs of run %q", r.Name)})
		}
	}
	if b := run.Spec.Backend; b != nil && b.ConfigSecret != "" {
		secret(spec.Child("backend", "configSecret"), b.ConfigSecret, "get")
	}
	if g := run.Spec.Source.Git; g != nil && g.CredentialsSecret != "" {
		secret(spec.Child("source", "git", "credentialsSecret"), g.CredentialsSecret, "get")
	}
	if o := run.Spec.Source.OCI; o != nil {
		oci := spec.Child("source", "oci")
		if o.CredentialsSecret != "" {
			secret(oci.Child("credentialsSecret"), o.CredentialsSecret, "get")
		}
		if o.CertSecret != "" {
			secret(oci.Child("certSecret"), o.CertSecret, "get")
		}
		if v := o.Verify; v != nil && v.KeysSecret != "" {
			secret(oci.Child("verify", "keysSecret"), v.KeysSecret, "get")
		}
		if v := o.Verify; v != nil && v.TrustedRootSecret != "" {
			secret(oci.Child("verify", "trustedRootSecret"), v.TrustedRootSecret, "get")
		}
	}
	if f := run.Spec.Source.SourceRef; f != nil && fluxsource.Resource(f.Kind) != "" {
		refs = append(refs, reference{path: spec.Child("source", "sourceRef"), verb: "get", group: terrarun.FluxSourceGroup,
			resource: fluxsource.Resource(f.Kind), name: f.Name, what: fmt.Sprintf("the artifact of %s %q", f.Kind, f.Name)})
	}
	if c := run.Spec.Source.ConfigMap; c != nil && c.Name != "" {
		configMap(spec.Child("source", "configMap", "name"), c.Name)
	}
	if run.Spec.OutputsSecret != "" {
		secret(spec.Child("outputsSecret"), run.Spec.OutputsSecret, "create")
	}
	if e := run.Spec.Executor; e != nil && e.ServiceAccountName != "" {
		refs = append(refs, reference{path: spec.Child("executor", "serviceAccountName"), verb: "create", resource: "pods",
			what: fmt.Sprintf("ServiceAccount %q (running as it takes creating pods)", e.ServiceAccountName)})
	}
	return refs
}

// checkReferences asks the authorizer, as a SubjectAccessReview for u would,
// whether u may do what run makes the server do in namespace on u's behalf.
// Without an authorizer (standalone mode, where Secrets and ConfigMaps are the
// server's own files) it checks nothing.
func (p *Plugin) checkReferences(ctx context.Context, u user.Info, namespace string, run *terrarun.TerraformRun) []violation {
	var vs []violation
	for _, r := range p.refused(ctx, u, namespace, references(run)) {
		vs = append(vs, violation{r.path, fmt.Sprintf(
			"user %q may not %s %s in namespace %q%s, and a run may use only what its creator may: the run would use %s with the server's authority; get that permission, or name something you may use",
			userName(u), r.verb, r.target, namespace, r.detail, r.what)})
	}
	return vs
}

// checkRunTask asks the authorizer whether u, who writes task, may get the
// Secret of its HMAC key, which the server reads to sign the task's calls.
func (p *Plugin) checkRunTask(ctx context.Context, u user.Info, namespace string, task *terrarun.TerraformRunTask) []violation {
	k := task.Spec.HMACKey
	if k == nil {
		return nil
	}
	ref := reference{path: field.NewPath("spec", "hmacKey", "name"), verb: "get", resource: "secrets", name: k.Name, what: fmt.Sprintf("Secret %q", k.Name)}
	var vs []violation
	for _, r := range p.refused(ctx, u, namespace, []reference{ref}) {
		vs = append(vs, violation{r.path, fmt.Sprintf(
			"user %q may not %s %s in namespace %q%s, and a run task may use only what whoever writes it may: the server would read %s to sign its calls; get that permission, or name a Secret you may read",
			userName(u), r.verb, r.target, namespace, r.detail, r.what)})
	}
	return vs
}

// checkNotification asks the authorizer whether u, who writes n, may read
// what n delivers and the Secrets it names: a notification tells its
// receiver about the namespace's runs (and, for Drifted, workspaces), so
// it may tell only what its writer may list; and the server reads its HMAC
// key or Slack URL on its writer's behalf.
func (p *Plugin) checkNotification(ctx context.Context, u user.Info, namespace string, n *terrarun.TerraformNotification) []violation {
	spec := field.NewPath("spec")
	refs := []reference{{path: spec.Child("triggers"), verb: "list", group: terrarun.GroupName, resource: "terraformruns", what: "the runs of the namespace"}}
	if slices.Contains(n.Spec.Triggers, terrarun.TriggerDrifted) {
		refs = append(refs, reference{path: spec.Child("triggers"), verb: "list", group: terrarun.GroupName, resource: "terraformworkspaces", what: "the workspaces of the namespace"})
	}
	secret := func(path *field.Path, k *terrarun.KeySelector) {
		if k != nil {
			refs = append(refs, reference{path: path, verb: "get", resource: "secrets", name: k.Name, what: fmt.Sprintf("Secret %q", k.Name)})
		}
	}
	if d := n.Spec.Webhook; d != nil {
		secret(spec.Child("webhook", "hmacKey", "name"), d.HMACKey)
	}
	if d := n.Spec.CloudEvents; d != nil {
		secret(spec.Child("cloudEvents", "hmacKey", "name"), d.HMACKey)
	}
	if d := n.Spec.Slack; d != nil {
		secret(spec.Child("slack", "urlFrom", "name"), &d.URLFrom)
	}
	var vs []violation
	for _, r := range p.refused(ctx, u, namespace, refs) {
		vs = append(vs, violation{r.path, fmt.Sprintf(
			"user %q may not %s %s in namespace %q%s, and a notification may use and tell only what whoever writes it may: the server would read %s on your behalf; get that permission, or change the notification",
			userName(u), r.verb, r.target, namespace, r.detail, r.what)})
	}
	return vs
}

// refusal is a reference its user may not use: target names what it
// would use, detail why not.
type refusal struct {
	reference
	target, detail string
}

// refused asks the authorizer, as a SubjectAccessReview for u would,
// whether u may do each of refs in namespace, and returns those it may
// not. Without an authorizer (standalone mode, where Secrets and
// ConfigMaps are the server's own files) it refuses nothing.
func (p *Plugin) refused(ctx context.Context, u user.Info, namespace string, refs []reference) []refusal {
	if p.authorizer == nil {
		return nil
	}
	var refusals []refusal
	for _, ref := range refs {
		attrs := authorizer.AttributesRecord{
			User:            u,
			Verb:            ref.verb,
			Namespace:       namespace,
			APIGroup:        ref.group,
			Resource:        ref.resource,
			Subresource:     ref.subresource,
			Name:            ref.name,
			ResourceRequest: true,
		}
		decision, reason, err := p.authorizer.Authorize(ctx, attrs)
		if decision == authorizer.DecisionAllow {
			continue
		}
		r := refusal{reference: ref, target: ref.resource}
		switch {
		case err != nil:
			r.detail = fmt.Sprintf(" (the check failed: %v; retry)", err)
		case reason != "":
			r.detail = " (" + reason + ")"
		}
		if ref.subresource != "" {
			r.target += "/" + ref.subresource
		}
		if ref.name != "" {
			r.target += " " + fmt.Sprintf("%q", ref.name)
		}
		refusals = append(refusals, r)
	}
	return refusals
}

// checkAllowedLists enforces allowedImages, allowedServiceAccounts and
// allowedBackends.
func (p *Plugin) checkAllowedLists(run *terrarun.TerraformRun) []violation {
	var vs []violation
	if img := run.Spec.Engine.Image; img != "" && !p.cfg.ImageAllowed(img) {
		vs = append(vs, violation{field.NewPath("spec", "engine", "image"), fmt.Sprintf(
			"image %q is not allowed by the cluster policy; allowed images: %s, or omit the field to get the cluster policy's default image", img, listOrAny(p.cfg.AllowedImages))})
	}
	if e := run.Spec.Executor; e != nil && e.ServiceAccountName != "" && len(p.cfg.AllowedServiceAccounts) > 0 &&
		!slices.Contains(p.cfg.AllowedServiceAccounts, e.ServiceAccountName) {
		vs = append(vs, violation{field.NewPath("spec", "executor", "serviceAccountName"), fmt.Sprintf(
			"ServiceAccount %q is not allowed by the cluster policy; allowed: %s, or omit the field to run as the executor's default ServiceAccount",
			e.ServiceAccountName, listOrAny(p.cfg.AllowedServiceAccounts))})
	}
	if b := run.Spec.Backend; b != nil && len(p.cfg.AllowedBackends) > 0 && !slices.Contains(p.cfg.AllowedBackends, b.Type) {
		vs = append(vs, violation{field.NewPath("spec", "backend", "type"), fmt.Sprintf(
			"backend %q is not allowed by the cluster policy; allowed backends: %s, or omit spec.backend to use the default backend",
			b.Type, listOrAny(p.cfg.AllowedBackends))})
	}
	return vs
}

// checkImageDigest keeps spec.engine.imageDigest to what it means: the
// digest that the image verification of TerraformRunDefaults checked.
// In cluster mode, a run whose image the policy's imageVerification
// covers must carry one (so that verification cannot be skipped by
// turning that plugin off), and no other run may (so that no user pins
// an image to a digest nobody checked).
func (p *Plugin) checkImageDigest(run *terrarun.TerraformRun) []violation {
	e := run.Spec.Engine
	iv := p.cfg.ImageVerification
	covered := iv != nil && p.authorizer != nil && e.Image != "" && iv.Covers(e.Image) && p.cfg.ImageAllowed(e.Image)
	switch {
	case covered && e.ImageDigest == "":
		return []violation{{field.NewPath("spec", "engine", "image"), fmt.Sprintf(
			"image %q must be verified by the cluster policy's imageVerification, and was not: enable the TerraformRunDefaults admission plugin, which verifies it", e.Image)}}
	case !covered && e.ImageDigest != "":
		return []violation{{field.NewPath("spec", "engine", "imageDigest"),
			"is set only by the server's image verification, which does not cover this image; remove it (to run one digest, name it in spec.engine.image as image@sha256:...)"}}
	}
	return nil
}

// checkKubeAPIAccess refuses the kubernetes backend with in_cluster_config
// unless the run names the ServiceAccount whose token its pods get: a run's
// code reaches the Kubernetes API only as a ServiceAccount that the run
// names, and that its creator may use (checkReferences), never as the
// namespace's default one.
func checkKubeAPIAccess(run *terrarun.TerraformRun) []violation {
	b := run.Spec.Backend
	if b == nil || b.Type != "kubernetes" || b.Config["in_cluster_config"] != "true" {
		return nil
	}
	if e := run.Spec.Executor; e != nil && e.ServiceAccountName != "" {
		return nil
	}
	return []violation{{field.NewPath("spec", "backend", "config").Key("in_cluster_config"),
		"the kubernetes backend with in_cluster_config needs spec.executor.serviceAccountName: a run's pods get a Kubernetes API token only for a ServiceAccount the run names (and its creator may use), with the RBAC you give it; or omit spec.backend to keep the state in the backend terrarun serves"}}
}
