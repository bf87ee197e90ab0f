package validation

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
)

func TestValidateTerraformRunTask(t *testing.T) {
	valid := func() *terrarun.TerraformRunTask {
		return &terrarun.TerraformRunTask{
			ObjectMeta: metav1.ObjectMeta{Name: "scanner", Namespace: "dev"},
			Spec: terrarun.TerraformRunTaskSpec{
				URL:         "https://scanner.example.com/terrarun",
				HMACKey:     &terrarun.KeySelector{Name: "scanner-hmac", Key: "key"},
				Stages:      []terrarun.RunTaskStage{terrarun.RunTaskPostPlan, terrarun.RunTaskPreApply},
				Enforcement: terrarun.RunTaskMandatory,
				Timeout:     &metav1.Duration{Duration: 10 * time.Minute},
			},
		}
	}
	if errs := ValidateTerraformRunTask(valid()); len(errs) > 0 {
		t.Fatalf("a valid task: %v", errs)
	}
	for name, tc := range map[string]struct {
		mutate func(*terrarun.TerraformRunTask)
		field  string
		detail string
	}{
		"no url":               {func(t *terrarun.TerraformRunTask) { t.Spec.URL = "" }, "spec.url", "https URL"},
		"http over a network":  {func(t *terrarun.TerraformRunTask) { t.Spec.URL = "http://scanner.example.com" }, "spec.url", "must be https"},
		"http on loopback":     {func(t *terrarun.TerraformRunTask) { t.Spec.URL = "http://127.0.0.1:8080/task" }, "spec.url", "a stage listening in its place"},
		"http to localhost":    {func(t *terrarun.TerraformRunTask) { t.Spec.URL = "http://localhost/task" }, "spec.url", "must be https"},
		"a CA that is no PEM":  {func(t *terrarun.TerraformRunTask) { t.Spec.CABundle = []byte("not a certificate") }, "spec.caBundle", "PEM-encoded CA certificates"},
		"credentials in url":   {func(t *terrarun.TerraformRunTask) { t.Spec.URL = "https://u:p@scanner.example.com" }, "spec.url", "must not hold credentials"},
		"relative url":         {func(t *terrarun.TerraformRunTask) { t.Spec.URL = "/task" }, "spec.url", "absolute URL"},
		"another scheme":       {func(t *terrarun.TerraformRunTask) { t.Spec.URL = "ftp://scanner.example.com" }, "spec.url", "https URL"},
		"no stages":            {func(t *terrarun.TerraformRunTask) { t.Spec.Stages = nil }, "spec.stages", "PrePlan"},
		"an unknown stage":     {func(t *terrarun.TerraformRunTask) { t.Spec.Stages = []terrarun.RunTaskStage{"PostDeploy"} }, "spec.stages[0]", "supported values"},
		"a repeated stage":     {func(t *terrarun.TerraformRunTask) { t.Spec.Stages = []terrarun.RunTaskStage{"PrePlan", "PrePlan"} }, "spec.stages[1]", ""},
		"an unknown level":     {func(t *terrarun.TerraformRunTask) { t.Spec.Enforcement = "SoftMandatory" }, "spec.enforcement", "supported values"},
		"a timeout too long":   {func(t *terrarun.TerraformRunTask) { t.Spec.Timeout.Duration = 2 * time.Hour }, "spec.timeout", "at most 1h"},
		"a zero timeout":       {func(t *terrarun.TerraformRunTask) { t.Spec.Timeout.Duration = 0 }, "spec.timeout", "more than 0s"},
		"a key without a name": {func(t *terrarun.TerraformRunTask) { t.Spec.HMACKey.Name = "" }, "spec.hmacKey.name", "name a secret"},
		"a bad selector": {func(t *terrarun.TerraformRunTask) {
			t.Spec.RunSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"a b": "c"}}
		}, "spec.runSelector.matchLabels", ""},
	} {
		task := valid()
		tc.mutate(task)
		errs := ValidateTerraformRunTask(task)
		if len(errs) != 1 || errs[0].Field != tc.field || !strings.Contains(errs.ToAggregate().Error(), tc.detail) {
			t.Errorf("%s: %v, want one error of %s saying %q", name, errs, tc.field, tc.detail)
		}
	}
}
