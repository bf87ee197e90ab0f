package local

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/klog/v2"

	"github.com/terrarun/terrarun/pkg/executor"
)

// Execution records: one etcd key per run, stage and attempt. Whoever creates
// the key starts the process; its final state is written to the same key.

// defaultEtcdPrefix is where executions are recorded when Options.EtcdPrefix is empty.
const defaultEtcdPrefix = "/terrarun/executions/"

// record is the JSON value of an execution's etcd key.
type record struct {
	Name           string         `json:"name"`
	State          executor.State `json:"state"`
	Holder         string         `json:"holder"`
	PID            int            `json:"pid,omitempty"`
	StartTime      *time.Time     `json:"startTime,omitempty"`
	CompletionTime *time.Time     `json:"completionTime,omitempty"`
	ExitCode       *int32         `json:"exitCode,omitempty"`
	Reason         string         `json:"reason,omitempty"`
	Message        string         `json:"message,omitempty"`
}

func (e *Executor) key(id executor.Identity) string {
	return fmt.Sprintf("%s%s/%s/%s/%s/%d", e.prefix, id.Namespace, id.Name, id.UID, id.Stage, id.Attempt)
}

// persist records a final state in etcd, retrying for a while. It reports
// whether the state is recorded (or no longer needs to be).
func (e *Executor) persist(p *proc, st executor.Status) bool {
	rec := record{
		Name: p.name, State: st.State, Holder: e.holder,
		StartTime: st.StartTime, CompletionTime: st.CompletionTime,
		ExitCode: st.ExitCode, Reason: st.Reason, Message: st.Message,
	}
	if p.cmd != nil && p.cmd.Process != nil {
		rec.PID = p.cmd.Process.Pid
	}
	val, err := json.Marshal(rec)
	if err != nil {
		klog.ErrorS(err, "Encoding execution record", "execution", p.name)
		return false
	}
	begin := time.Now()
	backoff := 200 * time.Millisecond
	for {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		// Only the record this execution created: after Forget it is gone.
		_, err := e.opts.Etcd.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(p.key), "=", p.createRev)).
			Then(clientv3.OpPut(p.key, string(val))).
			Commit()
		cancel()
		if err == nil {
			return true
		}
		if time.Since(begin) > persistFor {
			klog.ErrorS(err, "Giving up recording the final state of an execution; it stays in memory", "execution", p.name)
			return false
		}
		klog.V(2).InfoS("Recording the final state of an execution", "execution", p.name, "err", err)
		select {
		case <-time.After(backoff):
		case <-e.quit:
			return false
		}
		backoff = min(2*backoff, 10*time.Second)
	}
}

// neverStarted says whether rec, found in etcd for a key that this instance
// has no process for, is one this instance recorded without ever starting its
// process: its Start failed after the record was created (or its client saw an
// error for a transaction that did commit), and removing the record failed.
// Every process that this instance starts stays in its table until its final
// state is recorded (or its record is deleted), so a Running record of this
// instance with no process in the table was never started.
func (e *Executor) neverStarted(rec record) bool {
	e.mu.Lock()
	closed := e.closed
	e.mu.Unlock()
	return !closed && rec.Holder == e.holder && rec.State == executor.StateRunning
}

// claim records p as started by this instance with a create-if-absent
// transaction, and reports whether this Start now holds the record. An
// existing record is held only when it is this instance's own and it never
// started a process for it (see neverStarted).
func (e *Executor) claim(ctx context.Context, p *proc, rec record) (bool, error) {
	val, err := json.Marshal(rec)
	if err != nil {
		return false, err
	}
	resp, err := e.opts.Etcd.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(p.key), "=", 0)).
		Then(clientv3.OpPut(p.key, string(val))).
		Else(clientv3.OpGet(p.key)).
		Commit()
	if err != nil {
		return false, fmt.Errorf("recording execution %s: %w", p.name, err)
	}
	if resp.Succeeded {
		p.createRev = resp.Header.Revision
		return true, nil
	}
	kvs := resp.Responses[0].GetResponseRange().GetKvs()
	if len(kvs) == 0 {
		return false, nil
	}
	var old record
	if json.Unmarshal(kvs[0].Value, &old) != nil || !e.neverStarted(old) {
		return false, nil
	}
	tresp, err := e.opts.Etcd.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(p.key), "=", kvs[0].ModRevision)).
		Then(clientv3.OpPut(p.key, string(val))).
		Commit()
	if err != nil {
		return false, fmt.Errorf("recording execution %s: %w", p.name, err)
	}
	if !tresp.Succeeded {
		return false, nil
	}
	p.createRev = kvs[0].CreateRevision
	return true, nil
}

// release removes the record of p, whose process never started, so that a
// later Start may start it. A failure leaves a record that neverStarted
// recognizes.
func (e *Executor) release(ctx context.Context, p *proc) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	_, err := e.opts.Etcd.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(p.key), "=", p.createRev)).
		Then(clientv3.OpDelete(p.key)).
		Commit()
	if err != nil {
		klog.ErrorS(err, "Removing the record of an execution that did not start", "execution", p.name)
	}
}
