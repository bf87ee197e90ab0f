package standalone

import (
	"context"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"k8s.io/klog/v2"
)

const (
	// maintainInterval is how often the embedded etcd's database is checked.
	maintainInterval = 10 * time.Minute
	// defragMinFree is the free space (left by compaction of deleted runs'
	// logs and plans) that makes a defragmentation worth its pause of
	// writes, when it is also a quarter of the database.
	defragMinFree = 64 << 20
	// defaultQuota is etcd's default space quota (--quota-backend-bytes).
	defaultQuota = 2 << 30
)

// maintain keeps the embedded etcd's database small until ctx ends: etcd
// compacts its history every hour by itself, but only a defragmentation
// gives the freed space back, and a space alarm (NOSPACE, which makes etcd
// and so the whole API read-only) stays raised until it is disarmed. An
// operator of a real etcd does both with etcdctl; standalone mode does them
// itself.
func (e *Etcd) maintain(ctx context.Context) {
	t := time.NewTicker(maintainInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			e.maintainOnce(ctx, defragMinFree)
		}
	}
}

// maintainOnce defragments the database when at least minFree bytes, and a
// quarter of it, are free, and disarms a space alarm once the data in use
// is under 80% of the quota.
func (e *Etcd) maintainOnce(ctx context.Context, minFree int64) {
	logger := klog.FromContext(ctx).WithName("embedded-etcd")
	be := e.e.Server.Backend()
	size, inUse := be.Size(), be.SizeInUse()
	if free := size - inUse; free >= minFree && free >= size/4 {
		start := time.Now()
		if err := be.Defrag(); err != nil {
			logger.Error(err, "Defragmenting the embedded etcd")
		} else {
			logger.Info("Defragmented the embedded etcd", "before", size, "after", be.Size(), "took", time.Since(start))
		}
	}
	quota := e.e.Config().QuotaBackendBytes
	if quota <= 0 {
		quota = defaultQuota
	}
	for _, a := range e.e.Server.Alarms() {
		if a.Alarm != pb.AlarmType_NOSPACE || be.SizeInUse() >= quota/10*8 {
			continue
		}
		if _, err := e.e.Server.Alarm(ctx, &pb.AlarmRequest{Action: pb.AlarmRequest_DEACTIVATE, MemberID: a.MemberID, Alarm: a.Alarm}); err != nil {
			logger.Error(err, "Disarming the embedded etcd's space alarm")
			continue
		}
		logger.Info("Disarmed the embedded etcd's space alarm: deleted runs freed enough space", "inUse", be.SizeInUse(), "quota", quota)
	}
}
