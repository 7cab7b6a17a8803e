package rpc

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/idgen/idgen/cluster"
	"github.com/idgen/idgen/generator"
)

// fakeBackend stands in for cluster.Node: it mints unique IDs for one slot and
// lets tests flip readiness, report a conflict, inject errors and panics.
type fakeBackend struct {
	mu       sync.Mutex
	hints    []string // copy hints from Status
	slot     int
	layout   generator.Layout
	counter  int64
	ready    bool
	reason   string
	conflict error // what Conflict reports; Ready and NextBatch ignore it
	mintErr  error
	block    bool // NextBatch waits for ctx to end
	panicMem bool // Members panics
	left     bool
	applyFn  func(ctx context.Context, cmd []byte) ([]byte, error)
	faultErr error
	joinFn   func(addrs []string) (int, error) // Join's behaviour when set
	mints    int
	blocked  map[int]int // NextBatch calls waiting in block mode, by n
	// withdrawnBelow: IDs below it are withdrawn (Issuer.Withdrawn)
	withdrawnBelow int64
}

func (f *fakeBackend) DoorRefusals() map[string]uint64 {
	return map[string]uint64{"raft_tls": 3, "gossip_stream_budget": 0}
}

func newFakeBackend(slot int) *fakeBackend {
	return &fakeBackend{slot: slot, layout: generator.DefaultLayout(), ready: true}
}

func (f *fakeBackend) setReady(ok bool, reason string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ready, f.reason = ok, reason
}

func (f *fakeBackend) set(fn func(f *fakeBackend)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

func (f *fakeBackend) NextBatch(ctx context.Context, n int) ([]int64, int, error) {
	f.mu.Lock()
	if f.block {
		if f.blocked == nil {
			f.blocked = map[int]int{}
		}
		f.blocked[n]++
		f.mu.Unlock()
		<-ctx.Done()
		return nil, -1, ctx.Err()
	}
	defer f.mu.Unlock()
	if !f.ready {
		return nil, -1, fmt.Errorf("%w: %s", cluster.ErrNotReady, f.reason)
	}
	if f.mintErr != nil {
		return nil, -1, f.mintErr
	}
	if n < 1 || n > generator.MaxBatch {
		return nil, -1, fmt.Errorf("%w: %d", generator.ErrBatchSize, n)
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
	f.mints++
	return ids, f.slot, nil
}

func (f *fakeBackend) Ready() (bool, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ready, f.reason
}

// Conflict reports the conflict a test set. Unlike cluster.Node, Ready and
// NextBatch do not look at it: the server alone has to refuse.
func (f *fakeBackend) Conflict() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.conflict
}

// Withdrawn reports the IDs below what a test set as withdrawn.
func (f *fakeBackend) Withdrawn(id int64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return id < f.withdrawnBelow
}

// mintCount is the number of batches NextBatch has minted.
func (f *fakeBackend) mintCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mints
}

func (f *fakeBackend) Members() ([]cluster.MemberInfo, string) {
	f.mu.Lock()
	p := f.panicMem
	f.mu.Unlock()
	if p {
		panic("boom in Members")
	}
	return []cluster.MemberInfo{{ID: "n1", Name: "node-1", Slot: f.slot, RaftRole: "leader", GossipState: "alive", GrantedLead: 1500 * time.Millisecond}}, "n1"
}

func (f *fakeBackend) Status() cluster.Status {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.layout.Units(time.Now())
	return cluster.Status{
		ID: "n1", Name: "node-1", Slot: f.slot, Ready: f.ready, Reason: f.reason,
		RaftState: "Leader", LeaderID: "n1", Granted: now + 10, Cursor: now, Floor: now - 5,
		IDsIssued: uint64(f.counter), Layout: f.layout,
	}
}

func (f *fakeBackend) Join(addrs []string) (int, error) {
	f.mu.Lock()
	fn := f.joinFn
	f.mu.Unlock()
	if fn != nil {
		return fn(addrs)
	}
	return 0, fmt.Errorf("no gossip reply from %v", addrs)
}

func (f *fakeBackend) Leave(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.left = true
	return nil
}

func (f *fakeBackend) Remove(ctx context.Context, node string) (string, int, error) {
	if node == "n2" {
		return "n2", 3, nil
	}
	return "", -1, fmt.Errorf("%w: %s", cluster.ErrUnknownNode, node)
}

func (f *fakeBackend) History(ctx context.Context) ([]cluster.Tenure, error) {
	return []cluster.Tenure{{Slot: f.slot, NodeID: "n1", Floor: 1, Granted: 20, ClaimedIndex: 3}}, nil
}

func (f *fakeBackend) ApplyForwarded(ctx context.Context, cmd []byte) ([]byte, error) {
	f.mu.Lock()
	fn := f.applyFn
	f.mu.Unlock()
	if fn == nil {
		return nil, cluster.ErrNotLeader
	}
	return fn(ctx, cmd)
}

// SightedCopy records a peer's hint of a copy.
func (f *fakeBackend) SightedCopy(addr string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hints = append(f.hints, addr)
}

func (f *fakeBackend) SetClockOffset(d time.Duration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.faultErr
}

func (f *fakeBackend) blockedCalls(n int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.blocked[n]
}
