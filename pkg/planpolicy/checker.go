package planpolicy

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/metrics"
)

// Checker checks plans against the TerraformPolicies of the server.
type Checker struct {
	// Policies lists every policy; an error (say, a cache not synced yet)
	// fails the check, and the plan is not recorded.
	Policies func() ([]*v1alpha1.TerraformPolicy, error)

	mu       sync.Mutex
	compiled map[types.UID]*Policy
}

// Check evaluates every policy that matches the run of in and returns what
// they said of its plan, digest. It compiles each policy once per
// resourceVersion. A policy stored with an expression that no longer
// compiles fails closed: each of its validations is recorded as an Error of
// its enforcement.
func (c *Checker) Check(ctx context.Context, in *Input, digest string) (*v1alpha1.PolicyStatus, error) {
	policies, err := c.Policies()
	if err != nil {
		return nil, fmt.Errorf("listing the TerraformPolicies: %w", err)
	}
	slices.SortFunc(policies, func(a, b *v1alpha1.TerraformPolicy) int { return strings.Compare(a.Name, b.Name) })
	c.forgetDeleted(policies)
	now := metav1.NewTime(time.Now())
	status := &v1alpha1.PolicyStatus{PlanDigest: digest, CheckedAt: &now}
	for _, pol := range policies {
		p, errs := c.compile(pol)
		if len(errs) > 0 {
			if !policyMatches(pol, in) {
				continue
			}
			status.Policies = append(status.Policies, v1alpha1.CheckedPolicy{Name: pol.Name, ResourceVersion: pol.ResourceVersion})
			results, approvals := brokenPolicy(pol, errs.ToAggregate().Error())
			status.Results = append(status.Results, results...)
			status.Approvals = append(status.Approvals, approvals...)
			continue
		}
		if !p.Matches(in) {
			continue
		}
		start := time.Now()
		ev := p.Evaluate(ctx, in)
		metrics.PolicyEvaluationSeconds.Observe(time.Since(start).Seconds())
		status.Policies = append(status.Policies, v1alpha1.CheckedPolicy{Name: pol.Name, ResourceVersion: pol.ResourceVersion})
		status.Results = append(status.Results, ev.Results...)
		status.Approvals = append(status.Approvals, ev.Approvals...)
	}
	for _, r := range status.Results {
		metrics.PolicyResults.WithLabelValues(string(r.Enforcement), string(r.Outcome)).Inc()
	}
	return status, nil
}

// compile returns pol compiled, from the cache when its resourceVersion is
// the one compiled.
func (c *Checker) compile(pol *v1alpha1.TerraformPolicy) (*Policy, field.ErrorList) {
	c.mu.Lock()
	p := c.compiled[pol.UID]
	c.mu.Unlock()
	if p != nil && p.ResourceVersion == pol.ResourceVersion {
		return p, nil
	}
	p, errs := Compile(pol, StoredExpressions)
	if len(errs) > 0 {
		return nil, errs
	}
	c.mu.Lock()
	if c.compiled == nil {
		c.compiled = map[types.UID]*Policy{}
	}
	c.compiled[pol.UID] = p
	c.mu.Unlock()
	return p, nil
}

// forgetDeleted drops the compiled policies that are no longer listed.
func (c *Checker) forgetDeleted(policies []*v1alpha1.TerraformPolicy) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.compiled) <= len(policies) {
		return
	}
	listed := make(map[types.UID]bool, len(policies))
	for _, p := range policies {
		listed[p.UID] = true
	}
	for uid := range c.compiled {
		if !listed[uid] {
			delete(c.compiled, uid)
		}
	}
}

// policyMatches is Matches for a policy that does not compile: its
// constraints that parse decide, and one that does not matches.
func policyMatches(pol *v1alpha1.TerraformPolicy, in *Input) bool {
	m := pol.Spec.MatchConstraints
	if m == nil {
		return true
	}
	return (len(m.Operations) == 0 || slices.Contains(m.Operations, in.Operation)) &&
		(len(m.Triggers) == 0 || slices.Contains(m.Triggers, in.Trigger))
}

// brokenPolicy fails every validation of a policy that does not compile,
// and applies every approval rule.
func brokenPolicy(pol *v1alpha1.TerraformPolicy, why string) (out []v1alpha1.PolicyResult, approvals []v1alpha1.PolicyApprovalRequirement) {
	for i, v := range pol.Spec.Validations {
		name := v.Name
		if name == "" {
			name = fmt.Sprintf("validations[%d]", i)
		}
		e := v.Enforcement
		if e == "" {
			e = v1alpha1.EnforcementHardMandatory
		}
		out = append(out, v1alpha1.PolicyResult{Policy: pol.Name, Validation: name, Enforcement: e, Outcome: v1alpha1.PolicyError,
			Message: fmt.Sprintf("%s: the policy does not compile on this server: %s", failsClosed(e), why)})
	}
	for i, a := range pol.Spec.Approvals {
		name := a.Name
		if name == "" {
			name = fmt.Sprintf("approvals[%d]", i)
		}
		approvals = append(approvals, v1alpha1.PolicyApprovalRequirement{Policy: pol.Name, Rule: name, RequiredApprovals: a.RequiredApprovals, Groups: a.Groups,
			Message: "applied because the policy does not compile on this server: " + why})
	}
	return out, approvals
}
