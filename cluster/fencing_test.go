package cluster

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/idgen/idgen/cluster/core"
	"github.com/idgen/idgen/generator"
	"github.com/idgen/idgen/scripts/harness"
)

// pseudoNode speaks for a node the way its agent would (claims and reserves
// forwarded to the leader), but lets the test decide when each forwarded
// command arrives: the in-flight claim of TestDelayedClaimNeverExtendsAnOldGenerator.
type pseudoNode struct {
	id    string
	tc    *testCluster
	clock generator.Clock
}

func (p *pseudoNode) command(c core.Command) []byte {
	c.SentAt = p.clock.Now().UnixNano()
	c.ClusterID = p.tc.node("a").ident.ownCluster()
	data, err := core.EncodeCommand(c)
	if err != nil {
		panic(err)
	}
	return data
}

func (p *pseudoNode) claimData() []byte {
	l := generator.DefaultLayout()
	return p.command(core.Command{Type: core.CmdClaim, Layout: &l, Node: &NodeInfo{ID: p.id, Name: "x", Datacenter: -1}})
}

// enroll makes the pseudo node a server of the cluster (a non-voter at an
// address nobody listens on): a leader gives slots only to its own servers.
func (p *pseudoNode) enroll() {
	harness.WaitFor(p.tc.t, 20*time.Second, "x added to raft", func() bool {
		leader := p.tc.node(leaderOf(p.tc, "a", "b", "c"))
		return leader != nil && leader.rs.raft.AddNonvoter(raft.ServerID(p.id), "127.0.0.1:1", 0, time.Second).Error() == nil
	})
}

// deliver hands the command to the current leader, as a forward would.
func (p *pseudoNode) deliver(data []byte) (core.Result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var leader *Node
	harness.WaitFor(p.tc.t, 20*time.Second, "a leader", func() bool {
		leader = p.tc.node(leaderOf(p.tc, "a", "b", "c"))
		return leader != nil
	})
	out, err := leader.ApplyForwarded(ctx, data)
	if err != nil {
		return core.Result{}, err
	}
	return core.DecodeResult(out)
}

