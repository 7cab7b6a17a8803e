package generator

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync"
	"testing"
	"time"
)

// newTestGenerator returns a default-layout generator for slot 3 with floor 0
// and a manual clock standing at timestamp at.
func newTestGenerator(t testing.TB, at int64) (*Generator, *ManualClock) {
	t.Helper()
	l := DefaultLayout()
	clock := NewManualClock(l.Time(at))
	g, err := New(l, 3, 0, clock)
	if err != nil {
		t.Fatal(err)
	}
	return g, clock
}

func canceled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

func decompose(t testing.TB, id int64) Parts {
	t.Helper()
	p, err := DefaultLayout().Decompose(id)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestNewValidates(t *testing.T) {
	l := DefaultLayout()
	clock := NewManualClock(l.Time(1))
	cases := []struct {
		name   string
		layout Layout
		slot   int
		floor  int64
		want   error
	}{
		{"bad layout", Layout{Unit: time.Second}, 0, 0, ErrInvalidLayout},
		{"slot -1", l, -1, 0, ErrInvalidSlot},
		{"slot 8", l, 8, 0, ErrInvalidSlot},
		{"floor -1", l, 0, -1, ErrInvalidFloor},
		{"floor past layout", l, 0, l.MaxTimestamp() + 1, ErrInvalidFloor},
	}
	for _, c := range cases {
		if _, err := New(c.layout, c.slot, c.floor, clock); !errors.Is(err, c.want) {
			t.Errorf("%s: err = %v, want %v", c.name, err, c.want)
		}
	}
	g, err := New(l, 7, 42, nil)
	if err != nil {
		t.Fatal(err)
	}
	if g.Slot() != 7 || g.Floor() != 42 || g.Granted() != 42 || g.Cursor() != 42 || g.Issued() != 0 {
		t.Errorf("fresh generator: slot=%d floor=%d granted=%d cursor=%d issued=%d",
			g.Slot(), g.Floor(), g.Granted(), g.Cursor(), g.Issued())
	}
}

func TestBatchSizeErrors(t *testing.T) {
	g, _ := newTestGenerator(t, 5)
	g.Grant(100)
	for _, n := range []int{0, -1, math.MinInt, MaxBatch + 1} {
		if _, err := g.NextBatch(context.Background(), n); !errors.Is(err, ErrBatchSize) {
			t.Errorf("NextBatch(%d): err = %v, want ErrBatchSize", n, err)
		}
	}
	if err := g.Fill(context.Background(), nil); !errors.Is(err, ErrBatchSize) {
		t.Errorf("Fill(nil): err = %v", err)
	}
	if err := g.Fill(context.Background(), make([]int64, MaxBatch+1)); !errors.Is(err, ErrBatchSize) {
		t.Errorf("Fill(MaxBatch+1): err = %v", err)
	}
	if ids, err := g.NextBatch(context.Background(), MaxBatch); err != nil || len(ids) != MaxBatch {
		t.Errorf("NextBatch(MaxBatch): %d IDs, %v", len(ids), err)
	}
}

func TestNothingIssuedBeforeGrant(t *testing.T) {
	g, _ := newTestGenerator(t, 5)
	_, err := g.NextBatch(canceled(), 1)
	if !errors.Is(err, ErrWindowExhausted) || !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want ErrWindowExhausted wrapping context.Canceled", err)
	}
	for _, s := range []string{"window exhausted", "granted up to timestamp 0", "cursor at 0"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not say %q", err, s)
		}
	}
	g.Grant(-5) // lower than the floor: ignored
	if g.Granted() != 0 {
		t.Errorf("Granted() = %d after a lower grant", g.Granted())
	}
}

