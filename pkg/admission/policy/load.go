package policy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/validation"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
	runvalidation "github.com/terrarun/terrarun/pkg/apis/terrarun/validation"
	"github.com/terrarun/terrarun/pkg/ociregistry"
)

// Load reads a policy file (YAML or JSON) from r, decodes it strictly and
// validates it. Unknown or duplicate fields are errors. Every validation error
// names the offending field, for example
// "defaults.timeouts.plan: must be positive"; several errors are reported
// together.
//
// A nil reader, or one that yields only white space or comments, returns the
// zero policy (&Config{}): no defaults, no restrictions, separation of duties on.
func Load(r io.Reader) (*Config, error) {
	if r == nil || isNilPointer(r) {
		return &Config{}, nil
	}
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", Kind, err)
	}
	return Parse(data)
}

// Parse is Load for a policy already in memory.
func Parse(data []byte) (*Config, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return &Config{}, nil
	}
	if j, err := yaml.YAMLToJSON(data); err == nil && string(bytes.TrimSpace(j)) == "null" {
		// Only comments, or an explicit null document.
		return &Config{}, nil
	}

	// Strict in both steps: YAMLToJSONStrict refuses duplicate keys, and
	// sigs.k8s.io/json (the decoder of the Kubernetes API machinery) matches
	// keys case-sensitively and reports unknown fields by their full path,
	// such as unknown field "defaults.engine.imagee".
	jsonData, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, fmt.Errorf("decoding %s: %w", Kind, err)
	}
	cfg := &Config{}
	strictErrs, err := sigsjson.UnmarshalStrict(jsonData, cfg)
	if err != nil {
		if derr := findBadDuration(data); derr != nil {
			return nil, derr
		}
		return nil, fmt.Errorf("decoding %s: %w", Kind, err)
	}
	if len(strictErrs) > 0 {
		return nil, fmt.Errorf("decoding %s: %w", Kind, utilerrors.NewAggregate(strictErrs))
	}
	if err := Validate(cfg); err != nil {
		return nil, err
	}
	return cfg, nil
}

