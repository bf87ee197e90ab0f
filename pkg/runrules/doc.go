// Package runrules owns the rules of a TerraformRun that more than one part
// of terrarun acts on, each decided here and nowhere else:
//
//   - finished: Finished, Final and Phase;
//   - the stages: CurrentStage and PlanStart;
//   - approved: RequiredApprovals, Approvers, Approved and Requested;
//   - carrier: CarriesApply, Carrier and WritesFor, for an apply that the
//     execution of its plan stage carries;
//   - the state: StateKey, ChangedStateAfter, AppliedSince (stale) and
//     Busy (the state holder an approval waits for).
//
// They are pure functions over the v1alpha1 types, which the run controller
// and the executors hold. The registry, which holds the internal types,
// converts a run once (FromInternal) before it asks. The approve handler
// asks to refuse early, with a message that says what to do; the run
// controller is the only one that decides.
package runrules
