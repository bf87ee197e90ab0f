// Package fuzzer provides fuzzer functions for the terrarun.dev API group. They
// are used by the round-trip tests, which fuzz internal objects, convert them to
// every served version, serialize, deserialize and convert them back, and require
// the result to be semantically equal to the original.
//
// The functions keep fuzzed objects valid: a run has exactly one source, a variable
// has a value or a valueFrom, enums hold their documented values, durations and
// resource quantities are in range, and the fields that v1alpha1 defaults on decode
// (operation, workspace) are always set, so that decoding does not change them.
// Fuzzed specs also pass validation.ValidateTerraformRunSpec, like the objects
// the registry stores, so the functions can serve strategy tests as well.
package fuzzer

import (
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeserializer "k8s.io/apimachinery/pkg/runtime/serializer"
	"sigs.k8s.io/randfill"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
)

// Funcs returns the fuzzer functions for the terrarun.dev API group.
var Funcs = func(codecs runtimeserializer.CodecFactory) []interface{} {
	return []interface{}{
		func(s *terrarun.TerraformRunSpec, c randfill.Continue) {
			c.FillNoCustom(s) // fill the members with their own functions, not this one again

			// v1alpha1 defaults operation and workspace on decode; keep them set so
			// that a round trip does not change them.
			s.Operation = pick(c, terrarun.OperationApply, terrarun.OperationDestroy, terrarun.OperationPlan)
			s.Workspace = pick(c, "default", "staging", "prod-"+name(c))
			if s.Backend != nil {
				s.Backend.Type = pick(c, "local", "kubernetes", "s3")
				s.Backend.Config = randomMap(c, identifier, name)
				s.Backend.ConfigSecret = optional(c, name)
			}
			for i := range s.Variables {
				// variables are a list map keyed by name.
				s.Variables[i].Name = fmt.Sprintf("var_%d_%s", i, identifier(c))
			}
			s.OutputsSecret = optional(c, name)
			s.Targets = addresses(c)
			s.Replace = addresses(c)
			if s.Parallelism != nil {
				*s.Parallelism = 1 + c.Int31n(256)
			}
			if s.Creator != nil && s.Creator.Username == "" {
				s.Creator.Username = "user-" + name(c)
			}
		},
		func(e *terrarun.ExecutorSpec, c randfill.Continue) {
			c.FillNoCustom(e)
			e.ServiceAccountName = optional(c, name)
			e.NodeSelector = randomMap(c, func(c randfill.Continue) string { return "example.com/" + name(c) }, name)
		},
		func(s *terrarun.Source, c randfill.Continue) {
			// exactly one member
			*s = terrarun.Source{}
			switch c.Intn(5) {
			case 4:
				s.SourceRef = &terrarun.SourceReference{
					Kind: pick(c, terrarun.SourceKindGitRepository, terrarun.SourceKindOCIRepository, terrarun.SourceKindBucket),
					Name: name(c),
					Path: optional(c, func(c randfill.Continue) string { return "envs/" + name(c) }),
				}
			case 3:
				s.OCI = &terrarun.OCISource{URL: "oci://registry.example.com/" + name(c)}
				switch c.Intn(4) {
				case 0:
					s.OCI.Ref = &terrarun.OCIReference{Tag: pick(c, "v1.2.3", "latest")}
				case 1:
					s.OCI.Ref = &terrarun.OCIReference{Semver: "~1.2"}
				case 2:
					s.OCI.Ref = &terrarun.OCIReference{Digest: fmt.Sprintf("sha256:%016x%016x%016x%016x", c.Uint64(), c.Uint64(), c.Uint64(), c.Uint64())}
				}
				s.OCI.Path = optional(c, func(c randfill.Continue) string { return "envs/" + name(c) })
				s.OCI.CredentialsSecret = optional(c, name)
				s.OCI.CertSecret = optional(c, name)
				switch c.Intn(3) {
				case 1:
					s.OCI.Verify = &terrarun.OCIVerification{Provider: terrarun.OCIVerificationProviderCosign, KeysSecret: name(c)}
				case 2:
					s.OCI.Verify = &terrarun.OCIVerification{Provider: terrarun.OCIVerificationProviderCosign, TrustedRootSecret: name(c), MatchOIDCIdentity: []terrarun.OIDCIdentityMatch{{Issuer: "https://" + name(c), Subject: name(c) + "@.*"}}}
				}
			case 0:
				s.Inline = map[string]string{
					"main.tf": c.String(0),
				}
				if c.Bool() {
					s.Inline["terraform.tfvars"] = c.String(0)
				}
				if c.Bool() {
					s.Inline["extra.tf.json"] = `{"output":{"x":{"value":"` + name(c) + `"}}}`
				}
			case 1:
				s.ConfigMap = &terrarun.ConfigMapSource{Name: name(c)}
			default:
				s.Git = &terrarun.GitSource{
					URL: "https://git.example.com/" + name(c) + "/" + name(c) + ".git",
					Ref: pick(c, "main", "v1.2.3", fmt.Sprintf("%040x", c.Uint64())),
				}
				if c.Bool() {
					s.Git.Path = "modules/" + name(c)
				}
				if c.Bool() {
					s.Git.CredentialsSecret = name(c)
				}
			}
		},
		func(v *terrarun.Variable, c randfill.Continue) {
			// value and valueFrom are mutually exclusive
			v.Name = identifier(c)
			v.HCL = c.Bool()
			v.Value, v.ValueFrom = "", nil
			if c.Bool() {
				v.Value = c.String(0)
			} else {
				v.ValueFrom = &terrarun.VariableSource{}
				c.Fill(v.ValueFrom)
			}
		},
		func(s *terrarun.VariableSource, c randfill.Continue) {
			// exactly one member
			*s = terrarun.VariableSource{}
			ref := &terrarun.KeySelector{Name: name(c), Key: pick(c, "password", "token", "value")}
			if c.Bool() {
				s.SecretKeyRef = ref
			} else {
				s.ConfigMapKeyRef = ref
			}
		},
		// Approval mode, engine and timeouts are always set, as in stored objects:
		// the registry strategy defaults them. v1alpha1 does not default them on
		// decode, so their empty values are covered by the round trip of the
		// external types.
		func(a *terrarun.Approval, c randfill.Continue) {
			a.Mode = pick(c, terrarun.ApprovalModeManual, terrarun.ApprovalModeAuto)
			a.Timeout = duration(c, 720*time.Hour)
		},
		func(e *terrarun.Engine, c randfill.Continue) {
			e.Binary = pick(c, terrarun.EngineTerraform, terrarun.EngineTofu)
			e.Image = "ghcr.io/terrarun/terrarun-executor:v0." + fmt.Sprint(c.Intn(10)) + ".0"
		},
		func(t *terrarun.Timeouts, c randfill.Continue) {
			t.Plan = duration(c, 24*time.Hour)
			t.Apply = duration(c, 24*time.Hour)
		},
		func(d *metav1.Duration, c randfill.Continue) {
			d.Duration = duration(c, 720*time.Hour).Duration
		},
		func(r *corev1.ResourceRequirements, c randfill.Continue) {
			*r = corev1.ResourceRequirements{}
			if c.Bool() {
				return
			}
			cpu := resource.NewMilliQuantity(1+c.Int63n(4000), resource.DecimalSI)
			mem := resource.NewQuantity((1+c.Int63n(8192))*1024*1024, resource.BinarySI)
			r.Requests = corev1.ResourceList{
				corev1.ResourceCPU:    *cpu,
				corev1.ResourceMemory: *mem,
			}
			if c.Bool() {
				// limits at least the requests
				cpuLimit := resource.NewMilliQuantity(cpu.MilliValue()+c.Int63n(4000), resource.DecimalSI)
				memLimit := resource.NewQuantity(mem.Value()+c.Int63n(1024)*1024*1024, resource.BinarySI)
				r.Limits = corev1.ResourceList{
					corev1.ResourceCPU:              *cpuLimit,
					corev1.ResourceMemory:           *memLimit,
					corev1.ResourceEphemeralStorage: resource.MustParse(fmt.Sprintf("%dGi", 1+c.Intn(20))),
				}
			}
		},
		func(t *corev1.Toleration, c randfill.Continue) {
			*t = corev1.Toleration{}
			if c.Bool() {
				t.Operator = corev1.TolerationOpExists
				if c.Bool() {
					t.Key = "example.com/" + name(c)
				}
			} else {
				t.Operator = corev1.TolerationOpEqual
				t.Key = "example.com/" + name(c)
				t.Value = name(c)
			}
			t.Effect = pick(c, "", corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute)
			if t.Effect == corev1.TaintEffectNoExecute && c.Bool() {
				seconds := c.Int63n(3600)
				t.TolerationSeconds = &seconds
			}
		},
		func(s *terrarun.TerraformRunStatus, c randfill.Continue) {
			c.FillNoCustom(s)
			s.Phase = pick(c, "",
				terrarun.RunPhasePending, terrarun.RunPhaseQueued, terrarun.RunPhasePlanning, terrarun.RunPhaseAwaitingApproval,
				terrarun.RunPhaseApplying, terrarun.RunPhaseSucceeded, terrarun.RunPhaseFailed,
				terrarun.RunPhaseCanceled, terrarun.RunPhaseDiscarded)
			s.StartTime, s.CompletionTime = optionalTime(c), optionalTime(c)
			if s.ObservedGeneration < 0 {
				s.ObservedGeneration = -s.ObservedGeneration
			}
			// conditions are a list map keyed by type
			s.Conditions = nil
			for _, typ := range []string{terrarun.ConditionPlanned, terrarun.ConditionApproved, terrarun.ConditionApplied} {
				if c.Bool() {
					continue
				}
				cond := metav1.Condition{
					Type:               typ,
					Status:             pick(c, metav1.ConditionTrue, metav1.ConditionFalse, metav1.ConditionUnknown),
					ObservedGeneration: c.Int63n(100),
					Reason:             pick(c, "NoChanges", "PlanFailed", "ApprovalExpired", "Approved", "Applied"),
					Message:            c.String(0),
				}
				c.Fill(&cond.LastTransitionTime)
				s.Conditions = append(s.Conditions, cond)
			}
			// outputs are a list map keyed by name
			for i := range s.Outputs {
				s.Outputs[i].Name = fmt.Sprintf("output_%d_%s", i, identifier(c))
			}
		},
		func(p *terrarun.PlanSummary, c randfill.Continue) {
			c.FillNoCustom(p)
			p.Digest = fmt.Sprintf("sha256:%016x%016x%016x%016x", c.Uint64(), c.Uint64(), c.Uint64(), c.Uint64())
			p.Add, p.Change, p.Destroy, p.Import = c.Int31n(100), c.Int31n(100), c.Int31n(100), c.Int31n(10)
			p.HasChanges = p.Add+p.Change+p.Destroy+p.Import > 0 || c.Bool()
			p.CompletedAt = optionalTime(c)
		},
		func(a *terrarun.ApprovalStatus, c randfill.Continue) {
			c.FillNoCustom(a)
			a.PlanDigest = fmt.Sprintf("sha256:%016x%016x%016x%016x", c.Uint64(), c.Uint64(), c.Uint64(), c.Uint64())
			a.ApprovedAt = optionalTime(c)
		},
		func(s *terrarun.StageStatus, c randfill.Continue) {
			c.FillNoCustom(s)
			s.Name = pick(c, terrarun.StagePlan, terrarun.StageApply)
			s.Attempt = 1 + c.Int31n(5)
			s.Job = fmt.Sprintf("run-%s-%s-%d", name(c), s.Name, s.Attempt)
			s.StartTime, s.CompletionTime = optionalTime(c), optionalTime(c)
			if s.ExitCode != nil {
				*s.ExitCode = c.Int31n(256)
			}
		},
		func(v *terrarun.PolicyValidation, c randfill.Continue) {
			c.FillNoCustom(v)
			// Defaulted when empty.
			v.Enforcement = pick(c, terrarun.EnforcementAdvisory, terrarun.EnforcementSoftMandatory, terrarun.EnforcementHardMandatory)
		},
		func(s *terrarun.TerraformRunTaskSpec, c randfill.Continue) {
			c.FillNoCustom(s)
			// Defaulted when empty.
			s.Enforcement = pick(c, terrarun.RunTaskMandatory, terrarun.RunTaskAdvisory)
			s.Timeout = &metav1.Duration{Duration: time.Duration(1+c.Int63n(3600)) * time.Second}
		},
		func(j *terrarun.JSON, c randfill.Continue) { j.Raw = jsonValue(c) },
		func(j *v1alpha1.JSON, c randfill.Continue) { j.Raw = jsonValue(c) },
		func(o *terrarun.OutputStatus, c randfill.Continue) {
			o.Name = identifier(c)
			o.Type = &terrarun.JSON{Raw: []byte(pick(c, `"string"`, `"number"`, `["list","string"]`))}
			o.Sensitive = c.Bool()
			o.Value = nil
			if !o.Sensitive {
				// a JSON string, number or object
				o.Value = &terrarun.JSON{Raw: jsonValue(c)}
			}
		},
	}
}

