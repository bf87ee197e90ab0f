// Package runpolicy implements the TerraformRunPolicy validating admission
// plugin, which enforces the cluster policy (see package policy) on
// TerraformRuns, and checkApprover, the separation-of-duties rule of the
// approve subresource.
package terraformrunpolicy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/admission"
	genericadmissioninitializer "k8s.io/apiserver/pkg/admission/initializer"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/informers"

	"github.com/terrarun/terrarun/pkg/admission/initializer"
	"github.com/terrarun/terrarun/pkg/admission/policy"
	"github.com/terrarun/terrarun/pkg/apis/terrarun"
)

// PluginName is the name under which the plugin is registered and enabled.
const PluginName = "TerraformRunPolicy"

// Register registers the plugin. Its configuration is a policy file
// (policy.Load); without one the plugin only protects spec.creator.
func Register(plugins *admission.Plugins) {
	plugins.Register(PluginName, func(config io.Reader) (admission.Interface, error) {
		cfg, err := policy.Load(config)
		if err != nil {
			return nil, err
		}
		return New(cfg)
	})
}

// Plugin is the TerraformRunPolicy validating admission plugin. On the create
// and update of terraformruns objects (not their subresources) it enforces:
//
//   - spec.source.git.url points to a host in allowedGitHosts;
//   - spec.source.oci.url points to a registry in allowedOCIRegistries, and
//     sets verify when requireVerifiedSources says so;
//   - spec.approval.mode is not Auto in a namespace selected by
//     manualApprovalNamespaceSelector;
//   - spec.timeouts.plan, spec.timeouts.apply and spec.approval.timeout do not
//     exceed maxTimeouts;
//   - spec.approval.requiredApprovals of a Manual run is at least
//     minRequiredApprovals;
//   - spec.engine.image, spec.executor.serviceAccountName and
//     spec.backend.type are in allowedImages, allowedServiceAccounts and
//     allowedBackends;
//   - in cluster mode, the requesting user may herself use what the run makes
//     the server use on her behalf: get every Secret and ConfigMap it
//     references, create pods (to run as its ServiceAccount) and create its
//     outputs Secret, as a SubjectAccessReview says;
//   - spec.creator names the requesting user on create, and never changes on
//     update.
//
// The spec is immutable after creation, so on update the policy rules are
// checked only if the spec (other than spec.creator) changed: tightening the
// policy never blocks metadata updates of existing runs, such as the removal
// of a finalizer.
//
// Namespace labels come from a NamespaceLabeler set through
// initializer.NewInitializer or, failing that, from a namespace informer built
// from the Kubernetes informer factory (cluster mode). The informer is started
// only when a namespace selector is configured.
type Plugin struct {
	*admission.Handler

	cfg *policy.Config
	// selector is nil when the policy has no manualApprovalNamespaceSelector.
	selector labels.Selector

	labeler         NamespaceLabeler
	informerFactory informers.SharedInformerFactory
	runs            initializer.RunGetter
	// authorizer answers for the requesting user what the cluster's would
	// (cluster mode); nil in standalone mode.
	authorizer authorizer.Authorizer
}

var (
	_ admission.ValidationInterface                                = &Plugin{}
	_ initializer.WantsNamespaceLabeler                            = &Plugin{}
	_ genericadmissioninitializer.WantsExternalKubeInformerFactory = &Plugin{}
	_ genericadmissioninitializer.WantsAuthorizer                  = &Plugin{}
)

// New returns the plugin for a loaded policy. A nil policy is the zero policy.
func New(cfg *policy.Config) (*Plugin, error) {
	if cfg == nil {
		cfg = &policy.Config{}
	}
	p := &Plugin{Handler: admission.NewHandler(admission.Create, admission.Update), cfg: cfg}
	if cfg.ManualApprovalNamespaceSelector != nil {
		s, err := cfg.NamespaceSelector()
		if err != nil {
			return nil, err
		}
		p.selector = s
	}
	return p, nil
}