func TestBatchSpansUnits(t *testing.T) {
	g, _ := newTestGenerator(t, 1)
	g.Grant(10)
	ids, err := g.NextBatch(context.Background(), 3000)
	if err != nil {
		t.Fatal(err)
	}
	first, at2047, at2048, last := decompose(t, ids[0]), decompose(t, ids[2047]), decompose(t, ids[2048]), decompose(t, ids[2999])
	if first.Timestamp != 1 || first.Sequence != 0 || at2047.Timestamp != 1 || at2047.Sequence != 2047 ||
		at2048.Timestamp != 2 || at2048.Sequence != 0 || last.Timestamp != 2 || last.Sequence != 951 {
		t.Errorf("batch of 3000: first %+v, [2047] %+v, [2048] %+v, last %+v", first, at2047, at2048, last)
	}
	for i := 1; i < len(ids); i++ {
		if ids[i] <= ids[i-1] {
			t.Fatalf("ids[%d]=%d <= ids[%d]=%d", i, ids[i], i-1, ids[i-1])
		}
	}
	// The clock has not moved: the next batch continues in the same unit.
	next, err := g.NextBatch(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if p := decompose(t, next[0]); p.Timestamp != 2 || p.Sequence != 952 || p.Slot != 3 {
		t.Errorf("next ID %+v, want ts 2 seq 952 slot 3", p)
	}
	if g.Cursor() != 2 || g.Issued() != 3001 {
		t.Errorf("Cursor()=%d Issued()=%d, want 2, 3001", g.Cursor(), g.Issued())
	}
}

func TestCursorFollowsClockWithinGrant(t *testing.T) {
	g, clock := newTestGenerator(t, 5)
	l := DefaultLayout()
	g.Grant(100)
	stamp := func(n int) Parts {
		t.Helper()
		ids, err := g.NextBatch(context.Background(), n)
		if err != nil {
			t.Fatal(err)
		}
		return decompose(t, ids[0])
	}
	if p := stamp(10); p.Timestamp != 5 || p.Sequence != 0 {
		t.Errorf("at clock 5: %+v", p)
	}
	clock.Set(l.Time(50))
	if p := stamp(10); p.Timestamp != 50 || p.Sequence != 0 {
		t.Errorf("at clock 50: %+v", p)
	}
	if g.Head() != 50 {
		t.Errorf("Head() = %d, want 50", g.Head())
	}
	clock.Set(l.Time(20)) // stepped back: continue from the cursor
	if p := stamp(10); p.Timestamp != 50 || p.Sequence != 10 {
		t.Errorf("after clock stepped back to 20: %+v, want ts 50 seq 10", p)
	}
	if g.Head() != 50 {
		t.Errorf("Head() = %d with clock behind the cursor, want 50", g.Head())
	}
	clock.Set(l.Time(500)) // beyond the grant: jump only as far as granted
	if p := stamp(10); p.Timestamp != 100 || p.Sequence != 0 {
		t.Errorf("at clock 500, granted 100: %+v, want ts 100 seq 0", p)
	}
	if g.Head() != 500 {
		t.Errorf("Head() = %d, want 500", g.Head())
	}
}

// A batch larger than one unit does not give up room it could use: with the
// clock past the grant it starts as late as it can and still fits.
func TestJumpStopsWhereTheBatchStillFits(t *testing.T) {
	g, clock := newTestGenerator(t, 5)
	g.Grant(10)
	if _, err := g.NextBatch(canceled(), 1); err != nil {
		t.Fatal(err)
	}
	clock.Set(DefaultLayout().Time(20))
	ids, err := g.NextBatch(canceled(), 4000)
	if err != nil {
		t.Fatalf("batch of 4000 with room from ts 5 to 10: %v", err)
	}
	if p := decompose(t, ids[len(ids)-1]); p.Timestamp != 10 || p.Sequence != 2047 {
		t.Errorf("last ID %+v, want ts 10 seq 2047", p)
	}
	if p := decompose(t, ids[0]); p.Timestamp != 9 || p.Sequence != 96 {
		t.Errorf("first ID %+v, want ts 9 seq 96", p)
	}
}

func TestWaitsForGrant(t *testing.T) {
	g, _ := newTestGenerator(t, 5)
	g.Grant(5)
	if _, err := g.NextBatch(context.Background(), 2048); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	type result struct {
		ids []int64
		err error
	}
	done := make(chan result, 1)
	go func() {
		ids, err := g.NextBatch(ctx, 100)
		done <- result{ids, err}
	}()
	select {
	case <-g.Waiting():
	case <-ctx.Done():
		t.Fatal("no Waiting() signal")
	}
	select {
	case r := <-done:
		t.Fatalf("batch returned before a grant: %v", r.err)
	default:
	}
	g.Grant(6)
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if p := decompose(t, r.ids[0]); p.Timestamp != 6 || p.Sequence != 0 {
		t.Errorf("first ID after grant %+v, want ts 6 seq 0", p)
	}
}

func TestWaitEndsWithContext(t *testing.T) {
	g, _ := newTestGenerator(t, 5)
	g.Grant(5)
	if _, err := g.NextBatch(context.Background(), 1); err != nil { // cursor to (5, 1)
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err := g.NextBatch(ctx, 2048) // needs ts 6
	if !errors.Is(err, ErrWindowExhausted) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v", err)
	}
	if !strings.Contains(err.Error(), "granted up to timestamp 5") || !strings.Contains(err.Error(), "needs up to 6") {
		t.Errorf("error %q does not give granted and need", err)
	}
	if g.Issued() != 1 {
		t.Errorf("Issued() = %d after a failed batch: not all-or-nothing", g.Issued())
	}
	// The rest of the unit still fits: nothing was consumed by the failed batch.
	ids, err := g.NextBatch(canceled(), 2047)
	if err != nil {
		t.Fatal(err)
	}
	if p := decompose(t, ids[0]); p.Timestamp != 5 || p.Sequence != 1 {
		t.Errorf("first ID %+v, want ts 5 seq 1", p)
	}
}

func TestRevokeStopsWaitersAndLaterCalls(t *testing.T) {
	g, _ := newTestGenerator(t, 5)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := g.NextBatch(ctx, 1)
		done <- err
	}()
	select {
	case <-g.Waiting():
	case <-ctx.Done():
		t.Fatal("no Waiting() signal")
	}
	cause := errors.New("fenced by a new owner")
	g.Revoke(cause)
	g.Revoke(errors.New("second revoke is ignored"))
	err := <-done
	if !errors.Is(err, ErrRevoked) || !errors.Is(err, cause) {
		t.Fatalf("waiter err = %v, want ErrRevoked wrapping the cause", err)
	}
	g.Grant(100)
	if err := g.Fill(context.Background(), make([]int64, 1)); !errors.Is(err, ErrRevoked) || !errors.Is(err, cause) {
		t.Fatalf("later call err = %v", err)
	}
}

