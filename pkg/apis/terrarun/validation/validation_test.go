package validation

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
)

const (
	validDigest  = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	validImage   = "ghcr.io/terrarun/terrarun-executor:v0.1.0"
	secretMarker = "hunter2-s3cr3t"
)

// validRun returns a minimal valid run.
func validRun() *terrarun.TerraformRun {
	return &terrarun.TerraformRun{
		ObjectMeta: metav1.ObjectMeta{Name: "run-1", Namespace: "team-a"},
		Spec: terrarun.TerraformRunSpec{
			Operation: terrarun.OperationApply,
			Source:    terrarun.Source{Inline: map[string]string{"main.tf": `resource "null_resource" "x" {}`}},
			Approval:  terrarun.Approval{Mode: terrarun.ApprovalModeManual},
			Engine:    terrarun.Engine{Binary: terrarun.EngineTerraform, Image: validImage},
		},
	}
}

// fullRun returns a valid run that sets every optional field.
func fullRun() *terrarun.TerraformRun {
	run := validRun()
	run.Labels = map[string]string{"app": "infra"}
	run.Spec = terrarun.TerraformRunSpec{
		Operation: terrarun.OperationDestroy,
		Source: terrarun.Source{Git: &terrarun.GitSource{
			URL:               "https://github.com/org/repo.git",
			Ref:               "refs/heads/main",
			Path:              "infra/prod env",
			CredentialsSecret: "git-creds",
		}},
		Variables: []terrarun.Variable{
			{Name: "region", Value: "eu-west-1"},
			{Name: "instance_count", Value: "3", HCL: true},
			{Name: "db-password", ValueFrom: &terrarun.VariableSource{SecretKeyRef: &terrarun.KeySelector{Name: "db", Key: "password"}}},
			{Name: "_tags", ValueFrom: &terrarun.VariableSource{ConfigMapKeyRef: &terrarun.KeySelector{Name: "tags.v1", Key: "tags.json"}}},
			{Name: "empty", Value: `""`, HCL: true},
		},
		Backend: &terrarun.Backend{
			Type:         "s3",
			Config:       map[string]string{"bucket": "state", "region": "eu-west-1", "skip_credentials_validation": "true"},
			ConfigSecret: "backend-creds",
		},
		Workspace: "prod.eu-1",
		Approval:  terrarun.Approval{Mode: terrarun.ApprovalModeAuto, Timeout: &metav1.Duration{Duration: MaxApprovalTimeout}},
		Engine:    terrarun.Engine{Binary: terrarun.EngineTofu, Image: "registry.example.com:5000/exec@sha256:abcd"},
		Timeouts:  terrarun.Timeouts{Plan: &metav1.Duration{Duration: time.Hour}, Apply: &metav1.Duration{Duration: MaxStageTimeout}},
		Executor: &terrarun.ExecutorSpec{
			ServiceAccountName: "terraform-runner",
			Resources: corev1.ResourceRequirements{
				Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("2Gi")},
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("512Mi"), "example.com/gpu": resource.MustParse("0")},
			},
			NodeSelector: map[string]string{"kubernetes.io/os": "linux"},
			Tolerations: []corev1.Toleration{
				{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "terraform", Effect: corev1.TaintEffectNoSchedule},
				{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptrTo[int64](60)},
				{Operator: corev1.TolerationOpExists},
				{Key: "spot", Value: "true"},
			},
		},
		OutputsSecret: "run-1-outputs",
		Targets:       []string{"aws_instance.web", `module.net.aws_subnet.this["a"]`},
		Replace:       []string{"aws_instance.web[0]"},
		Parallelism:   ptrTo[int32](MaxParallelism),
		Refresh:       ptrTo(false),
		Creator:       &terrarun.Creator{Username: "alice", UID: "1", Groups: []string{"devs"}},
	}
	return run
}

// want describes one expected error by type and exact field path.
func want(t field.ErrorType, path string) string { return string(t) + " " + path }

func required(path string) string     { return want(field.ErrorTypeRequired, path) }
func invalid(path string) string      { return want(field.ErrorTypeInvalid, path) }
func forbidden(path string) string    { return want(field.ErrorTypeForbidden, path) }
func notSupported(path string) string { return want(field.ErrorTypeNotSupported, path) }
func duplicate(path string) string    { return want(field.ErrorTypeDuplicate, path) }
func tooLong(path string) string      { return want(field.ErrorTypeTooLong, path) }

// summarize renders errs as sorted "type path" strings.
func summarize(errs field.ErrorList) []string {
	out := make([]string, 0, len(errs))
	for _, e := range errs {
		out = append(out, want(e.Type, e.Field))
	}
	slices.Sort(out)
	return out
}

// checkErrors asserts that errs are exactly wantErrs (in any order), and that
// some error message contains detail when detail is set.
func checkErrors(t *testing.T, errs field.ErrorList, wantErrs []string, detail string) {
	t.Helper()
	wantSorted := slices.Clone(wantErrs)
	slices.Sort(wantSorted)
	if got := summarize(errs); !slices.Equal(got, wantSorted) {
		t.Fatalf("errors mismatch\n got: %q\nwant: %q\nfull: %v", got, wantSorted, errs)
	}
	if detail != "" && !strings.Contains(errs.ToAggregate().Error(), detail) {
		t.Errorf("no error mentions %q: %v", detail, errs)
	}
}

func TestValidRuns(t *testing.T) {
	for name, run := range map[string]*terrarun.TerraformRun{"minimal": validRun(), "full": fullRun()} {
		t.Run(name, func(t *testing.T) {
			if errs := ValidateTerraformRun(run); len(errs) != 0 {
				t.Fatalf("unexpected errors: %v", errs)
			}
		})
	}
}

type specCase struct {
	name   string
	mutate func(*terrarun.TerraformRun)
	want   []string
	detail string
}

func runSpecCases(t *testing.T, cases []specCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			run := validRun()
			tc.mutate(run)
			checkErrors(t, ValidateTerraformRun(run), tc.want, tc.detail)
		})
	}
}

func inline(files ...string) map[string]string {
	m := map[string]string{}
	for _, f := range files {
		m[f] = "# file"
	}
	return m
}

func TestValidateMetadata(t *testing.T) {
	runSpecCases(t, []specCase{
		{name: "missing namespace", mutate: func(r *terrarun.TerraformRun) { r.Namespace = "" }, want: []string{required("metadata.namespace")}},
		{name: "invalid namespace", mutate: func(r *terrarun.TerraformRun) { r.Namespace = "Team_A" }, want: []string{invalid("metadata.namespace")}},
		{name: "missing name", mutate: func(r *terrarun.TerraformRun) { r.Name = "" }, want: []string{required("metadata.name")}},
		{name: "invalid name", mutate: func(r *terrarun.TerraformRun) { r.Name = "Run_1" }, want: []string{invalid("metadata.name")}},
		{name: "dotted name is a DNS subdomain", mutate: func(r *terrarun.TerraformRun) { r.Name = "prod.network.1" }},
		{name: "invalid label", mutate: func(r *terrarun.TerraformRun) { r.Labels = map[string]string{"a b": "c"} }, want: []string{invalid("metadata.labels")}},
	})
}

func TestValidateOperation(t *testing.T) {
	runSpecCases(t, []specCase{
		{name: "Plan", mutate: func(r *terrarun.TerraformRun) { r.Spec.Operation = terrarun.OperationPlan }},
		{name: "Destroy", mutate: func(r *terrarun.TerraformRun) { r.Spec.Operation = terrarun.OperationDestroy }},
		{name: "empty", mutate: func(r *terrarun.TerraformRun) { r.Spec.Operation = "" }, want: []string{required("spec.operation")}},
		{name: "unknown", mutate: func(r *terrarun.TerraformRun) { r.Spec.Operation = "apply" }, want: []string{notSupported("spec.operation")}, detail: `"Apply", "Destroy", "Plan"`},
	})
}

func TestValidateSource(t *testing.T) {
	git := func() *terrarun.GitSource {
		return &terrarun.GitSource{URL: "https://github.com/org/repo.git", Ref: "main"}
	}
	cm := &terrarun.ConfigMapSource{Name: "config"}
	runSpecCases(t, []specCase{
		{name: "none", mutate: func(r *terrarun.TerraformRun) { r.Spec.Source = terrarun.Source{} },
			want: []string{required("spec.source")}, detail: "set exactly one of inline, configMap, git, oci or sourceRef"},
		{name: "empty inline", mutate: func(r *terrarun.TerraformRun) { r.Spec.Source = terrarun.Source{Inline: map[string]string{}} },
			want: []string{required("spec.source.inline")}},
		{name: "inline and git", mutate: func(r *terrarun.TerraformRun) { r.Spec.Source.Git = git() },
			want: []string{forbidden("spec.source.git")}, detail: "only one source may be set; inline is already set"},
		{name: "configMap and git", mutate: func(r *terrarun.TerraformRun) { r.Spec.Source = terrarun.Source{ConfigMap: cm, Git: git()} },
			want: []string{forbidden("spec.source.git")}, detail: "configMap is already set"},
		{name: "all three", mutate: func(r *terrarun.TerraformRun) { r.Spec.Source.ConfigMap, r.Spec.Source.Git = cm, git() },
			want: []string{forbidden("spec.source.configMap"), forbidden("spec.source.git")}},
		{name: "extra source is still validated", mutate: func(r *terrarun.TerraformRun) { r.Spec.Source.ConfigMap = &terrarun.ConfigMapSource{} },
			want: []string{forbidden("spec.source.configMap"), required("spec.source.configMap.name")}},

		// configMap
		{name: "configMap", mutate: func(r *terrarun.TerraformRun) { r.Spec.Source = terrarun.Source{ConfigMap: cm} }},
		{name: "configMap without name", mutate: func(r *terrarun.TerraformRun) {
			r.Spec.Source = terrarun.Source{ConfigMap: &terrarun.ConfigMapSource{}}
		}, want: []string{required("spec.source.configMap.name")}},
		{name: "configMap invalid name", mutate: func(r *terrarun.TerraformRun) {
			r.Spec.Source = terrarun.Source{ConfigMap: &terrarun.ConfigMapSource{Name: "My Config"}}
		}, want: []string{invalid("spec.source.configMap.name")}},
	})
}

