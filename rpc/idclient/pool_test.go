package idclient

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idgen/idgen/rpc"
	"github.com/idgen/idgen/scripts/harness"
)

// readyBatches is the number of fetched batches waiting besides the one
// being consumed.
func readyBatches(p *Pool) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return max(len(p.batches)-1, 0)
}

// newPool dials target and starts a pool on it; both are closed with the test.
func newPool(t *testing.T, target string, opts PoolOptions, dialOpts ...Option) *Pool {
	t.Helper()
	p, err := NewPool(dial(t, target, dialOpts...), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// idSet records IDs handed out and refuses a second copy.
type idSet struct {
	mu   sync.Mutex
	seen map[int64]bool
}

func (s *idSet) add(id int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen == nil {
		s.seen = map[int64]bool{}
	}
	if s.seen[id] {
		return fmt.Errorf("ID %d handed out twice", id)
	}
	s.seen[id] = true
	return nil
}

func (s *idSet) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.seen)
}

// draw runs workers callers of NextID (each call bounded by 5 s), each until
// it has taken each IDs (0: until NextID fails), recording them in seen. It
// returns what every caller ended with: nil, or the error that stopped it.
func draw(p *Pool, workers, each int, seen *idSet) []error {
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; each == 0 || i < each; i++ {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				id, err := p.NextID(ctx)
				cancel()
				if err == nil {
					err = seen.add(id)
				}
				if err != nil {
					errs[w] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	return errs
}

// startWaiters starts n callers of NextID with a bound of d each; their
// errors (nil for an ID) arrive on the channel.
func startWaiters(p *Pool, n int, d time.Duration) <-chan error {
	errs := make(chan error, n)
	for range n {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), d)
			defer cancel()
			_, err := p.NextID(ctx)
			errs <- err
		}()
	}
	return errs
}

