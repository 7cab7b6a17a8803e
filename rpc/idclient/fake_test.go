package idclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idgen/idgen/cluster"
	"github.com/idgen/idgen/generator"
	"github.com/idgen/idgen/rpc"
)

// fakeNode stands in for cluster.Node behind a real rpc.Server.
type fakeNode struct {
	mu      sync.Mutex
	slot    int
	layout  generator.Layout
	counter int64
	ready   bool
	reason  string
	failErr error       // NextBatch fails with it while set (health stays SERVING)
	mints   map[int]int // NextBatch calls by n
	// limitN/limitLeft: NextBatch for limitN IDs succeeds limitLeft more
	// times, then fails (a node that serves once and then breaks).
	limitN, limitLeft int
	// tamper, when set, rewrites every batch before it is served.
	tamper func([]int64) []int64
}

// errLimitReached is a fake node's failure after its allowed batches.
var errLimitReached = errors.New("fake node: batch limit reached")

// limit lets NextBatch for n IDs succeed left more times.
func (f *fakeNode) limit(n, left int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.limitN, f.limitLeft = n, left
}

func (f *fakeNode) setTamper(fn func([]int64) []int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tamper = fn
}

func (f *fakeNode) NextBatch(ctx context.Context, n int) ([]int64, int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.ready {
		return nil, -1, fmt.Errorf("%w: %s", cluster.ErrNotReady, f.reason)
	}
	if f.failErr != nil {
		return nil, -1, f.failErr
	}
	if f.limitN != 0 && n == f.limitN {
		if f.limitLeft <= 0 {
			return nil, -1, errLimitReached
		}
		f.limitLeft--
	}
	per := f.layout.SequencePerUnit()
	ids := make([]int64, n)
	for i := range ids {
		c := f.counter
		f.counter++
		id, err := f.layout.Compose(1+c/per, f.slot, c%per)
		if err != nil {
			return nil, -1, err
		}
		ids[i] = id
	}
	if f.mints == nil {
		f.mints = map[int]int{}
	}
	f.mints[n]++
	if f.tamper != nil {
		ids = f.tamper(ids)
	}
	return ids, f.slot, nil
}

func (f *fakeNode) Ready() (bool, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ready, f.reason
}

func (f *fakeNode) setReady(ok bool, reason string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ready, f.reason = ok, reason
}

func (f *fakeNode) setFail(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failErr = err
}

// mintCount is the number of NextBatch calls for n IDs.
func (f *fakeNode) mintCount(n int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mints[n]
}

func (f *fakeNode) Members() ([]cluster.MemberInfo, string) { return nil, "" }
func (f *fakeNode) Status() cluster.Status {
	return cluster.Status{Slot: f.slot, Layout: f.layout, Ready: true}
}
func (f *fakeNode) Join([]string) (int, error)         { return 0, errors.New("not in tests") }
func (f *fakeNode) Leave(context.Context) error        { return nil }
func (f *fakeNode) SetClockOffset(time.Duration) error { return nil }
func (f *fakeNode) Remove(context.Context, string) (string, int, error) {
	return "", -1, cluster.ErrUnknownNode
}
func (f *fakeNode) History(context.Context) ([]cluster.Tenure, error) { return nil, nil }
func (f *fakeNode) ApplyForwarded(context.Context, []byte) ([]byte, error) {
	return nil, cluster.ErrNotLeader
}

type node struct {
	fake *fakeNode
	srv  *rpc.Server
	addr string
}

// startNode runs a real rpc.Server for a fake node on 127.0.0.1:0.
func startNode(t testing.TB, slot int, cfg rpc.ServerConfig) *node {
	t.Helper()
	return startNodeReady(t, slot, cfg, true, "")
}

// startNodeReady starts a node whose readiness is set before it serves, so
// its prefetch buffer holds nothing minted while it was ready.
func startNodeReady(t testing.TB, slot int, cfg rpc.ServerConfig, ready bool, reason string) *node {
	t.Helper()
	f := &fakeNode{slot: slot, layout: generator.DefaultLayout(), ready: ready, reason: reason}
	cfg.Backend = f
	cfg.NodeName = fmt.Sprintf("node-%d", slot)
	srv, addr := serve(t, cfg)
	return &node{fake: f, srv: srv, addr: addr}
}

// serve runs a real rpc.Server for cfg.Backend on 127.0.0.1:0 until the
// test ends.
func serve(t testing.TB, cfg rpc.ServerConfig) (*rpc.Server, string) {
	t.Helper()
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg.Registerer = prometheus.NewRegistry()
	cfg.ReadyPollInterval = 10 * time.Millisecond
	srv, err := rpc.NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	t.Cleanup(func() { srv.Shutdown(time.Second) })
	return srv, lis.Addr().String()
}

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