func TestValidateInline(t *testing.T) {
	set := func(files map[string]string) func(*terrarun.TerraformRun) {
		return func(r *terrarun.TerraformRun) { r.Spec.Source.Inline = files }
	}
	const nameDetail = "ending in .tf, .tf.json or .tfvars"
	runSpecCases(t, []specCase{
		{name: "tf.json and tfvars", mutate: set(inline("main.tf.json", "terraform.tfvars", "_vars.tf", "a-b_c.1.tf"))},
		{name: "lock file", mutate: set(inline("main.tf", ".terraform.lock.hcl"))},
		{name: "lock file alone", mutate: set(inline(".terraform.lock.hcl")), want: []string{required("spec.source.inline")}},
		{name: "other hcl", mutate: set(inline("main.tf", ".terraform.hcl")), want: []string{invalid("spec.source.inline[.terraform.hcl]")}, detail: ".terraform.lock.hcl"},
		{name: "parent directory", mutate: set(inline("main.tf", "../x.tf")), want: []string{invalid("spec.source.inline[../x.tf]")}, detail: nameDetail},
		{name: "dot dot", mutate: set(inline("main.tf", "...tf")), want: []string{invalid("spec.source.inline[...tf]")}},
		{name: "directory", mutate: set(inline("main.tf", "modules/x.tf")), want: []string{invalid("spec.source.inline[modules/x.tf]")}},
		{name: "backslash", mutate: set(inline("main.tf", `modules\x.tf`)), want: []string{invalid(`spec.source.inline[modules\x.tf]`)}},
		{name: "leading dot", mutate: set(inline("main.tf", ".hidden.tf")), want: []string{invalid("spec.source.inline[.hidden.tf]")}},
		{name: "wrong extension", mutate: set(inline("main.tf", "script.sh")), want: []string{invalid("spec.source.inline[script.sh]")}},
		{name: "suffix after extension", mutate: set(inline("main.tf", "main.tf.bak")), want: []string{invalid("spec.source.inline[main.tf.bak]")}},
		{name: "tfvars.json", mutate: set(inline("main.tf", "x.tfvars.json")), want: []string{invalid("spec.source.inline[x.tfvars.json]")}},
		{name: "bare extension", mutate: set(inline("main.tf", ".tf")), want: []string{invalid("spec.source.inline[.tf]")}},
		{name: "empty name", mutate: set(inline("main.tf", "")), want: []string{invalid("spec.source.inline[]")}},
		{name: "long name", mutate: set(inline("main.tf", strings.Repeat("a", 251)+".tf")), want: []string{tooLong("spec.source.inline[" + strings.Repeat("a", 251) + ".tf]")}},
		{name: "only tfvars", mutate: set(inline("terraform.tfvars")), want: []string{required("spec.source.inline")}, detail: "add at least one *.tf or *.tf.json file"},
		{name: "only invalid names", mutate: set(inline("main.py")), want: []string{invalid("spec.source.inline[main.py]"), required("spec.source.inline")}},
		{name: "exactly the size limit", mutate: set(map[string]string{"main.tf": strings.Repeat("x", MaxInlineBytes-len("main.tf"))})},
		{name: "over the size limit", mutate: set(map[string]string{
			"main.tf": strings.Repeat("x", MaxInlineBytes/2),
			"vars.tf": strings.Repeat("x", MaxInlineBytes/2-len("main.tf")-len("vars.tf")+1),
		}), want: []string{tooLong("spec.source.inline")}, detail: "use a configMap or git source for larger configurations"},
	})
}

func TestValidateGit(t *testing.T) {
	withGit := func(mut func(g *terrarun.GitSource)) func(*terrarun.TerraformRun) {
		return func(r *terrarun.TerraformRun) {
			g := &terrarun.GitSource{URL: "https://github.com/org/repo.git", Ref: "main"}
			mut(g)
			r.Spec.Source = terrarun.Source{Git: g}
		}
	}
	url := func(u string) func(*terrarun.TerraformRun) {
		return withGit(func(g *terrarun.GitSource) { g.URL = u })
	}
	const schemeDetail = "only https:// and ssh:// URLs are supported"
	const credDetail = "credentials must not be embedded in the URL; use credentialsSecret"
	runSpecCases(t, []specCase{
		{name: "https", mutate: url("https://github.com/org/repo.git")},
		{name: "https with port", mutate: url("https://git.example.com:8443/org/repo")},
		{name: "upper-case scheme", mutate: url("HTTPS://github.com/org/repo.git")},
		{name: "ssh with user", mutate: url("ssh://git@github.com/org/repo.git")},
		{name: "ssh with port", mutate: url("ssh://git@git.example.com:2222/org/repo.git")},
		{name: "missing url", mutate: url(""), want: []string{required("spec.source.git.url")}},
		{name: "http", mutate: url("http://github.com/org/repo.git"), want: []string{invalid("spec.source.git.url")}, detail: schemeDetail},
		{name: "file", mutate: url("file:///etc/passwd"), want: []string{invalid("spec.source.git.url")}, detail: schemeDetail},
		{name: "git protocol", mutate: url("git://github.com/org/repo.git"), want: []string{invalid("spec.source.git.url")}, detail: schemeDetail},
		{name: "ext transport", mutate: url("ext::sh -c touch% /tmp/pwned"), want: []string{invalid("spec.source.git.url")}, detail: schemeDetail},
		{name: "scp-like", mutate: url("git@github.com:org/repo.git"), want: []string{invalid("spec.source.git.url")}, detail: "as ssh://git@host/org/repo.git"},
		{name: "local path", mutate: url("/srv/repo"), want: []string{invalid("spec.source.git.url")}, detail: schemeDetail},
		{name: "flag", mutate: url("--upload-pack=touch /tmp/x"), want: []string{invalid("spec.source.git.url")}},
		{name: "no host", mutate: url("https:///org/repo.git"), want: []string{invalid("spec.source.git.url")}, detail: "must include a host"},
		{name: "host is a flag", mutate: url("ssh://-oProxyCommand=x/repo"), want: []string{invalid("spec.source.git.url")}, detail: "host must not start with '-'"},
		{name: "ssh user is a flag", mutate: url("ssh://-oProxyCommand=x@github.com/repo"), want: []string{invalid("spec.source.git.url")}, detail: "user name must not start with '-'"},
		{name: "https user and password", mutate: url("https://bob:" + secretMarker + "@github.com/org/repo.git"), want: []string{forbidden("spec.source.git.url")}, detail: credDetail},
		{name: "https token as user", mutate: url("https://" + secretMarker + "@github.com/org/repo.git"), want: []string{forbidden("spec.source.git.url")}, detail: credDetail},
		{name: "https empty userinfo", mutate: url("https://@github.com/org/repo.git"), want: []string{forbidden("spec.source.git.url")}},
		{name: "ssh password", mutate: url("ssh://git:" + secretMarker + "@github.com/org/repo.git"), want: []string{forbidden("spec.source.git.url")}, detail: credDetail},
		{name: "query", mutate: url("https://github.com/org/repo.git?access_token=" + secretMarker), want: []string{forbidden("spec.source.git.url")}, detail: "must not contain a query string"},
		{name: "empty query", mutate: url("https://github.com/org/repo.git?"), want: []string{forbidden("spec.source.git.url")}},
		{name: "fragment", mutate: url("https://github.com/org/repo.git#main"), want: []string{forbidden("spec.source.git.url")}, detail: "select the branch, tag or commit with ref"},
		{name: "password and query", mutate: url("https://u:" + secretMarker + "@github.com/r?t=" + secretMarker), want: []string{forbidden("spec.source.git.url"), forbidden("spec.source.git.url")}},
		{name: "unparseable", mutate: url("https://u:" + secretMarker + "@github.com/%zz"), want: []string{invalid("spec.source.git.url")}, detail: "is not a valid URL"},
		{name: "control character", mutate: url("https://github.com/org/repo\n.git"), want: []string{invalid("spec.source.git.url")}},
		{name: "http with password", mutate: url("http://u:" + secretMarker + "@github.com/r"), want: []string{invalid("spec.source.git.url")}, detail: schemeDetail},

		{name: "ref sha", mutate: withGit(func(g *terrarun.GitSource) { g.Ref = "0123456789abcdef0123456789abcdef01234567" })},
		{name: "missing ref", mutate: withGit(func(g *terrarun.GitSource) { g.Ref = "" }), want: []string{required("spec.source.git.ref")}},
		{name: "ref with space", mutate: withGit(func(g *terrarun.GitSource) { g.Ref = "main branch" }), want: []string{invalid("spec.source.git.ref")}},
		{name: "ref with newline", mutate: withGit(func(g *terrarun.GitSource) { g.Ref = "main\n" }), want: []string{invalid("spec.source.git.ref")}},
		{name: "ref is a flag", mutate: withGit(func(g *terrarun.GitSource) { g.Ref = "--upload-pack=x" }), want: []string{invalid("spec.source.git.ref")}, detail: "must not start with '-'"},

		{name: "nested path", mutate: withGit(func(g *terrarun.GitSource) { g.Path = "infra/prod/" })},
		{name: "path with dots in a name", mutate: withGit(func(g *terrarun.GitSource) { g.Path = "a/..b/c.." })},
		{name: "absolute path", mutate: withGit(func(g *terrarun.GitSource) { g.Path = "/etc" }), want: []string{invalid("spec.source.git.path")}, detail: "remove the leading '/'"},
		{name: "parent path", mutate: withGit(func(g *terrarun.GitSource) { g.Path = ".." }), want: []string{invalid("spec.source.git.path")}},
		{name: "escaping path", mutate: withGit(func(g *terrarun.GitSource) { g.Path = "infra/../../etc" }), want: []string{invalid("spec.source.git.path")}, detail: "must stay inside the repository"},
		{name: "backslash path", mutate: withGit(func(g *terrarun.GitSource) { g.Path = `infra\prod` }), want: []string{invalid("spec.source.git.path")}},
		{name: "path with control character", mutate: withGit(func(g *terrarun.GitSource) { g.Path = "infra\x00" }), want: []string{invalid("spec.source.git.path")}},

		{name: "invalid credentialsSecret", mutate: withGit(func(g *terrarun.GitSource) { g.CredentialsSecret = "Git_Creds" }), want: []string{invalid("spec.source.git.credentialsSecret")}},
	})
}

