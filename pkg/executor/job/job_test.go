package job

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/executor"
	"github.com/terrarun/terrarun/pkg/stage"
)

const (
	testUID      = "6f1c2a3e-0000-4000-8000-000000000001"
	testCA       = "-----BEGIN CERTIFICATE-----\ntest CA\n-----END CERTIFICATE-----\n"
	testServer   = "https://terrarun-apiserver.terrarun-system.svc:443"
	testImage    = "ghcr.io/terrarun/executor:v0.1.0"
	literalValue = "literal-not-secret"
)

func testOptions() JobOptions {
	return JobOptions{ServerURL: testServer, CABundle: []byte(testCA)}
}

// testRun returns a run that uses every feature that reaches the Job.
func testRun() *v1alpha1.TerraformRun {
	return &v1alpha1.TerraformRun{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "team-a", UID: testUID},
		Spec: v1alpha1.TerraformRunSpec{
			Operation: v1alpha1.OperationApply,
			Source: v1alpha1.Source{Inline: map[string]string{
				"main.tf":      `resource "terraform_data" "x" { input = var.password }`,
				"vars.tfvars":  `region = "eu"`,
				"outputs.tf":   `output "x" { value = terraform_data.x.output }`,
				"variables.tf": `variable "password" {}`,
			}},
			Variables: []v1alpha1.Variable{
				{Name: "region", Value: literalValue},
				{Name: "password", ValueFrom: &v1alpha1.VariableSource{SecretKeyRef: &v1alpha1.KeySelector{Name: "db-credentials", Key: "password"}}},
				{Name: "username", ValueFrom: &v1alpha1.VariableSource{SecretKeyRef: &v1alpha1.KeySelector{Name: "db-credentials", Key: "username"}}},
				{Name: "api_token", ValueFrom: &v1alpha1.VariableSource{SecretKeyRef: &v1alpha1.KeySelector{Name: "api", Key: "token"}}},
				{Name: "tags", HCL: true, ValueFrom: &v1alpha1.VariableSource{ConfigMapKeyRef: &v1alpha1.KeySelector{Name: "settings", Key: "tags"}}},
			},
			Backend: &v1alpha1.Backend{
				Type:         "s3",
				Config:       map[string]string{"bucket": "state", "key": "web.tfstate"},
				ConfigSecret: "s3-backend",
			},
			Workspace: "prod",
			Engine:    v1alpha1.Engine{Binary: v1alpha1.EngineTofu, Image: testImage},
			Timeouts: v1alpha1.Timeouts{
				Plan:  &metav1.Duration{Duration: 20 * time.Minute},
				Apply: &metav1.Duration{Duration: 2 * time.Hour},
			},
			Executor: &v1alpha1.ExecutorSpec{
				ServiceAccountName: "terraform",
				NodeSelector:       map[string]string{"pool": "infra"},
				Tolerations:        []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "infra", Effect: corev1.TaintEffectNoSchedule}},
			},
			Targets:     []string{"terraform_data.x"},
			Parallelism: ptr.To[int32](4),
			Refresh:     ptr.To(false),
		},
	}
}

func build(t *testing.T, run *v1alpha1.TerraformRun, st v1alpha1.StageName, opts JobOptions) (*batchv1.Job, *corev1.Secret, stage.Spec) {
	t.Helper()
	job, secret, err := BuildJob(executor.Execution{Run: run, Stage: st, Attempt: 2, PlanDigest: "sha256:abc"}, opts)
	if err != nil {
		t.Fatalf("BuildJob: %v", err)
	}
	var spec stage.Spec
	if err := json.Unmarshal(secret.Data[StageKey], &spec); err != nil {
		t.Fatalf("stage.json: %v", err)
	}
	return job, secret, spec
}

func findVolume(pod *corev1.PodSpec, name string) *corev1.Volume {
	for i := range pod.Volumes {
		if pod.Volumes[i].Name == name {
			return &pod.Volumes[i]
		}
	}
	return nil
}

func mountAt(c *corev1.Container, path string) *corev1.VolumeMount {
	for i := range c.VolumeMounts {
		if c.VolumeMounts[i].MountPath == path {
			return &c.VolumeMounts[i]
		}
	}
	return nil
}

// volumeAt returns the volume mounted at path.
func volumeAt(t *testing.T, pod *corev1.PodSpec, path string) *corev1.Volume {
	t.Helper()
	m := mountAt(&pod.Containers[0], path)
	if m == nil {
		t.Fatalf("nothing is mounted at %s", path)
	}
	v := findVolume(pod, m.Name)
	if v == nil {
		t.Fatalf("mount %s names no volume %s", path, m.Name)
	}
	return v
}

