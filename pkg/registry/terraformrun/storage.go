package terraformrun

import (
	"context"
	"fmt"
	"io"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/klog/v2"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/artifacts"
)

// Storage bundles the REST storage of terraformruns and its subresources.
type Storage struct {
	// Run serves the main resource.
	Run *REST
	// Status serves terraformruns/status.
	Status *StatusREST
	// Approve, Override, Discard and Cancel serve the action subresources.
	Approve  ActionStorage
	Override ActionStorage
	Discard  ActionStorage
	Cancel   ActionStorage
	// Plan, Logs and Outputs serve the streamed subresources.
	Plan    *PlanREST
	Logs    *LogsREST
	Outputs *OutputsREST
	// State and StateLock serve the state terrarun keeps for stages.
	State     *StateREST
	StateLock *StateLockREST
	// TaskResult serves the run tasks' answers.
	TaskResult *TaskResultREST

	waiters *waiters
}

// EndWaits ends every log follow and plan wait, and refuses new ones: the
// server calls it when it begins to shut down, so that open follows end at
// once rather than hold the shutdown up.
func (s *Storage) EndWaits() { s.waiters.stop() }

// ActionStorage is the storage of an action subresource: approve, discard or
// cancel.
type ActionStorage interface {
	rest.Storage
	rest.NamedCreater
}

// Artifacts is what the run's storage and subresources do with its
// artifacts (package artifacts' Store).
type Artifacts interface {
	Put(ctx context.Context, run artifacts.RunRef, kind artifacts.Kind, r io.Reader) (artifacts.Meta, error)
	PutAll(ctx context.Context, run artifacts.RunRef, next func() (artifacts.Kind, io.Reader, error)) (map[artifacts.Kind]artifacts.Meta, error)
	Get(ctx context.Context, run artifacts.RunRef, kind artifacts.Kind) (io.ReadCloser, artifacts.Meta, error)
	Stat(ctx context.Context, run artifacts.RunRef, kind artifacts.Kind) (artifacts.Meta, error)
	AppendLog(ctx context.Context, run artifacts.RunRef, stage string, attempt int32, p []byte) error
	EndLog(ctx context.Context, run artifacts.RunRef, stage string, attempt int32, p []byte) error
	CloseLog(ctx context.Context, run artifacts.RunRef, stage string, attempt int32) error
	StreamLog(ctx context.Context, run artifacts.RunRef, stage string, attempt int32, opts artifacts.LogOptions, w io.Writer) error
	WatchLogFollowers(ctx context.Context, run artifacts.RunRef, stage string, attempt int32) (*artifacts.LogFollowers, error)
	DeleteRun(ctx context.Context, run artifacts.RunRef) error
}

// Deps are what the subresources need besides the object store.
type Deps struct {
	// Artifacts stores plans, logs and outputs.
	Artifacts Artifacts
	// Defaults fill spec.engine where neither the run nor the cluster
	// policy sets it.
	Defaults terrarun.ServerDefaults
	// OnDelete, when set, is called after a run is deleted, for example to stop
	// its executions. Artifacts are removed by the storage itself.
	OnDelete func(ctx context.Context, namespace, name, uid string)
	// NoHostCluster is true in standalone mode: there is no cluster whose
	// Secret could receive a run's outputs, so spec.outputsSecret is refused.
	NoHostCluster bool
	// MaxFollowsPerUser caps the log follows and plan waits one user holds
	// open on this server; 0 means DefaultMaxFollowsPerUser.
	MaxFollowsPerUser int
	// States is the state backend served to the stages of runs that name
	// none; nil in standalone mode, where those runs keep their state in
	// the data directory.
	States *StateBackend
	// RunsOnState lists the other runs on a run's state, for the approve
	// subresource's early refusal of a plan the state has moved past; nil
	// skips that check (the run controller still discards a stale plan).
	RunsOnState RunsOnState
	// CheckPolicy checks a plan against the TerraformPolicies when the plan
	// stage records it; nil checks none.
	CheckPolicy PolicyCheck
}

// PolicyCheck returns what the policies say of run's plan, whose digest is
// digest and whose redacted JSON is planJSON (planErr when it could not be
// read: the mandatory validations fail closed). An error fails the plan's
// upload, which the stage retries.
type PolicyCheck func(ctx context.Context, run *v1alpha1.TerraformRun, planJSON []byte, planErr error, digest string) (*v1alpha1.PolicyStatus, error)

