package terraformrun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/klog/v2"

	"github.com/terrarun/terrarun/pkg/apis/terrarun"
	"github.com/terrarun/terrarun/pkg/apis/terrarun/v1alpha1"
	"github.com/terrarun/terrarun/pkg/executor/auth"
	"github.com/terrarun/terrarun/pkg/runrules"
	"github.com/terrarun/terrarun/pkg/statestore"
)

// StateBackend is the state backend that terrarun serves to the stages of
// runs that name no backend, in cluster mode (stage.ServedBackend).
type StateBackend struct {
	// Store keeps the states.
	Store *statestore.Store
	// NamespaceUID returns the UID of a namespace of the host cluster.
	NamespaceUID func(ctx context.Context, namespace string) (string, error)
	// Legacy returns the state that the kubernetes backend kept for a
	// workspace of a namespace before terrarun served state, and where it
	// is, for a one-time import; nil bytes when there is none.
	Legacy func(ctx context.Context, namespace, workspace string) ([]byte, string, error)
}

// Headers of the state subresources' answers, which terrarun-executor
// reports in the stage's log.
const (
	// StateImportedHeader names where a state imported on this read came from.
	StateImportedHeader = "X-Terrarun-State-Imported"
	// StateBrokenLockHeader names the ended stage whose lock a lock request
	// took over.
	StateBrokenLockHeader = "X-Terrarun-State-Broken-Lock"
)

// maxLockBody bounds a lock request's body.
const maxLockBody = 16 << 10

// stateBase is shared by the state and statelock subresources.
type stateBase struct {
	connectBase
	backend *StateBackend
}

// NewConnectOptions returns the options of a request: a TerraformRunStateOptions.
func (r *stateBase) NewConnectOptions() (runtime.Object, bool, string) {
	return &terrarun.TerraformRunStateOptions{}, false, ""
}

// StateREST serves terraformruns/state: GET reads the state of the run's
// workspace, POST ?lockID= writes a version of it. Only the executor of the
// run's current stage may use it, and only the apply stage writes.
type StateREST struct{ stateBase }

var _ rest.Connecter = &StateREST{}

// StateLockREST serves terraformruns/statelock: GET reads the lock of the
// run's state, POST takes it (the body is the engine's lock information),
// DELETE ?lockID= releases it. Reading is authorized by RBAC on the
// subresource; taking and releasing are the current stage executor's.
type StateLockREST struct{ stateBase }

var _ rest.Connecter = &StateLockREST{}

// ConnectMethods are GET and POST.
func (r *StateREST) ConnectMethods() []string { return []string{http.MethodGet, http.MethodPost} }

// ConnectMethods are GET, POST and DELETE.
func (r *StateLockREST) ConnectMethods() []string {
	return []string{http.MethodGet, http.MethodPost, http.MethodDelete}
}

// prepareState loads the run of a state request and names its state.
func (r *stateBase) prepareState(ctx context.Context, name string, options runtime.Object, what string) (*terrarun.TerraformRun, statestore.Ref, *terrarun.TerraformRunStateOptions, string, error) {
	opts, ok := options.(*terrarun.TerraformRunStateOptions)
	if !ok {
		return nil, statestore.Ref{}, nil, "", apierrors.NewInternalError(fmt.Errorf("invalid options object: %T", options))
	}
	info, ok := genericapirequest.RequestInfoFrom(ctx)
	if !ok {
		return nil, statestore.Ref{}, nil, "", apierrors.NewInternalError(errors.New("the request has no RequestInfo"))
	}
	if r.backend == nil {
		return nil, statestore.Ref{}, nil, "", notFound(name, what, "this server serves no state: in standalone mode a run that names no backend keeps its state in the server's data directory")
	}
	run, err := r.status.get(ctx, name)
	if err != nil {
		return nil, statestore.Ref{}, nil, "", err
	}
	if b := run.Spec.Backend; b != nil && b.Type != "" {
		return nil, statestore.Ref{}, nil, "", notFound(name, what, fmt.Sprintf("run %q keeps its state in its own %s backend (spec.backend), not in the one terrarun serves", name, b.Type))
	}
	uid, err := r.backend.NamespaceUID(ctx, run.Namespace)
	if err != nil {
		return nil, statestore.Ref{}, nil, "", err
	}
	workspace := run.Spec.Workspace
	if workspace == "" {
		workspace = "default"
	}
	return run, statestore.Ref{Namespace: run.Namespace, NamespaceUID: uid, Workspace: workspace}, opts, info.Verb, nil
}

