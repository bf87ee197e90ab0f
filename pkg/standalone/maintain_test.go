package standalone

import (
	"context"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// TestMaintainDefragmentsAndDisarms: once deleted data is compacted, the
// embedded etcd gives the space back, and a space alarm raised while it was
// full is disarmed, so that the API is writable again without an operator.
func TestMaintainDefragmentsAndDisarms(t *testing.T) {
	ctx := t.Context()
	e, err := StartEtcd(ctx, t.TempDir(), WithoutFsync())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{e.ClientURL()}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })

	value := strings.Repeat("x", 512<<10)
	for i := range 16 {
		if _, err := cli.Put(ctx, "/logs/"+string(rune('a'+i)), value); err != nil {
			t.Fatal(err)
		}
	}
	del, err := cli.Delete(ctx, "/logs/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(ctx, del.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	be := e.e.Server.Backend()
	// The compaction's pages count as free only once the backend has
	// committed it and no read transaction sees them any more: wait for
	// that, or maintenance may rightly see them still in use.
	deadline := time.Now().Add(10 * time.Second)
	for be.ForceCommit(); be.Size()-be.SizeInUse() < be.Size()/2; be.ForceCommit() {
		if time.Now().After(deadline) {
			t.Fatalf("the compacted pages are not free after 10s: size %d, in use %d", be.Size(), be.SizeInUse())
		}
		time.Sleep(20 * time.Millisecond)
	}
	before := be.Size()
	if _, err := e.e.Server.Alarm(ctx, &pb.AlarmRequest{Action: pb.AlarmRequest_ACTIVATE, MemberID: uint64(e.e.Server.MemberID()), Alarm: pb.AlarmType_NOSPACE}); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, "/probe", "x"); err == nil || !strings.Contains(err.Error(), "database space exceeded") {
		t.Fatalf("a write under the space alarm: %v, want etcd's database space exceeded", err)
	}

	e.maintainOnce(context.Background(), 1<<20)

	if after := be.Size(); after > before/2 {
		t.Errorf("database %d bytes after maintenance, %d before: not defragmented", after, before)
	}
	if alarms := e.e.Server.Alarms(); len(alarms) != 0 {
		t.Errorf("alarms after maintenance: %v", alarms)
	}
	if _, err := cli.Put(ctx, "/probe", "x"); err != nil {
		t.Errorf("a write after maintenance: %v", err)
	}
}