// Validate checks a decoded policy and returns an error naming every
// offending field, or nil.
func Validate(cfg *Config) error {
	if cfg == nil {
		return nil
	}
	var errs []error
	add := func(path, format string, args ...interface{}) {
		errs = append(errs, fmt.Errorf("%s: %s", path, fmt.Sprintf(format, args...)))
	}

	if cfg.APIVersion != APIVersion {
		add("apiVersion", "must be %q, got %q", APIVersion, cfg.APIVersion)
	}
	if cfg.Kind != Kind {
		add("kind", "must be %q, got %q", Kind, cfg.Kind)
	}

	d := cfg.Defaults
	switch d.Engine.Binary {
	case "", terrarun.EngineTerraform, terrarun.EngineTofu:
	default:
		add("defaults.engine.binary", "unsupported value %q: must be %q or %q", d.Engine.Binary, terrarun.EngineTerraform, terrarun.EngineTofu)
	}
	if d.Engine.Image != strings.TrimSpace(d.Engine.Image) || strings.ContainsAny(d.Engine.Image, " \t\r\n") {
		add("defaults.engine.image", "must not contain white space, got %q", d.Engine.Image)
	}
	switch d.Approval.Mode {
	case "", terrarun.ApprovalModeManual, terrarun.ApprovalModeAuto:
	default:
		add("defaults.approval.mode", "unsupported value %q: must be %q or %q", d.Approval.Mode, terrarun.ApprovalModeManual, terrarun.ApprovalModeAuto)
	}

	for _, n := range []struct {
		path  string
		value int32
	}{
		{"defaults.approval.requiredApprovals", d.Approval.RequiredApprovals},
		{"minRequiredApprovals", cfg.MinRequiredApprovals},
	} {
		if n.value != 0 && (n.value < 1 || n.value > runvalidation.MaxRequiredApprovals) {
			add(n.path, "must be between 1 and %d, got %d", runvalidation.MaxRequiredApprovals, n.value)
		}
	}
	if m := cfg.MinRequiredApprovals; m > 1 && d.Approval.RequiredApprovals < m {
		add("defaults.approval.requiredApprovals", "%d is below minRequiredApprovals (%d), so runs that set no requiredApprovals would be refused; set it to at least %d",
			max(d.Approval.RequiredApprovals, 1), m, m)
	}

	durations := []struct {
		path string
		d    *metav1.Duration
	}{
		{"defaults.approval.timeout", d.Approval.Timeout},
		{"defaults.timeouts.plan", d.Timeouts.Plan},
		{"defaults.timeouts.apply", d.Timeouts.Apply},
		{"maxTimeouts.plan", cfg.MaxTimeouts.Plan},
		{"maxTimeouts.apply", cfg.MaxTimeouts.Apply},
		{"maxTimeouts.approval", cfg.MaxTimeouts.Approval},
	}
	for _, x := range durations {
		if x.d != nil && x.d.Duration <= 0 {
			add(x.path, "must be positive, got %s", FormatDuration(x.d.Duration))
		}
	}

	bounds := []struct {
		path, maxPath string
		d, max        *metav1.Duration
	}{
		{"defaults.timeouts.plan", "maxTimeouts.plan", d.Timeouts.Plan, cfg.MaxTimeouts.Plan},
		{"defaults.timeouts.apply", "maxTimeouts.apply", d.Timeouts.Apply, cfg.MaxTimeouts.Apply},
		{"defaults.approval.timeout", "maxTimeouts.approval", d.Approval.Timeout, cfg.MaxTimeouts.Approval},
	}
	for _, b := range bounds {
		if b.d != nil && b.max != nil && b.max.Duration > 0 && b.d.Duration > b.max.Duration {
			add(b.path, "%s exceeds %s (%s); lower the default or raise the maximum",
				FormatDuration(b.d.Duration), b.maxPath, FormatDuration(b.max.Duration))
		}
	}

	for i, h := range cfg.AllowedGitHosts {
		if msg := validateHostPattern(h); msg != "" {
			add(fmt.Sprintf("allowedGitHosts[%d]", i), "%s", msg)
		}
	}
	for i, h := range cfg.AllowedOCIRegistries {
		if msg := validateHostPattern(h); msg != "" {
			add(fmt.Sprintf("allowedOCIRegistries[%d]", i), "%s", msg)
		}
	}

	for _, list := range []struct {
		path   string
		values []string
	}{{"allowedImages", cfg.AllowedImages}, {"allowedServiceAccounts", cfg.AllowedServiceAccounts}, {"allowedBackends", cfg.AllowedBackends}} {
		for i, v := range list.values {
			if v == "" || v != strings.TrimSpace(v) || strings.ContainsAny(v, " \t\r\n") {
				add(fmt.Sprintf("%s[%d]", list.path, i), "must be non-empty, without white space, got %q", v)
			}
		}
	}
	imagePatterns := func(path string, patterns []string) {
		for i, img := range patterns {
			if strings.Contains(strings.TrimSuffix(img, "*"), "*") {
				add(fmt.Sprintf("%s[%d]", path, i), "%q: \"*\" may only end a pattern", img)
			}
		}
	}
	if k := cfg.TrustedSourceKeys; k != "" {
		if _, err := ociregistry.ParseKeys([]byte(k)); err != nil {
			add("trustedSourceKeys", "%v", err)
		}
	}
	imagePatterns("allowedImages", cfg.AllowedImages)
	if v := cfg.ImageVerification; v != nil {
		for i, img := range v.Images {
			if img == "" || strings.ContainsAny(img, " \t\r\n") {
				add(fmt.Sprintf("imageVerification.images[%d]", i), "must be non-empty, without white space, got %q", img)
			}
		}
		imagePatterns("imageVerification.images", v.Images)
		if strings.TrimSpace(v.PublicKeys) == "" {
			add("imageVerification.publicKeys", "is required: the PEM public keys (cosign.pub) that sign the executor images")
		} else if _, err := ociregistry.ParseKeys([]byte(v.PublicKeys)); err != nil {
			add("imageVerification.publicKeys", "%v", err)
		}
		if v.CABundle != "" {
			if _, err := ociregistry.Transport([]byte(v.CABundle)); err != nil {
				add("imageVerification.caBundle", "%v", err)
			}
		}
		if f := v.CredentialsFile; f != "" && !filepath.IsAbs(f) {
			add("imageVerification.credentialsFile", "must be an absolute path (a Secret's .dockerconfigjson mounted into the server), got %q", f)
		}
		if t := v.Timeout; t != nil && (t.Duration <= 0 || t.Duration > MaxImageVerificationTimeout) {
			add("imageVerification.timeout", "must be positive and at most %s (a create request waits for it), got %s", FormatDuration(MaxImageVerificationTimeout), FormatDuration(t.Duration))
		}
	}
	switch img := d.Engine.Image; {
	case img != "" && !cfg.ImageAllowed(img):
		add("defaults.engine.image", "%q is not in allowedImages, so runs that set no image would be refused; add it, or change the default", img)
	case img == "" && !cfg.ImageAllowed(terrarun.DefaultExecutorImage):
		add("defaults.engine.image", "is not set, and the built-in default image %q is not in allowedImages, so runs that set no image would be refused; set it to an allowed image",
			terrarun.DefaultExecutorImage)
	}

	if ttl := d.TTLSecondsAfterFinished; ttl != nil && *ttl < 0 {
		add("defaults.ttlSecondsAfterFinished", "must be 0 or more seconds, got %d", *ttl)
	}
	for i, r := range cfg.Retention {
		if _, err := metav1.LabelSelectorAsSelector(&r.NamespaceSelector); err != nil {
			add(fmt.Sprintf("retention[%d].namespaceSelector", i), "%v", err)
		}
		if r.TTLSecondsAfterFinished < 0 {
			add(fmt.Sprintf("retention[%d].ttlSecondsAfterFinished", i), "must be 0 or more seconds, got %d", r.TTLSecondsAfterFinished)
		}
	}
	if cfg.ManualApprovalNamespaceSelector != nil {
		if _, err := metav1.LabelSelectorAsSelector(cfg.ManualApprovalNamespaceSelector); err != nil {
			add("manualApprovalNamespaceSelector", "invalid label selector: %v", err)
		}
	}

	if t := cfg.TaskRunTemplate; t != nil {
		for _, m := range validateTaskRunTemplate(t) {
			errs = append(errs, errors.New(m))
		}
	}

	return utilerrors.NewAggregate(errs)
}