// jsonValue returns a random JSON string, number or object, escaped as the
// serializer escapes, so that its bytes survive a round trip.
func jsonValue(c randfill.Continue) []byte {
	str, _ := json.Marshal(c.String(0))
	return []byte(pick(c, string(str), fmt.Sprint(c.Int31()), `{"a":[1,true,null]}`))
}

// optionalTime returns nil or a random time. It is needed because randfill leaves
// every *metav1.Time nil: metav1.Time fills itself through a pointer receiver
// that ignores a nil pointer.
func optionalTime(c randfill.Continue) *metav1.Time {
	if c.Bool() {
		return nil
	}
	t := &metav1.Time{}
	c.Fill(t)
	return t
}

// duration returns a positive duration of at most max, with nanosecond
// precision to exercise the string form of metav1.Duration.
func duration(c randfill.Continue, max time.Duration) *metav1.Duration {
	return &metav1.Duration{Duration: 1 + time.Duration(c.Int63n(int64(max)))}
}

// optional returns "" or a value made by gen.
func optional(c randfill.Continue, gen func(randfill.Continue) string) string {
	if c.Bool() {
		return ""
	}
	return gen(c)
}

// randomMap returns nil or a map of up to two entries made by key and value.
func randomMap(c randfill.Continue, key, value func(randfill.Continue) string) map[string]string {
	n := c.Intn(3)
	if n == 0 {
		return nil
	}
	m := make(map[string]string, n)
	for i := 0; i < n; i++ {
		m[key(c)] = value(c)
	}
	return m
}

// addresses returns up to two Terraform resource addresses.
func addresses(c randfill.Continue) []string {
	var out []string
	for i := c.Intn(3); i > 0; i-- {
		out = append(out, pick(c, "", "module."+identifier(c)+".")+"terraform_data."+identifier(c))
	}
	return out
}

// pick returns one of the given values at random.
func pick[T any](c randfill.Continue, values ...T) T {
	return values[c.Intn(len(values))]
}

const lower = "abcdefghijklmnopqrstuvwxyz"

// name returns a random DNS label.
func name(c randfill.Continue) string {
	b := make([]byte, 1+c.Intn(12))
	for i := range b {
		b[i] = lower[c.Intn(len(lower))]
	}
	return string(b)
}

// identifier returns a random Terraform identifier.
func identifier(c randfill.Continue) string {
	return name(c) + "_" + name(c)
}