// TestJobHardening asserts each rule of DESIGN.md's "Executor Jobs" list, and
// of the brief, in a subtest of its own, so that a regression names its rule.
func TestJobHardening(t *testing.T) {
	run := testRun()
	job, secret, _ := build(t, run, v1alpha1.StagePlan, testOptions())
	pod := &job.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Containers))
	}
	c := &pod.Containers[0]
	wantLabels := map[string]string{
		LabelRun: "web", LabelRunUID: testUID, LabelStage: "plan", LabelAttempt: "2",
	}

	rules := []struct {
		rule string
		ok   func(*testing.T) bool
	}{
		{"deterministic Job name <run>-<stage>-<attempt>", func(t *testing.T) bool { return job.Name == "web-plan-2" }},
		{"Job in the run's namespace", func(t *testing.T) bool { return job.Namespace == "team-a" }},
		{"Job labels terrarun.dev/run, run-uid, stage, attempt", func(t *testing.T) bool { return subset(wantLabels, job.Labels) }},
		{"pod labels terrarun.dev/run, run-uid, stage, attempt", func(t *testing.T) bool { return subset(wantLabels, job.Spec.Template.Labels) }},
		{"Secret labels terrarun.dev/run, run-uid, stage, attempt", func(t *testing.T) bool { return subset(wantLabels, secret.Labels) }},
		{"Job ownerReference: controller TerraformRun, blockOwnerDeletion false", func(t *testing.T) bool { return ownedByRun(job.OwnerReferences) }},
		{"Secret ownerReference: controller TerraformRun, blockOwnerDeletion false", func(t *testing.T) bool { return ownedByRun(secret.OwnerReferences) }},
		{"Secret <job>-stage in the run's namespace", func(t *testing.T) bool { return secret.Name == "web-plan-2-stage" && secret.Namespace == "team-a" }},
		{"backoffLimit 0", func(t *testing.T) bool { return ptr.Deref(job.Spec.BackoffLimit, -1) == 0 }},
		{"activeDeadlineSeconds from spec.timeouts.plan", func(t *testing.T) bool { return ptr.Deref(job.Spec.ActiveDeadlineSeconds, 0) == 20*60 }},
		{"ttlSecondsAfterFinished default 3600", func(t *testing.T) bool { return ptr.Deref(job.Spec.TTLSecondsAfterFinished, 0) == 3600 }},
		{"restartPolicy Never", func(t *testing.T) bool { return pod.RestartPolicy == corev1.RestartPolicyNever }},
		{"serviceAccountName from spec.executor", func(t *testing.T) bool { return pod.ServiceAccountName == "terraform" }},
		{"nodeSelector from spec.executor", func(t *testing.T) bool { return pod.NodeSelector["pool"] == "infra" && len(pod.NodeSelector) == 1 }},
		{"tolerations from spec.executor", func(t *testing.T) bool {
			return len(pod.Tolerations) == 1 && pod.Tolerations[0].Key == "dedicated" && pod.Tolerations[0].Effect == corev1.TaintEffectNoSchedule
		}},
		{"automountServiceAccountToken false", func(t *testing.T) bool {
			return pod.AutomountServiceAccountToken != nil && !*pod.AutomountServiceAccountToken
		}},
		{"projected token: audience terrarun.dev, 3600s, at /var/run/secrets/terrarun/token", func(t *testing.T) bool {
			v := volumeAt(t, pod, "/var/run/secrets/terrarun")
			if v.Projected == nil || len(v.Projected.Sources) != 1 {
				return false
			}
			tok := v.Projected.Sources[0].ServiceAccountToken
			return tok != nil && tok.Audience == "terrarun.dev" && ptr.Deref(tok.ExpirationSeconds, 0) == 3600 && tok.Path == "token" &&
				TokenFile == "/var/run/secrets/terrarun/token"
		}},
		{"no kube-apiserver token for a non-kubernetes backend", func(t *testing.T) bool {
			return mountAt(c, KubeAPIAccessDir) == nil && !slices.ContainsFunc(pod.Volumes, func(v corev1.Volume) bool {
				return v.Projected != nil && slices.ContainsFunc(v.Projected.Sources, func(p corev1.VolumeProjection) bool {
					return p.ServiceAccountToken != nil && p.ServiceAccountToken.Audience != "terrarun.dev"
				})
			})
		}},
		{"pod runAsNonRoot", func(t *testing.T) bool { return ptr.Deref(pod.SecurityContext.RunAsNonRoot, false) }},
		{"pod runAsUser 65532", func(t *testing.T) bool { return ptr.Deref(pod.SecurityContext.RunAsUser, 0) == 65532 }},
		{"pod runAsGroup 65532", func(t *testing.T) bool { return ptr.Deref(pod.SecurityContext.RunAsGroup, 0) == 65532 }},
		{"pod fsGroup 65532", func(t *testing.T) bool { return ptr.Deref(pod.SecurityContext.FSGroup, 0) == 65532 }},
		{"pod seccompProfile RuntimeDefault", func(t *testing.T) bool {
			return pod.SecurityContext.SeccompProfile != nil && pod.SecurityContext.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault
		}},
		{"container allowPrivilegeEscalation false", func(t *testing.T) bool {
			return c.SecurityContext != nil && c.SecurityContext.AllowPrivilegeEscalation != nil && !*c.SecurityContext.AllowPrivilegeEscalation
		}},
		{"container readOnlyRootFilesystem", func(t *testing.T) bool { return ptr.Deref(c.SecurityContext.ReadOnlyRootFilesystem, false) }},
		{"container capabilities drop ALL, add none", func(t *testing.T) bool {
			return c.SecurityContext.Capabilities != nil && slices.Equal(c.SecurityContext.Capabilities.Drop, []corev1.Capability{"ALL"}) &&
				len(c.SecurityContext.Capabilities.Add) == 0
		}},
		{"container not privileged", func(t *testing.T) bool { return !ptr.Deref(c.SecurityContext.Privileged, true) }},
		{"emptyDir at /work", func(t *testing.T) bool {
			v := volumeAt(t, pod, "/work")
			return v.EmptyDir != nil && !mountAt(c, "/work").ReadOnly
		}},
		{"emptyDir at /tmp", func(t *testing.T) bool {
			v := volumeAt(t, pod, "/tmp")
			return v.EmptyDir != nil && !mountAt(c, "/tmp").ReadOnly
		}},
		{"HOME=/work", func(t *testing.T) bool {
			return slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "HOME" && e.Value == "/work" })
		}},
		{"command terrarun-executor --stage-file /etc/terrarun/stage/stage.json", func(t *testing.T) bool {
			return slices.Equal(c.Command, []string{"terrarun-executor", "--stage-file", "/etc/terrarun/stage/stage.json"}) && len(c.Args) == 0
		}},
		{"stage.json mounted from the stage Secret", func(t *testing.T) bool {
			v := volumeAt(t, pod, "/etc/terrarun/stage")
			return v.Secret != nil && v.Secret.SecretName == secret.Name &&
				slices.ContainsFunc(v.Secret.Items, func(i corev1.KeyToPath) bool { return i.Key == "stage.json" && i.Path == "stage.json" }) &&
				slices.ContainsFunc(v.Secret.Items, func(i corev1.KeyToPath) bool { return i.Key == "ca.crt" && i.Path == "ca.crt" })
		}},
		{"image from spec.engine.image", func(t *testing.T) bool { return c.Image == testImage }},
		{"terminationGracePeriodSeconds default 30", func(t *testing.T) bool { return ptr.Deref(pod.TerminationGracePeriodSeconds, 0) == 30 }},
		{"default requests cpu 100m", func(t *testing.T) bool { return c.Resources.Requests.Cpu().Cmp(resource.MustParse("100m")) == 0 }},
		{"default requests memory 256Mi", func(t *testing.T) bool { return c.Resources.Requests.Memory().Cmp(resource.MustParse("256Mi")) == 0 }},
		{"default limits memory 1Gi", func(t *testing.T) bool { return c.Resources.Limits.Memory().Cmp(resource.MustParse("1Gi")) == 0 }},
		{"every mount but /work and /tmp read-only", func(t *testing.T) bool {
			for _, m := range c.VolumeMounts {
				if m.MountPath != "/work" && m.MountPath != "/tmp" && !m.ReadOnly {
					return false
				}
			}
			return true
		}},
		{"Secret immutable", func(t *testing.T) bool { return ptr.Deref(secret.Immutable, false) }},
	}
	for _, r := range rules {
		t.Run(r.rule, func(t *testing.T) {
			if !r.ok(t) {
				t.Errorf("rule broken: %s", r.rule)
			}
		})
	}
}