// validateTaskRunTemplate returns what is wrong with t, each message
// starting with its field's path.
func validateTaskRunTemplate(t *TaskRunTemplate) []string {
	var msgs []string
	add := func(path, format string, args ...any) {
		msgs = append(msgs, "taskRunTemplate."+path+": "+fmt.Sprintf(format, args...))
	}
	dnsName := func(path, v string) {
		for _, m := range validation.IsDNS1123Subdomain(v) {
			add(path, "%q: %s", v, m)
		}
	}
	if t.ServiceAccountName != "" {
		dnsName("serviceAccountName", t.ServiceAccountName)
	}
	if p := t.PodTemplate; p != nil {
		for _, k := range slices.Sorted(maps.Keys(p.NodeSelector)) {
			for _, m := range validation.IsQualifiedName(k) {
				add(fmt.Sprintf("podTemplate.nodeSelector[%s]", k), "%s", m)
			}
			for _, m := range validation.IsValidLabelValue(p.NodeSelector[k]) {
				add(fmt.Sprintf("podTemplate.nodeSelector[%s]", k), "%s", m)
			}
		}
		for i, tol := range p.Tolerations {
			path := fmt.Sprintf("podTemplate.tolerations[%d]", i)
			switch tol.Operator {
			case "", corev1.TolerationOpEqual:
			case corev1.TolerationOpExists:
				if tol.Value != "" {
					add(path+".value", "must be empty with operator Exists")
				}
			default:
				add(path+".operator", "unsupported value %q: must be Equal or Exists", tol.Operator)
			}
			switch tol.Effect {
			case "", corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
			default:
				add(path+".effect", "unsupported value %q: must be NoSchedule, PreferNoSchedule or NoExecute", tol.Effect)
			}
			if tol.Key == "" && tol.Operator != corev1.TolerationOpExists {
				add(path+".key", "is required unless operator is Exists")
			}
		}
		for _, f := range []struct{ path, v string }{
			{"podTemplate.priorityClassName", p.PriorityClassName},
			{"podTemplate.runtimeClassName", p.RuntimeClassName},
			{"podTemplate.schedulerName", p.SchedulerName},
		} {
			if f.v != "" {
				dnsName(f.path, f.v)
			}
		}
		for i, s := range p.ImagePullSecrets {
			dnsName(fmt.Sprintf("podTemplate.imagePullSecrets[%d].name", i), s.Name)
		}
	}
	if r := t.Task; r != nil {
		if r.Namespace == "" {
			add("task.namespace", "is required: the namespace of the Tekton Task, one that only operators may write")
		} else {
			for _, m := range validation.IsDNS1123Label(r.Namespace) {
				add("task.namespace", "%q: %s", r.Namespace, m)
			}
		}
		if r.Name == "" {
			add("task.name", "is required")
		} else {
			dnsName("task.name", r.Name)
		}
	}
	return msgs
}