func TestValidateOCI(t *testing.T) {
	withOCI := func(mut func(o *terrarun.OCISource)) func(*terrarun.TerraformRun) {
		return func(r *terrarun.TerraformRun) {
			o := &terrarun.OCISource{URL: "oci://ghcr.io/org/infra"}
			mut(o)
			r.Spec.Source = terrarun.Source{OCI: o}
		}
	}
	url := func(u string) func(*terrarun.TerraformRun) {
		return withOCI(func(o *terrarun.OCISource) { o.URL = u })
	}
	ref := func(r terrarun.OCIReference) func(*terrarun.TerraformRun) {
		return withOCI(func(o *terrarun.OCISource) { o.Ref = &r })
	}
	digest := "sha256:" + strings.Repeat("ab", 32)
	runSpecCases(t, []specCase{
		{name: "latest", mutate: url("oci://ghcr.io/org/infra")},
		{name: "port", mutate: url("oci://127.0.0.1:5000/infra/app")},
		{name: "localhost", mutate: url("oci://localhost/infra")},
		{name: "missing url", mutate: url(""), want: []string{required("spec.source.oci.url")}},
		{name: "https scheme", mutate: url("https://ghcr.io/org/infra"), want: []string{invalid("spec.source.oci.url")}, detail: "must start with oci://"},
		{name: "no host", mutate: url("oci://org/infra"), want: []string{invalid("spec.source.oci.url")}, detail: "must name a registry host"},
		{name: "no repository", mutate: url("oci://ghcr.io"), want: []string{invalid("spec.source.oci.url")}},
		{name: "upper case", mutate: url("oci://ghcr.io/Org/Infra"), want: []string{invalid("spec.source.oci.url")}},
		{name: "tag in the url", mutate: url("oci://ghcr.io/org/infra:v1"), want: []string{invalid("spec.source.oci.url")}, detail: "set spec.source.oci.ref.tag to v1"},
		{name: "digest in the url", mutate: url("oci://ghcr.io/org/infra@" + digest), want: []string{invalid("spec.source.oci.url")}, detail: "spec.source.oci.ref.digest"},
		{name: "credentials in the url", mutate: url("oci://bob:" + secretMarker + "@ghcr.io/org/infra"), want: []string{invalid("spec.source.oci.url")}, detail: "credentialsSecret"},

		{name: "tag", mutate: ref(terrarun.OCIReference{Tag: "v1.2.0"})},
		{name: "semver", mutate: ref(terrarun.OCIReference{Semver: ">=1.0.0 <2.0.0"})},
		{name: "digest", mutate: ref(terrarun.OCIReference{Digest: digest})},
		{name: "bad tag", mutate: ref(terrarun.OCIReference{Tag: "-v1"}), want: []string{invalid("spec.source.oci.ref.tag")}},
		{name: "bad semver", mutate: ref(terrarun.OCIReference{Semver: "one"}), want: []string{invalid("spec.source.oci.ref.semver")}, detail: "must be a semver range"},
		{name: "short digest", mutate: ref(terrarun.OCIReference{Digest: "sha256:abc"}), want: []string{invalid("spec.source.oci.ref.digest")}},
		{name: "tag and digest", mutate: ref(terrarun.OCIReference{Tag: "v1", Digest: digest}), want: []string{forbidden("spec.source.oci.ref.digest")}, detail: "tag is already set"},

		{name: "path", mutate: withOCI(func(o *terrarun.OCISource) { o.Path = "envs/prod" })},
		{name: "escaping path", mutate: withOCI(func(o *terrarun.OCISource) { o.Path = "../x" }), want: []string{invalid("spec.source.oci.path")}, detail: "inside the artifact"},
		{name: "secrets", mutate: withOCI(func(o *terrarun.OCISource) { o.CredentialsSecret, o.CertSecret = "pull", "ca" })},
		{name: "invalid credentialsSecret", mutate: withOCI(func(o *terrarun.OCISource) { o.CredentialsSecret = "Pull_Secret" }), want: []string{invalid("spec.source.oci.credentialsSecret")}},
		{name: "insecure", mutate: withOCI(func(o *terrarun.OCISource) { o.Insecure = true })},
		{name: "insecure with credentials", mutate: withOCI(func(o *terrarun.OCISource) { o.Insecure, o.CredentialsSecret = true, "pull" }), want: []string{forbidden("spec.source.oci.insecure")}, detail: "never sent over plain HTTP"},
		{name: "insecure with a CA", mutate: withOCI(func(o *terrarun.OCISource) { o.Insecure, o.CertSecret = true, "ca" }), want: []string{forbidden("spec.source.oci.insecure")}},
		{name: "verify", mutate: withOCI(func(o *terrarun.OCISource) {
			o.Verify = &terrarun.OCIVerification{Provider: "cosign", KeysSecret: "keys"}
		})},
		{name: "verify without keys", mutate: withOCI(func(o *terrarun.OCISource) { o.Verify = &terrarun.OCIVerification{} }), want: []string{required("spec.source.oci.verify.keysSecret")}},
		{name: "keyless", mutate: withOCI(func(o *terrarun.OCISource) {
			o.Verify = &terrarun.OCIVerification{TrustedRootSecret: "sigstore", MatchOIDCIdentity: []terrarun.OIDCIdentityMatch{{Issuer: `https://token\.actions\.githubusercontent\.com`, Subject: `https://github\.com/org/infra/.*`}}}
		})},
		{name: "keyless without a trusted root or identities", mutate: withOCI(func(o *terrarun.OCISource) {
			o.Verify = &terrarun.OCIVerification{MatchOIDCIdentity: []terrarun.OIDCIdentityMatch{{Issuer: "(", Subject: ""}}}
		}), want: []string{required("spec.source.oci.verify.trustedRootSecret"), invalid("spec.source.oci.verify.matchOIDCIdentity[0].issuer"), required("spec.source.oci.verify.matchOIDCIdentity[0].subject")}},
		{name: "a trusted root without identities", mutate: withOCI(func(o *terrarun.OCISource) {
			o.Verify = &terrarun.OCIVerification{TrustedRootSecret: "sigstore"}
		}), want: []string{required("spec.source.oci.verify.matchOIDCIdentity")}, detail: "at least one identity"},
		{name: "keys and keyless", mutate: withOCI(func(o *terrarun.OCISource) {
			o.Verify = &terrarun.OCIVerification{KeysSecret: "keys", TrustedRootSecret: "sigstore", MatchOIDCIdentity: []terrarun.OIDCIdentityMatch{{Issuer: "i", Subject: "s"}}}
		}), want: []string{forbidden("spec.source.oci.verify.keysSecret")}, detail: "not both"},
		{name: "verify with notation", mutate: withOCI(func(o *terrarun.OCISource) {
			o.Verify = &terrarun.OCIVerification{Provider: "notation", KeysSecret: "k"}
		}), want: []string{notSupported("spec.source.oci.verify.provider")}},
		{name: "oci and git", mutate: func(r *terrarun.TerraformRun) {
			withOCI(func(*terrarun.OCISource) {})(r)
			r.Spec.Source.Git = &terrarun.GitSource{URL: "https://github.com/org/repo.git", Ref: "main"}
		}, want: []string{forbidden("spec.source.oci")}},
	})
}

