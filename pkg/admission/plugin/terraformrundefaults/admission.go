// Package terraformrundefaults implements the TerraformRunDefaults admission
// plugin, which fills the empty fields of a new TerraformRun from the
// cluster policy's defaults (see package policy) and, in cluster mode,
// verifies its executor image and pins it to the digest verified.
package terraformrundefaults

import (
	"context"
	"fmt"
	"io"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/admission"
	genericadmissioninitializer "k8s.io/apiserver/pkg/admission/initializer"
	"k8s.io/client-go/informers"

	"github.com/terrarun/terrarun/pkg/admission/initializer"
	"github.com/terrarun/terrarun/pkg/admission/policy"
	"github.com/terrarun/terrarun/pkg/apis/terrarun"
)

// PluginName is the name under which the plugin is registered and enabled.
const PluginName = "TerraformRunDefaults"

// Register registers the plugin. Its configuration is a policy file
// (policy.Load); without one the plugin changes nothing.
func Register(plugins *admission.Plugins) {
	plugins.Register(PluginName, func(config io.Reader) (admission.Interface, error) {
		cfg, err := policy.Load(config)
		if err != nil {
			return nil, err
		}
		return New(cfg), nil
	})
}

// Plugin is the TerraformRunDefaults mutating admission plugin. On the creation
// of a terraformruns object it sets, from the policy defaults, only the fields
// the user left empty: spec.engine.binary, spec.engine.image,
// spec.approval.mode, spec.approval.timeout, spec.timeouts.plan,
// spec.timeouts.apply, and spec.ttlSecondsAfterFinished (by namespace). It never overwrites a value the user set, and ignores
// every other resource, subresource and operation. It copies the policy's
// trustedSourceKeys into an OCI source's verify.trustedKeys, which no user
// may set.
//
// In cluster mode, when the policy has an imageVerification, it then checks
// the cosign signature of the run's executor image, resolved to a digest,
// and records that digest in spec.engine.imageDigest, which no user may set
// (see imageVerifier.pin).
type Plugin struct {
	*admission.Handler
	cfg *policy.Config
	// labeler gives the namespace labels that the policy's retention
	// entries select by.
	labeler         initializer.NamespaceLabeler
	informerFactory informers.SharedInformerFactory
	// images verifies executor images: cluster mode, with a policy
	// imageVerification; else nil.
	images *imageVerifier
}

var (
	_ admission.MutationInterface                                  = &Plugin{}
	_ initializer.WantsNamespaceLabeler                            = &Plugin{}
	_ genericadmissioninitializer.WantsExternalKubeInformerFactory = &Plugin{}
)

// SetNamespaceLabeler implements initializer.WantsNamespaceLabeler
// (standalone mode).
func (p *Plugin) SetNamespaceLabeler(l initializer.NamespaceLabeler) {
	p.labeler = l
	p.SetReadyFunc(nil)
}

// SetExternalKubeInformerFactory implements
// genericadmissioninitializer.WantsExternalKubeInformerFactory (cluster
// mode, the only one that sets it): the namespaces' labels come from its
// informer, and executor images are verified.
func (p *Plugin) SetExternalKubeInformerFactory(f informers.SharedInformerFactory) {
	p.informerFactory = f
}

// ValidateInitialization implements admission.InitializationValidator: a
// policy with retention entries needs the namespaces' labels, and one with
// an imageVerification gets its verifier in cluster mode.
func (p *Plugin) ValidateInitialization() error {
	if p.informerFactory != nil {
		v, err := newImageVerifier(p.cfg)
		if err != nil {
			return fmt.Errorf("%s: %w", PluginName, err)
		}
		p.images = v
	}
	if len(p.cfg.Retention) == 0 || p.labeler != nil {
		return nil
	}
	if p.informerFactory == nil {
		return fmt.Errorf("%s: retention is configured but namespace labels are unavailable", PluginName)
	}
	namespaces := p.informerFactory.Core().V1().Namespaces()
	p.labeler = initializer.NewInformerNamespaceLabeler(namespaces.Lister())
	p.SetReadyFunc(namespaces.Informer().HasSynced)
	return nil
}

// New returns the plugin for a loaded policy. A nil policy sets nothing.
func New(cfg *policy.Config) *Plugin {
	if cfg == nil {
		cfg = &policy.Config{}
	}
	return &Plugin{Handler: admission.NewHandler(admission.Create, admission.Update), cfg: cfg}
}