// TestDelayedClaimNeverExtendsAnOldGenerator: X's first claim is held in
// flight (its caller gave up), X claims again and runs generator gB, X is
// removed, Y takes the slot, issues and is removed, and only then X's first
// claim commits. gB's next reserve must be refused: with the node ID as the
// fence it was granted above Y's window and gB stamped inside it.
func TestDelayedClaimNeverExtendsAnOldGenerator(t *testing.T) {
	// The held claim arrives late, but within max-skew; x is never reaped
	// behind the test's back.
	tc := startThree(t, func(c *Config) { c.MaxSkew, c.ReapAfter = time.Minute, time.Hour })
	a := tc.node("a")
	x := &pseudoNode{id: "0123456789abcdef0123456789abcdef", tc: tc, clock: generator.SystemClock()}
	layout := generator.DefaultLayout()

	claim1 := x.claimData() // in flight, delayed
	x.enroll()
	r2, err := x.deliver(x.claimData())
	if err != nil {
		t.Fatalf("claim 2: %v", err)
	}
	gB, err := generator.New(layout, r2.Slot, r2.Floor, x.clock)
	if err != nil {
		t.Fatal(err)
	}
	reserveB := func() (core.Result, error) {
		upTo := gB.Head() + core.UnitsCeil(DefaultLead, layout.Unit)
		return x.deliver(x.command(core.Command{Type: core.CmdReserve, NodeID: x.id, Slot: gB.Slot(), Tenure: r2.Tenure, UpTo: upTo}))
	}
	harness.WaitFor(t, 10*time.Second, "a grant for gB", func() bool {
		r, err := reserveB()
		if err == nil {
			gB.Grant(r.Granted)
		}
		return gB.Granted() > gB.Head()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ids, err := gB.NextBatch(ctx, 1000)
	if err != nil {
		t.Fatal(err)
	}
	xIssuer := issuer{"x", x.id}
	tc.record(xIssuer, ids)

	remove := func(id string) {
		var err error
		harness.WaitFor(t, 20*time.Second, "removal of "+id, func() bool {
			_, _, err = a.Remove(context.Background(), id)
			return err == nil
		})
	}
	remove(x.id)
	tc.add("y", 1, "a").cfg.MaxSkew, tc.specs["y"].cfg.ReapAfter = time.Minute, time.Hour
	y := tc.start("y")
	harness.WaitFor(t, 30*time.Second, "y to hold x's old slot", func() bool { return y.Status().Slot == r2.Slot })
	waitReady(t, y)
	for i := 0; i < 3; i++ {
		tc.issue(y, 2048)
	}
	tc.stop("y")
	remove(y.ID())

	x.enroll() // x is added back, as a restarted member would be
	r1, err := x.deliver(claim1)
	if err != nil {
		t.Fatalf("delayed claim 1: %v", err)
	}
	if r1.Slot != r2.Slot || r1.Tenure == r2.Tenure {
		t.Fatalf("delayed claim got slot %d tenure %d; want slot %d under a new tenure", r1.Slot, r1.Tenure, r2.Slot)
	}
	if r, err := reserveB(); !errors.Is(err, ErrNotOwner) {
		t.Errorf("gB's reserve after the delayed claim: got %v, want %v", err, ErrNotOwner)
		if err == nil {
			gB.Grant(r.Granted) // as the agent would: the drain below then meets Y's IDs
		}
	}
	// Whatever gB can still stamp lies in its own old window: no duplicate
	// with Y, and every ID inside a tenure of its issuer.
	for {
		short, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		ids, err := gB.NextBatch(short, 500)
		cancel()
		if err != nil {
			break
		}
		tc.record(xIssuer, ids)
	}
	tc.checkContainment()
}

// TestWipedSeedNeverJoinsItsOldCluster: a seed started alone, that others
// joined, is wiped and restarted with the same command. It forms a new
// cluster of its own; the old cluster must never add it, and it must stop
// issuing with a reason that names the other cluster (it is the younger).
func TestWipedSeedNeverJoinsItsOldCluster(t *testing.T) {
	tc := startSeeded(t)
	for _, name := range []string{"a", "b", "c"} {
		tc.issue(tc.node(name), 500)
	}
	b := tc.node("b")
	oldCluster := b.Status().ClusterID
	if oldCluster == "" || tc.node("a").Status().ClusterID != oldCluster {
		t.Fatalf("cluster IDs: a %q, b %q", tc.node("a").Status().ClusterID, oldCluster)
	}
	waitVoters(t, tc.node("a"), 3)
	oldID := tc.node("a").ID()
	tc.stop("a")
	tc.specs["a"].cfg.DataDir = t.TempDir() // wiped
	wiped := tc.start("a")
	if wiped.ID() == oldID {
		t.Fatal("a wiped data dir kept its node ID")
	}
	harness.WaitFor(t, 30*time.Second, "the wiped seed to report the conflict", func() bool {
		_, reason := wiped.Ready()
		return strings.Contains(reason, oldCluster) && strings.Contains(reason, "cluster conflict")
	})
	if _, _, err := wiped.NextBatch(context.Background(), 1); !errors.Is(err, ErrClusterConflict) {
		t.Fatalf("the younger cluster's node still issues: %v", err)
	}
	newCluster := wiped.Status().ClusterID
	if newCluster == "" || newCluster == oldCluster {
		t.Fatalf("wiped seed's cluster %q, old %q", newCluster, oldCluster)
	}
	// The older side keeps serving, reports the conflict, and never adds the impostor.
	// Each node learns of the wiped seed through its own gossip view and
	// proves it over the authenticated transport on its own; one of the old
	// cluster's nodes reporting it is the older side reporting it.
	harness.WaitFor(t, 20*time.Second, "the old cluster to report the conflict", func() bool {
		for _, name := range []string{"b", "c"} {
			if cs := tc.node(name).Status().ConflictingClusters; len(cs) == 1 && cs[0] == newCluster {
				return true
			}
		}
		return false
	})
	deadline := time.Now().Add(3 * time.Second) // several reconcile sweeps
	for time.Now().Before(deadline) {
		for _, name := range []string{"b", "c"} {
			if tc.node(name).members.inRaftConfig(wiped.ID()) {
				t.Fatalf("the old cluster added the wiped seed %s to Raft", wiped.ID())
			}
		}
		if wiped.members.inRaftConfig(b.ID()) || wiped.members.inRaftConfig(tc.node("c").ID()) {
			t.Fatal("the wiped seed added members of the old cluster to its Raft")
		}
		time.Sleep(100 * time.Millisecond)
	}
	tc.issue(b, 100)
	tc.issue(tc.node("c"), 100)
}

// TestLeaderAnswersOnlyAfterBarrier: until a new leader's Barrier has applied
// everything earlier leaders committed, its state may lag, and a "not owner"
// from it would revoke a valid generator. It answers ErrLeaderNotReady (an
// unknown outcome to the agent) instead.
func TestLeaderAnswersOnlyAfterBarrier(t *testing.T) {
	tc := newTestCluster(t)
	tc.add("a", 1)
	a := tc.start("a")
	waitReady(t, a)
	st := a.Status()
	c := core.Command{Type: core.CmdReserve, NodeID: a.ID(), Slot: st.Slot, Tenure: a.agent.tenure.Load(), UpTo: st.Granted + 1,
		SentAt: time.Now().UnixNano(), ClusterID: a.ident.ownCluster()}
	data, err := core.EncodeCommand(c)
	if err != nil {
		t.Fatal(err)
	}
	a.gate.leaderReady.Store(false) // as between winning the election and the Barrier
	if _, err := a.ApplyForwarded(context.Background(), data); !errors.Is(err, ErrLeaderNotReady) {
		t.Fatalf("before the barrier: %v, want %v", err, ErrLeaderNotReady)
	}
	a.gate.leaderReady.Store(true)
	if _, err := a.ApplyForwarded(context.Background(), data); err != nil {
		t.Fatalf("after the barrier: %v", err)
	}
	// A forwarded command of the wrong shape is refused before anything is proposed.
	bad, _ := core.EncodeCommand(core.Command{Type: core.CmdReserve, Slot: st.Slot, UpTo: st.Granted + 100, Tenure: 1})
	before := a.rs.raft.LastIndex()
	if _, err := a.ApplyForwarded(context.Background(), bad); !errors.Is(err, ErrBadCommand) {
		t.Fatalf("malformed forward: %v, want %v", err, ErrBadCommand)
	}
	if after := a.rs.raft.LastIndex(); after != before {
		t.Fatalf("a malformed forward was proposed: last index %d -> %d", before, after)
	}
}