func TestValidateVariables(t *testing.T) {
	vars := func(v ...terrarun.Variable) func(*terrarun.TerraformRun) {
		return func(r *terrarun.TerraformRun) { r.Spec.Variables = v }
	}
	secretRef := func(name, key string) *terrarun.VariableSource {
		return &terrarun.VariableSource{SecretKeyRef: &terrarun.KeySelector{Name: name, Key: key}}
	}
	cmRef := func(name, key string) *terrarun.VariableSource {
		return &terrarun.VariableSource{ConfigMapKeyRef: &terrarun.KeySelector{Name: name, Key: key}}
	}
	runSpecCases(t, []specCase{
		{name: "valid", mutate: vars(terrarun.Variable{Name: "a", Value: "x"}, terrarun.Variable{Name: "b", ValueFrom: cmRef("cm", "KEY_1")},
			terrarun.Variable{Name: "empty", Value: `""`, HCL: true})},
		{name: "neither value nor valueFrom", mutate: vars(terrarun.Variable{Name: "a", Value: "x"}, terrarun.Variable{Name: "b"}),
			want: []string{required("spec.variables[1].value")}, detail: "set value or valueFrom"},
		{name: "missing name", mutate: vars(terrarun.Variable{Value: "x"}), want: []string{required("spec.variables[0].name")}},
		{name: "name starts with digit", mutate: vars(terrarun.Variable{Name: "a", Value: "x"}, terrarun.Variable{Name: "1a", Value: "x"}), want: []string{invalid("spec.variables[1].name")}, detail: "Terraform identifier"},
		{name: "name with dot", mutate: vars(terrarun.Variable{Name: "a.b", Value: "x"}), want: []string{invalid("spec.variables[0].name")}},
		{name: "name with space", mutate: vars(terrarun.Variable{Name: "a b", Value: "x"}), want: []string{invalid("spec.variables[0].name")}},
		{name: "duplicate name", mutate: vars(terrarun.Variable{Name: "a", Value: "x"}, terrarun.Variable{Name: "b", Value: "x"}, terrarun.Variable{Name: "a", Value: "x"}), want: []string{duplicate("spec.variables[2].name")}},
		{name: "value and valueFrom", mutate: vars(terrarun.Variable{Name: "a", Value: "x", ValueFrom: secretRef("s", "k")}),
			want: []string{forbidden("spec.variables[0]")}, detail: "value and valueFrom are mutually exclusive"},
		{name: "empty valueFrom", mutate: vars(terrarun.Variable{Name: "a", ValueFrom: &terrarun.VariableSource{}}),
			want: []string{required("spec.variables[0].valueFrom")}, detail: "set exactly one of secretKeyRef, configMapKeyRef or runOutput"},
		{name: "both key refs", mutate: vars(terrarun.Variable{Name: "a", ValueFrom: &terrarun.VariableSource{
			SecretKeyRef: &terrarun.KeySelector{Name: "s", Key: "k"}, ConfigMapKeyRef: &terrarun.KeySelector{Name: "c", Key: "k"},
		}}), want: []string{forbidden("spec.variables[0].valueFrom")}, detail: "mutually exclusive"},
		{name: "secretKeyRef without name", mutate: vars(terrarun.Variable{Name: "a", ValueFrom: secretRef("", "k")}), want: []string{required("spec.variables[0].valueFrom.secretKeyRef.name")}},
		{name: "secretKeyRef invalid name", mutate: vars(terrarun.Variable{Name: "a", ValueFrom: secretRef("My_Secret", "k")}), want: []string{invalid("spec.variables[0].valueFrom.secretKeyRef.name")}},
		{name: "secretKeyRef without key", mutate: vars(terrarun.Variable{Name: "a", ValueFrom: secretRef("s", "")}), want: []string{required("spec.variables[0].valueFrom.secretKeyRef.key")}},
		{name: "secretKeyRef invalid key", mutate: vars(terrarun.Variable{Name: "a", ValueFrom: secretRef("s", "a/b")}), want: []string{invalid("spec.variables[0].valueFrom.secretKeyRef.key")}},
		{name: "secretKeyRef dot-dot key", mutate: vars(terrarun.Variable{Name: "a", ValueFrom: secretRef("s", "..")}), want: []string{invalid("spec.variables[0].valueFrom.secretKeyRef.key")}},
		{name: "configMapKeyRef invalid", mutate: vars(terrarun.Variable{Name: "a", ValueFrom: cmRef("Bad Name", "k k")}),
			want: []string{invalid("spec.variables[0].valueFrom.configMapKeyRef.name"), invalid("spec.variables[0].valueFrom.configMapKeyRef.key")}},
	})
}

// TestValidateSpecSize: a spec over MaxSpecBytes is refused with the size
// and its largest field, before etcd would refuse the object or, worse, its
// later status writes.
func TestValidateSpecSize(t *testing.T) {
	value := strings.Repeat("v", MaxSpecBytes/3)
	runSpecCases(t, []specCase{
		{name: "two large values", mutate: func(r *terrarun.TerraformRun) {
			r.Spec.Variables = []terrarun.Variable{{Name: "a", Value: value}, {Name: "b", Value: value}}
		}},
		{name: "three large values", mutate: func(r *terrarun.TerraformRun) {
			r.Spec.Variables = []terrarun.Variable{{Name: "a", Value: value}, {Name: "b", Value: value}, {Name: "c", Value: value}}
		}, want: []string{tooLong("spec")}, detail: "its largest field spec.variables"},
	})
}

func TestValidateBackend(t *testing.T) {
	backend := func(b terrarun.Backend) func(*terrarun.TerraformRun) {
		return func(r *terrarun.TerraformRun) { r.Spec.Backend = &b }
	}
	const credDetail = "looks like a credential; put it in the Secret named by configSecret"
	cases := []specCase{
		{name: "kubernetes", mutate: backend(terrarun.Backend{Type: "kubernetes", Config: map[string]string{"secret_suffix": "x"}})},
		{name: "non-secret keys that contain a marker", mutate: backend(terrarun.Backend{Type: "gcs", Config: map[string]string{
			"kms_encryption_key": "projects/p/locations/l/keyRings/r/cryptoKeys/k", "skip_credentials_validation": "true", "secret_suffix": "x",
		}})},
		{name: "missing type", mutate: backend(terrarun.Backend{}), want: []string{required("spec.backend.type")}},
		{name: "upper-case type", mutate: backend(terrarun.Backend{Type: "S3"}), want: []string{invalid("spec.backend.type")}},
		{name: "type with dash", mutate: backend(terrarun.Backend{Type: "my-backend"}), want: []string{invalid("spec.backend.type")}},
		{name: "key starts with digit", mutate: backend(terrarun.Backend{Type: "s3", Config: map[string]string{"1bucket": "x"}}), want: []string{invalid("spec.backend.config[1bucket]")}},
		{name: "key with dash", mutate: backend(terrarun.Backend{Type: "s3", Config: map[string]string{"bucket-name": "x"}}), want: []string{invalid("spec.backend.config[bucket-name]")}},
		{name: "empty key", mutate: backend(terrarun.Backend{Type: "s3", Config: map[string]string{"": "x"}}), want: []string{invalid("spec.backend.config[]")}},
		{name: "invalid configSecret", mutate: backend(terrarun.Backend{Type: "s3", ConfigSecret: "-creds"}), want: []string{invalid("spec.backend.configSecret")}},
		{name: "local backend", mutate: backend(terrarun.Backend{Type: "local"})},
		{name: "local backend path elsewhere", mutate: backend(terrarun.Backend{Type: "local", Config: map[string]string{"path": "/var/lib/terrarun/state/default/default/terraform.tfstate"}}),
			want: []string{forbidden("spec.backend.config[path]")}},
		{name: "local backend workspace_dir elsewhere", mutate: backend(terrarun.Backend{Type: "local", Config: map[string]string{"workspace_dir": "../other"}}),
			want: []string{forbidden("spec.backend.config[workspace_dir]")}},
		{name: "local backend settings from a Secret", mutate: backend(terrarun.Backend{Type: "local", ConfigSecret: "state-location"}),
			want: []string{forbidden("spec.backend.configSecret")}},
		{name: "path of another backend", mutate: backend(terrarun.Backend{Type: "consul", Config: map[string]string{"path": "terrarun/state"}})},
		{name: "an address without credentials", mutate: backend(terrarun.Backend{Type: "http", Config: map[string]string{
			"address": "https://state.example.com/v1/state?env=dev", "lock_address": "https://user@state.example.com/lock"}})},
		{name: "an address with a password", mutate: backend(terrarun.Backend{Type: "http", Config: map[string]string{"address": "https://u:" + secretMarker + "@state.example.com/s"}}),
			want: []string{forbidden("spec.backend.config[address]")}, detail: "is a URL with a password or a credential in it"},
		{name: "an address with a token", mutate: backend(terrarun.Backend{Type: "consul", Config: map[string]string{"address": "https://consul:8500/?access_token=" + secretMarker}}),
			want: []string{forbidden("spec.backend.config[address]")}},
		{name: "a connection string", mutate: backend(terrarun.Backend{Type: "pg", Config: map[string]string{"schema_name": "postgres://app:" + secretMarker + "@db/state"}}),
			want: []string{forbidden("spec.backend.config[schema_name]")}},
		{name: "an unparsable URL with credentials", mutate: backend(terrarun.Backend{Type: "pg", Config: map[string]string{"schema_name": "postgres://app:%zz" + secretMarker + "@db"}}),
			want: []string{forbidden("spec.backend.config[schema_name]")}},
	}
	for _, key := range []string{
		"password", "client_secret", "token", "access_key", "secret_key", "AWS_Secret_Access_Key", "private_key",
		"sas_token", "credentials", "shared_credentials_file", "oidc_token", "client_certificate_password",
		"client_key", "api_key", "encryption_key", "ACCESS_KEY", "token_file", "access_token", "Secret_Suffix_Token",
		"conn_str", "connection_string", "http_auth",
	} {
		cases = append(cases, specCase{
			name:   "credential key " + key,
			mutate: backend(terrarun.Backend{Type: "s3", Config: map[string]string{key: secretMarker, "bucket": "b"}}),
			want:   []string{forbidden("spec.backend.config[" + key + "]")},
			detail: credDetail,
		})
	}
	runSpecCases(t, cases)
}

func TestValidateWorkspace(t *testing.T) {
	ws := func(w string) func(*terrarun.TerraformRun) {
		return func(r *terrarun.TerraformRun) { r.Spec.Workspace = w }
	}
	runSpecCases(t, []specCase{
		{name: "default", mutate: ws("default")},
		{name: "dots and dashes", mutate: ws("prod.eu-1_a")},
		{name: "90 characters", mutate: ws(strings.Repeat("w", 90))},
		{name: "91 characters", mutate: ws(strings.Repeat("w", 91)), want: []string{invalid("spec.workspace")}},
		{name: "leading dash", mutate: ws("-prod"), want: []string{invalid("spec.workspace")}},
		{name: "slash", mutate: ws("prod/eu"), want: []string{invalid("spec.workspace")}},
		{name: "space", mutate: ws("prod eu"), want: []string{invalid("spec.workspace")}},
	})
}