// SetRunGetter implements initializer.WantsRunGetter: the approve subresource
// needs the run's creator for separation of duties.
func (p *Plugin) SetRunGetter(r initializer.RunGetter) { p.runs = r }

// validateApprove enforces separation of duties on terraformruns/approve.
func (p *Plugin) validateApprove(ctx context.Context, a admission.Attributes) error {
	if !p.cfg.SeparationOfDutiesEnabled() {
		return nil
	}
	if p.runs == nil {
		return apierrors.NewInternalError(fmt.Errorf("%s: separation of duties is enabled but the plugin cannot read runs", PluginName))
	}
	run, err := p.runs.GetRun(ctx, a.GetNamespace(), a.GetName())
	if err != nil {
		return err
	}
	if err := checkApprover(p.cfg, run, a.GetUserInfo()); err != nil {
		return err
	}
	return p.checkConfigMapAuthor(ctx, run, a.GetUserInfo())
}

// checkConfigMapAuthor extends separation of duties to the configuration a
// run reads from a ConfigMap (spec.source.configMap): Kubernetes does not
// record who wrote a ConfigMap, so whoever may write it (update or patch,
// as a SubjectAccessReview says) may have written the code the plan
// planned, and may not approve it. A change of the ConfigMap starts a
// workspace's run on its spec editor's behalf; without this rule its
// author could approve it. Standalone mode, whose ConfigMaps are the
// server's own files that no tenant writes, has no authorizer here.
func (p *Plugin) checkConfigMapAuthor(ctx context.Context, run *terrarun.TerraformRun, approver user.Info) error {
	cm := run.Spec.Source.ConfigMap
	if p.authorizer == nil || cm == nil || approver == nil {
		return nil
	}
	for _, verb := range []string{"update", "patch"} {
		decision, _, err := p.authorizer.Authorize(ctx, authorizer.AttributesRecord{
			User: approver, Verb: verb, Namespace: run.Namespace, Resource: "configmaps", Name: cm.Name, ResourceRequest: true})
		switch {
		case decision == authorizer.DecisionAllow:
			return apierrors.NewForbidden(terrarun.Resource("terraformruns"), run.Name, fmt.Errorf(
				"separation of duties: %s may %s ConfigMap %q, which holds the run's configuration (spec.source.configMap), and so may have written the code it plans; ask a user who may not change it, with create on terraformruns/approve",
				approver.GetName(), verb, cm.Name))
		case err != nil:
			return apierrors.NewServiceUnavailable(fmt.Sprintf("separation of duties: whether %s may change ConfigMap %q cannot be checked (%v); retry", approver.GetName(), cm.Name, err))
		}
	}
	return nil
}

// SetAuthorizer implements genericadmissioninitializer.WantsAuthorizer. Only
// cluster mode's generic initializer sets it: with it, the plugin checks that
// the creator of a run may use what the run references.
func (p *Plugin) SetAuthorizer(a authorizer.Authorizer) { p.authorizer = a }

// SetNamespaceLabeler implements initializer.WantsNamespaceLabeler. A labeler
// set here takes precedence over the Kubernetes informer factory.
func (p *Plugin) SetNamespaceLabeler(l NamespaceLabeler) {
	p.labeler = l
	// An explicit labeler needs no informer to sync.
	p.SetReadyFunc(nil)
}

// SetExternalKubeInformerFactory implements
// genericadmissioninitializer.WantsExternalKubeInformerFactory. The factory is
// used by ValidateInitialization when no labeler was set explicitly.
func (p *Plugin) SetExternalKubeInformerFactory(f informers.SharedInformerFactory) {
	p.informerFactory = f
}