func TestLayoutExhausted(t *testing.T) {
	l, err := NewLayout(DefaultEpoch, time.Second, 4, 1, 1, 2) // timestamps 0..15, 4 per unit
	if err != nil {
		t.Fatal(err)
	}
	clock := NewManualClock(l.Time(14))
	g, err := New(l, 1, 13, clock)
	if err != nil {
		t.Fatal(err)
	}
	g.Grant(1000) // grants may run past the layout; the layout still ends
	clock.Set(l.Time(1000))
	ids, err := g.NextBatch(context.Background(), 8)
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := l.Decompose(ids[7]); p.Timestamp != 15 || p.Sequence != 3 {
		t.Errorf("last ID %+v, want ts 15 seq 3", p)
	}
	// Background context: the call must fail at once, not wait.
	_, err = g.NextBatch(context.Background(), 1)
	if !errors.Is(err, ErrLayoutExhausted) || !strings.Contains(err.Error(), "layout exhausted") {
		t.Fatalf("err = %v, want ErrLayoutExhausted", err)
	}
	// A floor at the very end is allowed, but nothing can be stamped.
	g2, err := New(l, 0, 15, clock)
	if err != nil {
		t.Fatal(err)
	}
	g2.Grant(20)
	if _, err := g2.NextBatch(context.Background(), 1); !errors.Is(err, ErrLayoutExhausted) {
		t.Fatalf("floor at max: err = %v", err)
	}
}

