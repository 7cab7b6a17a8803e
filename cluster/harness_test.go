package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/idgen/idgen/generator"
	"github.com/idgen/idgen/scripts/harness"
)

// localForwarder delivers forwarded commands in-process, standing in for the
// gRPC PeerService only in this package's tests (rpc has the real one).
type localForwarder struct {
	mu     sync.Mutex
	byAddr map[string]*Node
	// holes are addresses where a forward waits until its context ends,
	// as a dial to the address of a container that was killed does (no
	// host answers, not even with a refusal); a forward whose context
	// carries holeCall signals its channel once it waits there.
	holes map[string]bool
}

// holeCall marks a forward's context for localForwarder's holes.
type holeCall struct{}

// blackHole makes every forward to addr wait until its context ends.
func (f *localForwarder) blackHole(addr string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.holes == nil {
		f.holes = map[string]bool{}
	}
	f.holes[addr] = true
}

func (f *localForwarder) Forward(ctx context.Context, addr string, cmd []byte) ([]byte, error) {
	f.mu.Lock()
	n, hole := f.byAddr[addr], f.holes[addr]
	f.mu.Unlock()
	if hole {
		if waiting, ok := ctx.Value(holeCall{}).(chan struct{}); ok {
			close(waiting)
		}
		<-ctx.Done()
		return nil, fmt.Errorf("forward to %s: %w while waiting for connections to become ready", addr, context.Cause(ctx))
	}
	if n == nil {
		return nil, fmt.Errorf("forward to %s: connection refused", addr)
	}
	select {
	case <-n.Done():
		return nil, fmt.Errorf("forward to %s: connection refused", addr)
	default:
	}
	return n.ApplyForwarded(ctx, cmd)
}

// Probe answers with the Status of the node at addr, in-process: the test
// stand-in for rpc's PeerProber (ClusterService over mutual TLS). Only a
// started node of the test cluster answers; an address nothing serves is
// refused, as a member without a server certificate is by the real one.
func (f *localForwarder) Probe(ctx context.Context, addr string) (Status, error) {
	f.mu.Lock()
	n := f.byAddr[addr]
	f.mu.Unlock()
	if n == nil {
		return Status{}, fmt.Errorf("probe %s: connection refused", addr)
	}
	select {
	case <-n.Done():
		return Status{}, fmt.Errorf("probe %s: connection refused", addr)
	default:
	}
	return n.Status(), nil
}

// TellCopy implements CopyTeller, as ClusterService.Status with a hint does.
func (f *localForwarder) TellCopy(ctx context.Context, addr, copyAddr string) error {
	if _, err := f.Probe(ctx, addr); err != nil {
		return err
	}
	f.mu.Lock()
	n := f.byAddr[addr]
	f.mu.Unlock()
	n.SightedCopy(copyAddr)
	return nil
}

func (f *localForwarder) set(addr string, n *Node) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if n == nil {
		delete(f.byAddr, addr)
		return
	}
	f.byAddr[addr] = n
}

// testCluster runs real nodes (Raft over TCP, memberlist) on loopback.
type testCluster struct {
	t     testing.TB
	fwd   *localForwarder
	mu    sync.Mutex
	specs map[string]*nodeSpec
	seen  map[int64]issuer // every ID issued in the test, and who issued it
	// opts change the configuration of every node added from then on.
	opts []func(*Config)
}

type issuer struct{ name, id string }

type nodeSpec struct {
	cfg  Config
	node *Node
	// lastIndex is the node's last Raft index when it was stopped.
	lastIndex uint64
}

func newTestCluster(t testing.TB) *testCluster {
	tc := &testCluster{t: t, fwd: &localForwarder{byAddr: map[string]*Node{}}, specs: map[string]*nodeSpec{}, seen: map[int64]issuer{}}
	t.Cleanup(func() {
		tc.mu.Lock()
		defer tc.mu.Unlock()
		for _, s := range tc.specs {
			if s.node != nil {
				s.node.Close()
			}
		}
	})
	return tc
}

// add configures a node; join lists names of nodes whose gossip addresses to join.
func (tc *testCluster) add(name string, expect int, join ...string) *nodeSpec {
	tc.t.Helper()
	cfg := Config{
		Name:              name,
		DataDir:           filepath.Join(tc.t.TempDir(), name),
		RaftAddr:          fmt.Sprintf("127.0.0.1:%d", harness.NextPort(tc.t)),
		GossipAddr:        fmt.Sprintf("127.0.0.1:%d", harness.NextPort(tc.t)),
		GRPCAddr:          fmt.Sprintf("grpc-%s:1", name),
		BootstrapExpect:   expect,
		Datacenter:        -1,
		ReapAfter:         3 * time.Second,
		ReconcileInterval: 500 * time.Millisecond,
		JoinRetryInterval: 500 * time.Millisecond,
		GossipLocal:       true,
		Forwarder:         tc.fwd,
		Prober:            tc.fwd,
		Logger:            testLogger(tc.t, name),
	}
	for _, o := range tc.opts {
		o(&cfg)
	}
	tc.mu.Lock()
	for _, j := range join {
		cfg.Join = append(cfg.Join, tc.specs[j].cfg.GossipAddr)
	}
	s := &nodeSpec{cfg: cfg}
	tc.specs[name] = s
	tc.mu.Unlock()
	return s
}