func subset(want, got map[string]string) bool {
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	return true
}

func ownedByRun(refs []metav1.OwnerReference) bool {
	return len(refs) == 1 &&
		refs[0].APIVersion == "terrarun.dev/v1alpha1" && refs[0].Kind == "TerraformRun" &&
		refs[0].Name == "web" && refs[0].UID == testUID &&
		ptr.Deref(refs[0].Controller, false) && refs[0].BlockOwnerDeletion != nil && !*refs[0].BlockOwnerDeletion
}

func TestJobApplyTimeout(t *testing.T) {
	job, _, _ := build(t, testRun(), v1alpha1.StageApply, testOptions())
	if got := ptr.Deref(job.Spec.ActiveDeadlineSeconds, 0); got != 2*3600 {
		t.Errorf("apply activeDeadlineSeconds = %d, want spec.timeouts.apply (7200)", got)
	}
	run := testRun()
	run.Spec.Timeouts = v1alpha1.Timeouts{}
	job, _, _ = build(t, run, v1alpha1.StageApply, testOptions())
	if got := ptr.Deref(job.Spec.ActiveDeadlineSeconds, 0); got != 3600 {
		t.Errorf("activeDeadlineSeconds without timeouts = %d, want the 1h default", got)
	}
}

func TestJobOptionsOverrideDefaults(t *testing.T) {
	opts := testOptions()
	opts.GracePeriod = 90 * time.Second
	opts.TTLAfterFinished = 10 * time.Minute
	opts.Audience = "https://terrarun.example"
	job, _, _ := build(t, testRun(), v1alpha1.StagePlan, opts)
	pod := &job.Spec.Template.Spec
	if got := ptr.Deref(pod.TerminationGracePeriodSeconds, 0); got != 90 {
		t.Errorf("terminationGracePeriodSeconds = %d, want opts.GracePeriod 90", got)
	}
	if got := ptr.Deref(job.Spec.TTLSecondsAfterFinished, 0); got != 600 {
		t.Errorf("ttlSecondsAfterFinished = %d, want 600", got)
	}
	if got := volumeAt(t, pod, TokenDir).Projected.Sources[0].ServiceAccountToken.Audience; got != opts.Audience {
		t.Errorf("token audience = %q, want %q", got, opts.Audience)
	}
}

// TestJobSpread: with a topology key, a namespace's executor pods spread over
// its values, softly; without one there is no constraint.
func TestJobSpread(t *testing.T) {
	opts := testOptions()
	job, _, _ := build(t, testRun(), v1alpha1.StagePlan, opts)
	if c := job.Spec.Template.Spec.TopologySpreadConstraints; len(c) != 0 {
		t.Errorf("constraints without a key: %+v", c)
	}
	opts.SpreadTopologyKey = corev1.LabelHostname
	job, _, _ = build(t, testRun(), v1alpha1.StagePlan, opts)
	c := job.Spec.Template.Spec.TopologySpreadConstraints
	if len(c) != 1 || c[0].TopologyKey != corev1.LabelHostname || c[0].WhenUnsatisfiable != corev1.ScheduleAnyway || c[0].MaxSkew != 1 {
		t.Fatalf("constraints %+v", c)
	}
	sel, err := metav1.LabelSelectorAsSelector(c[0].LabelSelector)
	if err != nil {
		t.Fatal(err)
	}
	if !sel.Matches(labels.Set(job.Spec.Template.Labels)) || sel.Matches(labels.Set{"app": "other"}) {
		t.Errorf("selector %s does not select executor pods only", sel)
	}
}