// MaxImageVerificationTimeout bounds imageVerification.timeout, and
// DefaultImageVerificationTimeout is its default.
const (
	MaxImageVerificationTimeout     = 30 * time.Second
	DefaultImageVerificationTimeout = 10 * time.Second
)

// NamespaceSelector returns manualApprovalNamespaceSelector as a labels.Selector:
// labels.Nothing() when unset, labels.Everything() when empty.
func (c *Config) NamespaceSelector() (labels.Selector, error) {
	if c == nil || c.ManualApprovalNamespaceSelector == nil {
		return labels.Nothing(), nil
	}
	s, err := metav1.LabelSelectorAsSelector(c.ManualApprovalNamespaceSelector)
	if err != nil {
		return nil, fmt.Errorf("manualApprovalNamespaceSelector: invalid label selector: %w", err)
	}
	return s, nil
}

// ImageAllowed reports whether image is allowed by allowedImages. An empty
// list allows every image.
func (c *Config) ImageAllowed(image string) bool {
	return c == nil || len(c.AllowedImages) == 0 || matchImage(c.AllowedImages, image)
}

// matchImage reports whether image matches one of patterns: exactly, or,
// for a pattern that ends in "*", by starting with what precedes the "*".
func matchImage(patterns []string, image string) bool {
	for _, p := range patterns {
		if prefix, ok := strings.CutSuffix(p, "*"); ok && strings.HasPrefix(image, prefix) || p == image {
			return true
		}
	}
	return false
}

// GitHostAllowed reports whether host (a host name, optionally with a port)
// is allowed by allowedGitHosts. An empty list allows every host.
func (c *Config) GitHostAllowed(host string) bool {
	return c == nil || hostAllowed(c.AllowedGitHosts, host)
}

// OCIRegistryAllowed reports whether an OCI source may pull from the
// registry host (a host with an optional port).
func (c *Config) OCIRegistryAllowed(host string) bool {
	return c == nil || hostAllowed(c.AllowedOCIRegistries, host)
}

// hostAllowed reports whether host matches one of patterns, or patterns is
// empty.
func hostAllowed(patterns []string, host string) bool {
	if len(patterns) == 0 {
		return true
	}
	for _, p := range patterns {
		if matchHost(p, host) {
			return true
		}
	}
	return false
}

// matchHost reports whether host matches pattern. A pattern "*.example.com"
// matches any subdomain of example.com (a.example.com, a.b.example.com) but
// not example.com itself; any other pattern matches exactly. The comparison is
// case-insensitive, and ignores a port and a trailing dot on either side.
func matchHost(pattern, host string) bool {
	p := NormalizeHost(pattern)
	h := NormalizeHost(host)
	if p == "" || h == "" {
		return false
	}
	if suffix, ok := strings.CutPrefix(p, "*."); ok {
		return strings.HasSuffix(h, "."+suffix) && len(h) > len(suffix)+1
	}
	return p == h
}