// A node that serves one 10-ID batch and then fails: two callers waiting on
// the empty pool both get an ID from that batch, the other eight can still be
// taken, and the eleventh caller gets the deadline with the fetch error.
func TestPoolWaitersShareOneBatch(t *testing.T) {
	n := startNodeReady(t, 1, rpc.ServerConfig{BatchSize: 50}, false, "starting")
	n.fake.Limit(10, 1)
	p := newPool(t, n.addr, PoolOptions{BatchSize: 10, Lookahead: 1}, WithCallTimeout(200*time.Millisecond))
	// Both callers block on the empty pool while fetches fail. Their own
	// deadline is far off: a caller that returns at it has waited with IDs
	// in the pool.
	errs := startWaiters(p, 2, harness.Scale(20*time.Second))
	harness.WaitFor(t, 10*time.Second, "a failed fetch", func() bool { return p.fetchErr() != nil })
	n.fake.SetReady(true, "")
	// From ready to served takes a fetch backoff (at most 1 s), the health
	// watch and one call; 12 s leaves room for a starved 2-core machine (once
	// 5 s was not enough under two stress-ng workers) and still ends before
	// the waiters' own 20 s, which is what a waiter left asleep would reach.
	wait := harness.Scale(12 * time.Second)
	for i := range 2 {
		select {
		case err := <-errs:
			if err != nil {
				t.Fatalf("waiter %d: %v", i, err)
			}
		case <-time.After(wait):
			t.Fatalf("waiter %d still waiting %v after the node turned ready", i, wait)
		}
	}
	for i := range 8 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := p.NextID(ctx)
		cancel()
		if err != nil {
			t.Fatalf("ID %d of the eight left: %v", i, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := p.NextID(ctx); !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(fmt.Sprint(err), "last fetch failed") {
		t.Fatalf("after the only batch: %v (last fetch error %v)", err, p.fetchErr())
	}
}

// Ten callers running dry at once cost one fetch of ten, not ten fetches.
func TestPoolManyWaitersOneFetch(t *testing.T) {
	n := startNodeReady(t, 2, rpc.ServerConfig{BatchSize: 50}, false, "starting")
	p := newPool(t, n.addr, PoolOptions{BatchSize: 10, Lookahead: 1}, WithCallTimeout(200*time.Millisecond))
	const waiters = 10
	errs := startWaiters(p, waiters, 5*time.Second)
	harness.WaitFor(t, 10*time.Second, "a failed fetch", func() bool { return p.fetchErr() != nil })
	n.fake.SetReady(true, "")
	for i := range waiters {
		if err := <-errs; err != nil {
			t.Fatalf("waiter %d: %v", i, err)
		}
	}
	// One batch for the ten waiters, plus what the lookahead asks for: it
	// grows with the draw rate, and ten draws at once are a high one (a CI
	// run saw 4). A fetch per waiter would be 10.
	if got := n.fake.MintCount(10); got > waiters/2 {
		t.Fatalf("%d fetches of 10 for %d waiters, want at most %d", got, waiters, waiters/2)
	}
}

// IDs in the pool are taken before a caller's ended context is looked at.
func TestPoolTakesReadyIDsWithEndedContext(t *testing.T) {
	n := startNode(t, 3, rpc.ServerConfig{BatchSize: 50})
	const ready = 40
	p := newPool(t, n.addr, PoolOptions{BatchSize: 1, Lookahead: ready})
	harness.WaitFor(t, 10*time.Second, "lookahead filled", func() bool { return readyBatches(p) == ready })
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for i := range ready {
		if _, err := p.NextID(ctx); err != nil {
			t.Fatalf("call %d with %d batches ready: %v", i, ready, err)
		}
	}
}

// Close while sixteen callers draw IDs: every caller ends with ErrPoolClosed
// (not a hang, not its deadline), and no ID is handed out twice.
func TestPoolCloseUnderLoad(t *testing.T) {
	_, target := threeNodes(t)
	p := newPool(t, target, PoolOptions{BatchSize: 30, Lookahead: 2})
	const workers = 16
	seen := &idSet{}
	ended := make(chan []error, 1)
	go func() { ended <- draw(p, workers, 0, seen) }()
	harness.WaitFor(t, 10*time.Second, "IDs drawn", func() bool { return seen.len() > 500 })
	closed := make(chan struct{})
	go func() { p.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return under load")
	}
	for _, err := range <-ended {
		if !errors.Is(err, ErrPoolClosed) {
			t.Errorf("caller ended with %v, want ErrPoolClosed", err)
		}
	}
}

// startBlackHole listens on a port from the harness and accepts connections
// that it never answers, as a paused process's kernel does; gRPC gives such
// an address 20 s to connect before it calls it failed.
func startBlackHole(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", harness.NextPort(t)))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var held []net.Conn
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		lis.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	})
	return lis.Addr().String()
}

// The pool's first draw waits for the first node that is ready, not for
// every node: the other two addresses are black holes that hold their
// connections in CONNECTING for gRPC's 20 s, or nodes that are not ready.
func TestPoolFirstDrawTakesFirstReadyNode(t *testing.T) {
	for name, other := range map[string]func(*testing.T) string{
		"black holes": startBlackHole,
		"not ready": func(t *testing.T) string {
			return startNodeReady(t, 1, rpc.ServerConfig{BatchSize: 10}, false, "no slot").addr
		},
	} {
		t.Run(name, func(t *testing.T) {
			n := startNode(t, 0, rpc.ServerConfig{BatchSize: 10})
			p := newPool(t, strings.Join([]string{other(t), n.addr, other(t)}, ","), PoolOptions{})
			start := time.Now()
			bound := harness.Scale(5 * time.Second)
			ctx, cancel := context.WithTimeout(context.Background(), bound)
			defer cancel()
			id, err := p.NextID(ctx)
			if err != nil {
				t.Fatalf("first draw with one ready node of three: %v after %s (bound %s)", err, time.Since(start), bound)
			}
			if slotOf(t, id) != 0 {
				t.Fatalf("first ID %d is of slot %d, want the ready node's 0", id, slotOf(t, id))
			}
			t.Logf("first draw took %s", time.Since(start))
		})
	}
}