func TestValidateForceUnlock(t *testing.T) {
	unlock := func(id string) func(*terrarun.TerraformRun) {
		return func(r *terrarun.TerraformRun) { r.Spec.ForceUnlock = id }
	}
	runSpecCases(t, []specCase{
		{name: "uuid", mutate: unlock("5c1b2a5e-0d3c-4b0e-9a57-1f0e9d2c7b11")},
		{name: "128 characters", mutate: unlock(strings.Repeat("a", 128))},
		{name: "129 characters", mutate: unlock(strings.Repeat("a", 129)), want: []string{invalid("spec.forceUnlock")}},
		{name: "space", mutate: unlock("5c1b 2a5e"), want: []string{invalid("spec.forceUnlock")}, detail: "Lock Info: ID"},
		{name: "option", mutate: unlock("-force"), want: []string{invalid("spec.forceUnlock")}},
		{name: "newline", mutate: unlock("a\nb"), want: []string{invalid("spec.forceUnlock")}},
	})
}

func TestValidateApprovalAndEngine(t *testing.T) {
	dur := func(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }
	runSpecCases(t, []specCase{
		{name: "auto", mutate: func(r *terrarun.TerraformRun) { r.Spec.Approval.Mode = terrarun.ApprovalModeAuto }},
		{name: "missing mode", mutate: func(r *terrarun.TerraformRun) { r.Spec.Approval.Mode = "" }, want: []string{required("spec.approval.mode")}},
		{name: "unknown mode", mutate: func(r *terrarun.TerraformRun) { r.Spec.Approval.Mode = "manual" }, want: []string{notSupported("spec.approval.mode")}},
		{name: "max approval timeout", mutate: func(r *terrarun.TerraformRun) { r.Spec.Approval.Timeout = dur(MaxApprovalTimeout) }},
		{name: "approval timeout too long", mutate: func(r *terrarun.TerraformRun) { r.Spec.Approval.Timeout = dur(MaxApprovalTimeout + time.Second) },
			want: []string{invalid("spec.approval.timeout")}, detail: "must be at most 720h"},
		{name: "zero approval timeout", mutate: func(r *terrarun.TerraformRun) { r.Spec.Approval.Timeout = dur(0) }, want: []string{invalid("spec.approval.timeout")}, detail: "greater than zero"},

		{name: "ten approvals", mutate: func(r *terrarun.TerraformRun) { r.Spec.Approval.RequiredApprovals = MaxRequiredApprovals }},
		{name: "too many approvals", mutate: func(r *terrarun.TerraformRun) { r.Spec.Approval.RequiredApprovals = MaxRequiredApprovals + 1 },
			want: []string{invalid("spec.approval.requiredApprovals")}, detail: "must be between 1 and 10"},
		{name: "negative approvals", mutate: func(r *terrarun.TerraformRun) { r.Spec.Approval.RequiredApprovals = -1 },
			want: []string{invalid("spec.approval.requiredApprovals")}},
		{name: "approvals in Auto mode", mutate: func(r *terrarun.TerraformRun) {
			r.Spec.Approval.Mode = terrarun.ApprovalModeAuto
			r.Spec.Approval.RequiredApprovals = 2
		}, want: []string{forbidden("spec.approval.requiredApprovals")}, detail: "Auto mode applies without approvals"},

		{name: "tofu", mutate: func(r *terrarun.TerraformRun) { r.Spec.Engine.Binary = terrarun.EngineTofu }},
		{name: "missing binary", mutate: func(r *terrarun.TerraformRun) { r.Spec.Engine.Binary = "" }, want: []string{required("spec.engine.binary")}},
		{name: "unknown binary", mutate: func(r *terrarun.TerraformRun) { r.Spec.Engine.Binary = "opentofu" }, want: []string{notSupported("spec.engine.binary")}, detail: `"terraform", "tofu"`},
		{name: "no image (the local executor's)", mutate: func(r *terrarun.TerraformRun) { r.Spec.Engine.Image = "" }},
		{name: "image with space", mutate: func(r *terrarun.TerraformRun) { r.Spec.Engine.Image = "busybox latest" }, want: []string{invalid("spec.engine.image")}},
		{name: "image with newline", mutate: func(r *terrarun.TerraformRun) { r.Spec.Engine.Image = "busybox\n" }, want: []string{invalid("spec.engine.image")}},
		{name: "image at max length", mutate: func(r *terrarun.TerraformRun) { r.Spec.Engine.Image = strings.Repeat("i", 512) }},
		{name: "image too long", mutate: func(r *terrarun.TerraformRun) { r.Spec.Engine.Image = strings.Repeat("i", 513) }, want: []string{tooLong("spec.engine.image")}},
		{name: "a pinned image digest", mutate: func(r *terrarun.TerraformRun) { r.Spec.Engine.ImageDigest = "sha256:" + strings.Repeat("a", 64) }},
		{name: "a pinned digest not sha256", mutate: func(r *terrarun.TerraformRun) { r.Spec.Engine.ImageDigest = "md5:" + strings.Repeat("a", 32) },
			want: []string{invalid("spec.engine.imageDigest")}, detail: "must be sha256:"},
		{name: "a pinned digest unlike the image's", mutate: func(r *terrarun.TerraformRun) {
			r.Spec.Engine.Image = "busybox@sha256:" + strings.Repeat("b", 64)
			r.Spec.Engine.ImageDigest = "sha256:" + strings.Repeat("a", 64)
		}, want: []string{invalid("spec.engine.imageDigest")}, detail: "differs from the digest in spec.engine.image"},

		{name: "max stage timeouts", mutate: func(r *terrarun.TerraformRun) {
			r.Spec.Timeouts = terrarun.Timeouts{Plan: dur(MaxStageTimeout), Apply: dur(time.Minute)}
		}},
		{name: "plan timeout too long", mutate: func(r *terrarun.TerraformRun) { r.Spec.Timeouts.Plan = dur(25 * time.Hour) }, want: []string{invalid("spec.timeouts.plan")}, detail: "must be at most 24h"},
		{name: "negative apply timeout", mutate: func(r *terrarun.TerraformRun) { r.Spec.Timeouts.Apply = dur(-time.Second) }, want: []string{invalid("spec.timeouts.apply")}},
	})
}

func TestValidateExecutor(t *testing.T) {
	exec := func(mut func(e *terrarun.ExecutorSpec)) func(*terrarun.TerraformRun) {
		return func(r *terrarun.TerraformRun) {
			e := &terrarun.ExecutorSpec{}
			mut(e)
			r.Spec.Executor = e
		}
	}
	q := resource.MustParse
	runSpecCases(t, []specCase{
		{name: "empty", mutate: exec(func(e *terrarun.ExecutorSpec) {})},
		{name: "invalid service account", mutate: exec(func(e *terrarun.ExecutorSpec) { e.ServiceAccountName = "Runner SA" }), want: []string{invalid("spec.executor.serviceAccountName")}},
		{name: "negative limit", mutate: exec(func(e *terrarun.ExecutorSpec) { e.Resources.Limits = corev1.ResourceList{corev1.ResourceCPU: q("-1")} }),
			want: []string{invalid("spec.executor.resources.limits[cpu]")}, detail: "greater than or equal to 0"},
		{name: "negative request", mutate: exec(func(e *terrarun.ExecutorSpec) {
			e.Resources.Requests = corev1.ResourceList{corev1.ResourceMemory: q("-1Mi")}
		}),
			want: []string{invalid("spec.executor.resources.requests[memory]")}},
		{name: "invalid resource name", mutate: exec(func(e *terrarun.ExecutorSpec) { e.Resources.Limits = corev1.ResourceList{"bad name!": q("1")} }),
			want: []string{invalid("spec.executor.resources.limits[bad name!]")}},
		{name: "request above limit", mutate: exec(func(e *terrarun.ExecutorSpec) {
			e.Resources.Limits = corev1.ResourceList{corev1.ResourceCPU: q("500m"), corev1.ResourceMemory: q("1Gi")}
			e.Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: q("1"), corev1.ResourceMemory: q("1Gi")}
		}), want: []string{invalid("spec.executor.resources.requests[cpu]")}, detail: "must be less than or equal to the limit"},
		{name: "request without limit", mutate: exec(func(e *terrarun.ExecutorSpec) {
			e.Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: q("64")}
		})},
		{name: "claims", mutate: exec(func(e *terrarun.ExecutorSpec) { e.Resources.Claims = []corev1.ResourceClaim{{Name: "gpu"}} }),
			want: []string{forbidden("spec.executor.resources.claims")}, detail: "claims are not supported"},
		{name: "invalid nodeSelector key", mutate: exec(func(e *terrarun.ExecutorSpec) { e.NodeSelector = map[string]string{"bad key": "x"} }),
			want: []string{invalid("spec.executor.nodeSelector")}},
		{name: "invalid nodeSelector value", mutate: exec(func(e *terrarun.ExecutorSpec) { e.NodeSelector = map[string]string{"zone": "a b"} }),
			want: []string{invalid("spec.executor.nodeSelector")}},
		{name: "toleration exists with value", mutate: exec(func(e *terrarun.ExecutorSpec) {
			e.Tolerations = []corev1.Toleration{{Key: "k", Operator: corev1.TolerationOpExists, Value: "v"}}
		}), want: []string{invalid("spec.executor.tolerations[0].value")}, detail: "must be empty when operator is Exists"},
		{name: "toleration unsupported operator", mutate: exec(func(e *terrarun.ExecutorSpec) {
			e.Tolerations = []corev1.Toleration{{Key: "k", Operator: corev1.TolerationOpExists}, {Key: "k", Operator: "Lt", Value: "1"}}
		}), want: []string{notSupported("spec.executor.tolerations[1].operator")}},
		{name: "toleration unsupported effect", mutate: exec(func(e *terrarun.ExecutorSpec) {
			e.Tolerations = []corev1.Toleration{{Key: "k", Operator: corev1.TolerationOpExists, Effect: "NoScheduleNoAdmit"}}
		}), want: []string{notSupported("spec.executor.tolerations[0].effect")}},
		{name: "toleration invalid key", mutate: exec(func(e *terrarun.ExecutorSpec) {
			e.Tolerations = []corev1.Toleration{{Key: "bad key", Operator: corev1.TolerationOpExists}}
		}), want: []string{invalid("spec.executor.tolerations[0].key")}},
		{name: "toleration invalid value", mutate: exec(func(e *terrarun.ExecutorSpec) {
			e.Tolerations = []corev1.Toleration{{Key: "k", Value: "a b"}}
		}), want: []string{invalid("spec.executor.tolerations[0].value")}},
		{name: "toleration empty key needs Exists", mutate: exec(func(e *terrarun.ExecutorSpec) {
			e.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpEqual, Value: "x"}}
		}), want: []string{invalid("spec.executor.tolerations[0].operator")}},
		{name: "tolerationSeconds without NoExecute", mutate: exec(func(e *terrarun.ExecutorSpec) {
			e.Tolerations = []corev1.Toleration{{Key: "k", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule, TolerationSeconds: ptrTo[int64](5)}}
		}), want: []string{invalid("spec.executor.tolerations[0].tolerationSeconds")}, detail: "NoExecute"},
	})
}