func TestJobResources(t *testing.T) {
	run := testRun()
	run.Spec.Executor.Resources = corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("2Gi")},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m")},
	}
	job, _, _ := build(t, run, v1alpha1.StagePlan, testOptions())
	r := job.Spec.Template.Spec.Containers[0].Resources
	if got := r.Requests.Memory(); got.Cmp(resource.MustParse("2Gi")) != 0 {
		t.Errorf("memory request = %v, want the run's 2Gi", got)
	}
	if _, ok := r.Limits[corev1.ResourceMemory]; ok {
		t.Errorf("memory limit %v set below the run's request", r.Limits.Memory())
	}
	if _, ok := r.Requests[corev1.ResourceCPU]; ok {
		t.Errorf("cpu request %v defaulted above the run's cpu limit", r.Requests.Cpu())
	}
	if got := r.Limits.Cpu(); got.Cmp(resource.MustParse("50m")) != 0 {
		t.Errorf("cpu limit = %v, want the run's 50m", got)
	}
	if &run.Spec.Executor.Resources.Requests == &r.Requests || len(run.Spec.Executor.Resources.Limits) != 1 {
		t.Errorf("BuildJob changed the run's resources")
	}
}

// TestNoSecretInEnvOrArgs: secrets are files; nothing secret, and no
// reference to a Secret, is in the environment, the command or the arguments.
func TestNoSecretInEnvOrArgs(t *testing.T) {
	run := testRun()
	run.Spec.Source = v1alpha1.Source{Git: &v1alpha1.GitSource{URL: "https://git.example/infra.git", Ref: "main", CredentialsSecret: "git-creds"}}
	for _, st := range []v1alpha1.StageName{v1alpha1.StagePlan, v1alpha1.StageApply} {
		job, secret, _ := build(t, run, st, testOptions())
		pod := job.Spec.Template.Spec
		containers := append(append([]corev1.Container{}, pod.InitContainers...), pod.Containers...)
		forbidden := []string{"db-credentials", "password", "username", "api", "token", "git-creds", "s3-backend", testCA, literalValue}
		for _, c := range containers {
			if len(c.EnvFrom) != 0 {
				t.Errorf("%s: container %s has envFrom", st, c.Name)
			}
			for _, e := range c.Env {
				if e.ValueFrom != nil {
					t.Errorf("%s: env %s has valueFrom (secretKeyRef or other): %+v", st, e.Name, e.ValueFrom)
				}
				for _, f := range forbidden {
					if strings.Contains(e.Value, f) || strings.Contains(e.Name, strings.ToUpper(f)) {
						t.Errorf("%s: env %s=%q holds %q", st, e.Name, e.Value, f)
					}
				}
			}
			for _, a := range append(append([]string{}, c.Command...), c.Args...) {
				for _, f := range forbidden {
					if strings.Contains(a, f) {
						t.Errorf("%s: command or argument %q holds %q", st, a, f)
					}
				}
			}
		}
		// The stage Secret holds no secret value either: only file paths.
		if strings.Contains(string(secret.Data[StageKey]), "valueFrom") {
			t.Errorf("%s: stage.json holds a valueFrom", st)
		}
	}
}

func TestSecretVariablesAreFiles(t *testing.T) {
	job, _, spec := build(t, testRun(), v1alpha1.StagePlan, testOptions())
	pod := &job.Spec.Template.Spec
	byName := map[string]stage.Variable{}
	for _, v := range spec.Variables {
		byName[v.Name] = v
	}
	if v := byName["region"]; v.Value != literalValue || v.File != "" || v.Secret {
		t.Errorf("literal variable = %+v", v)
	}
	check := func(name, object, key string, secret bool) {
		t.Helper()
		v, ok := byName[name]
		if !ok {
			t.Fatalf("variable %s missing from stage.json", name)
		}
		if v.Value != "" || v.File == "" || v.Secret != secret {
			t.Errorf("variable %s = %+v, want a file with Secret=%v", name, v, secret)
		}
		dir, file := v.File[:strings.LastIndex(v.File, "/")], v.File[strings.LastIndex(v.File, "/")+1:]
		vol := volumeAt(t, pod, dir)
		var items []corev1.KeyToPath
		switch {
		case secret && vol.Secret != nil && vol.Secret.SecretName == object:
			items = vol.Secret.Items
		case !secret && vol.ConfigMap != nil && vol.ConfigMap.Name == object:
			items = vol.ConfigMap.Items
		default:
			t.Fatalf("variable %s: %s is mounted from %+v, want %s", name, dir, vol.VolumeSource, object)
		}
		if !slices.Contains(items, corev1.KeyToPath{Key: key, Path: file}) {
			t.Errorf("variable %s: items %+v lack %s -> %s", name, items, key, file)
		}
	}
	check("password", "db-credentials", "password", true)
	check("username", "db-credentials", "username", true)
	check("api_token", "api", "token", true)
	check("tags", "settings", "tags", false)
	if !byName["tags"].HCL {
		t.Errorf("variable tags lost hcl: true")
	}
	// One volume per Secret: password and username share one.
	if byName["password"].File[:strings.LastIndex(byName["password"].File, "/")] != byName["username"].File[:strings.LastIndex(byName["username"].File, "/")] {
		t.Errorf("two keys of one Secret in two volumes: %s, %s", byName["password"].File, byName["username"].File)
	}
}