func testLogger(t testing.TB, name string) *slog.Logger {
	level := slog.LevelWarn
	if os.Getenv("IDGEN_TEST_VERBOSE") != "" {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})).With("test", t.Name())
}

func (tc *testCluster) start(name string) *Node {
	tc.t.Helper()
	s := tc.specs[name]
	n, err := Open(s.cfg)
	if err != nil {
		tc.t.Fatalf("open %s: %v", name, err)
	}
	s.node = n
	tc.fwd.set(s.cfg.GRPCAddr, n)
	// Closed before the test's temporary dirs made so far are removed
	// (cleanups run last first): a running node writes into its data dir
	// (APPLIED every second), and a removal racing it fails the test.
	tc.t.Cleanup(func() { n.Close() })
	return n
}

// stop closes a node as a crash would look to the others (no leave).
func (tc *testCluster) stop(name string) {
	tc.t.Helper()
	s := tc.specs[name]
	tc.fwd.set(s.cfg.GRPCAddr, nil)
	s.lastIndex = s.node.rs.raft.LastIndex()
	if err := s.node.Close(); err != nil {
		tc.t.Logf("close %s: %v", name, err)
	}
}

func (tc *testCluster) node(name string) *Node { return tc.specs[name].node }

// waitReady waits up to harness.Scale(30s) for n to be ready.
func waitReady(t testing.TB, n *Node) {
	t.Helper()
	var reason string
	limit := harness.Scale(30 * time.Second)
	deadline := time.Now().Add(limit)
	for {
		var ok bool
		if ok, reason = n.Ready(); ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready after %v%s: %s (status %+v)", n.Name(), limit, harness.SlowdownNote(), reason, n.Status())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// issue draws count IDs from n and records them, failing on any duplicate.
func (tc *testCluster) issue(n *Node, count int) []int64 {
	tc.t.Helper()
	ids := tc.mint(n, count)
	tc.record(issuer{n.Name(), n.ID()}, ids)
	return ids
}

// mint has n mint count IDs that are not handed out (as a prefetch buffer
// holds them), so not recorded.
func (tc *testCluster) mint(n *Node, count int) []int64 {
	tc.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ids, _, err := n.NextBatch(ctx, count)
	if err != nil {
		tc.t.Fatalf("%s: NextBatch(%d): %v", n.Name(), count, err)
	}
	return ids
}

func (tc *testCluster) record(who issuer, ids []int64) {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	for _, id := range ids {
		if prev, dup := tc.seen[id]; dup {
			tc.t.Fatalf("DUPLICATE ID %d issued by %s and earlier by %s", id, who, prev)
		}
		tc.seen[id] = who
	}
}

// checkContainment asserts every recorded ID lies inside a tenure that the
// replicated state granted to the owner of its slot. It asks the leader,
// whichever live node that is by then.
func (tc *testCluster) checkContainment() {
	tc.t.Helper()
	var tenures []Tenure
	var layout generator.Layout
	harness.WaitFor(tc.t, 20*time.Second, "history from the leader", func() bool {
		for _, s := range tc.liveSpecs() {
			if s.node.Status().RaftState == "Leader" {
				h, err := s.node.History(context.Background())
				tenures, layout = h, s.node.Layout()
				return err == nil
			}
		}
		return false
	})
	tc.mu.Lock()
	defer tc.mu.Unlock()
	for id, who := range tc.seen {
		p, err := layout.Decompose(id)
		if err != nil {
			tc.t.Fatalf("ID %d from %s does not decode: %v", id, who, err)
		}
		inside := false
		for _, tn := range tenures {
			if tn.Slot == p.Slot && tn.NodeID == who.id && p.Timestamp > tn.Floor && p.Timestamp <= tn.Granted {
				inside = true
				break
			}
		}
		if !inside {
			tc.t.Fatalf("ID %d (slot %d, ts %d) from %s is outside every window granted to it: %+v", id, p.Slot, p.Timestamp, who, tenures)
		}
	}
}

func (tc *testCluster) liveSpecs() []*nodeSpec {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	var out []*nodeSpec
	for _, s := range tc.specs {
		if s.node != nil {
			select {
			case <-s.node.Done():
			default:
				out = append(out, s)
			}
		}
	}
	return out
}

func isNotReadyErr(err error) bool {
	return errors.Is(err, ErrNotReady) || errors.Is(err, generator.ErrRevoked) || errors.Is(err, generator.ErrWindowExhausted)
}