func TestValidateFlagsAndMisc(t *testing.T) {
	runSpecCases(t, []specCase{
		{name: "invalid outputsSecret", mutate: func(r *terrarun.TerraformRun) { r.Spec.OutputsSecret = "Outputs" }, want: []string{invalid("spec.outputsSecret")}},
		{name: "empty target", mutate: func(r *terrarun.TerraformRun) { r.Spec.Targets = []string{"a.b", ""} }, want: []string{required("spec.targets[1]")}},
		{name: "target flag", mutate: func(r *terrarun.TerraformRun) { r.Spec.Targets = []string{"-lock=false"} },
			want: []string{invalid("spec.targets[0]")}, detail: "must be a resource address, not a flag"},
		{name: "target with space", mutate: func(r *terrarun.TerraformRun) { r.Spec.Targets = []string{"a.b c"} }, want: []string{invalid("spec.targets[0]")}},
		{name: "target with control", mutate: func(r *terrarun.TerraformRun) { r.Spec.Targets = []string{"a.b\x1b"} }, want: []string{invalid("spec.targets[0]")}},
		{name: "target at max length", mutate: func(r *terrarun.TerraformRun) { r.Spec.Targets = []string{strings.Repeat("a", 1024)} }},
		{name: "target too long", mutate: func(r *terrarun.TerraformRun) { r.Spec.Targets = []string{strings.Repeat("a", 1025)} }, want: []string{tooLong("spec.targets[0]")}},
		{name: "replace flag", mutate: func(r *terrarun.TerraformRun) { r.Spec.Replace = []string{"a.b", "--auto-approve"} }, want: []string{invalid("spec.replace[1]")}},
		{name: "replace empty", mutate: func(r *terrarun.TerraformRun) { r.Spec.Replace = []string{""} }, want: []string{required("spec.replace[0]")}},
		{name: "parallelism 1", mutate: func(r *terrarun.TerraformRun) { r.Spec.Parallelism = ptrTo[int32](1) }},
		{name: "parallelism 0", mutate: func(r *terrarun.TerraformRun) { r.Spec.Parallelism = ptrTo[int32](0) }, want: []string{invalid("spec.parallelism")}},
		{name: "parallelism too high", mutate: func(r *terrarun.TerraformRun) { r.Spec.Parallelism = ptrTo[int32](MaxParallelism + 1) },
			want: []string{invalid("spec.parallelism")}, detail: "between 1 and 256"},
		{name: "creator without username", mutate: func(r *terrarun.TerraformRun) { r.Spec.Creator = &terrarun.Creator{UID: "1"} }, want: []string{required("spec.creator.username")}},
	})
}

func TestValidateTerraformRunSpecUsesFieldPath(t *testing.T) {
	spec := validRun().Spec
	spec.Operation = ""
	checkErrors(t, ValidateTerraformRunSpec(&spec, field.NewPath("x", "spec")), []string{required("x.spec.operation")}, "")
}

func TestValidateDuration(t *testing.T) {
	p := field.NewPath("d")
	for _, tc := range []struct {
		d    *metav1.Duration
		want []string
	}{
		{nil, nil},
		{&metav1.Duration{Duration: time.Nanosecond}, nil},
		{&metav1.Duration{Duration: time.Hour}, nil},
		{&metav1.Duration{Duration: 0}, []string{invalid("d")}},
		{&metav1.Duration{Duration: -time.Hour}, []string{invalid("d")}},
		{&metav1.Duration{Duration: time.Hour + 1}, []string{invalid("d")}},
	} {
		t.Run(fmt.Sprint(tc.d), func(t *testing.T) {
			checkErrors(t, ValidateDuration(tc.d, time.Hour, p), tc.want, "")
		})
	}
	errs := ValidateDuration(&metav1.Duration{Duration: 90 * time.Minute}, 90*time.Second, p)
	checkErrors(t, errs, []string{invalid("d")}, "must be at most 1m30s")
}

func TestValidateTerraformRunUpdate(t *testing.T) {
	base := func() *terrarun.TerraformRun {
		r := fullRun()
		r.ResourceVersion = "7"
		r.Generation = 1
		return r
	}
	specChanges := map[string]func(*terrarun.TerraformRun){
		"operation":      func(r *terrarun.TerraformRun) { r.Spec.Operation = terrarun.OperationApply },
		"source":         func(r *terrarun.TerraformRun) { r.Spec.Source.Git.Ref = "v2" },
		"variable value": func(r *terrarun.TerraformRun) { r.Spec.Variables[0].Value = "us-east-1" },
		"variable added": func(r *terrarun.TerraformRun) {
			r.Spec.Variables = append(r.Spec.Variables, terrarun.Variable{Name: "x", Value: "y"})
		},
		"backend config": func(r *terrarun.TerraformRun) { r.Spec.Backend.Config["bucket"] = "other" },
		"workspace":      func(r *terrarun.TerraformRun) { r.Spec.Workspace = "staging" },
		"approval mode":  func(r *terrarun.TerraformRun) { r.Spec.Approval.Mode = terrarun.ApprovalModeManual },
		"engine image":   func(r *terrarun.TerraformRun) { r.Spec.Engine.Image = validImage },
		"timeouts":       func(r *terrarun.TerraformRun) { r.Spec.Timeouts.Plan = &metav1.Duration{Duration: 2 * time.Hour} },
		"executor":       func(r *terrarun.TerraformRun) { r.Spec.Executor.ServiceAccountName = "other" },
		"resources": func(r *terrarun.TerraformRun) {
			r.Spec.Executor.Resources.Limits[corev1.ResourceCPU] = resource.MustParse("3")
		},
		"outputsSecret": func(r *terrarun.TerraformRun) { r.Spec.OutputsSecret = "" },
		"targets":       func(r *terrarun.TerraformRun) { r.Spec.Targets = nil },
		"replace":       func(r *terrarun.TerraformRun) { r.Spec.Replace = append(r.Spec.Replace, "x.y") },
		"parallelism":   func(r *terrarun.TerraformRun) { r.Spec.Parallelism = ptrTo[int32](1) },
		"refresh":       func(r *terrarun.TerraformRun) { r.Spec.Refresh = nil },
		"creator":       func(r *terrarun.TerraformRun) { r.Spec.Creator.Username = "mallory" },
		"creator removed": func(r *terrarun.TerraformRun) {
			r.Spec.Creator = nil
		},
	}
	for name, mutate := range specChanges {
		t.Run("spec change "+name, func(t *testing.T) {
			oldRun, newRun := base(), base()
			mutate(newRun)
			checkErrors(t, ValidateTerraformRunUpdate(newRun, oldRun), []string{forbidden("spec")},
				"spec is immutable after creation but for ttlSecondsAfterFinished; to run again, create a new TerraformRun")
		})
	}

	t.Run("ttlSecondsAfterFinished may change", func(t *testing.T) {
		oldRun, newRun := base(), base()
		newRun.Spec.TTLSecondsAfterFinished = ptrTo[int32](3600)
		if errs := ValidateTerraformRunUpdate(newRun, oldRun); len(errs) != 0 {
			t.Fatalf("raising the TTL: %v", errs)
		}
		newRun.Spec.TTLSecondsAfterFinished = ptrTo[int32](-1)
		checkErrors(t, ValidateTerraformRunUpdate(newRun, oldRun), []string{"FieldValueInvalid spec.ttlSecondsAfterFinished"}, "must be greater than or equal to 0")
	})

	t.Run("metadata only", func(t *testing.T) {
		oldRun, newRun := base(), base()
		newRun.Labels = map[string]string{"team": "a"}
		newRun.Annotations = map[string]string{"note": "x"}
		newRun.Finalizers = []string{"terrarun.dev/cleanup"}
		newRun.ResourceVersion = "8"
		if errs := ValidateTerraformRunUpdate(newRun, oldRun); len(errs) != 0 {
			t.Fatalf("unexpected errors: %v", errs)
		}
	})
	t.Run("equal quantities in another form are no change", func(t *testing.T) {
		oldRun, newRun := base(), base()
		newRun.Spec.Executor.Resources.Limits[corev1.ResourceCPU] = resource.MustParse("2000m")
		if errs := ValidateTerraformRunUpdate(newRun, oldRun); len(errs) != 0 {
			t.Fatalf("unexpected errors: %v", errs)
		}
	})
	t.Run("name change", func(t *testing.T) {
		oldRun, newRun := base(), base()
		newRun.Name = "other"
		checkErrors(t, ValidateTerraformRunUpdate(newRun, oldRun), []string{invalid("metadata.name")}, "field is immutable")
	})
	t.Run("missing resourceVersion", func(t *testing.T) {
		oldRun, newRun := base(), base()
		newRun.ResourceVersion = ""
		checkErrors(t, ValidateTerraformRunUpdate(newRun, oldRun), []string{invalid("metadata.resourceVersion")}, "")
	})
	t.Run("invalid label", func(t *testing.T) {
		oldRun, newRun := base(), base()
		newRun.Labels = map[string]string{"bad key": "x"}
		checkErrors(t, ValidateTerraformRunUpdate(newRun, oldRun), []string{invalid("metadata.labels")}, "")
	})
	t.Run("unchanged spec that a tightened rule rejects does not block metadata updates", func(t *testing.T) {
		oldRun, newRun := base(), base()
		oldRun.Spec.Parallelism = ptrTo[int32](0)
		newRun.Spec.Parallelism = ptrTo[int32](0)
		newRun.Finalizers = nil
		checkErrors(t, ValidateTerraformRunUpdate(newRun, oldRun), nil, "")
	})
	t.Run("changed spec is also validated", func(t *testing.T) {
		oldRun, newRun := base(), base()
		newRun.Spec.Parallelism = ptrTo[int32](0)
		checkErrors(t, ValidateTerraformRunUpdate(newRun, oldRun), []string{forbidden("spec"), invalid("spec.parallelism")}, "")
	})
	t.Run("status is ignored", func(t *testing.T) {
		oldRun, newRun := base(), base()
		newRun.Status.Phase = "Bogus"
		if errs := ValidateTerraformRunUpdate(newRun, oldRun); len(errs) != 0 {
			t.Fatalf("unexpected errors: %v", errs)
		}
	})
}

