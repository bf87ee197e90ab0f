package policy

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
)

const validPolicy = `
apiVersion: admission.terrarun.dev/v1alpha1
kind: TerraformRunPolicy
defaults:
  engine: {binary: tofu, image: registry.example.com/terrarun-executor:v1}
  approval: {mode: Manual, timeout: 24h}
  timeouts: {plan: 30m, apply: 1h}
allowedGitHosts: ["github.com", "*.corp.example.com"]
manualApprovalNamespaceSelector: {matchLabels: {env: prod}}
maxTimeouts: {plan: 2h, apply: 4h, approval: 72h}
separationOfDuties: true
taskRunTemplate:
  serviceAccountName: terraform-stages
  podTemplate:
    nodeSelector: {pool: terraform}
    tolerations: [{key: dedicated, value: terraform, effect: NoSchedule}]
    runtimeClassName: gvisor
  task: {namespace: terrarun-system, name: stage-with-scanner}
`

const header = "apiVersion: admission.terrarun.dev/v1alpha1\nkind: TerraformRunPolicy\n"

func TestLoadValid(t *testing.T) {
	cfg, err := Load(strings.NewReader(validPolicy))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if cfg.Defaults.Engine.Binary != terrarun.EngineTofu || cfg.Defaults.Engine.Image != "registry.example.com/terrarun-executor:v1" {
		t.Errorf("engine defaults = %+v", cfg.Defaults.Engine)
	}
	if cfg.Defaults.Approval.Mode != terrarun.ApprovalModeManual || cfg.Defaults.Approval.Timeout.Duration != 24*time.Hour {
		t.Errorf("approval defaults = %+v", cfg.Defaults.Approval)
	}
	if cfg.Defaults.Timeouts.Plan.Duration != 30*time.Minute || cfg.Defaults.Timeouts.Apply.Duration != time.Hour {
		t.Errorf("timeout defaults = %+v", cfg.Defaults.Timeouts)
	}
	if cfg.MaxTimeouts.Plan.Duration != 2*time.Hour || cfg.MaxTimeouts.Apply.Duration != 4*time.Hour || cfg.MaxTimeouts.Approval.Duration != 72*time.Hour {
		t.Errorf("max timeouts = %+v", cfg.MaxTimeouts)
	}
	if len(cfg.AllowedGitHosts) != 2 || !cfg.SeparationOfDutiesEnabled() {
		t.Errorf("cfg = %+v", cfg)
	}
	if tr := cfg.TaskRunTemplate; tr == nil || tr.ServiceAccountName != "terraform-stages" || tr.PodTemplate.NodeSelector["pool"] != "terraform" ||
		len(tr.PodTemplate.Tolerations) != 1 || tr.PodTemplate.RuntimeClassName != "gvisor" || *tr.Task != (TaskReference{Namespace: "terrarun-system", Name: "stage-with-scanner"}) {
		t.Errorf("taskRunTemplate = %+v", tr)
	}
	sel, err := cfg.NamespaceSelector()
	if err != nil {
		t.Fatal(err)
	}
	if !sel.Matches(labels.Set{"env": "prod"}) || sel.Matches(labels.Set{"env": "dev"}) {
		t.Errorf("selector %v", sel)
	}
}