// Admit implements admission.MutationInterface.
func (p *Plugin) Admit(ctx context.Context, a admission.Attributes, o admission.ObjectInterfaces) error {
	if ws, ok := a.GetObject().(*terrarun.TerraformWorkspace); ok && a.GetSubresource() == "" &&
		(a.GetOperation() == admission.Create || a.GetOperation() == admission.Update) {
		applyWorkspaceDefaults(p.cfg, ws)
		return nil
	}
	if a.GetOperation() != admission.Create ||
		a.GetResource().GroupResource() != terrarun.Resource("terraformruns") ||
		a.GetSubresource() != "" {
		return nil
	}
	run, ok := a.GetObject().(*terrarun.TerraformRun)
	if !ok {
		return apierrors.NewBadRequest(fmt.Sprintf("%s: expected a *terrarun.TerraformRun, got %T", PluginName, a.GetObject()))
	}
	ApplyDefaults(p.cfg, run)
	if err := p.defaultTTL(ctx, a.GetNamespace(), run); err != nil {
		return err
	}
	if err := trustSourceKeys(p.cfg, run); err != nil {
		return err
	}
	if p.images != nil {
		return p.images.pin(ctx, a, run)
	}
	return nil
}

// defaultTTL sets spec.ttlSecondsAfterFinished from the policy (its
// namespace's retention entry, else its default) when the run sets none and
// no workspace created it: a workspace's history limits keep its runs.
func (p *Plugin) defaultTTL(ctx context.Context, namespace string, run *terrarun.TerraformRun) error {
	if run.Spec.TTLSecondsAfterFinished != nil || run.Labels[terrarun.LabelWorkspace] != "" {
		return nil
	}
	var nsLabels map[string]string
	if len(p.cfg.Retention) > 0 {
		var err error
		if nsLabels, err = p.labeler.NamespaceLabels(ctx, namespace); err != nil {
			return apierrors.NewServiceUnavailable(fmt.Sprintf("%s: reading the labels of namespace %q for the policy's retention: %v", PluginName, namespace, err))
		}
	}
	run.Spec.TTLSecondsAfterFinished = p.cfg.DefaultTTL(nsLabels)
	return nil
}

// ApplyDefaults sets the policy defaults on the empty fields of run's spec and
// leaves every other field alone.
func ApplyDefaults(cfg *policy.Config, run *terrarun.TerraformRun) {
	if cfg == nil || run == nil {
		return
	}
	d := cfg.Defaults
	s := &run.Spec
	if s.Engine.Binary == "" {
		s.Engine.Binary = d.Engine.Binary
	}
	if s.Engine.Image == "" {
		s.Engine.Image = d.Engine.Image
	}
	if s.Approval.Mode == "" {
		s.Approval.Mode = d.Approval.Mode
	}
	if s.Approval.Timeout == nil {
		s.Approval.Timeout = copyDuration(d.Approval.Timeout)
	}
	if s.Approval.RequiredApprovals == 0 && s.Approval.Mode != terrarun.ApprovalModeAuto {
		s.Approval.RequiredApprovals = d.Approval.RequiredApprovals
	}
	if s.Timeouts.Plan == nil {
		s.Timeouts.Plan = copyDuration(d.Timeouts.Plan)
	}
	if s.Timeouts.Apply == nil {
		s.Timeouts.Apply = copyDuration(d.Timeouts.Apply)
	}
}

// trustSourceKeys copies the policy's trustedSourceKeys into the
// verification of run's OCI source, which the plan stage then requires. A
// run that sets spec.source.oci.verify.trustedKeys itself is refused: only
// the policy chooses them.
func trustSourceKeys(cfg *policy.Config, run *terrarun.TerraformRun) error {
	o := run.Spec.Source.OCI
	if o == nil {
		return nil
	}
	if o.Verify != nil && o.Verify.TrustedKeys != "" {
		return apierrors.NewForbidden(terrarun.Resource("terraformruns"), run.Name, field.Forbidden(field.NewPath("spec", "source", "oci", "verify", "trustedKeys"),
			"is copied by the server from the cluster policy's trustedSourceKeys; remove it (to add keys of your own, name a Secret in verify.keysSecret)"))
	}
	if cfg.TrustedSourceKeys == "" {
		return nil
	}
	if o.Verify == nil {
		o.Verify = &terrarun.OCIVerification{}
	}
	o.Verify.TrustedKeys = cfg.TrustedSourceKeys
	return nil
}

func copyDuration(d *metav1.Duration) *metav1.Duration {
	if d == nil {
		return nil
	}
	c := *d
	return &c
}

// applyWorkspaceDefaults sets the policy defaults on the template of a
// workspace, as on the runs it makes: spec.approval is their approval.
func applyWorkspaceDefaults(cfg *policy.Config, ws *terrarun.TerraformWorkspace) {
	if ws.Spec.Template.Approval != (terrarun.Approval{}) {
		return // refused by validation: approval is spec.approval
	}
	run := &terrarun.TerraformRun{Spec: terrarun.RunTemplate(&ws.Spec)}
	ApplyDefaults(cfg, run)
	terrarun.SetRunTemplate(&ws.Spec, run.Spec)
}
