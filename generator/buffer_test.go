package generator

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idgen/idgen/scripts/harness"
)

func TestNewBufferDepth(t *testing.T) {
	if _, err := NewBuffer(0); !errors.Is(err, ErrInvalidDepth) {
		t.Errorf("NewBuffer(0): %v", err)
	}
	b, err := NewBuffer(3)
	if err != nil || b.Cap() != 3 || b.Len() != 0 {
		t.Fatalf("NewBuffer(3) = cap %d len %d, %v", b.Cap(), b.Len(), err)
	}
}

func TestBufferBlocksWhenFullAndEmpty(t *testing.T) {
	b, _ := NewBuffer(2)
	ctx := context.Background()
	for i := range 2 {
		if err := b.Put(ctx, []int64{int64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	// Full: Put blocks until the context ends ...
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := b.Put(short, []int64{9}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Put on a full buffer: %v", err)
	}
	// ... or until a Take makes room.
	put := make(chan error, 1)
	go func() { put <- b.Put(ctx, []int64{2}) }()
	if got, err := b.Take(ctx); err != nil || got[0] != 0 {
		t.Fatalf("Take = %v, %v", got, err)
	}
	if err := <-put; err != nil {
		t.Fatal(err)
	}
	for want := int64(1); want <= 2; want++ {
		if got, err := b.Take(ctx); err != nil || got[0] != want {
			t.Fatalf("Take = %v, %v, want [%d]", got, err, want)
		}
	}
	// Empty: Take blocks until the context ends ...
	short2, cancel2 := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel2()
	if _, err := b.Take(short2); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Take on an empty buffer: %v", err)
	}
	// ... or until a batch arrives.
	took := make(chan []int64, 1)
	go func() {
		got, _ := b.Take(ctx)
		took <- got
	}()
	if err := b.Put(ctx, []int64{7}); err != nil {
		t.Fatal(err)
	}
	if got := <-took; len(got) != 1 || got[0] != 7 {
		t.Fatalf("blocked Take got %v", got)
	}
	// A ready batch is still handed out after the caller's context ended.
	_ = b.Put(ctx, []int64{8})
	if got, err := b.Take(canceled()); err != nil || got[0] != 8 {
		t.Fatalf("Take with ended ctx and a ready batch = %v, %v", got, err)
	}
	if err := b.Put(canceled(), []int64{1}); err == nil || b.Len() != 0 {
		t.Fatalf("Put with ended ctx = %v, len %d", err, b.Len())
	}
}

func TestProducerKeepsBufferFullWithWholeBatches(t *testing.T) {
	g, _ := newTestGenerator(t, 5)
	g.Grant(1000)
	buf, _ := NewBuffer(4)
	var errs atomic.Int32
	p := NewProducer(buf, 1160, g.NextBatch, func(error) { errs.Add(1) })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()

	harness.WaitFor(t, 10*time.Second, "a full buffer", func() bool { return buf.Len() == 4 })
	// Full: the producer is blocked, holding at most one batch more.
	harness.WaitFor(t, 10*time.Second, "the producer to block", func() bool { return g.Issued() == 5*1160 })
	seen := make(map[int64]bool)
	for range 10 {
		batch, err := buf.Take(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(batch) != 1160 {
			t.Fatalf("batch of %d", len(batch))
		}
		for _, id := range batch {
			if seen[id] {
				t.Fatalf("duplicate %d", id)
			}
			seen[id] = true
		}
	}
	cancel()
	<-done
	if errs.Load() != 0 {
		t.Errorf("%d errors reported", errs.Load())
	}
}

func TestProducerRecoversFromPanicAndReportsErrors(t *testing.T) {
	buf, _ := NewBuffer(2)
	var calls atomic.Int32
	mint := func(ctx context.Context, n int) ([]int64, error) {
		switch calls.Add(1) {
		case 1:
			panic("boom")
		case 2:
			return nil, errors.New("window exhausted for now")
		case 3:
			return make([]int64, n-1), nil // partial: must not be pushed
		}
		ids := make([]int64, n)
		ids[0] = int64(calls.Load())
		return ids, nil
	}
	errc := make(chan error, 10)
	p := NewProducer(buf, 3, mint, func(err error) { errc <- err })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()

	got, err := buf.Take(ctx) // arrives only after the three failures
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0] != 4 {
		t.Fatalf("first batch %v, want the 4th mint call's whole batch", got)
	}
	e1, e2, e3 := <-errc, <-errc, <-errc
	if !errors.Is(e1, ErrMintPanic) || !strings.Contains(e1.Error(), "boom") {
		t.Errorf("panic reported as %v", e1)
	}
	if !strings.Contains(e2.Error(), "window exhausted for now") {
		t.Errorf("error reported as %v", e2)
	}
	if !errors.Is(e3, ErrPartialBatch) {
		t.Errorf("partial batch reported as %v", e3)
	}
	cancel()
	<-done
}

func TestProducerStopsWithContextWhileBlockedOrBackingOff(t *testing.T) {
	buf, _ := NewBuffer(1)
	failing := NewProducer(buf, 1, func(context.Context, int) ([]int64, error) {
		return nil, errors.New("always")
	}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { failing.Run(ctx); close(done) }()
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel while failing")
	}

	// Blocked on a full buffer: also returns.
	g, _ := newTestGenerator(t, 5)
	g.Grant(100)
	full := NewProducer(buf, 10, g.NextBatch, nil)
	ctx2, cancel2 := context.WithCancel(context.Background())
	done2 := make(chan struct{})
	go func() { full.Run(ctx2); close(done2) }()
	harness.WaitFor(t, 10*time.Second, "the producer to block on a full buffer", func() bool { return g.Issued() == 20 })
	cancel2()
	select {
	case <-done2:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel while blocked")
	}
}

func TestBufferDrainDropsReadyBatches(t *testing.T) {
	b, err := NewBuffer(3)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, batch := range [][]int64{{1, 2}, {3}} {
		if err := b.Put(ctx, batch); err != nil {
			t.Fatal(err)
		}
	}
	if n := b.Drain(); n != 3 || b.Len() != 0 {
		t.Fatalf("drained %d IDs, %d batches left; want 3 and 0", n, b.Len())
	}
	if n := b.Drain(); n != 0 {
		t.Fatalf("second drain dropped %d", n)
	}
}

// TestTakeRuleFor: a node that met an older cluster drops its buffer whatever
// else holds; a ready one waits; one that is not ready hands out only what
// it has buffered, and refuses when it has nothing.
func TestTakeRuleFor(t *testing.T) {
	for _, tc := range []struct {
		conflict, ready bool
		buffered        int
		want            TakeRule
	}{
		{true, true, 3, TakeDrop},
		{true, false, 3, TakeDrop},
		{true, false, 0, TakeDrop},
		{false, true, 0, TakeWait},
		{false, true, 2, TakeWait},
		{false, false, 2, TakeBriefly},
		{false, false, 0, TakeRefuse},
	} {
		if got := TakeRuleFor(tc.conflict, tc.ready, tc.buffered); got != tc.want {
			t.Errorf("TakeRuleFor(conflict %v, ready %v, buffered %d) = %d, want %d", tc.conflict, tc.ready, tc.buffered, got, tc.want)
		}
	}
}