// stateHolder returns the stage execution whose executor sends the
// request, as the server knows it: the stage it writes for (an apply its
// plan execution carries, see runrules.WritesFor). Anyone else is refused, as
// checkExecutor refuses.
func stateHolder(ctx context.Context, run *terrarun.TerraformRun, what string) (statestore.Holder, error) {
	id, isExecutor, err := auth.IdentityFrom(ctx)
	if err != nil || !isExecutor || id.Namespace != run.Namespace || id.Name != run.Name || id.UID != string(run.UID) {
		// checkExecutor says why: not an executor, an unverified or false
		// claim, or another run's.
		err := checkExecutor(ctx, run, terrarun.StagePlan, 0, what)
		if err == nil {
			err = apierrors.NewForbidden(terrarun.Resource("terraformruns/"+what), run.Name, errors.New("only the executor of this run's current stage may use its state"))
		}
		return statestore.Holder{}, err
	}
	stageName, attempt := runrules.WritesFor(runrules.FromInternal(run), v1alpha1.StageName(id.Stage), id.Attempt)
	if err := checkExecutor(ctx, run, terrarun.StageName(stageName), 0, what); err != nil {
		return statestore.Holder{}, err
	}
	return statestore.Holder{Run: run.Name, RunUID: string(run.UID), Stage: string(stageName), Attempt: attempt}, nil
}

// holderStage returns the stage record of holder's attempt when its run
// exists with its UID and the attempt is the run's current one of its
// stage; nil otherwise.
func (r *stateBase) holderStage(ctx context.Context, holder statestore.Holder) (*v1alpha1.StageStatus, error) {
	run, err := r.status.get(ctx, holder.Run)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	st := runrules.CurrentStage(runrules.FromInternal(run), v1alpha1.StageName(holder.Stage))
	if string(run.UID) != holder.RunUID || st == nil || st.Attempt != holder.Attempt {
		return nil, nil
	}
	return st, nil
}

// running says whether holder's stage attempt is its run's current one and
// has not ended.
func (r *stateBase) running(ctx context.Context, holder statestore.Holder) (bool, error) {
	st, err := r.holderStage(ctx, holder)
	return st != nil && st.CompletionTime == nil, err
}

// alive says whether holder's lock must stay: its stage is running, or is
// an apply lost with its executor, which may still be changing
// infrastructure on a node out of reach (a run's spec.forceUnlock releases
// that lock, once someone has looked). A lost apply never writes the state
// again: its stage has ended, so stateHolder refuses it.
func (r *stateBase) alive(ctx context.Context, holder statestore.Holder) (bool, error) {
	st, err := r.holderStage(ctx, holder)
	if st == nil || err != nil {
		return false, err
	}
	lostApply := st.Name == v1alpha1.StageApply && st.Reason == terrarun.ReasonExecutorLost
	return st.CompletionTime == nil || lostApply, nil
}

