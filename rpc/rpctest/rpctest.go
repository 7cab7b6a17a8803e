// Package rpctest runs real rpc.Servers in front of a fake node, for tests of
// the client library and idctl that plant what a healthy cluster never shows:
// another slot's IDs, repeated IDs, an old owner stamping into the next
// owner's window, diverged views of the Raft log. Only tests import it.
package rpctest

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

var (
	// ErrLimitReached is a node's failure once its allowed batches are served.
	ErrLimitReached = errors.New("rpctest: batch limit reached")
	errNotInTests   = errors.New("rpctest: not supported")
)

// Node stands in for cluster.Node behind a real rpc.Server. It mints IDs of
// one slot in the default layout (or SetLayout's) from a counter (the c-th ID at timestamp
// 1+c/2048, sequence c%2048) and answers History and Members from its View.
type Node struct {
	mu      sync.Mutex
	slot    int
	layout  generator.Layout
	counter int64
	ready   bool
	reason  string
	failErr error
	mints   map[int]int
	// limitN/limitLeft: NextBatch for limitN IDs succeeds limitLeft more
	// times, then fails.
	limitN, limitLeft int
	tamper            func([]int64) []int64

	id, name string
	view     *View
}

// NewNode returns a ready node of slot whose first ID has timestamp 1.
func NewNode(slot int) *Node {
	return &Node{slot: slot, layout: generator.DefaultLayout(), ready: true}
}

// SetLayout makes the node mint under l and report it (the node's
// cluster's), from timestamp 1; call it before the node serves, as the
// server keeps the first layout it sees.
func (f *Node) SetLayout(l generator.Layout) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.layout, f.counter = l, 0
}

// StartAt makes the next ID's timestamp ts.
func (f *Node) StartAt(ts int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.counter = (ts - 1) * f.layout.SequencePerUnit()
}

// SetReady sets what Ready reports; NextBatch fails while not ready.
func (f *Node) SetReady(ok bool, reason string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ready, f.reason = ok, reason
}

// SetFail makes NextBatch fail with err while it is set; health stays SERVING.
func (f *Node) SetFail(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failErr = err
}

// Limit lets NextBatch for n IDs succeed left more times, then fail with
// ErrLimitReached: a node that serves once and then breaks.
func (f *Node) Limit(n, left int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.limitN, f.limitLeft = n, left
}

// SetTamper makes every batch pass through fn before it is served.
func (f *Node) SetTamper(fn func([]int64) []int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tamper = fn
}

// MintCount is the number of NextBatch calls for n IDs so far.
func (f *Node) MintCount(n int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mints[n]
}

// NextBatch mints n IDs (then tampers with them, if asked to).
func (f *Node) NextBatch(ctx context.Context, n int) ([]int64, int, error) {
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
			return nil, -1, ErrLimitReached
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

// Ready reports what SetReady set.
func (f *Node) Ready() (bool, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ready, f.reason
}

// Conflict reports none: the node never meets another cluster.
func (f *Node) Conflict() error { return nil }

// Withdrawn reports none: the node's tenure never ends.
func (f *Node) Withdrawn(int64) bool { return false }

// Members reports the View's members.
func (f *Node) Members() ([]cluster.MemberInfo, string) {
	if f.view == nil {
		return nil, ""
	}
	return f.view.Members, ""
}

// Status reports the node's identity, slot and layout.
func (f *Node) Status() cluster.Status {
	f.mu.Lock()
	defer f.mu.Unlock()
	return cluster.Status{ID: f.id, Name: f.name, Slot: f.slot, Layout: f.layout, Ready: true}
}

// History reports the View's tenures.
func (f *Node) History(context.Context) ([]cluster.Tenure, error) {
	if f.view == nil {
		return nil, nil
	}
	return f.view.Tenures, nil
}

// Join is not supported.
func (f *Node) Join([]string) (int, error) { return 0, errNotInTests }

// Leave does nothing.
func (f *Node) Leave(context.Context) error { return nil }

// SetClockOffset does nothing.
func (f *Node) SetClockOffset(time.Duration) error { return nil }

// Remove knows no node.
func (f *Node) Remove(context.Context, string) (string, int, error) {
	return "", -1, cluster.ErrUnknownNode
}

// ApplyForwarded refuses: the node never leads.
func (f *Node) ApplyForwarded(context.Context, []byte) ([]byte, error) {
	return nil, cluster.ErrNotLeader
}

// SightedCopy implements rpc.Peer: a fake node has no copies.
func (f *Node) SightedCopy(string) {}

// Serve runs a real rpc.Server for cfg.Backend on 127.0.0.1:0 until the test
// ends, quiet and with its own metrics registry.
func Serve(t testing.TB, cfg rpc.ServerConfig) (*rpc.Server, string) {
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

// View is a cluster as its nodes answer History and Members.
type View struct {
	Tenures []cluster.Tenure
	Members []cluster.MemberInfo
}

// Member adds a node named name (node ID "id-"+name) holding slot over
// (floor, granted], claimed at Raft index claimed.
func (v *View) Member(name string, slot int, floor, granted int64, claimed uint64) *View {
	v.Members = append(v.Members, cluster.MemberInfo{ID: "id-" + name, Name: name, Slot: slot})
	v.Tenures = append(v.Tenures, cluster.Tenure{Slot: slot, NodeID: "id-" + name, Floor: floor, Granted: granted, ClaimedIndex: claimed})
	return v
}

// Planted serves node name (node ID "id-"+name) of view on slot, minting
// from timestamp firstTS, with a default batch of 40 IDs.
func Planted(t testing.TB, view *View, name string, slot int, firstTS int64) (*Node, string) {
	t.Helper()
	f := NewNode(slot)
	f.StartAt(firstTS)
	f.id, f.name, f.view = "id-"+name, name, view
	_, addr := Serve(t, rpc.ServerConfig{Backend: f, NodeName: name, BatchSize: 40})
	return f, addr
}

// OtherSlotLast ends a batch with an ID of the next slot, as a node serving
// another node's IDs would.
func OtherSlotLast(ids []int64) []int64 {
	l := generator.DefaultLayout()
	p, _ := l.Decompose(ids[len(ids)-1])
	ids[len(ids)-1], _ = l.Compose(p.Timestamp, (p.Slot+1)%l.Slots(), p.Sequence)
	return ids
}

// RepeatFirst puts a batch's first ID in every place.
func RepeatFirst(ids []int64) []int64 {
	for i := range ids {
		ids[i] = ids[0]
	}
	return ids
}