func TestStageSpec(t *testing.T) {
	job, secret, spec := build(t, testRun(), v1alpha1.StagePlan, testOptions())
	if spec.Server != testServer || spec.CAFile != CAFile || spec.TokenFile != TokenFile {
		t.Errorf("server %q, CA %q, token %q", spec.Server, spec.CAFile, spec.TokenFile)
	}
	if string(secret.Data[CAKey]) != testCA {
		t.Errorf("ca.crt = %q", secret.Data[CAKey])
	}
	if spec.Namespace != "team-a" || spec.Name != "web" || spec.UID != testUID || spec.Stage != v1alpha1.StagePlan || spec.Attempt != 2 {
		t.Errorf("identity: %+v", spec)
	}
	if spec.WorkDir != "/work" || spec.Binary != "tofu" || spec.Operation != "Apply" || spec.Workspace != "prod" {
		t.Errorf("workDir %q binary %q operation %q workspace %q", spec.WorkDir, spec.Binary, spec.Operation, spec.Workspace)
	}
	if spec.PlanDigest != "sha256:abc" || !slices.Equal(spec.Targets, []string{"terraform_data.x"}) ||
		ptr.Deref(spec.Parallelism, 0) != 4 || ptr.Deref(spec.Refresh, true) {
		t.Errorf("flags: %+v", spec)
	}
	// Inline source: src-<file> keys, mounted back as <file> at /etc/terrarun/source.
	if spec.Source.Dir != SourceDir || spec.Source.Git != nil {
		t.Errorf("source = %+v", spec.Source)
	}
	vol := volumeAt(t, &job.Spec.Template.Spec, SourceDir)
	if vol.Secret == nil || vol.Secret.SecretName != secret.Name {
		t.Fatalf("source volume = %+v", vol.VolumeSource)
	}
	for file, content := range testRun().Spec.Source.Inline {
		if string(secret.Data["src-"+file]) != content {
			t.Errorf("Secret key src-%s = %q", file, secret.Data["src-"+file])
		}
		if !slices.Contains(vol.Secret.Items, corev1.KeyToPath{Key: "src-" + file, Path: file}) {
			t.Errorf("source items %+v lack src-%s -> %s", vol.Secret.Items, file, file)
		}
	}
	// Backend with configSecret: backend.hcl mounted and passed as ConfigFile.
	if spec.Backend.Type != "s3" || spec.Backend.Config["bucket"] != "state" || spec.Backend.ConfigFile != "/etc/terrarun/backend/backend.hcl" {
		t.Errorf("backend = %+v", spec.Backend)
	}
	bvol := volumeAt(t, &job.Spec.Template.Spec, "/etc/terrarun/backend")
	if bvol.Secret == nil || bvol.Secret.SecretName != "s3-backend" ||
		!slices.Equal(bvol.Secret.Items, []corev1.KeyToPath{{Key: "backend.hcl", Path: "backend.hcl"}}) {
		t.Errorf("backend volume = %+v", bvol.VolumeSource)
	}
}

func TestApplyStageHasNoSource(t *testing.T) {
	job, secret, spec := build(t, testRun(), v1alpha1.StageApply, testOptions())
	if spec.Source.Dir != "" || spec.Source.Git != nil {
		t.Errorf("apply stage source = %+v, want none: it downloads the planned configuration", spec.Source)
	}
	if mountAt(&job.Spec.Template.Spec.Containers[0], SourceDir) != nil {
		t.Errorf("apply stage mounts %s", SourceDir)
	}
	for k := range secret.Data {
		if strings.HasPrefix(k, SourceKeyPrefix) {
			t.Errorf("apply stage Secret has %s", k)
		}
	}
	if job.Labels[LabelStage] != "apply" || job.Name != "web-apply-2" {
		t.Errorf("apply Job %s labels %v", job.Name, job.Labels)
	}
}

func TestConfigMapSource(t *testing.T) {
	run := testRun()
	run.Spec.Source = v1alpha1.Source{ConfigMap: &v1alpha1.ConfigMapSource{Name: "infra-config"}}
	job, _, spec := build(t, run, v1alpha1.StagePlan, testOptions())
	vol := volumeAt(t, &job.Spec.Template.Spec, "/etc/terrarun/source")
	if vol.ConfigMap == nil || vol.ConfigMap.Name != "infra-config" {
		t.Errorf("source volume = %+v", vol.VolumeSource)
	}
	if spec.Source.Dir != "/etc/terrarun/source" {
		t.Errorf("source = %+v", spec.Source)
	}
}

func TestGitSource(t *testing.T) {
	run := testRun()
	run.Spec.Source = v1alpha1.Source{Git: &v1alpha1.GitSource{URL: "https://git.example/infra.git", Ref: "v1", Path: "envs/prod", CredentialsSecret: "git-creds"}}
	job, _, spec := build(t, run, v1alpha1.StagePlan, testOptions())
	g := spec.Source.Git
	if g == nil || g.URL != "https://git.example/infra.git" || g.Ref != "v1" || g.Path != "envs/prod" || g.CredentialsDir != "/etc/terrarun/git" {
		t.Fatalf("git source = %+v", g)
	}
	vol := volumeAt(t, &job.Spec.Template.Spec, "/etc/terrarun/git")
	if vol.Secret == nil || vol.Secret.SecretName != "git-creds" {
		t.Errorf("git credentials volume = %+v", vol.VolumeSource)
	}
	if spec.Source.Dir != "" {
		t.Errorf("git source with dir %q", spec.Source.Dir)
	}
}

