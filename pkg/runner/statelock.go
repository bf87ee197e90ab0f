package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/user"
	"regexp"
	"slices"
	"strings"

	"github.com/hashicorp/terraform-exec/tfexec"
)

// lockInfo is what terraform and tofu print of the state lock they could not
// take ("Error acquiring the state lock ... Lock Info: ID, Operation, Who").
type lockInfo struct {
	ID, Operation, Who string
}

var (
	// The second form is a new workspace's state, which the backend locks
	// to create it ("error loading state: the state is already locked by
	// another tofu client").
	lockErrorRegexp = regexp.MustCompile(`Error acquiring the state lock|the state is already locked by another`)
	lockFieldRegexp = regexp.MustCompile(`(?m)^[\s│]*(ID|Operation|Who):[ \t]*(\S*)`)
	// lockMessageIDRegexp finds the holder's ID in the error message of
	// backends whose Lock Info is the engine's own attempt (terraform's http
	// backend).
	lockMessageIDRegexp = regexp.MustCompile(`(?m)^[\s│]*Error message:.*\bID=(\S+)`)
)

// heldLock returns the lock that err, the error of a failed engine command,
// says is in the way, or false. self is the engine's own "Who": some
// backends report the lock the engine tried to take instead of the holder's,
// and then only the holder's ID, if any, is known.
func heldLock(err error, self string) (lockInfo, bool) {
	if err == nil || !lockErrorRegexp.MatchString(err.Error()) {
		return lockInfo{}, false
	}
	var info lockInfo
	for _, m := range lockFieldRegexp.FindAllStringSubmatch(err.Error(), -1) {
		switch m[1] {
		case "ID":
			info.ID = m[2]
		case "Operation":
			info.Operation = m[2]
		case "Who":
			info.Who = m[2]
		}
	}
	if info.Who == self {
		info = lockInfo{}
		if m := lockMessageIDRegexp.FindStringSubmatch(err.Error()); m != nil {
			info.ID = m[1]
		}
	}
	return info, true
}

// lockOwner is what engines record as "Who" for a lock this process takes.
func lockOwner() string {
	name := ""
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	host, _ := os.Hostname()
	return name + "@" + host
}

// lostPlanLock says whether lock was taken by one of hosts, this run's lost
// plan attempts ("Who" is user@host), for their plan or for creating the
// workspace's state before it (the backends' "init").
func lostPlanLock(lock lockInfo, hosts []string) bool {
	at := strings.LastIndex(lock.Who, "@")
	return (lock.Operation == "OperationTypePlan" || lock.Operation == "init") && at >= 0 && slices.Contains(hosts, lock.Who[at+1:])
}

// forceUnlock releases the state lock id, saying why in the log.
func (r *runner) forceUnlock(ctx context.Context, tf *tfexec.Terraform, id, why string) error {
	r.logf("terrarun: releasing state lock %s: %s", id, why)
	if r.stateProxy != nil {
		// The state terrarun serves releases it for the run that names
		// it (the engine's http backend cannot say which lock to release).
		resp, err := r.client.State(ctx, http.MethodDelete, "statelock", url.Values{"lockID": {id}}, nil)
		if err != nil {
			return fmt.Errorf("releasing state lock %s: %w", id, err)
		}
		return resp.Body.Close()
	}
	return r.step("force-unlock", func() error {
		if err := tf.ForceUnlock(ctx, id); err != nil {
			return fmt.Errorf("releasing state lock %s: %w", id, err)
		}
		return nil
	})
}

// nameServedLock fills in, from the state terrarun serves, the holder and
// operation of lock, which the engine's http backend reports by ID only.
func (r *runner) nameServedLock(ctx context.Context, lock *lockInfo) {
	resp, err := r.client.State(ctx, http.MethodGet, "statelock", nil, nil)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	var view struct {
		ID     string `json:"id"`
		Holder struct {
			Run     string `json:"run"`
			Stage   string `json:"stage"`
			Attempt int32  `json:"attempt"`
		} `json:"holder"`
		Operation string `json:"operation"`
	}
	if json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&view) != nil || (lock.ID != "" && view.ID != lock.ID) {
		return
	}
	lock.ID = view.ID
	lock.Who = fmt.Sprintf("run %s's %s stage attempt %d", view.Holder.Run, view.Holder.Stage, view.Holder.Attempt)
	if view.Operation != "" {
		lock.Operation = view.Operation
	}
}