// NormalizeHost lower-cases a host and strips a port, IPv6 brackets and a
// trailing dot.
func NormalizeHost(host string) string {
	h := strings.ToLower(strings.TrimSpace(host))
	if strings.HasPrefix(h, "[") {
		// [::1] or [::1]:22
		if end := strings.Index(h, "]"); end > 0 {
			return h[1:end]
		}
		return h
	}
	if i := strings.LastIndex(h, ":"); i >= 0 && strings.Count(h, ":") == 1 {
		h = h[:i]
	}
	return strings.TrimSuffix(h, ".")
}

func validateHostPattern(pattern string) string {
	if pattern == "" {
		return "must not be empty"
	}
	h := strings.ToLower(pattern)
	h = strings.TrimSuffix(h, ".")
	h = strings.TrimPrefix(h, "*.")
	if strings.Contains(h, "*") {
		return fmt.Sprintf("invalid host %q: a wildcard is allowed only as a leading \"*.\"", pattern)
	}
	if strings.ContainsAny(h, "/:@") {
		return fmt.Sprintf("invalid host %q: give a host name only, without scheme, user, port or path", pattern)
	}
	if msgs := validation.IsDNS1123Subdomain(h); len(msgs) > 0 {
		return fmt.Sprintf("invalid host %q: %s", pattern, strings.Join(msgs, "; "))
	}
	return ""
}

// FormatDuration prints d like time.Duration.String but without trailing zero
// units: 2h rather than 2h0m0s, 1h30m rather than 1h30m0s.
func FormatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// durationPaths are the duration-valued fields of a policy file, for error
// reporting: a bad duration fails decoding with an error that does not say
// which field holds it.
var durationPaths = [][]string{
	{"defaults", "approval", "timeout"},
	{"defaults", "timeouts", "plan"},
	{"defaults", "timeouts", "apply"},
	{"maxTimeouts", "plan"},
	{"maxTimeouts", "apply"},
	{"maxTimeouts", "approval"},
}

// findBadDuration returns an error naming the first duration field of data
// that does not parse, or nil.
func findBadDuration(data []byte) error {
	var raw map[string]interface{}
	if err := yaml.Unmarshal(data, &raw); err != nil {
		return nil
	}
	for _, p := range durationPaths {
		var cur interface{} = raw
		for _, k := range p {
			m, ok := cur.(map[string]interface{})
			if !ok {
				cur = nil
				break
			}
			cur = m[k]
		}
		if cur == nil {
			continue
		}
		s, ok := cur.(string)
		if !ok {
			return fmt.Errorf("%s: invalid duration %v: must be a string such as \"30m\" or \"2h\"", strings.Join(p, "."), cur)
		}
		if _, err := time.ParseDuration(s); err != nil {
			return fmt.Errorf("%s: invalid duration %q: use a Go duration such as \"30m\" or \"2h\"", strings.Join(p, "."), s)
		}
	}
	return nil
}

func isNilPointer(r io.Reader) bool {
	v := reflect.ValueOf(r)
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan:
		return v.IsNil()
	}
	return false
}

// DefaultTTL returns the default spec.ttlSecondsAfterFinished of a run in a
// namespace labelled nsLabels: the first retention entry that selects it,
// else defaults.ttlSecondsAfterFinished, else none.
func (c *Config) DefaultTTL(nsLabels map[string]string) *int32 {
	if c == nil {
		return nil
	}
	for _, r := range c.Retention {
		if s, err := metav1.LabelSelectorAsSelector(&r.NamespaceSelector); err == nil && s.Matches(labels.Set(nsLabels)) {
			ttl := r.TTLSecondsAfterFinished
			return &ttl
		}
	}
	if ttl := c.Defaults.TTLSecondsAfterFinished; ttl != nil {
		v := *ttl
		return &v
	}
	return nil
}