func validStatus() terrarun.TerraformRunStatus {
	now := metav1.NewTime(time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC))
	return terrarun.TerraformRunStatus{
		Phase: terrarun.RunPhaseSucceeded,
		Conditions: []metav1.Condition{
			{Type: terrarun.ConditionPlanned, Status: metav1.ConditionTrue, Reason: "Planned", LastTransitionTime: now},
			{Type: terrarun.ConditionApproved, Status: metav1.ConditionTrue, Reason: "Approved", LastTransitionTime: now},
			{Type: terrarun.ConditionApplied, Status: metav1.ConditionTrue, Reason: "Applied", LastTransitionTime: now},
		},
		ObservedGeneration: 1,
		Plan:               &terrarun.PlanSummary{Digest: validDigest, Add: 1, Change: 2, Destroy: 0, Import: 1, HasChanges: true, CompletedAt: &now},
		Approval:           &terrarun.ApprovalStatus{ApprovedBy: "bob", ApprovedAt: &now, PlanDigest: validDigest, Comment: "lgtm"},
		Source:             &terrarun.SourceStatus{Revision: "0123456789abcdef0123456789abcdef01234567"},
		Stages: []terrarun.StageStatus{
			{Name: terrarun.StagePlan, Attempt: 1, Job: "run-1-plan-1", StartTime: &now, CompletionTime: &now, ExitCode: ptrTo[int32](0), Reason: "Completed"},
			{Name: terrarun.StageApply, Attempt: 2, Job: "run-1-apply-2"},
		},
		Outputs: []terrarun.OutputStatus{
			{Name: "ip", Type: &terrarun.JSON{Raw: []byte(`"string"`)}, Value: &terrarun.JSON{Raw: []byte(`"10.0.0.1"`)}},
			{Name: "db_password", Type: &terrarun.JSON{Raw: []byte(`"string"`)}, Sensitive: true},
		},
		StartTime:      &now,
		CompletionTime: &now,
		Message:        "applied",
	}
}

func TestValidateSourceRef(t *testing.T) {
	ref := func(kind, name, path string) func(*terrarun.TerraformRun) {
		return func(r *terrarun.TerraformRun) {
			r.Spec.Source = terrarun.Source{SourceRef: &terrarun.SourceReference{Kind: kind, Name: name, Path: path}}
		}
	}
	runSpecCases(t, []specCase{
		{name: "GitRepository", mutate: ref("GitRepository", "infra", "")},
		{name: "OCIRepository with a path", mutate: ref("OCIRepository", "infra", "envs/prod")},
		{name: "Bucket", mutate: ref("Bucket", "infra", "")},
		{name: "no kind", mutate: ref("", "infra", ""), want: []string{required("spec.source.sourceRef.kind")}, detail: "GitRepository, OCIRepository, Bucket"},
		{name: "HelmChart", mutate: ref("HelmChart", "infra", ""), want: []string{notSupported("spec.source.sourceRef.kind")}},
		{name: "no name", mutate: ref("GitRepository", "", ""), want: []string{required("spec.source.sourceRef.name")}},
		{name: "bad name", mutate: ref("GitRepository", "Infra_Repo", ""), want: []string{invalid("spec.source.sourceRef.name")}},
		{name: "escaping path", mutate: ref("GitRepository", "infra", "../other"), want: []string{invalid("spec.source.sourceRef.path")}, detail: "inside the artifact"},
		{name: "sourceRef and inline", mutate: func(r *terrarun.TerraformRun) {
			ref("GitRepository", "infra", "")(r)
			r.Spec.Source.Inline = map[string]string{"main.tf": ""}
		}, want: []string{forbidden("spec.source.sourceRef")}},
	})
}

func TestValidatePinnedArtifact(t *testing.T) {
	pinned := func() *terrarun.TerraformRun {
		r := validRun()
		r.ResourceVersion = "3"
		r.Spec.Source = terrarun.Source{SourceRef: &terrarun.SourceReference{Kind: "GitRepository", Name: "infra"}}
		r.Status = terrarun.TerraformRunStatus{Phase: terrarun.RunPhasePlanning, Source: &terrarun.SourceStatus{
			Revision: "main@sha1:abc", Artifact: &terrarun.SourceArtifact{URL: "http://source-controller/gitrepository/default/infra/abc.tar.gz", Digest: validDigest},
		}}
		return r
	}
	for _, tc := range []struct {
		name   string
		mutate func(*terrarun.TerraformRun)
		want   []string
	}{
		{name: "unchanged", mutate: func(*terrarun.TerraformRun) {}},
		{name: "another revision", mutate: func(r *terrarun.TerraformRun) { r.Status.Source.Revision = "main@sha1:def" }, want: []string{forbidden("status.source")}},
		{name: "another digest", mutate: func(r *terrarun.TerraformRun) {
			r.Status.Source.Artifact.Digest = "sha256:" + strings.Repeat("f", 64)
		}, want: []string{forbidden("status.source")}},
		{name: "unpinned", mutate: func(r *terrarun.TerraformRun) { r.Status.Source = nil }, want: []string{forbidden("status.source")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			oldRun, newRun := pinned(), pinned()
			tc.mutate(newRun)
			checkErrors(t, ValidateTerraformRunStatusUpdate(newRun, oldRun), tc.want, "")
		})
	}
	// The first pin may be anything valid; an invalid one is refused.
	oldRun, newRun := pinned(), pinned()
	oldRun.Status.Source = nil
	newRun.Status.Source.Artifact = &terrarun.SourceArtifact{URL: "file:///etc/passwd", Digest: "md5:abc"}
	checkErrors(t, ValidateTerraformRunStatusUpdate(newRun, oldRun), []string{invalid("status.source.artifact.url"), invalid("status.source.artifact.digest")}, "")
}