// ValidateInitialization implements admission.InitializationValidator. It runs
// after every initializer. When a namespace selector is configured and no
// labeler was set explicitly, it builds an initializer.InformerNamespaceLabeler from the
// informer factory's namespace informer (registering that informer before the
// factory is started) and makes admission wait for its cache to sync. It fails
// when a selector is configured and neither source of labels was provided.
func (p *Plugin) ValidateInitialization() error {
	if p.selector == nil || p.labeler != nil {
		return nil
	}
	if p.informerFactory == nil {
		return fmt.Errorf("%s: manualApprovalNamespaceSelector is configured but namespace labels are unavailable: "+
			"provide a Kubernetes informer factory (cluster mode) or a NamespaceLabeler through initializer.NewInitializer "+
			"(standalone mode: initializer.NameOnlyNamespaceLabeler)", PluginName)
	}
	nsInformer := p.informerFactory.Core().V1().Namespaces()
	p.labeler = initializer.NewInformerNamespaceLabeler(nsInformer.Lister())
	p.SetReadyFunc(nsInformer.Informer().HasSynced)
	return nil
}

// violation is one broken rule: the field and a message that says what to do.
type violation struct {
	path *field.Path
	msg  string
}

// Validate implements admission.ValidationInterface.
func (p *Plugin) Validate(ctx context.Context, a admission.Attributes, o admission.ObjectInterfaces) error {
	if a.GetResource().GroupResource() == terrarun.Resource("terraformworkspaces") && a.GetSubresource() == "" {
		return p.validateWorkspace(ctx, a)
	}
	if task, ok := a.GetObject().(*terrarun.TerraformRunTask); ok && a.GetSubresource() == "" {
		return deny(a, p.checkRunTask(ctx, a.GetUserInfo(), a.GetNamespace(), task))
	}
	if n, ok := a.GetObject().(*terrarun.TerraformNotification); ok && a.GetSubresource() == "" {
		return deny(a, p.checkNotification(ctx, a.GetUserInfo(), a.GetNamespace(), n))
	}
	if a.GetResource().GroupResource() != terrarun.Resource("terraformruns") {
		return nil
	}
	if a.GetSubresource() == "approve" && a.GetOperation() == admission.Create {
		return p.validateApprove(ctx, a)
	}
	if a.GetSubresource() != "" {
		return nil
	}
	op := a.GetOperation()
	if op != admission.Create && op != admission.Update {
		return nil
	}
	run, ok := a.GetObject().(*terrarun.TerraformRun)
	if !ok {
		return apierrors.NewBadRequest(fmt.Sprintf("%s: expected a *terrarun.TerraformRun, got %T", PluginName, a.GetObject()))
	}

	var vs []violation
	creatorPath := field.NewPath("spec", "creator")
	// Whose rights the run uses: its creator's. That is the requester, except
	// for a run the server creates for a workspace, whose creator is the
	// user who last set the workspace's spec.
	creator := a.GetUserInfo()
	switch op {
	case admission.Create:
		requester := userName(a.GetUserInfo())
		if c := run.Spec.Creator; c != nil && c.Username != requester && terrarun.CreatesOnBehalf(a.GetUserInfo()) {
			creator = c.User()
		} else if c != nil && c.Username != requester {
			vs = append(vs, violation{creatorPath, fmt.Sprintf(
				"is set by the server from the creating user and cannot be chosen by the client: it names %q but the request was made by %q; omit spec.creator",
				c.Username, requester)})
		}
	case admission.Update:
		old, ok := a.GetOldObject().(*terrarun.TerraformRun)
		if !ok {
			return apierrors.NewBadRequest(fmt.Sprintf("%s: expected an old *terrarun.TerraformRun, got %T", PluginName, a.GetOldObject()))
		}
		if !apiequality.Semantic.DeepEqual(old.Spec.Creator, run.Spec.Creator) {
			vs = append(vs, violation{creatorPath, "is set by the server from the creating user and cannot be changed"})
		}
		vs = append(vs, p.checkTTLChange(ctx, a.GetUserInfo(), old, run)...)
		if specEqualIgnoringCreator(old, run) {
			return deny(a, vs)
		}
	}

	namespace := a.GetNamespace()
	if namespace == "" {
		namespace = run.Namespace
	}
	// Of runs only, not of the runs a workspace would make: those are
	// verified when they are made.
	vs = append(vs, p.checkImageDigest(run)...)
	vs = append(vs, p.checkTrustedKeys(run)...)
	return deny(a, append(vs, p.checkRun(ctx, creator, namespace, run)...))
}