// TestOCISource mounts one key of each Secret an OCI source names, each in
// a directory of its own, and hands the stage their paths, and the cluster
// policy's trusted keys.
func TestOCISource(t *testing.T) {
	run := testRun()
	run.Spec.Source = v1alpha1.Source{OCI: &v1alpha1.OCISource{URL: "oci://registry.example/infra", Ref: &v1alpha1.OCIReference{Semver: "~1"}, Path: "envs/prod",
		CredentialsSecret: "pull", CertSecret: "registry-ca", Verify: &v1alpha1.OCIVerification{KeysSecret: "cosign-keys", TrustedKeys: "policy keys"}}}
	job, _, spec := build(t, run, v1alpha1.StagePlan, testOptions())
	o := spec.Source.OCI
	want := stage.OCISource{URL: "oci://registry.example/infra", Semver: "~1", Path: "envs/prod",
		KeysFile: "/etc/terrarun/oci/oci-keys/cosign.pub", KeysSecret: "cosign-keys", TrustedKeys: "policy keys"}
	if o == nil || !reflect.DeepEqual(*o, want) {
		t.Fatalf("OCI source = %+v, want %+v", o, want)
	}
	wantAccess := stage.RegistryAccess{CredentialsFile: "/etc/terrarun/oci/oci-credentials/.dockerconfigjson", CAFile: "/etc/terrarun/oci/oci-ca/ca.crt"}
	if spec.Registry == nil || *spec.Registry != wantAccess {
		t.Errorf("registry access = %+v, want %+v", spec.Registry, wantAccess)
	}
	// The apply stage installs OpenTofu's oci:// modules again: it has the
	// registry's access, and no source.
	applyJob, _, applySpec := build(t, run, v1alpha1.StageApply, testOptions())
	if applySpec.Registry == nil || *applySpec.Registry != wantAccess || applySpec.Source.OCI != nil {
		t.Errorf("the apply stage: registry %+v, source %+v", applySpec.Registry, applySpec.Source)
	}
	volumeAt(t, &applyJob.Spec.Template.Spec, "/etc/terrarun/oci/oci-credentials")
	for dir, secret := range map[string]string{"/etc/terrarun/oci/oci-credentials": "pull", "/etc/terrarun/oci/oci-ca": "registry-ca", "/etc/terrarun/oci/oci-keys": "cosign-keys"} {
		vol := volumeAt(t, &job.Spec.Template.Spec, dir)
		if vol.Secret == nil || vol.Secret.SecretName != secret || len(vol.Secret.Items) != 1 || vol.Secret.Items[0].Key != vol.Secret.Items[0].Path {
			t.Errorf("the volume at %s = %+v, want the one key of Secret %s", dir, vol.VolumeSource, secret)
		}
	}
	// Keyless: the trusted root's one key, and the identities.
	keyless := run.DeepCopy()
	keyless.Spec.Source.OCI.Verify = &v1alpha1.OCIVerification{TrustedRootSecret: "sigstore",
		MatchOIDCIdentity: []v1alpha1.OIDCIdentityMatch{{Issuer: "https://issuer", Subject: "ci@example\\.com"}}}
	kjob, _, kspec := build(t, keyless, v1alpha1.StagePlan, testOptions())
	if o := kspec.Source.OCI; o.KeysFile != "" || o.TrustedRootFile != "/etc/terrarun/oci/oci-trusted-root/trusted_root.json" || o.TrustedRootSecret != "sigstore" ||
		!reflect.DeepEqual(o.Identities, []stage.Identity{{Issuer: "https://issuer", Subject: "ci@example\\.com"}}) {
		t.Errorf("a keyless OCI source: %+v", o)
	}
	if vol := volumeAt(t, &kjob.Spec.Template.Spec, "/etc/terrarun/oci/oci-trusted-root"); vol.Secret == nil || vol.Secret.SecretName != "sigstore" ||
		len(vol.Secret.Items) != 1 || vol.Secret.Items[0].Key != "trusted_root.json" {
		t.Errorf("the trusted root's volume = %+v", vol.VolumeSource)
	}
	// Without verify and Secrets, nothing is mounted and nothing verified.
	run.Spec.Source = v1alpha1.Source{OCI: &v1alpha1.OCISource{URL: "oci://registry.example/infra"}}
	job, _, spec = build(t, run, v1alpha1.StagePlan, testOptions())
	if o := spec.Source.OCI; o.KeysFile != "" || spec.Registry != nil {
		t.Errorf("an OCI source without Secrets: %+v, registry %+v", o, spec.Registry)
	}
	for _, m := range job.Spec.Template.Spec.Containers[0].VolumeMounts {
		if strings.HasPrefix(m.MountPath, "/etc/terrarun/oci") {
			t.Errorf("mounted %s without a Secret to mount", m.MountPath)
		}
	}
}

