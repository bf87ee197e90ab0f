package terraformrun

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/utils/clock"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
	"github.com/terrarun/terrarun/pkg/registry/table"
	"github.com/terrarun/terrarun/pkg/runrules"
)

// TableConvertor prints runs for `kubectl get`: NAME, PHASE, PLAN, POLICY, APPROVED-BY
// and AGE, plus OPERATION, SOURCE and ENGINE with `-o wide`.
type TableConvertor struct {
	// Clock measures AGE; nil means the real clock.
	Clock clock.PassiveClock
}

var columns = []metav1.TableColumnDefinition{
	{Name: "Name", Type: "string", Format: "name", Description: "Name of the run."},
	{Name: "Phase", Type: "string", Description: "Where the run is in its lifecycle."},
	{Name: "Plan", Type: "string", Description: "Resources to add (+), change (~) and destroy (-), or - before a plan exists."},
	{Name: "Policy", Type: "string", Description: "What the TerraformPolicies said of the plan: Passed, Advisory (only advisory checks failed), Held (a soft-mandatory failure waits for an override), Overridden, Denied, or - when none checked it."},
	{Name: "Approved-By", Type: "string", Description: "The user who approved the plan."},
	{Name: "Age", Type: "string", Description: "Time since the run was created."},
	{Name: "Operation", Type: "string", Priority: 1, Description: "Apply, Destroy or Plan."},
	{Name: "Source", Type: "string", Priority: 1, Description: "Where the configuration comes from."},
	{Name: "Engine", Type: "string", Priority: 1, Description: "terraform or tofu."},
}

// ConvertToTable converts one run or a list of runs into a table.
func (c TableConvertor) ConvertToTable(ctx context.Context, obj runtime.Object, tableOptions runtime.Object) (*metav1.Table, error) {
	clk := c.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	return table.Convert(obj, tableOptions, columns, func(obj runtime.Object) ([]metav1.TableRow, error) {
		switch o := obj.(type) {
		case *terrarun.TerraformRun:
			return []metav1.TableRow{row(o, clk)}, nil
		case *terrarun.TerraformRunList:
			rows := make([]metav1.TableRow, 0, len(o.Items))
			for i := range o.Items {
				rows = append(rows, row(&o.Items[i], clk))
			}
			return rows, nil
		default:
			return nil, fmt.Errorf("cannot print %T as a TerraformRun table", obj)
		}
	})
}

func row(run *terrarun.TerraformRun, clk clock.PassiveClock) metav1.TableRow {
	approvedBy := "<none>"
	if run.Status.Approval != nil && run.Status.Approval.ApprovedBy != "" {
		approvedBy = run.Status.Approval.ApprovedBy
	}
	age := "<unknown>"
	if !run.CreationTimestamp.IsZero() {
		age = duration.HumanDuration(clk.Since(run.CreationTimestamp.Time))
	}
	return metav1.TableRow{
		Object: runtime.RawExtension{Object: run},
		Cells: []interface{}{
			run.Name,
			string(run.Status.Phase),
			planSummary(run.Status.Plan),
			policySummary(run),
			approvedBy,
			age,
			string(run.Spec.Operation),
			sourceSummary(&run.Spec.Source),
			string(run.Spec.Engine.Binary),
		},
	}
}

// planSummary renders a plan as `+a ~c -d`, or `-` before a plan exists.
func planSummary(p *terrarun.PlanSummary) string {
	if p == nil || p.CompletedAt == nil && p.Digest == "" {
		return "-"
	}
	return fmt.Sprintf("+%d ~%d -%d", p.Add, p.Change, p.Destroy)
}

// policySummary is runrules.PolicyVerdict of a run of the internal types.
func policySummary(run *terrarun.TerraformRun) string {
	if run.Status.Policy == nil {
		return "-"
	}
	return runrules.PolicyVerdict(runrules.FromInternal(run))
}

// sourceSummary renders the source in a few words, without credentials.
func sourceSummary(s *terrarun.Source) string {
	switch {
	case s.Git != nil:
		where := s.Git.URL
		if u, err := url.Parse(s.Git.URL); err == nil {
			where = u.Host + u.Path
		}
		if s.Git.Path != "" {
			where += "//" + strings.TrimPrefix(s.Git.Path, "/")
		}
		return fmt.Sprintf("git:%s@%s", where, s.Git.Ref)
	case s.OCI != nil:
		where := strings.TrimPrefix(s.OCI.URL, "oci://")
		if s.OCI.Path != "" {
			where += "//" + s.OCI.Path
		}
		switch r := s.OCI.Ref; {
		case r == nil || r.Tag == "" && r.Semver == "" && r.Digest == "":
			return "oci:" + where + ":latest"
		case r.Digest != "":
			return "oci:" + where + "@" + r.Digest[:min(len(r.Digest), 19)]
		case r.Semver != "":
			return "oci:" + where + ":" + r.Semver
		default:
			return "oci:" + where + ":" + r.Tag
		}
	case s.ConfigMap != nil:
		return "configmap:" + s.ConfigMap.Name
	case len(s.Inline) == 1:
		return "inline:1 file"
	case len(s.Inline) > 1:
		return fmt.Sprintf("inline:%d files", len(s.Inline))
	default:
		return "<none>"
	}
}
