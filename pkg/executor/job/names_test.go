package job

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
)

func TestJobNameShort(t *testing.T) {
	if got, want := JobName("web", "plan", 1), "web-plan-1"; got != want {
		t.Errorf("JobName = %q, want %q", got, want)
	}
	if got, want := JobName("web", "apply", 12), "web-apply-12"; got != want {
		t.Errorf("JobName = %q, want %q", got, want)
	}
}

func TestJobNameDeterministicAndValid(t *testing.T) {
	long := strings.Repeat("a", 100)
	longDots := strings.Repeat("ab.", 33) + "c" // 100 characters
	cases := []string{
		"web",
		"a",
		long,
		long[:99] + "b",
		longDots,
		"x.y",
		"x-y",
		strings.Repeat("a", 53),
		strings.Repeat("a", 54),
		strings.Repeat("a", 56) + ".b",
		strings.Repeat("a", 253),
	}
	if len(long) != 100 || len(longDots) != 100 {
		t.Fatal("bad fixture")
	}
	seen := map[string]string{}
	for _, run := range cases {
		for _, st := range []v1alpha1.StageName{v1alpha1.StagePlan, v1alpha1.StageApply} {
			for _, attempt := range []int32{1, 7, 2147483647} {
				name := JobName(run, st, attempt)
				if name != JobName(run, st, attempt) {
					t.Errorf("JobName(%q, %s, %d) is not deterministic", run, st, attempt)
				}
				if errs := validation.IsDNS1123Label(name); len(errs) != 0 {
					t.Errorf("JobName(%q, %s, %d) = %q is not a DNS label: %v", run, st, attempt, name, errs)
				}
				if errs := validation.IsDNS1123Label(stageSecretName(name)); len(errs) != 0 && len(validation.IsDNS1123Subdomain(stageSecretName(name))) != 0 {
					t.Errorf("stageSecretName(%q) is not a valid name: %v", name, errs)
				}
				if other, dup := seen[name]; dup {
					t.Errorf("JobName(%q, %s, %d) = %q, as for %s", run, st, attempt, name, other)
				}
				seen[name] = run + "/" + string(st)
			}
		}
		if errs := validation.IsValidLabelValue(runLabelValue(run)); len(errs) != 0 {
			t.Errorf("runLabelValue(%q) = %q is not a label value: %v", run, runLabelValue(run), errs)
		}
	}
}

func TestJobNameHundredCharacterRun(t *testing.T) {
	run := strings.Repeat("r", 100)
	name := JobName(run, "plan", 3)
	if len(name) > 63 {
		t.Fatalf("JobName of a 100-character run = %q, %d characters", name, len(name))
	}
	if !strings.HasPrefix(name, "rrrr") || !strings.HasSuffix(name, "-plan-3") {
		t.Errorf("JobName = %q, want a prefix of the run name and -plan-3", name)
	}
	// Two long names that share their first 63 characters stay apart.
	other := strings.Repeat("r", 99) + "s"
	if JobName(other, "plan", 3) == name {
		t.Errorf("JobName of two different 100-character runs is the same: %q", name)
	}
	if got := runLabelValue(run); len(got) > 63 || got == runLabelValue(other) {
		t.Errorf("runLabelValue of 100-character runs: %q and %q", got, runLabelValue(other))
	}
}

func TestJobNameDots(t *testing.T) {
	// Dots are not allowed in DNS labels, and "a.b" must not collide with "a-b".
	if a, b := JobName("a.b", "plan", 1), JobName("a-b", "plan", 1); a == b {
		t.Errorf("JobName(a.b) = JobName(a-b) = %q", a)
	}
	if got := runLabelValue("a.b"); got != "a.b" {
		t.Errorf("runLabelValue(a.b) = %q, want the name: dots are valid in label values", got)
	}
}
