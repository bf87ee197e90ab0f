package artifacts

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestUploadSlots: one object upload of a run at a time, maxObjectUploads
// in all, whatever a stage's code sends at once; a wait that its request
// gives up on takes no slot.
func TestUploadSlots(t *testing.T) {
	u := newUploadSlots()
	var inFlight, most atomic.Int32
	perRun := map[string]*atomic.Int32{}
	for i := range 40 {
		perRun[fmt.Sprint(i%20)] = &atomic.Int32{}
	}
	var wg sync.WaitGroup
	for i := range 200 {
		run := fmt.Sprint(i % 20)
		wg.Add(1)
		go func() {
			defer wg.Done()
			release, err := u.acquire(context.Background(), run)
			if err != nil {
				t.Error(err)
				return
			}
			if n := perRun[run].Add(1); n > 1 {
				t.Errorf("run %s has %d uploads at once", run, n)
			}
			n := inFlight.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			time.Sleep(time.Millisecond)
			inFlight.Add(-1)
			perRun[run].Add(-1)
			release()
		}()
	}
	wg.Wait()
	if m := most.Load(); m > maxObjectUploads {
		t.Errorf("%d uploads at once, the bound is %d", m, maxObjectUploads)
	}

	release, err := u.acquire(context.Background(), "slow")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := u.acquire(ctx, "slow"); err == nil {
		t.Fatal("a second upload of a run went ahead of the first")
	}
	release()
	if len(u.runs) != 0 || len(u.all) != 0 {
		t.Errorf("slots left taken: %d runs, %d uploads", len(u.runs), len(u.all))
	}
}