// checkTTLChange refuses a change of spec.ttlSecondsAfterFinished by a user
// who may not delete the run (a SubjectAccessReview, in cluster mode): the
// TTL controller deletes it for her, and update is no right to delete.
func (p *Plugin) checkTTLChange(ctx context.Context, u user.Info, old, run *terrarun.TerraformRun) []violation {
	if p.authorizer == nil || apiequality.Semantic.DeepEqual(old.Spec.TTLSecondsAfterFinished, run.Spec.TTLSecondsAfterFinished) {
		return nil
	}
	decision, reason, err := p.authorizer.Authorize(ctx, authorizer.AttributesRecord{User: u, Verb: "delete", Namespace: run.Namespace,
		APIGroup: terrarun.GroupName, Resource: "terraformruns", Name: run.Name, ResourceRequest: true})
	if decision == authorizer.DecisionAllow {
		return nil
	}
	if err != nil {
		reason = fmt.Sprintf("the check failed: %v; retry", err)
	}
	return []violation{{field.NewPath("spec", "ttlSecondsAfterFinished"), fmt.Sprintf(
		"user %q may not delete run %q (%s), and a time to live deletes it: ask someone who may, or delete it yourself once you may", userName(u), run.Name, reason)}}
}

// checkRun applies the cluster policy to a run that creator makes the server
// run in namespace.
func (p *Plugin) checkRun(ctx context.Context, creator user.Info, namespace string, run *terrarun.TerraformRun) []violation {
	var vs []violation
	vs = append(vs, p.checkGitHost(run)...)
	vs = append(vs, p.checkOCISource(run)...)
	vs = append(vs, p.checkSourceRef(run)...)
	vs = append(vs, p.checkApprovalMode(ctx, namespace, run)...)
	vs = append(vs, p.checkTimeouts(run)...)
	vs = append(vs, p.checkRequiredApprovals(run)...)
	vs = append(vs, p.checkAllowedLists(run)...)
	vs = append(vs, checkKubeAPIAccess(run)...)
	vs = append(vs, p.checkReferences(ctx, creator, namespace, run)...)
	return vs
}

// validateWorkspace applies the cluster policy, at create and at every
// change of spec, to the runs a workspace would create, as the requester
// (who becomes their creator): a workspace cannot hold what its runs could
// not. Each run is checked again when it is created.
func (p *Plugin) validateWorkspace(ctx context.Context, a admission.Attributes) error {
	ws, ok := a.GetObject().(*terrarun.TerraformWorkspace)
	if !ok || (a.GetOperation() != admission.Create && a.GetOperation() != admission.Update) {
		return nil
	}
	if old, ok := a.GetOldObject().(*terrarun.TerraformWorkspace); ok && a.GetOperation() == admission.Update {
		oldSpec, newSpec := old.Spec.DeepCopy(), ws.Spec.DeepCopy()
		oldSpec.Template.Creator, newSpec.Template.Creator = nil, nil
		if apiequality.Semantic.DeepEqual(oldSpec, newSpec) {
			return nil
		}
	}
	// A workspace output is read from some run of the dependency: the
	// right to read outputs in the namespace. The outputs Secret is written
	// as the runs' creator.
	run := &terrarun.TerraformRun{
		ObjectMeta: metav1.ObjectMeta{Name: ws.Name, Namespace: ws.Namespace},
		Spec:       terrarun.RunSpecOf(&ws.Spec, ws.Spec.Template.Operation, func(string) string { return "" }),
	}
	run.Spec.OutputsSecret = ws.Spec.OutputsSecret
	namespace := a.GetNamespace()
	if namespace == "" {
		namespace = ws.Namespace
	}
	vs := p.checkRun(ctx, a.GetUserInfo(), namespace, run)
	for i, v := range vs {
		// The run's fields, where the workspace holds them.
		path := v.path.String()
		switch {
		case strings.HasPrefix(path, "spec.approval"), strings.HasPrefix(path, "spec.outputsSecret"):
		case strings.HasPrefix(path, "spec."):
			path = "spec.template." + strings.TrimPrefix(path, "spec.")
		}
		path = strings.Replace(path, ".valueFrom.runOutput", ".valueFrom.workspaceOutput", 1)
		vs[i].path = field.NewPath(path)
	}
	return deny(a, vs)
}

