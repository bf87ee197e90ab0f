package terraformrunpolicy

import (
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/terrarun/terrarun/pkg/admission/policy"
	"github.com/terrarun/terrarun/pkg/apis/terrarun"
)

func TestCheckApprover(t *testing.T) {
	off, on := false, true
	run := newRun("prod", nil) // created by alice
	cases := []struct {
		name     string
		cfg      *policy.Config
		run      *terrarun.TerraformRun
		approver user.Info
		wantErr  string
	}{
		{name: "another user may approve", cfg: &policy.Config{}, run: run, approver: bob},
		{name: "the creator may not approve (default)", cfg: &policy.Config{}, run: run, approver: alice,
			wantErr: "separation of duties: alice created this run and may not approve it; ask another user with create on terraformruns/approve"},
		{name: "nil policy keeps separation of duties on", cfg: nil, run: run, approver: alice,
			wantErr: "separation of duties: alice created this run"},
		{name: "explicitly on", cfg: &policy.Config{SeparationOfDuties: &on}, run: run, approver: alice,
			wantErr: "separation of duties"},
		{name: "same name, other groups and uid still denied", cfg: &policy.Config{}, run: run,
			approver: &user.DefaultInfo{Name: "alice", UID: "other", Groups: []string{"admins"}}, wantErr: "separation of duties"},
		{name: "disabled: the creator may approve", cfg: &policy.Config{SeparationOfDuties: &off}, run: run, approver: alice},
		{name: "run without a creator", cfg: &policy.Config{}, run: newRun("prod", func(r *terrarun.TerraformRun) { r.Spec.Creator = nil }), approver: alice},
		{name: "unknown approver", cfg: &policy.Config{SeparationOfDuties: &off}, run: run, approver: nil, wantErr: "approving user is unknown"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := checkApprover(tc.cfg, tc.run, tc.approver)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("want allowed, got %v", err)
				}
				return
			}
			if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("want Forbidden containing %q, got %v", tc.wantErr, err)
			}
			if !strings.Contains(err.Error(), `terraformruns.terrarun.dev "run" is forbidden`) {
				t.Errorf("error does not name the run: %v", err)
			}
		})
	}
	if err := checkApprover(nil, nil, bob); !apierrors.IsBadRequest(err) {
		t.Errorf("nil run: want BadRequest, got %v", err)
	}
}
