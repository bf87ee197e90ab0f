package tekton

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/terrarun/terrarun/pkg/executor"
)

// claimPrefix is where Claims keeps, in terrarun's etcd, the pod of each
// stage attempt: claimPrefix<run UID>/<stage>/<attempt> = pod UID; and
// shapePrefix the shape of its TaskRun (shape), in JSON.
const (
	claimPrefix = "/terrarun/tekton-stage-pods/"
	shapePrefix = "/terrarun/tekton-taskrun-shapes/"
)

// Claims records the first pod of each stage attempt that speaks to the
// server, in terrarun's etcd, which no tenant and no stage writes.
//
// Tekton starts a TaskRun's pod again when it is gone before the TaskRun
// ended (deleted, or evicted with its node): the stage would run a second
// time, and an apply must never. The new pod is the TaskRun's as much as
// the first was (the same name, owner and stage Secret); only its UID
// differs. So the first pod's UID is the stage attempt's, recorded at its
// first request (IdentityResolver), and any other pod of the attempt is
// refused; Status reports the attempt lost once its pod is not that one.
type Claims struct {
	etcd *clientv3.Client
}

// NewClaims returns the claims kept in etcd.
func NewClaims(etcd *clientv3.Client) *Claims { return &Claims{etcd: etcd} }

func claimKey(id executor.Identity) string {
	return fmt.Sprintf("%s%s/%s/%d", claimPrefix, id.UID, id.Stage, id.Attempt)
}

func shapeKey(id executor.Identity) string {
	return fmt.Sprintf("%s%s/%s/%d", shapePrefix, id.UID, id.Stage, id.Attempt)
}

// noPod is the claim of an attempt whose stage was lost before any pod
// proved its key: no pod is ever its.
const noPod = "none: the stage was lost"

// recordShape records data as the shape of id's TaskRun unless one is
// recorded, and returns the one recorded.
func (c *Claims) recordShape(ctx context.Context, id executor.Identity, data []byte) ([]byte, error) {
	key := shapeKey(id)
	resp, err := c.etcd.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(data))).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		return nil, fmt.Errorf("recording the TaskRun template of the %s stage of run %s/%s: %w", id.Stage, id.Namespace, id.Name, err)
	}
	if resp.Succeeded {
		return data, nil
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) != 1 {
		return nil, fmt.Errorf("recording the TaskRun template of the %s stage of run %s/%s: the record went while it was read; the stage starts again at the next try", id.Stage, id.Namespace, id.Name)
	}
	return kvs[0].Value, nil
}

// forgetShape removes the shape recorded for id's TaskRun.
func (c *Claims) forgetShape(ctx context.Context, id executor.Identity) error {
	if _, err := c.etcd.Delete(ctx, shapeKey(id)); err != nil {
		return fmt.Errorf("removing the TaskRun template of the %s stage of run %s/%s: %w", id.Stage, id.Namespace, id.Name, err)
	}
	return nil
}

// recordedShape is the shape recorded for id's TaskRun, nil when none is.
func (c *Claims) recordedShape(ctx context.Context, id executor.Identity) ([]byte, error) {
	resp, err := c.etcd.Get(ctx, shapeKey(id))
	if err != nil {
		return nil, fmt.Errorf("reading the TaskRun template of the %s stage of run %s/%s: %w", id.Stage, id.Namespace, id.Name, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, nil
	}
	return resp.Kvs[0].Value, nil
}

// Claim records podUID as id's pod when id has none, and says whether id's
// pod is podUID.
func (c *Claims) Claim(ctx context.Context, id executor.Identity, podUID string) (bool, error) {
	key := claimKey(id)
	resp, err := c.etcd.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, podUID)).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		return false, fmt.Errorf("recording the pod of the %s stage of run %s/%s: %w", id.Stage, id.Namespace, id.Name, err)
	}
	if resp.Succeeded {
		return true, nil
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	return len(kvs) == 1 && string(kvs[0].Value) == podUID, nil
}

// Pod is the UID of id's pod, "" when none has spoken yet.
func (c *Claims) Pod(ctx context.Context, id executor.Identity) (string, error) {
	resp, err := c.etcd.Get(ctx, claimKey(id))
	if err != nil {
		return "", fmt.Errorf("reading the pod of the %s stage of run %s/%s: %w", id.Stage, id.Namespace, id.Name, err)
	}
	if len(resp.Kvs) == 0 {
		return "", nil
	}
	return string(resp.Kvs[0].Value), nil
}

// Forget removes the claims and shapes of the run with UID uid.
func (c *Claims) Forget(ctx context.Context, uid string) error {
	if uid == "" {
		return nil
	}
	for _, prefix := range []string{claimPrefix, shapePrefix} {
		if _, err := c.etcd.Delete(ctx, prefix+uid+"/", clientv3.WithPrefix()); err != nil {
			return err
		}
	}
	return nil
}