func TestFillDoesNotAllocate(t *testing.T) {
	g, clock := newTestGenerator(t, 5)
	g.Grant(DefaultLayout().MaxTimestamp())
	dst := make([]int64, 1160)
	ctx := context.Background()
	allocs := testing.AllocsPerRun(100, func() {
		clock.Add(time.Second)
		if err := g.Fill(ctx, dst); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("Fill allocates %.1f times per call", allocs)
	}
}

// Under demand above supply, with the grant kept a lead ahead of the clock as
// the cluster agent does, batches of 1160 use all 2048 sequence numbers of
// every second of clock time; the article's algorithm wastes the 888 left
// after the first batch of each second.
func TestSustained1160UsesEverySequence(t *testing.T) {
	const (
		lead    = 10
		warmup  = 2 * lead // the cursor runs ahead of the clock up to the grant
		seconds = 145      // 145*2048 is a whole number of 1160-ID batches
	)
	g, clock := newTestGenerator(t, 0)
	article := newArticleGenerator(clock, 1, 1)
	article.noWait = true
	l := DefaultLayout()
	ours, theirs := 0, 0
	for s := int64(1); s <= warmup+seconds; s++ {
		clock.Set(l.Time(s))
		g.Grant(s + lead)
		for {
			ids, err := g.NextBatch(canceled(), 1160)
			if errors.Is(err, ErrWindowExhausted) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if s > warmup {
				ours += len(ids)
			}
		}
		for {
			ids, err := article.NextBatch(1160)
			if errors.Is(err, errWouldWait) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if s > warmup {
				theirs += len(ids)
			}
		}
	}
	if ours != 2048*seconds {
		t.Errorf("generator: %d IDs in %d s = %.1f/s, want 2048/s", ours, seconds, float64(ours)/seconds)
	}
	if theirs != 1160*seconds {
		t.Errorf("article baseline: %d IDs in %d s, want 1160/s", theirs, seconds)
	}
	t.Logf("IDs per second of clock time: generator %d, article %d", ours/seconds, theirs/seconds)
}

func TestConcurrentCallersGetUniqueIDs(t *testing.T) {
	g, clock := newTestGenerator(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const workers, batches = 8, 200
	var wg sync.WaitGroup
	results := make([][][]int64, workers)
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range batches {
				n := 1 + (w*batches+b)*37%3000
				ids, err := g.NextBatch(ctx, n)
				if err != nil {
					errs <- err
					return
				}
				results[w] = append(results[w], ids)
			}
		}()
	}
	// The "agent": grant more whenever someone waits, and move the clock.
	agentDone := make(chan struct{})
	go func() {
		defer close(agentDone)
		for {
			select {
			case <-g.Waiting():
				clock.Add(time.Second)
				g.Grant(g.Head() + 2)
			case <-ctx.Done():
				return
			}
		}
	}()
	wg.Wait()
	cancel()
	<-agentDone
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	seen := make(map[int64]bool)
	total := 0
	for _, bs := range results {
		for _, ids := range bs {
			for i, id := range ids {
				if seen[id] {
					t.Fatalf("duplicate ID %d", id)
				}
				seen[id] = true
				if i > 0 && id <= ids[i-1] {
					t.Fatalf("batch not increasing at %d", i)
				}
				if p := decompose(t, id); p.Slot != 3 || p.Timestamp <= 0 || p.Timestamp > g.Granted() {
					t.Fatalf("ID %d outside the window: %+v", id, p)
				}
			}
			total += len(ids)
		}
	}
	if uint64(total) != g.Issued() {
		t.Errorf("collected %d IDs, Issued() = %d", total, g.Issued())
	}
}