// RunsOnState returns the other runs on run's Terraform state
// (runrules.SameState), as an informer of runs shows them.
type RunsOnState func(ctx context.Context, run *v1alpha1.TerraformRun) ([]*v1alpha1.TerraformRun, error)

// REST serves the terraformruns resource from the generic registry store.
type REST struct {
	*genericregistry.Store
}

var (
	_ rest.ShortNamesProvider   = &REST{}
	_ rest.CategoriesProvider   = &REST{}
	_ rest.SingularNameProvider = &REST{}
)

// ShortNames lets kubectl resolve `tfrun` and `tfr`.
func (r *REST) ShortNames() []string { return []string{"tfrun", "tfr"} }

// Categories puts runs in `kubectl get terraform`.
func (r *REST) Categories() []string { return []string{"terraform"} }

// NewStorage builds the store of terraformruns and the storage of every
// subresource. The store uses the watch cache whenever optsGetter enables it.
func NewStorage(scheme *runtime.Scheme, optsGetter generic.RESTOptionsGetter, deps Deps) (*Storage, error) {
	strategy := NewStrategy(scheme, deps.Defaults)
	strategy.noHostCluster = deps.NoHostCluster
	store := &genericregistry.Store{
		NewFunc:                   func() runtime.Object { return &terrarun.TerraformRun{} },
		NewListFunc:               func() runtime.Object { return &terrarun.TerraformRunList{} },
		PredicateFunc:             Match,
		DefaultQualifiedResource:  terrarun.Resource("terraformruns"),
		SingularQualifiedResource: terrarun.Resource("terraformrun"),

		CreateStrategy:      strategy,
		UpdateStrategy:      strategy,
		DeleteStrategy:      strategy,
		ResetFieldsStrategy: strategy,

		TableConvertor: TableConvertor{},
	}
	// Artifacts live in etcd beside the object, not in it: remove them with the
	// run. Their lease removes them anyway if this is missed.
	store.AfterDelete = func(obj runtime.Object, _ *metav1.DeleteOptions) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		run, ok := obj.(*terrarun.TerraformRun)
		if !ok {
			return
		}
		if deps.OnDelete != nil {
			deps.OnDelete(ctx, run.Namespace, run.Name, string(run.UID))
		}
		if deps.Artifacts == nil {
			return
		}
		if err := deps.Artifacts.DeleteRun(ctx, runRef(run)); err != nil {
			klog.ErrorS(err, "Removing the artifacts of a deleted run; their retention lease removes them later", "run", klog.KObj(run))
		}
	}
	options := &generic.StoreOptions{RESTOptions: optsGetter, AttrFunc: GetAttrs}
	if err := store.CompleteWithOptions(options); err != nil {
		return nil, fmt.Errorf("building terraformruns storage: %w", err)
	}

	statusStore := *store
	statusStrategy := NewStatusStrategy(strategy)
	statusStore.UpdateStrategy = statusStrategy
	statusStore.ResetFieldsStrategy = statusStrategy

	// The handlers record approvals, plans and outputs, which /status keeps.
	recordStore := *store
	records := recordStrategy(strategy)
	recordStore.UpdateStrategy = records
	recordStore.ResetFieldsStrategy = records
	status := statusWriter{store: &recordStore}
	waits := newWaiters(deps.MaxFollowsPerUser)
	base := connectBase{status: status, artifacts: deps.Artifacts, waiters: waits}
	return &Storage{
		waiters:    waits,
		Run:        &REST{store},
		Status:     &StatusREST{store: &statusStore},
		Approve:    newApproveREST(status, deps.RunsOnState),
		Override:   newOverrideREST(status),
		Discard:    newDiscardREST(status),
		Cancel:     newCancelREST(status),
		Plan:       &PlanREST{connectBase: base, checkPolicy: deps.CheckPolicy},
		Logs:       &LogsREST{connectBase: base},
		Outputs:    &OutputsREST{connectBase: base},
		State:      &StateREST{stateBase{connectBase: base, backend: deps.States}},
		StateLock:  &StateLockREST{stateBase{connectBase: base, backend: deps.States}},
		TaskResult: &TaskResultREST{status: status, now: time.Now},
	}, nil
}
