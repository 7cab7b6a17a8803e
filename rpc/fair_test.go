package rpc

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/idgen/idgen/generator"
	"github.com/idgen/idgen/scripts/harness"
)

// TestFairTakeServesIdentitiesInTurn: one identity keeps 16 calls waiting
// for a batch, another one; the node makes one batch at a time. The second
// identity gets the third batch at the latest, not the seventeenth, and every
// batch goes to exactly one caller. A caller that gives up takes no batch
// with it.
func TestFairTakeServesIdentitiesInTurn(t *testing.T) {
	buf, err := generator.NewBuffer(1)
	if err != nil {
		t.Fatal(err)
	}
	f := newFairTake(buf)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go f.run(ctx)

	var mu sync.Mutex
	var order []string
	var wg sync.WaitGroup
	wait := func(id string, ctx context.Context) {
		defer wg.Done()
		b, err := f.take(ctx, id)
		if err != nil {
			return
		}
		mu.Lock()
		order = append(order, id+":"+string(rune('a'+b[0])))
		mu.Unlock()
	}
	queued := func(id string) int { f.mu.Lock(); defer f.mu.Unlock(); return len(f.queues[id]) }
	for range 16 {
		wg.Add(1)
		go wait("hog", ctx)
	}
	harness.WaitFor(t, 5*time.Second, "the hog's calls to wait (one of them chosen)", func() bool { return queued("hog") == 15 })
	// A caller that gives up before its turn leaves no trace.
	gaveUp, stop := context.WithCancel(ctx)
	wg.Add(1)
	go wait("quitter", gaveUp)
	harness.WaitFor(t, 5*time.Second, "the quitter to wait", func() bool { return queued("quitter") == 1 })
	stop()
	harness.WaitFor(t, 5*time.Second, "the quitter to be gone", func() bool { return queued("quitter") == 0 })
	wg.Add(1)
	go wait("other", ctx)
	harness.WaitFor(t, 5*time.Second, "the other identity's call to wait", func() bool { return queued("other") == 1 })
	for i := range 17 {
		if err := buf.Put(ctx, []int64{int64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	if len(order) != 17 {
		t.Fatalf("%d batches handed out for 17 callers: %v", len(order), order)
	}
	got := -1
	for _, o := range order {
		if o[:5] == "other" {
			got = int(o[6] - 'a')
		}
	}
	// The hog's first call was chosen before the other identity came;
	// then the turn is the hog's and the other's: batch 2 or 3 at most,
	// where first come, first served gave it batch 17.
	if got < 0 || got > 2 {
		t.Fatalf("the other identity got batch %d of 17, want at most the third (round robin): %v", got+1, order)
	}
}