// checkRequiredApprovals holds Manual runs to the policy's
// minRequiredApprovals. Auto runs are governed by
// manualApprovalNamespaceSelector.
func (p *Plugin) checkRequiredApprovals(run *terrarun.TerraformRun) []violation {
	m, n := p.cfg.MinRequiredApprovals, run.Spec.Approval.RequiredApprovals
	if run.Spec.Approval.Mode == terrarun.ApprovalModeAuto || m <= 1 || max(n, 1) >= m {
		return nil
	}
	return []violation{{field.NewPath("spec", "approval", "requiredApprovals"), fmt.Sprintf(
		"%d is below the cluster policy's minRequiredApprovals (%d); ask for at least %d approvals, or omit the field", max(n, 1), m, m)}}
}

func (p *Plugin) checkGitHost(run *terrarun.TerraformRun) []violation {
	git := run.Spec.Source.Git
	if git == nil || len(p.cfg.AllowedGitHosts) == 0 {
		return nil
	}
	path := field.NewPath("spec", "source", "git", "url")
	allowed := listOrAny(p.cfg.AllowedGitHosts)
	host, err := gitURLHost(git.URL)
	if err != nil {
		return []violation{{path, fmt.Sprintf("%v; use an https:// or ssh:// URL on an allowed host; allowed hosts: %s", err, allowed)}}
	}
	if !p.cfg.GitHostAllowed(host) {
		return []violation{{path, fmt.Sprintf("host %q is not allowed by the cluster policy; allowed hosts: %s", host, allowed)}}
	}
	return nil
}

// checkOCISource applies allowedOCIRegistries and requireVerifiedSources.
func (p *Plugin) checkOCISource(run *terrarun.TerraformRun) []violation {
	o := run.Spec.Source.OCI
	if o == nil {
		return nil
	}
	var vs []violation
	path := field.NewPath("spec", "source", "oci")
	host, _, _ := strings.Cut(strings.TrimPrefix(o.URL, "oci://"), "/")
	if !p.cfg.OCIRegistryAllowed(host) {
		vs = append(vs, violation{path.Child("url"), fmt.Sprintf("registry %q is not allowed by the cluster policy; allowed registries: %s", host, listOrAny(p.cfg.AllowedOCIRegistries))})
	}
	if p.cfg.RequireVerifiedSources && o.Verify == nil && p.cfg.TrustedSourceKeys == "" {
		vs = append(vs, violation{path.Child("verify"), "the cluster policy requires every OCI source to be verified (requireVerifiedSources): set verify.keysSecret to a Secret whose cosign.pub holds the signers' public keys, or verify.matchOIDCIdentity and verify.trustedRootSecret for keyless signatures"})
	}
	return vs
}

// checkTrustedKeys keeps an OCI source's verify.trustedKeys to what the
// TerraformRunDefaults plugin copied from the policy's trustedSourceKeys:
// exactly those keys, and none without them.
func (p *Plugin) checkTrustedKeys(run *terrarun.TerraformRun) []violation {
	o := run.Spec.Source.OCI
	if o == nil {
		return nil
	}
	got := ""
	if o.Verify != nil {
		got = o.Verify.TrustedKeys
	}
	if got == p.cfg.TrustedSourceKeys {
		return nil
	}
	path := field.NewPath("spec", "source", "oci", "verify", "trustedKeys")
	if got == "" {
		return []violation{{path, "the cluster policy's trustedSourceKeys were not applied to the run: enable the TerraformRunDefaults admission plugin, which copies them"}}
	}
	return []violation{{path, "is copied by the server from the cluster policy's trustedSourceKeys, and these are not they; remove it"}}
}

