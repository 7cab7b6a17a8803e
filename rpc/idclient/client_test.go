package idclient

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/idgen/idgen/generator"
	"github.com/idgen/idgen/rpc"
	"github.com/idgen/idgen/rpc/rpctest"
	"github.com/idgen/idgen/scripts/harness"
)

func threeNodes(t *testing.T) ([]*node, string) {
	var nodes []*node
	var addrs []string
	for slot := 0; slot < 3; slot++ {
		n := startNode(t, slot, rpc.ServerConfig{BatchSize: 50})
		nodes = append(nodes, n)
		addrs = append(addrs, n.addr)
	}
	return nodes, strings.Join(addrs, ",")
}

func dial(t *testing.T, target string, opts ...Option) *Client {
	t.Helper()
	c, err := Dial(target, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func slotOf(t *testing.T, id int64) int {
	p, err := generator.DefaultLayout().Decompose(id)
	if err != nil {
		t.Fatal(err)
	}
	return p.Slot
}

func TestRoundRobinReachesAllNodes(t *testing.T) {
	_, target := threeNodes(t)
	c := dial(t, target)
	seen := map[int]bool{}
	harness.WaitFor(t, 10*time.Second, "IDs from all three slots", func() bool {
		ids, err := c.GetIDBatch(context.Background(), 5)
		if err != nil {
			t.Fatalf("GetIDBatch: %v", err)
		}
		if len(ids) != 5 {
			t.Fatalf("got %d ids", len(ids))
		}
		seen[slotOf(t, ids[0])] = true
		return len(seen) == 3
	})
}

func TestDNSTargetAndServiceConfigAccepted(t *testing.T) {
	n := startNode(t, 1, rpc.ServerConfig{BatchSize: 10})
	port := n.addr[strings.LastIndex(n.addr, ":")+1:]
	c := dial(t, "dns:///127.0.0.1:"+port)
	ids, err := c.GetIDBatch(context.Background(), 0)
	if err != nil || len(ids) != 10 {
		t.Fatalf("dns target: %d ids, %v", len(ids), err)
	}
	// Dial parses the default service config: a bad one, or one whose only
	// balancer is not registered, fails Dial. TestFailingNodeIsEjected shows
	// the balancer is the one in use.
	if _, err := Dial("h1:1,,h2:2"); err != nil {
		t.Fatalf("list with an empty element: %v", err)
	}
	for _, bad := range []string{"", "nohostport", " , "} {
		if _, err := Dial(bad); err == nil {
			t.Errorf("Dial(%q) accepted", bad)
		}
	}
}

func TestCallsSucceedWhenANodeStops(t *testing.T) {
	nodes, target := threeNodes(t)
	c := dial(t, target)
	seen := map[int]bool{}
	harness.WaitFor(t, 10*time.Second, "all three nodes in use", func() bool {
		ids, err := c.GetIDBatch(context.Background(), 3)
		if err != nil {
			t.Fatal(err)
		}
		seen[slotOf(t, ids[0])] = true
		return len(seen) == 3
	})
	nodes[1].srv.Shutdown(time.Second)
	for i := 0; i < 200; i++ {
		ids, err := c.GetIDBatch(context.Background(), 3)
		if err != nil {
			t.Fatalf("call %d after stopping a node: %v", i, err)
		}
		if slotOf(t, ids[0]) == 1 && i > 20 {
			t.Fatalf("call %d still served by the stopped node", i)
		}
	}
}

func TestCallsSucceedWhenANodeIsNotReady(t *testing.T) {
	nodes, target := threeNodes(t)
	c := dial(t, target)
	nodes[2].fake.SetReady(false, "no slot")
	for i := 0; i < 200; i++ {
		ids, err := c.GetIDBatch(context.Background(), 4)
		if err != nil {
			t.Fatalf("call %d with a node not ready: %v", i, err)
		}
		if slotOf(t, ids[0]) == 2 {
			t.Fatalf("call %d served by the node that is not ready", i)
		}
	}
}

// waitAllServing waits until round robin reaches all three nodes.
func waitAllServing(t *testing.T, c *Client) {
	t.Helper()
	harness.WaitFor(t, 10*time.Second, "all three nodes SERVING", func() bool {
		seen := map[int]bool{}
		for i := 0; i < 6; i++ {
			ids, err := c.GetIDBatch(context.Background(), 2)
			if err != nil {
				t.Fatal(err)
			}
			seen[slotOf(t, ids[0])] = true
		}
		return len(seen) == 3
	})
}

// ejectedWithin makes 100 calls and fails the test unless the calls that
// failed with a failure isFailure accepts number 1..ejectAfterFailures.
func ejectedWithin(t *testing.T, c *Client, isFailure func(error) bool) {
	t.Helper()
	failures := 0
	for i := 0; i < 100; i++ {
		_, err := c.GetIDBatch(context.Background(), 2)
		if err != nil {
			if !isFailure(err) {
				t.Fatalf("unexpected error: %v", err)
			}
			failures++
		}
	}
	if failures == 0 || failures > ejectAfterFailures {
		t.Fatalf("%d failed calls; want 1..%d before ejection", failures, ejectAfterFailures)
	}
}

func TestFailingNodeIsEjected(t *testing.T) {
	nodes, target := threeNodes(t)
	c := dial(t, target)
	waitAllServing(t, c)
	// Healthy by its health check, but every call fails with Internal.
	nodes[0].fake.SetFail(errors.New("disk on fire"))
	ejectedWithin(t, c, func(err error) bool { return status.Code(err) == codes.Internal })
}

// A node whose calls succeed but whose batches are malformed counts toward
// ejection like a failed call.
func TestMalformedBatchNodeIsEjected(t *testing.T) {
	for name, tamper := range map[string]func([]int64) []int64{
		"another slot's ID": rpctest.OtherSlotLast,
		"a repeated ID":     rpctest.RepeatFirst,
	} {
		t.Run(name, func(t *testing.T) {
			nodes, target := threeNodes(t)
			c := dial(t, target)
			waitAllServing(t, c)
			nodes[0].fake.SetTamper(tamper)
			ejectedWithin(t, c, func(err error) bool { return errors.Is(err, ErrBadBatch) })
		})
	}
}

// A count the protocol's uint32 cannot carry is refused before any node
// is asked, not truncated into another count.
func TestGetIDBatchRefusesCountOverProtocolLimit(t *testing.T) {
	n := startNode(t, 4, rpc.ServerConfig{BatchSize: 10})
	c := dial(t, n.addr)
	if _, err := c.GetIDBatch(context.Background(), 1<<32+5); err == nil {
		t.Fatal("count 2^32+5 accepted")
	}
	if got := n.fake.MintCount(5); got != 0 {
		t.Fatalf("the node minted %d batches of 5 for a count of 2^32+5", got)
	}
}

func TestCallTimeout(t *testing.T) {
	// Not ready from the start: a node serves batches it buffered while
	// ready even after it stops being ready, which this test is not about.
	n := startNodeReady(t, 1, rpc.ServerConfig{BatchSize: 10}, false, "paused")
	c := dial(t, n.addr, WithCallTimeout(300*time.Millisecond))
	start := time.Now()
	_, err := c.GetIDBatch(context.Background(), 0)
	if err == nil {
		t.Fatal("call to a node that is not ready succeeded")
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("call took %s with a 300ms call timeout", d)
	}
}

func TestPoolConcurrentUniqueAndPrefetched(t *testing.T) {
	nodes, target := threeNodes(t)
	p := newPool(t, target, PoolOptions{BatchSize: 100, Lookahead: 3})
	// Prefetch happens before anyone asks.
	harness.WaitFor(t, 10*time.Second, "lookahead filled", func() bool { return readyBatches(p) == 3 })

	const workers, each = 8, 500
	seen := &idSet{}
	for _, err := range draw(p, workers, each, seen) {
		if err != nil {
			t.Fatal(err)
		}
	}
	if seen.len() != workers*each {
		t.Fatalf("%d unique IDs, want %d", seen.len(), workers*each)
	}
	// One fetch per 100 IDs, plus the lookahead: no fetch per ID. (Nodes
	// mint their own 50-ID default batches too; those are not the pool's.)
	mints := 0
	for _, n := range nodes {
		mints += n.fake.MintCount(100)
	}
	if max := workers*each/100 + 3 + 2; mints > max {
		t.Fatalf("%d fetches for %d IDs, want at most %d", mints, workers*each, max)
	}
	code, err := p.NextCode(context.Background())
	if err != nil || code == "" {
		t.Fatalf("NextCode = %q, %v", code, err)
	}
	if id, err := generator.Decode(code); err != nil || seen.add(id) != nil {
		t.Fatalf("code %q decodes to %d (%v), a fresh ID expected", code, id, err)
	}
}

func TestPoolCloseKeepsFetchedIDs(t *testing.T) {
	_, target := threeNodes(t)
	p := newPool(t, target, PoolOptions{BatchSize: 20, Lookahead: 2})
	harness.WaitFor(t, 10*time.Second, "lookahead filled", func() bool { return readyBatches(p) == 2 })
	if _, err := p.NextID(context.Background()); err != nil { // 19 left in the first batch, 2 batches ready
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	got := 0
	for {
		_, err := p.NextID(context.Background())
		if errors.Is(err, ErrPoolClosed) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got++
		if got > 100 {
			t.Fatal("pool keeps producing after Close")
		}
	}
	// 19 from the first batch, 20 from each of the two ready ones; the
	// producer had no room for a fourth.
	if got != 59 {
		t.Fatalf("took %d IDs after Close, want 59", got)
	}
	if _, err := p.NextCode(context.Background()); !errors.Is(err, ErrPoolClosed) {
		t.Fatalf("NextCode after drain: %v", err)
	}
	p.Close() // idempotent
}

func TestPoolSurfacesFetchError(t *testing.T) {
	n := startNodeReady(t, 1, rpc.ServerConfig{BatchSize: 10}, false, "cluster full: all slots are owned")
	// Long enough for all retries to run, so the fetch ends with the node's answer.
	p := newPool(t, n.addr, PoolOptions{}, WithCallTimeout(2*time.Second))
	harness.WaitFor(t, 10*time.Second, "a fetch to fail", func() bool { return p.fetchErr() != nil })
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := p.NextID(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want the context's error, got %v", err)
	}
	if status.Code(p.fetchErr()) != codes.Unavailable || !strings.Contains(err.Error(), "Unavailable") {
		t.Fatalf("want the Unavailable fetch error in %v", err)
	}

	// The producer keeps retrying: the caller gets IDs once the node is ready.
	n.fake.SetReady(true, "")
	ctx2, cancel2 := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel2()
	if _, err := p.NextID(ctx2); err != nil {
		t.Fatalf("after recovery: %v", err)
	}
}