func TestValidateTerraformRunStatusUpdate(t *testing.T) {
	base := func() *terrarun.TerraformRun {
		r := validRun()
		r.ResourceVersion = "3"
		r.Status = validStatus()
		return r
	}
	cases := []struct {
		name   string
		mutate func(*terrarun.TerraformRun)
		want   []string
		detail string
	}{
		{name: "valid", mutate: func(r *terrarun.TerraformRun) {}},
		{name: "empty status", mutate: func(r *terrarun.TerraformRun) { r.Status = terrarun.TerraformRunStatus{} }},
		{name: "plan without digest", mutate: func(r *terrarun.TerraformRun) { r.Status.Plan.Digest = "" }},
		{name: "unknown phase", mutate: func(r *terrarun.TerraformRun) { r.Status.Phase = "Done" }, want: []string{notSupported("status.phase")}},
		{name: "condition without reason", mutate: func(r *terrarun.TerraformRun) { r.Status.Conditions[1].Reason = "" }, want: []string{required("status.conditions[1].reason")}},
		{name: "condition bad status", mutate: func(r *terrarun.TerraformRun) { r.Status.Conditions[0].Status = "Yes" }, want: []string{notSupported("status.conditions[0].status")}},
		{name: "duplicate condition", mutate: func(r *terrarun.TerraformRun) { r.Status.Conditions[2].Type = terrarun.ConditionPlanned }, want: []string{duplicate("status.conditions[2]")}},
		{name: "negative observedGeneration", mutate: func(r *terrarun.TerraformRun) { r.Status.ObservedGeneration = -1 }, want: []string{invalid("status.observedGeneration")}},
		{name: "negative counts", mutate: func(r *terrarun.TerraformRun) {
			r.Status.Plan.Add, r.Status.Plan.Change, r.Status.Plan.Destroy, r.Status.Plan.Import = -1, -1, -1, -1
		}, want: []string{invalid("status.plan.add"), invalid("status.plan.change"), invalid("status.plan.destroy"), invalid("status.plan.import")}},
		{name: "digest without prefix", mutate: func(r *terrarun.TerraformRun) { r.Status.Plan.Digest = strings.TrimPrefix(validDigest, "sha256:") }, want: []string{invalid("status.plan.digest")}},
		{name: "digest upper-case", mutate: func(r *terrarun.TerraformRun) { r.Status.Plan.Digest = strings.ToUpper(validDigest) }, want: []string{invalid("status.plan.digest")}},
		{name: "digest short", mutate: func(r *terrarun.TerraformRun) { r.Status.Plan.Digest = validDigest[:len(validDigest)-1] }, want: []string{invalid("status.plan.digest")}},
		{name: "approval without approver", mutate: func(r *terrarun.TerraformRun) { r.Status.Approval.ApprovedBy = "" }, want: []string{required("status.approval.approvedBy")}},
		{name: "approval without digest", mutate: func(r *terrarun.TerraformRun) { r.Status.Approval.PlanDigest = "" }, want: []string{required("status.approval.planDigest")}},
		{name: "approval comment too long", mutate: func(r *terrarun.TerraformRun) { r.Status.Approval.Comment = strings.Repeat("c", 1025) }, want: []string{tooLong("status.approval.comment")}},
		{name: "stage attempt zero", mutate: func(r *terrarun.TerraformRun) { r.Status.Stages[1].Attempt = 0 }, want: []string{invalid("status.stages[1].attempt")}},
		{name: "stage unknown name", mutate: func(r *terrarun.TerraformRun) { r.Status.Stages[0].Name = "init" }, want: []string{notSupported("status.stages[0].name")}},
		{name: "stage without name", mutate: func(r *terrarun.TerraformRun) { r.Status.Stages[0].Name = "" }, want: []string{required("status.stages[0].name")}},
		{name: "output duplicate", mutate: func(r *terrarun.TerraformRun) { r.Status.Outputs[1].Name = "ip" }, want: []string{duplicate("status.outputs[1].name")}},
		{name: "output invalid name", mutate: func(r *terrarun.TerraformRun) { r.Status.Outputs[0].Name = "1ip" }, want: []string{invalid("status.outputs[0].name")}},
		{name: "output without name", mutate: func(r *terrarun.TerraformRun) { r.Status.Outputs[0].Name = "" }, want: []string{required("status.outputs[0].name")}},
		{name: "sensitive output with value", mutate: func(r *terrarun.TerraformRun) {
			r.Status.Outputs[1].Value = &terrarun.JSON{Raw: []byte(`"` + secretMarker + `"`)}
		}, want: []string{forbidden("status.outputs[1].value")}},
		{name: "spec change through status", mutate: func(r *terrarun.TerraformRun) { r.Spec.Workspace = "other" }, want: []string{forbidden("spec")}},
		{name: "missing resourceVersion", mutate: func(r *terrarun.TerraformRun) { r.ResourceVersion = "" }, want: []string{invalid("metadata.resourceVersion")}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			oldRun, newRun := base(), base()
			oldRun.Status = terrarun.TerraformRunStatus{Phase: terrarun.RunPhasePending}
			tc.mutate(newRun)
			errs := ValidateTerraformRunStatusUpdate(newRun, oldRun)
			checkErrors(t, errs, tc.want, tc.detail)
			assertNoLeak(t, errs)
		})
	}
}

func TestValidateTerraformRunApproval(t *testing.T) {
	cases := []struct {
		name   string
		a      terrarun.TerraformRunApproval
		want   []string
		detail string
	}{
		{name: "valid", a: terrarun.TerraformRunApproval{PlanDigest: validDigest}},
		{name: "valid with comment", a: terrarun.TerraformRunApproval{PlanDigest: validDigest, Comment: strings.Repeat("é", 512)}},
		{name: "missing digest", a: terrarun.TerraformRunApproval{}, want: []string{required("planDigest")}, detail: "copy it from status.plan.digest"},
		{name: "malformed digest", a: terrarun.TerraformRunApproval{PlanDigest: "sha1:abc"}, want: []string{invalid("planDigest")}, detail: "copy it from status.plan.digest"},
		{name: "digest with whitespace", a: terrarun.TerraformRunApproval{PlanDigest: validDigest + "\n"}, want: []string{invalid("planDigest")}},
		{name: "comment too long", a: terrarun.TerraformRunApproval{PlanDigest: validDigest, Comment: strings.Repeat("é", 513)}, want: []string{tooLong("comment")}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			checkErrors(t, ValidateTerraformRunApproval(&tc.a), tc.want, tc.detail)
		})
	}
}

// assertNoLeak fails if any error, rendered in any way, contains secretMarker.
func assertNoLeak(t *testing.T, errs field.ErrorList) {
	t.Helper()
	for _, e := range errs {
		for _, s := range []string{e.Error(), e.Detail, fmt.Sprintf("%#v", e.BadValue), fmt.Sprint(e.BadValue)} {
			if strings.Contains(s, secretMarker) {
				t.Errorf("error leaks a secret: %q", s)
			}
		}
	}
	if len(errs) > 0 && strings.Contains(errs.ToAggregate().Error(), secretMarker) {
		t.Errorf("aggregate error leaks a secret: %v", errs.ToAggregate())
	}
}

func TestSecretsAreNotEchoed(t *testing.T) {
	cases := []specCase{
		{name: "variable value with invalid name", mutate: func(r *terrarun.TerraformRun) {
			r.Spec.Variables = []terrarun.Variable{{Name: "bad name", Value: secretMarker}}
		}, want: []string{invalid("spec.variables[0].name")}},
		{name: "variable value and valueFrom", mutate: func(r *terrarun.TerraformRun) {
			r.Spec.Variables = []terrarun.Variable{{Name: "a", Value: secretMarker, ValueFrom: &terrarun.VariableSource{}}}
		}, want: []string{forbidden("spec.variables[0]"), required("spec.variables[0].valueFrom")}},
		{name: "duplicate variable with value", mutate: func(r *terrarun.TerraformRun) {
			r.Spec.Variables = []terrarun.Variable{{Name: "a", Value: secretMarker}, {Name: "a", Value: secretMarker, HCL: true}}
		}, want: []string{duplicate("spec.variables[1].name")}},
		{name: "backend credential", mutate: func(r *terrarun.TerraformRun) {
			r.Spec.Backend = &terrarun.Backend{Type: "s3", Config: map[string]string{"secret_key": secretMarker}}
		}, want: []string{forbidden("spec.backend.config[secret_key]")}},
		{name: "backend invalid key", mutate: func(r *terrarun.TerraformRun) {
			r.Spec.Backend = &terrarun.Backend{Type: "S3!", Config: map[string]string{"bad-key": secretMarker}}
		}, want: []string{invalid("spec.backend.type"), invalid("spec.backend.config[bad-key]")}},
	}
	for _, u := range []string{
		"https://bob:" + secretMarker + "@github.com/org/repo.git",
		"https://" + secretMarker + "@github.com/org/repo.git",
		"https://" + secretMarker + ":x-oauth-basic@github.com/org/repo.git",
		"ssh://git:" + secretMarker + "@github.com/org/repo.git",
		"https://github.com/org/repo.git?token=" + secretMarker,
		"https://github.com/org/repo.git#" + secretMarker,
		"https://u:" + secretMarker + "@github.com/%zz",
		"https://u:" + secretMarker + "@exa mple.com/r",
		"http://u:" + secretMarker + "@github.com/r",
		"http://" + secretMarker + "@github.com/r",
		"ftp://github.com/r?t=" + secretMarker,
		"https://u:" + secretMarker + "@/r",
		"https://u:" + secretMarker + "@-host/r?x=" + secretMarker,
		"ssh://-u:" + secretMarker + "@github.com/r",
		"git:" + secretMarker + "@github.com:org/repo.git",
		secretMarker + "@github.com:org/repo.git?x",
		"github.com/r?token=" + secretMarker,
	} {
		cases = append(cases, gitURLCase(u))
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			run := validRun()
			tc.mutate(run)
			errs := ValidateTerraformRun(run)
			if len(errs) == 0 {
				t.Fatal("expected errors")
			}
			if tc.want != nil {
				checkErrors(t, errs, tc.want, "")
			}
			assertNoLeak(t, errs)
		})
	}
}

// gitURLCase builds a leak test case for a git URL.
func gitURLCase(u string) specCase {
	return specCase{
		name: "git url " + strings.ReplaceAll(u, "/", "_"),
		mutate: func(r *terrarun.TerraformRun) {
			r.Spec.Source = terrarun.Source{Git: &terrarun.GitSource{URL: u, Ref: "main"}}
		},
	}
}

// ptrTo returns a pointer to v.
func ptrTo[T any](v T) *T { return &v }

func TestRedactedURLIsStillHelpful(t *testing.T) {
	run := validRun()
	run.Spec.Source = terrarun.Source{Git: &terrarun.GitSource{URL: "http://bob:" + secretMarker + "@github.com/org/repo.git?t=" + secretMarker, Ref: "main"}}
	errs := ValidateTerraformRun(run)
	checkErrors(t, errs, []string{invalid("spec.source.git.url")}, "github.com/org/repo.git")
	assertNoLeak(t, errs)

	run.Spec.Source.Git.URL = "ssh://git@github.com:22/org/repo.git#x"
	errs = ValidateTerraformRun(run)
	checkErrors(t, errs, []string{forbidden("spec.source.git.url")}, "")
}