func TestDefaultBackend(t *testing.T) {
	run := testRun()
	run.Spec.Backend = nil
	run.Spec.Workspace = "default" // as the registry strategy defaults it
	run.Spec.Executor = nil
	run.Spec.Engine = v1alpha1.Engine{Binary: v1alpha1.EngineTerraform}
	opts := testOptions()
	opts.Image = "default-image:1"
	job, _, spec := build(t, run, v1alpha1.StagePlan, opts)
	if spec.Backend.Type != stage.ServedBackend || len(spec.Backend.Config) != 0 || spec.Backend.ConfigFile != "" {
		t.Errorf("default backend = %+v, want the one terrarun serves", spec.Backend)
	}
	if spec.Workspace != "default" || spec.Binary != "terraform" {
		t.Errorf("workspace %q binary %q, want default, terraform", spec.Workspace, spec.Binary)
	}
	pod := &job.Spec.Template.Spec
	if pod.Containers[0].Image != "default-image:1" {
		t.Errorf("image = %q, want JobOptions.Image", pod.Containers[0].Image)
	}
	// The digest that the image verification pinned is what runs.
	run.Spec.Engine = v1alpha1.Engine{Binary: v1alpha1.EngineTerraform, Image: "registry.example.com/executor:v1", ImageDigest: "sha256:" + strings.Repeat("a", 64)}
	pinned, _, _ := build(t, run, v1alpha1.StagePlan, opts)
	if got, want := pinned.Spec.Template.Spec.Containers[0].Image, "registry.example.com/executor:v1@sha256:"+strings.Repeat("a", 64); got != want {
		t.Errorf("pinned image = %q, want %q", got, want)
	}
	// No Kubernetes API credential reaches the pod.
	if ptr.Deref(pod.AutomountServiceAccountToken, true) {
		t.Errorf("automountServiceAccountToken is not false")
	}
	for _, v := range pod.Volumes {
		if v.Projected != nil {
			for _, src := range v.Projected.Sources {
				if src.ServiceAccountToken != nil && src.ServiceAccountToken.Audience != DefaultAudience {
					t.Errorf("volume %s projects a token with audience %q, not terrarun's", v.Name, src.ServiceAccountToken.Audience)
				}
			}
		}
	}
	if pod.ServiceAccountName != "" || pod.NodeSelector != nil || pod.Tolerations != nil {
		t.Errorf("executor fields without spec.executor: sa %q nodeSelector %v tolerations %v", pod.ServiceAccountName, pod.NodeSelector, pod.Tolerations)
	}
}

// TestKubeAPIAccessOnlyForANamedServiceAccount: the kubernetes backend with
// in_cluster_config gets a kube-apiserver token for the ServiceAccount the
// run names, and none for the namespace's default one.
func TestKubeAPIAccessOnlyForANamedServiceAccount(t *testing.T) {
	run := testRun()
	run.Spec.Backend = &v1alpha1.Backend{Type: "kubernetes", Config: map[string]string{"in_cluster_config": "true", "secret_suffix": "s"}}
	run.Spec.Executor = nil
	job, _, _ := build(t, run, v1alpha1.StagePlan, testOptions())
	for _, v := range job.Spec.Template.Spec.Volumes {
		if v.Name == volumeKubeAPIAccess {
			t.Errorf("the default ServiceAccount's token is mounted for the kubernetes backend")
		}
	}
	run.Spec.Executor = &v1alpha1.ExecutorSpec{ServiceAccountName: "deployer"}
	job, _, _ = build(t, run, v1alpha1.StagePlan, testOptions())
	vol := volumeAt(t, &job.Spec.Template.Spec, KubeAPIAccessDir)
	if vol.Projected == nil || len(vol.Projected.Sources) != 3 || vol.Projected.Sources[0].ServiceAccountToken == nil ||
		vol.Projected.Sources[0].ServiceAccountToken.Audience != "" || ptr.Deref(vol.Projected.Sources[0].ServiceAccountToken.ExpirationSeconds, 0) != 3600 {
		t.Errorf("kube-api-access volume = %+v", vol.VolumeSource)
	}
	if job.Spec.Template.Spec.ServiceAccountName != "deployer" {
		t.Errorf("service account = %q", job.Spec.Template.Spec.ServiceAccountName)
	}
}

func TestNoCABundle(t *testing.T) {
	opts := testOptions()
	opts.CABundle = nil
	job, secret, spec := build(t, testRun(), v1alpha1.StagePlan, opts)
	if spec.CAFile != "" || secret.Data[CAKey] != nil {
		t.Errorf("CA file %q and data %q without a CA bundle", spec.CAFile, secret.Data[CAKey])
	}
	for _, i := range volumeAt(t, &job.Spec.Template.Spec, StageDir).Secret.Items {
		if i.Key == CAKey {
			t.Errorf("ca.crt item without a CA bundle")
		}
	}
}

func TestVolumesWellFormed(t *testing.T) {
	run := testRun()
	run.Spec.Backend = nil
	job, _, _ := build(t, run, v1alpha1.StagePlan, testOptions())
	pod := &job.Spec.Template.Spec
	names := map[string]bool{}
	for _, v := range pod.Volumes {
		if errs := validation.IsDNS1123Label(v.Name); len(errs) != 0 {
			t.Errorf("volume name %q: %v", v.Name, errs)
		}
		if names[v.Name] {
			t.Errorf("volume %q twice", v.Name)
		}
		names[v.Name] = true
	}
	paths := map[string]bool{}
	mounted := map[string]bool{}
	for _, m := range pod.Containers[0].VolumeMounts {
		if !names[m.Name] {
			t.Errorf("mount %s of unknown volume %s", m.MountPath, m.Name)
		}
		if paths[m.MountPath] {
			t.Errorf("two mounts at %s", m.MountPath)
		}
		paths[m.MountPath] = true
		mounted[m.Name] = true
	}
	for n := range names {
		if !mounted[n] {
			t.Errorf("volume %s is not mounted", n)
		}
	}
}