func TestLoadJSON(t *testing.T) {
	cfg, err := Load(strings.NewReader(`{"apiVersion":"admission.terrarun.dev/v1alpha1","kind":"TerraformRunPolicy","separationOfDuties":false,"maxTimeouts":{"plan":"90m"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.SeparationOfDutiesEnabled() || cfg.MaxTimeouts.Plan.Duration != 90*time.Minute {
		t.Errorf("cfg = %+v", cfg)
	}
}

func TestLoadEmpty(t *testing.T) {
	var nilBuf *bytes.Buffer
	for name, r := range map[string]io.Reader{
		"nil":           nil,
		"typed nil":     nilBuf,
		"empty":         strings.NewReader(""),
		"blank":         strings.NewReader("  \n\t\n"),
		"comments only": strings.NewReader("# nothing here\n# really\n"),
	} {
		t.Run(name, func(t *testing.T) {
			cfg, err := Load(r)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if cfg == nil || !cfg.SeparationOfDutiesEnabled() || len(cfg.AllowedGitHosts) != 0 ||
				cfg.ManualApprovalNamespaceSelector != nil || cfg.Defaults != (Defaults{}) || cfg.MaxTimeouts != (MaxTimeouts{}) {
				t.Errorf("want the zero policy, got %+v", cfg)
			}
			sel, _ := cfg.NamespaceSelector()
			if sel.Matches(labels.Set{"kubernetes.io/metadata.name": "prod"}) {
				t.Errorf("zero policy selector must select nothing")
			}
		})
	}
	var nilCfg *Config
	if !nilCfg.SeparationOfDutiesEnabled() || !nilCfg.GitHostAllowed("anything.example") {
		t.Errorf("nil config must be the zero policy")
	}
}

func TestLoadErrors(t *testing.T) {
	cases := []struct {
		name string
		in   string
		want []string // substrings of the error
	}{
		{"unknown top-level field", header + "allowedHosts: [github.com]\n", []string{`unknown field "allowedHosts"`}},
		{"unknown nested field", header + "defaults:\n  engine:\n    imagee: x\n", []string{`unknown field "defaults.engine.imagee"`}},
		{"wrong case", header + "Defaults: {}\n", []string{`unknown field "Defaults"`}},
		{"duplicate in JSON", `{"apiVersion":"admission.terrarun.dev/v1alpha1","kind":"TerraformRunPolicy","kind":"TerraformRunPolicy"}`, []string{"kind"}},
		{"duplicate field", header + "separationOfDuties: true\nseparationOfDuties: false\n", []string{"separationOfDuties"}},
		{"missing apiVersion and kind", "separationOfDuties: true\n", []string{`apiVersion: must be "admission.terrarun.dev/v1alpha1", got ""`, `kind: must be "TerraformRunPolicy"`}},
		{"wrong apiVersion", "apiVersion: admission.terrarun.dev/v1\nkind: TerraformRunPolicy\n", []string{`apiVersion: must be "admission.terrarun.dev/v1alpha1", got "admission.terrarun.dev/v1"`}},
		{"wrong kind", "apiVersion: admission.terrarun.dev/v1alpha1\nkind: Policy\n", []string{`kind: must be "TerraformRunPolicy", got "Policy"`}},
		{"bad duration", header + "maxTimeouts: {plan: 2hours}\n", []string{`maxTimeouts.plan: invalid duration "2hours"`}},
		{"numeric duration", header + "defaults: {timeouts: {apply: 3600}}\n", []string{`defaults.timeouts.apply: invalid duration 3600`}},
		{"zero duration", header + "defaults: {timeouts: {plan: 0s}}\n", []string{"defaults.timeouts.plan: must be positive"}},
		{"negative duration", header + "maxTimeouts: {approval: -1h}\n", []string{"maxTimeouts.approval: must be positive"}},
		{"bad binary", header + "defaults: {engine: {binary: pulumi}}\n", []string{`defaults.engine.binary: unsupported value "pulumi"`}},
		{"bad mode", header + "defaults: {approval: {mode: Sometimes}}\n", []string{`defaults.approval.mode: unsupported value "Sometimes"`}},
		{"bad image", header + "defaults: {engine: {image: \"a b\"}}\n", []string{"defaults.engine.image: must not contain white space"}},
		{"default plan exceeds max", header + "defaults: {timeouts: {plan: 3h}}\nmaxTimeouts: {plan: 2h}\n", []string{"defaults.timeouts.plan: 3h exceeds maxTimeouts.plan (2h)"}},
		{"default apply exceeds max", header + "defaults: {timeouts: {apply: 5h}}\nmaxTimeouts: {apply: 4h}\n", []string{"defaults.timeouts.apply: 5h exceeds maxTimeouts.apply (4h)"}},
		{"default approval exceeds max", header + "defaults: {approval: {timeout: 100h}}\nmaxTimeouts: {approval: 72h}\n", []string{"defaults.approval.timeout: 100h exceeds maxTimeouts.approval (72h)"}},
		{"bad selector", header + "manualApprovalNamespaceSelector: {matchExpressions: [{key: env, operator: Sometimes, values: [prod]}]}\n", []string{"manualApprovalNamespaceSelector: invalid label selector"}},
		{"required approvals out of range", header + "defaults: {approval: {requiredApprovals: 11}}\nminRequiredApprovals: -1\n",
			[]string{"defaults.approval.requiredApprovals: must be between 1 and 10, got 11", "minRequiredApprovals: must be between 1 and 10, got -1"}},
		{"default below the minimum", header + "minRequiredApprovals: 2\n",
			[]string{"defaults.approval.requiredApprovals: 1 is below minRequiredApprovals (2), so runs that set no requiredApprovals would be refused; set it to at least 2"}},
		{"bad host", header + "allowedGitHosts: [\"https://github.com\"]\n", []string{`allowedGitHosts[0]: invalid host "https://github.com"`}},
		{"host with port", header + "allowedGitHosts: [\"github.com:443\"]\n", []string{`allowedGitHosts[0]: invalid host "github.com:443"`}},
		{"inner wildcard", header + "allowedGitHosts: [\"git.*.example.com\"]\n", []string{`allowedGitHosts[0]: invalid host "git.*.example.com": a wildcard is allowed only as a leading`}},
		{"empty host", header + "allowedGitHosts: [\"\"]\n", []string{"allowedGitHosts[0]: must not be empty"}},
		{"inner image wildcard", header + "allowedImages: [\"registry.example.com/*:v1\"]\n", []string{`allowedImages[0]: "registry.example.com/*:v1": "*" may only end a pattern`}},
		{"empty entries", header + "allowedServiceAccounts: [\"\"]\nallowedBackends: [\" s3\"]\n",
			[]string{`allowedServiceAccounts[0]: must be non-empty, without white space, got ""`, `allowedBackends[0]: must be non-empty, without white space, got " s3"`}},
		{"no default image", header + "allowedImages: [\"registry.example.com/*\"]\n",
			[]string{`defaults.engine.image: is not set, and the built-in default image "ghcr.io/terrarun/terrarun-executor:v0.1.0" is not in allowedImages`}},
		{"default image not allowed", header + "defaults: {engine: {image: other.example/x:v1}}\nallowedImages: [\"registry.example.com/*\"]\n",
			[]string{`defaults.engine.image: "other.example/x:v1" is not in allowedImages, so runs that set no image would be refused`}},
		{"several errors reported together", header + "defaults: {engine: {binary: pulumi}, timeouts: {plan: -1m}}\n", []string{"defaults.engine.binary", "defaults.timeouts.plan: must be positive"}},
		{"image verification without keys", header + "imageVerification: {images: [\"registry.example.com/*\"]}\n",
			[]string{"imageVerification.publicKeys: is required"}},
		{"image verification with bad parts", header + "imageVerification:\n  images: [\"registry.*/x\", \"\"]\n  publicKeys: not a key\n  caBundle: not a cert\n  credentialsFile: config.json\n  timeout: 2m\n",
			[]string{`imageVerification.images[0]: "registry.*/x": "*" may only end a pattern`, `imageVerification.images[1]: must be non-empty`,
				"imageVerification.publicKeys: holds no PEM public key", "imageVerification.caBundle: holds no PEM certificate",
				"imageVerification.credentialsFile: must be an absolute path", "imageVerification.timeout: must be positive and at most 30s"}},
		{"taskRunTemplate with bad parts", header + "taskRunTemplate:\n  serviceAccountName: Not_A_Name\n  podTemplate:\n    nodeSelector: {\"bad key!\": x}\n    tolerations: [{operator: Maybe}, {key: k, operator: Exists, value: v, effect: Never}]\n    runtimeClassName: \"g visor\"\n    imagePullSecrets: [{name: \"\"}]\n  task: {name: scan}\n",
			[]string{`taskRunTemplate.serviceAccountName: "Not_A_Name"`, "taskRunTemplate.podTemplate.nodeSelector[bad key!]: name part must consist of",
				`taskRunTemplate.podTemplate.tolerations[0].operator: unsupported value "Maybe"`, "taskRunTemplate.podTemplate.tolerations[0].key: is required unless operator is Exists",
				"taskRunTemplate.podTemplate.tolerations[1].value: must be empty with operator Exists", `taskRunTemplate.podTemplate.tolerations[1].effect: unsupported value "Never"`,
				`taskRunTemplate.podTemplate.runtimeClassName: "g visor"`, `taskRunTemplate.podTemplate.imagePullSecrets[0].name: ""`,
				"taskRunTemplate.task.namespace: is required"}},
		{"taskRunTemplate unknown field", header + "taskRunTemplate: {podTemplate: {env: [{name: X, value: y}]}}\n", []string{`unknown field "taskRunTemplate.podTemplate.env"`}},
		{"not yaml", "{", []string{"decoding TerraformRunPolicy"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Load(strings.NewReader(tc.in))
			if err == nil {
				t.Fatalf("want an error, got %+v", cfg)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestMatchHost(t *testing.T) {
	cases := []struct {
		pattern, host string
		want          bool
	}{
		{"github.com", "github.com", true},
		{"github.com", "GitHub.COM", true},
		{"GitHub.com", "github.com", true},
		{"github.com", "github.com:443", true},
		{"github.com", "github.com.", true},
		{"github.com", "api.github.com", false},
		{"github.com", "github.com.evil.example", false},
		{"github.com", "evilgithub.com", false},
		{"*.corp.example.com", "git.corp.example.com", true},
		{"*.corp.example.com", "a.b.corp.example.com", true},
		{"*.corp.example.com", "GIT.Corp.Example.com:8443", true},
		{"*.corp.example.com", "corp.example.com", false},
		{"*.corp.example.com", "evilcorp.example.com", false},
		{"*.corp.example.com", "corp.example.com.evil.example", false},
		{"*.corp.example.com", "", false},
		{"", "github.com", false},
		{"10.0.0.1", "10.0.0.1:22", true},
	}
	for _, tc := range cases {
		if got := matchHost(tc.pattern, tc.host); got != tc.want {
			t.Errorf("matchHost(%q, %q) = %v, want %v", tc.pattern, tc.host, got, tc.want)
		}
	}
}

func TestFormatDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		2 * time.Hour:                 "2h",
		90 * time.Minute:              "1h30m",
		30 * time.Minute:              "30m",
		45 * time.Second:              "45s",
		time.Hour + 30*time.Second:    "1h0m30s",
		72 * time.Hour:                "72h",
		1500 * time.Millisecond:       "1.5s",
		time.Hour + time.Minute + 1e9: "1h1m1s",
		10*time.Minute + 500*1e6:      "10m0.5s",
		0:                             "0s",
	} {
		if got := FormatDuration(d); got != want {
			t.Errorf("FormatDuration(%v) = %q, want %q", d, got, want)
		}
	}
}