// Connect serves a read or a write of the state.
func (r *StateREST) Connect(ctx context.Context, name string, options runtime.Object, responder rest.Responder) (http.Handler, error) {
	run, ref, opts, verb, err := r.prepareState(ctx, name, options, "state")
	if err != nil {
		return nil, err
	}
	holder, err := stateHolder(ctx, run, "state")
	if err != nil {
		return nil, err
	}
	switch verb {
	case "get":
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			data, v, err := r.backend.Store.Get(ctx, ref)
			if errors.Is(err, statestore.ErrNotFound) {
				source, ierr := r.importLegacy(ctx, ref)
				switch {
				case ierr != nil:
					err = ierr
				case source != "":
					w.Header().Set(StateImportedHeader, source)
					data, v, err = r.backend.Store.Get(ctx, ref)
				}
			}
			switch {
			case errors.Is(err, statestore.ErrNotFound):
				w.WriteHeader(http.StatusNoContent)
				return
			case err != nil:
				responder.Error(stateError(err, name))
				return
			}
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Cache-Control", "no-store")
			w.Header().Set("Content-Length", strconv.Itoa(len(data)))
			w.Header().Set("ETag", strconv.Quote(v.SHA256))
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write(data)
		}), nil
	case "create":
		if holder.Stage != string(terrarun.StageApply) {
			return nil, apierrors.NewForbidden(terrarun.Resource("terraformruns/state"), name,
				fmt.Errorf("the %s stage reads the state; only the apply stage writes it", holder.Stage))
		}
		if opts.LockID == "" {
			return nil, apierrors.NewBadRequest("a write of the state needs lockID, the ID of the lock this stage holds")
		}
		return uploadHandler(responder, func(req *http.Request) error {
			limit := r.backend.Store.Limits().State
			data, err := io.ReadAll(io.LimitReader(req.Body, limit+1))
			if err != nil {
				return apierrors.NewBadRequest("reading the state: " + err.Error())
			}
			if int64(len(data)) > limit {
				return apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("the state is larger than the %d bytes a state may take (--max-state-bytes)", limit))
			}
			v, err := r.backend.Store.Put(ctx, ref, holder, opts.LockID, data)
			if err != nil {
				return stateError(err, name)
			}
			klog.FromContext(ctx).V(2).Info("Stored a state version", "run", klog.KObj(run), "workspace", ref.Workspace, "serial", v.Serial, "bytes", v.Size)
			return nil
		}), nil
	}
	return nil, apierrors.NewMethodNotSupported(terrarun.Resource("terraformruns/state"), verb)
}

// importLegacy imports the state that the kubernetes backend kept for ref
// before, once, and returns where it came from ("" when there was none).
func (r *stateBase) importLegacy(ctx context.Context, ref statestore.Ref) (string, error) {
	if r.backend.Legacy == nil {
		return "", nil
	}
	data, source, err := r.backend.Legacy(ctx, ref.Namespace, ref.Workspace)
	if err != nil || data == nil {
		return "", err
	}
	imported, err := r.backend.Store.Import(ctx, ref, source, data)
	if err != nil || !imported {
		return "", err
	}
	klog.FromContext(ctx).Info("Imported a state kept by the kubernetes backend into the state terrarun serves; delete its Secret once runs use the new state",
		"namespace", ref.Namespace, "workspace", ref.Workspace, "source", source)
	return source, nil
}

// engineLockInfo is the lock information terraform and tofu send and read
// (statemgr.LockInfo).
type engineLockInfo struct {
	ID        string    `json:"ID"`
	Operation string    `json:"Operation"`
	Info      string    `json:"Info"`
	Who       string    `json:"Who"`
	Version   string    `json:"Version"`
	Created   time.Time `json:"Created"`
	Path      string    `json:"Path"`
}

// lockView is what GET statelock answers, and, in the engine's form, what
// a refused lock request does.
type lockView struct {
	ID        string            `json:"id"`
	Holder    statestore.Holder `json:"holder"`
	Operation string            `json:"operation,omitempty"`
	Created   time.Time         `json:"created"`
}

func viewOf(l *statestore.Lock) lockView {
	var info engineLockInfo
	_ = json.Unmarshal(l.Info, &info)
	return lockView{ID: l.ID, Holder: l.Holder, Operation: info.Operation, Created: l.Created}
}