func TestBuildJobErrors(t *testing.T) {
	run := testRun()
	cases := map[string]struct {
		run  *v1alpha1.TerraformRun
		ex   executor.Execution
		opts JobOptions
	}{
		"no run":        {nil, executor.Execution{Stage: v1alpha1.StagePlan, Attempt: 1}, testOptions()},
		"unknown stage": {run, executor.Execution{Stage: "destroy", Attempt: 1}, testOptions()},
		"attempt 0":     {run, executor.Execution{Stage: v1alpha1.StagePlan}, testOptions()},
		"no server URL": {run, executor.Execution{Stage: v1alpha1.StagePlan, Attempt: 1}, JobOptions{}},
		"no image":      {func() *v1alpha1.TerraformRun { r := testRun(); r.Spec.Engine.Image = ""; return r }(), executor.Execution{Stage: v1alpha1.StagePlan, Attempt: 1}, testOptions()},
		"no source":     {func() *v1alpha1.TerraformRun { r := testRun(); r.Spec.Source = v1alpha1.Source{}; return r }(), executor.Execution{Stage: v1alpha1.StagePlan, Attempt: 1}, testOptions()},
		"no UID":        {func() *v1alpha1.TerraformRun { r := testRun(); r.UID = ""; return r }(), executor.Execution{Stage: v1alpha1.StagePlan, Attempt: 1}, testOptions()},
		"empty valueFrom": {func() *v1alpha1.TerraformRun {
			r := testRun()
			r.Spec.Variables = []v1alpha1.Variable{{Name: "x", ValueFrom: &v1alpha1.VariableSource{}}}
			return r
		}(), executor.Execution{Stage: v1alpha1.StagePlan, Attempt: 1}, testOptions()},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			if _, _, err := BuildJob(c.ex, c.opts); err == nil {
				t.Errorf("BuildJob succeeded")
			}
		})
	}
}

func TestBuildJobDeterministic(t *testing.T) {
	a, as, _ := build(t, testRun(), v1alpha1.StagePlan, testOptions())
	b, bs, _ := build(t, testRun(), v1alpha1.StagePlan, testOptions())
	ja, _ := json.Marshal([]any{a, as})
	jb, _ := json.Marshal([]any{b, bs})
	if string(ja) != string(jb) {
		t.Errorf("BuildJob is not deterministic:\n%s\n%s", ja, jb)
	}
}

// TestStageBinding: the executor container's stage.BindingEnv is the digest
// of the stage file and of every file terrarun writes for the stage into
// its Secrets, as the pod mounts them; the executor checks it before it uses
// anything (stage.VerifyBinding).
func TestStageBinding(t *testing.T) {
	job, secret, err := BuildJob(executor.Execution{Run: testRun(), Stage: v1alpha1.StagePlan, Attempt: 1}, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	var spec stage.Spec
	if err := json.Unmarshal(secret.Data[StageKey], &spec); err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{CAFile: []byte(testCA)}
	for _, name := range []string{"main.tf", "outputs.tf", "variables.tf", "vars.tfvars"} {
		files[SourceDir+"/"+name] = []byte(testRun().Spec.Source.Inline[name])
	}
	if len(spec.Bound) != len(files) {
		t.Fatalf("stage.Bound = %v, want the CA and the inline files", spec.Bound)
	}
	env := bindingEnv(&job.Spec.Template.Spec)
	if env == nil || env.Value != stage.BindingDigest(secret.Data[StageKey], files) {
		t.Fatalf("%s = %+v, want the digest of the stage file and its bound files", stage.BindingEnv, env)
	}
	// A Job whose binding names other content is not terrarun's.
	forged := job.DeepCopy()
	bindingEnv(&forged.Spec.Template.Spec).Value = stage.BindingDigest([]byte("{}"), nil)
	if err := checkJob(forged, job, secret, testRun()); err == nil || !strings.Contains(err.Error(), "containers differs") {
		t.Errorf("a Job with another binding: %v, want it refused", err)
	}
	if err := checkJob(job, job, secret, testRun()); err != nil {
		t.Errorf("the Job itself: %v", err)
	}
}

// TestFluxSource: the plan stage of a run from a Flux source downloads the
// artifact pinned in the run's status, never what the source says now, and
// mounts nothing for it; a run with nothing pinned does not start.
func TestFluxSource(t *testing.T) {
	run := testRun()
	run.Spec.Source = v1alpha1.Source{SourceRef: &v1alpha1.SourceReference{Kind: v1alpha1.SourceKindGitRepository, Name: "infra", Path: "envs/prod"}}
	run.Status.Source = &v1alpha1.SourceStatus{Revision: "main@sha1:abc", Artifact: &v1alpha1.SourceArtifact{
		URL: "http://source-controller.flux-system.svc.cluster.local./gitrepository/ns/infra/abc.tar.gz", Digest: "sha256:" + strings.Repeat("0", 64)}}
	_, _, spec := build(t, run, v1alpha1.StagePlan, testOptions())
	want := stage.ArtifactSource{URL: run.Status.Source.Artifact.URL, Digest: run.Status.Source.Artifact.Digest, Revision: "main@sha1:abc",
		Path: "envs/prod", Source: "GitRepository " + run.Namespace + "/infra"}
	if a := spec.Source.Artifact; a == nil || *a != want || spec.Registry != nil {
		t.Fatalf("artifact = %+v, registry %+v; want %+v and no registry access", a, spec.Registry, want)
	}
	run.Status.Source = nil
	if _, _, err := BuildJob(executor.Execution{Run: run, Stage: v1alpha1.StagePlan, Attempt: 1}, testOptions()); err == nil || !strings.Contains(err.Error(), "no pinned artifact") {
		t.Errorf("a run from a Flux source with nothing pinned: %v, want it refused", err)
	}
}