// checkSourceRef refuses a Flux source in standalone mode, which has no
// cluster and no source-controller, and applies requireVerifiedSources to
// an OCIRepository: terrarun verifies the signatures of the artifacts it
// pulls itself (spec.source.oci.verify), and cannot tell whether
// source-controller verified one.
func (p *Plugin) checkSourceRef(run *terrarun.TerraformRun) []violation {
	f := run.Spec.Source.SourceRef
	if f == nil {
		return nil
	}
	path := field.NewPath("spec", "source", "sourceRef")
	if p.authorizer == nil {
		return []violation{{path, "Flux sources need cluster mode (a cluster where Flux's source-controller runs); in standalone mode use an inline, configMap, git or oci source"}}
	}
	if p.cfg.RequireVerifiedSources && f.Kind == terrarun.SourceKindOCIRepository {
		return []violation{{path.Child("kind"), "the cluster policy requires every OCI artifact to be verified by terrarun (requireVerifiedSources), which it does only for the artifacts it pulls: use spec.source.oci with verify.keysSecret instead of an OCIRepository"}}
	}
	return nil
}

func (p *Plugin) checkApprovalMode(ctx context.Context, namespace string, run *terrarun.TerraformRun) []violation {
	if p.selector == nil || run.Spec.Approval.Mode != terrarun.ApprovalModeAuto {
		return nil
	}
	path := field.NewPath("spec", "approval", "mode")
	if p.labeler == nil {
		return []violation{{path, fmt.Sprintf(
			"Auto approval cannot be checked against the cluster policy in namespace %q: the %s admission plugin has no source of namespace labels; use Manual, or ask the server administrator to fix the configuration",
			namespace, PluginName)}}
	}
	if !p.WaitForReady() {
		return []violation{{path, fmt.Sprintf(
			"Auto approval cannot be checked against the cluster policy in namespace %q yet: the namespace cache is not synced; retry shortly, or use Manual",
			namespace)}}
	}
	lbls, err := p.labeler.NamespaceLabels(ctx, namespace)
	if err != nil {
		return []violation{{path, fmt.Sprintf(
			"Auto approval cannot be checked against the cluster policy in namespace %q: %v; retry, or use Manual",
			namespace, err)}}
	}
	if p.selector.Matches(labels.Set(lbls)) {
		return []violation{{path, fmt.Sprintf(
			"Auto approval is forbidden in namespace %q by the cluster policy; use Manual", namespace)}}
	}
	return nil
}

func (p *Plugin) checkTimeouts(run *terrarun.TerraformRun) []violation {
	m := p.cfg.MaxTimeouts
	checks := []struct {
		path    *field.Path
		maxName string
		value   *metav1.Duration
		max     *metav1.Duration
	}{
		{field.NewPath("spec", "timeouts", "plan"), "maxTimeouts.plan", run.Spec.Timeouts.Plan, m.Plan},
		{field.NewPath("spec", "timeouts", "apply"), "maxTimeouts.apply", run.Spec.Timeouts.Apply, m.Apply},
		{field.NewPath("spec", "approval", "timeout"), "maxTimeouts.approval", run.Spec.Approval.Timeout, m.Approval},
	}
	var vs []violation
	for _, c := range checks {
		if c.value == nil || c.max == nil || c.value.Duration <= c.max.Duration {
			continue
		}
		max := policy.FormatDuration(c.max.Duration)
		vs = append(vs, violation{c.path, fmt.Sprintf(
			"%s exceeds the cluster policy maximum of %s (%s); use at most %s",
			policy.FormatDuration(c.value.Duration), max, c.maxName, max)})
	}
	return vs
}

