// Package terraformworkspace is the workspace controller: it keeps each
// TerraformWorkspace's desired state applied by creating TerraformRuns, one
// at a time, labeled terrarun.dev/workspace and owned by the workspace.
//
// A run is created when the hash of what terraform would do (the effective
// template, see Hash) differs from the last applied one, when the rerun
// subresource asks for one, when the drift interval has passed (a plan-only
// run), when a drift check found changes and driftPolicy is Apply, and when
// a workspace with destroyOnDelete is deleted (a Destroy run). Everything it
// decides is derived from the workspace and its runs, as the informers show
// them, so a restart starts nothing that was already applied.
package terraformworkspace