// Connect serves a read, a take or a release of the state's lock.
func (r *StateLockREST) Connect(ctx context.Context, name string, options runtime.Object, responder rest.Responder) (http.Handler, error) {
	run, ref, opts, verb, err := r.prepareState(ctx, name, options, "statelock")
	if err != nil {
		return nil, err
	}
	if verb == "get" {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			lock, err := r.backend.Store.LockOf(ctx, ref)
			if err != nil {
				responder.Error(stateError(err, name))
				return
			}
			if lock == nil {
				responder.Error(notFound(name, "statelock", fmt.Sprintf("the state of workspace %q is not locked", ref.Workspace)))
				return
			}
			writeJSON(w, http.StatusOK, viewOf(lock))
		}), nil
	}
	holder, err := stateHolder(ctx, run, "statelock")
	if err != nil {
		return nil, err
	}
	switch verb {
	case "create":
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			body, err := io.ReadAll(io.LimitReader(req.Body, maxLockBody+1))
			if err != nil || len(body) > maxLockBody {
				responder.Error(apierrors.NewBadRequest(fmt.Sprintf("the lock information must be JSON of at most %d bytes", maxLockBody)))
				return
			}
			var info engineLockInfo
			if err := json.Unmarshal(body, &info); err != nil {
				responder.Error(apierrors.NewBadRequest("the body is not the engine's lock information: " + err.Error()))
				return
			}
			held, err := r.backend.Store.Lock(ctx, ref, holder, info.ID, body, r.alive)
			switch {
			case errors.Is(err, statestore.ErrLocked):
				// The engine's form, with the holder as the server knows it.
				var heldInfo engineLockInfo
				_ = json.Unmarshal(held.Info, &heldInfo)
				writeJSON(w, http.StatusLocked, engineLockInfo{ID: held.ID, Operation: heldInfo.Operation, Who: "terrarun " + held.Holder.String(),
					Info: "held by a stage that has not ended; it is released when that stage ends", Created: held.Created})
				return
			case err != nil:
				responder.Error(stateError(err, name))
				return
			case held != nil:
				klog.FromContext(ctx).Info("Took over the state lock of an ended stage", "run", klog.KObj(run), "workspace", ref.Workspace, "holder", held.Holder.String())
				w.Header().Set(StateBrokenLockHeader, held.Holder.String())
			}
			w.WriteHeader(http.StatusOK)
		}), nil
	case "delete":
		if opts.LockID == "" {
			return nil, apierrors.NewBadRequest("releasing the state lock needs lockID, the ID of the lock this stage holds")
		}
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			// A plan stage releases a lock it does not hold only when its
			// run's spec.forceUnlock names it, as the engine's
			// force-unlock does.
			force := holder.Stage == string(terrarun.StagePlan) && run.Spec.ForceUnlock == opts.LockID
			if force {
				// Never the lock of a stage that still runs: only one whose
				// stage is gone, or an apply lost with its node.
				if lock, err := r.backend.Store.LockOf(ctx, ref); err == nil && lock != nil && lock.ID == opts.LockID && lock.Holder != holder {
					if running, err := r.running(ctx, lock.Holder); err != nil || running {
						if err == nil {
							err = conflict(name, "state lock %s is held by %s, which is still running: cancel that run, or wait for it to end; spec.forceUnlock releases only the lock of a stage that is gone", opts.LockID, lock.Holder)
						}
						responder.Error(err)
						return
					}
				}
			}
			if err := r.backend.Store.Unlock(ctx, ref, holder, opts.LockID, force); err != nil {
				responder.Error(stateError(err, name))
				return
			}
			if force {
				klog.FromContext(ctx).Info("Released a state lock that the run's spec.forceUnlock names", "run", klog.KObj(run), "workspace", ref.Workspace, "lock", opts.LockID)
			}
			w.WriteHeader(http.StatusOK)
		}), nil
	}
	return nil, apierrors.NewMethodNotSupported(terrarun.Resource("terraformruns/statelock"), verb)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	data, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write(data)
}

// stateError maps an error of the state store to the API error that
// answers it.
func stateError(err error, name string) error {
	switch {
	case errors.Is(err, statestore.ErrNotHolder):
		return conflict(name, "%v", err)
	case errors.Is(err, statestore.ErrTooLarge):
		return apierrors.NewRequestEntityTooLargeError(err.Error())
	case errors.Is(err, statestore.ErrInvalid):
		return apierrors.NewBadRequest(err.Error())
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return err
	}
	if storeUnavailable(err) {
		return apierrors.NewServiceUnavailable(fmt.Sprintf("the state store is unavailable, try again: %v", err))
	}
	return apierrors.NewInternalError(err)
}