// gitURLHost returns the lower-cased host of a git URL, without port: the
// host of an https://, http://, ssh:// or git:// URL, or of the scp-like form
// [user@]host:path. It refuses what it cannot read unambiguously.
func gitURLHost(raw string) (string, error) {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return "", fmt.Errorf("the URL is empty")
	}
	var host string
	if i := strings.Index(raw, "://"); i >= 0 {
		authority := raw[i+3:]
		if j := strings.IndexAny(authority, "/?#"); j >= 0 {
			authority = authority[:j]
		}
		if strings.Contains(authority, `\`) {
			return "", fmt.Errorf("cannot determine the host of the URL: it contains a backslash")
		}
		u, err := url.Parse(raw)
		if err != nil {
			return "", fmt.Errorf("cannot determine the host of the URL: it does not parse")
		}
		host = u.Hostname()
	} else {
		// scp-like syntax: [user@]host:path or [user@][ipv6]:path, where the
		// part before the colon holds no slash.
		const notSCP = "cannot determine the host of the URL: it is neither a URL with a scheme nor of the form user@host:path"
		rest := raw
		if at := strings.Index(raw, "@"); at >= 0 && !strings.ContainsAny(raw[:at], `/:\`) {
			rest = raw[at+1:]
		}
		if strings.HasPrefix(rest, "[") {
			end := strings.Index(rest, "]")
			if end < 0 || !strings.HasPrefix(rest[end+1:], ":") {
				return "", errors.New(notSCP)
			}
			host = rest[1:end]
		} else {
			colon := strings.Index(rest, ":")
			if colon <= 0 || strings.ContainsAny(rest[:colon], `/\`) {
				return "", errors.New(notSCP)
			}
			host = rest[:colon]
		}
	}
	host = policy.NormalizeHost(host)
	if host == "" {
		return "", fmt.Errorf("cannot determine the host of the URL: it has none")
	}
	if strings.Contains(host, ":") {
		// An IPv6 literal. No allowedGitHosts entry can name one, so it is
		// allowed only when the list is empty.
		return host, nil
	}
	if msgs := validation.IsDNS1123Subdomain(host); len(msgs) > 0 {
		return "", fmt.Errorf("cannot determine the host of the URL: %q is not a valid host name", host)
	}
	return host, nil
}

// specEqualIgnoringCreator reports whether the specs of two runs are equal
// apart from spec.creator and spec.ttlSecondsAfterFinished, which are
// checked on their own.
func specEqualIgnoringCreator(old, cur *terrarun.TerraformRun) bool {
	a, b := old.Spec, cur.Spec
	a.Creator, b.Creator = nil, nil
	return terrarun.SameRunSpec(&a, &b)
}

// listOrAny is an allowed list for a message.
func listOrAny(list []string) string {
	if len(list) == 0 {
		return "any"
	}
	return strings.Join(list, ", ")
}

func userName(u user.Info) string {
	if u == nil {
		return ""
	}
	return u.GetName()
}

// deny turns violations into one Forbidden error whose message lists every
// violation as "<field>: <message>", and whose details carry one cause per
// field. It returns nil when there are none.
func deny(a admission.Attributes, vs []violation) error {
	if len(vs) == 0 {
		return nil
	}
	errs := make([]error, 0, len(vs))
	for _, v := range vs {
		errs = append(errs, fmt.Errorf("%s: %s", v.path.String(), v.msg))
	}
	err := admission.NewForbidden(a, utilerrors.NewAggregate(errs))
	if se, ok := err.(*apierrors.StatusError); ok && se.ErrStatus.Details != nil {
		for _, v := range vs {
			se.ErrStatus.Details.Causes = append(se.ErrStatus.Details.Causes, metav1.StatusCause{
				Type:    metav1.CauseType(field.ErrorTypeForbidden),
				Message: v.msg,
				Field:   v.path.String(),
			})
		}
	}
	return err
}
