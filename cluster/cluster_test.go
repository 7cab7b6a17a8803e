package cluster

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/idgen/idgen/cluster/core"
	"github.com/idgen/idgen/scripts/harness"
)

// startThree brings up a, b, c with --bootstrap-expect 3, all ready; tune
// changes each node's config before it starts.
func startThree(t *testing.T, tune ...func(*Config)) *testCluster {
	tc := newTestCluster(t)
	for _, s := range []*nodeSpec{tc.add("a", 3), tc.add("b", 3, "a"), tc.add("c", 3, "a")} {
		for _, f := range tune {
			f(&s.cfg)
		}
	}
	for _, name := range []string{"a", "b", "c"} {
		tc.start(name)
	}
	for _, name := range []string{"a", "b", "c"} {
		waitReady(t, tc.node(name))
	}
	return tc
}

func leaderOf(tc *testCluster, names ...string) string {
	for _, name := range names {
		if n := tc.node(name); n != nil && n.Status().RaftState == "Leader" {
			return name
		}
	}
	return ""
}

func TestThreeNodesHoldDistinctSlots(t *testing.T) {
	tc := startThree(t)
	slots := map[int]string{}
	for _, name := range []string{"a", "b", "c"} {
		st := tc.node(name).Status()
		if st.Slot < 0 {
			t.Fatalf("%s holds no slot", name)
		}
		if other, dup := slots[st.Slot]; dup {
			t.Fatalf("%s and %s both hold slot %d", name, other, st.Slot)
		}
		slots[st.Slot] = name
		tc.issue(tc.node(name), 3000)
	}
	members, leader := tc.node("a").Members()
	if len(members) != 3 || leader == "" {
		t.Fatalf("members %+v, leader %q", members, leader)
	}
	voters := 0
	for _, m := range members {
		if m.RaftRole == "voter" || m.RaftRole == "leader" {
			voters++
		}
	}
	if voters != 3 {
		t.Fatalf("%d voters, want 3: %+v", voters, members)
	}
	tc.checkContainment()
}

func TestLeaderLossKeepsOthersIssuing(t *testing.T) {
	tc := startThree(t)
	names := []string{"a", "b", "c"}
	var old string
	harness.WaitFor(t, 10*time.Second, "a leader", func() bool { old = leaderOf(tc, names...); return old != "" })
	for _, name := range names {
		tc.issue(tc.node(name), 500)
	}
	tc.stop(old)
	var rest []string
	for _, name := range names {
		if name != old {
			rest = append(rest, name)
		}
	}
	harness.WaitFor(t, 20*time.Second, "a new leader", func() bool { l := leaderOf(tc, rest...); return l != "" && l != old })
	// Keep issuing on the survivors for longer than one lead, so each needs
	// new grants from the new leader.
	deadline := time.Now().Add(tc.node(rest[0]).cfg.Lead + 2*time.Second)
	for time.Now().Before(deadline) {
		for _, name := range rest {
			tc.issue(tc.node(name), 1000)
		}
		time.Sleep(100 * time.Millisecond)
	}
	tc.checkContainment()
}

func TestRestartKeepsSlotAndIssuesAbove(t *testing.T) {
	tc := startThree(t)
	before := tc.node("b").Status()
	ids := tc.issue(tc.node("b"), 5000)
	maxBefore := ids[len(ids)-1]
	tc.stop("b")
	tc.start("b")
	waitReady(t, tc.node("b"))
	after := tc.node("b").Status()
	if after.Slot != before.Slot {
		t.Fatalf("slot changed across restart: %d -> %d", before.Slot, after.Slot)
	}
	if after.ID != before.ID {
		t.Fatalf("node ID changed across restart")
	}
	next := tc.issue(tc.node("b"), 100)
	if next[0] <= maxBefore {
		t.Fatalf("after restart issued %d, not above the old maximum %d", next[0], maxBefore)
	}
	tc.checkContainment()
}

func TestWipedDataDirIsANewNode(t *testing.T) {
	tc := startThree(t)
	oldID := tc.node("c").ID()
	tc.issue(tc.node("c"), 2000)
	tc.stop("c")
	s := tc.specs["c"]
	s.cfg.DataDir = t.TempDir() // same addresses, fresh state
	tc.start("c")
	waitReady(t, tc.node("c"))
	if tc.node("c").ID() == oldID {
		t.Fatal("a wiped data dir reused the old node ID")
	}
	tc.issue(tc.node("c"), 2000)
	harness.WaitFor(t, 20*time.Second, "old identity removed from raft", func() bool {
		members, _ := tc.node("a").Members()
		for _, m := range members {
			if m.ID == oldID && m.RaftRole != "none" {
				return false
			}
		}
		return true
	})
	tc.checkContainment()
}

func TestFiveVotersThenNonvoters(t *testing.T) {
	tc := startThree(t)
	for _, name := range []string{"d", "e", "f"} {
		tc.add(name, 1, "a")
		tc.start(name)
	}
	harness.WaitFor(t, 40*time.Second, "5 voters and 1 non-voter", func() bool {
		members, _ := tc.node("a").Members()
		voters, nonvoters := 0, 0
		for _, m := range members {
			switch m.RaftRole {
			case "voter", "leader":
				voters++
			case "nonvoter":
				nonvoters++
			}
		}
		return voters == 5 && nonvoters == 1
	})
	for _, name := range []string{"d", "e", "f"} {
		waitReady(t, tc.node(name))
		tc.issue(tc.node(name), 1000)
	}
	tc.checkContainment()
}

func TestCutOffNodeStopsWhenWindowUsedUp(t *testing.T) {
	tc := startThree(t)
	names := []string{"a", "b", "c"}
	var leader string
	harness.WaitFor(t, 10*time.Second, "a leader", func() bool { leader = leaderOf(tc, names...); return leader != "" })
	var lone string
	for _, name := range names {
		if name != leader {
			lone = name
			break
		}
	}
	// Losing both others cuts lone off from any quorum.
	for _, name := range names {
		if name != lone {
			tc.stop(name)
		}
	}
	n := tc.node(lone)
	granted := n.Status().Granted
	layout := n.Layout()
	issuedAbove := false
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		ids, _, err := n.NextBatch(ctx, 2000)
		cancel()
		if err != nil {
			if !isNotReadyErr(err) {
				t.Fatalf("unexpected error once cut off: %v", err)
			}
			break
		}
		tc.record(issuer{n.Name(), n.ID()}, ids)
		for _, id := range ids {
			p, _ := layout.Decompose(id)
			if p.Timestamp > granted {
				issuedAbove = true
			}
		}
	}
	if issuedAbove || n.Status().Granted != granted {
		t.Fatalf("a node without quorum got more room: granted %d -> %d", granted, n.Status().Granted)
	}
	// It stays ready for grantGrace after the leader last answered (a node at
	// the layout's rate gets room within a unit), then reports why not.
	harness.WaitFor(t, 5*time.Second, "the cut-off node with its window used up to report not ready", func() bool {
		ok, reason := n.Ready()
		return !ok && strings.Contains(reason, "no room")
	})
}

func TestRestartOnNewAddressKeepsSlot(t *testing.T) {
	tc := startThree(t)
	before := tc.node("c").Status()
	last := tc.issue(tc.node("c"), 2000)
	tc.stop("c")
	s := tc.specs["c"]
	s.cfg.RaftAddr = fmt.Sprintf("127.0.0.1:%d", harness.NextPort(t))
	s.cfg.RaftAdvertise = ""
	tc.start("c")
	waitReady(t, tc.node("c"))
	if st := tc.node("c").Status(); st.Slot != before.Slot {
		t.Fatalf("slot changed across a move: %d -> %d", before.Slot, st.Slot)
	}
	var seen string
	defer func() {
		if t.Failed() {
			t.Logf("last view: %s", seen)
		}
	}()
	harness.WaitFor(t, 45*time.Second, "the raft configuration to carry the new address", func() bool {
		name := leaderOf(tc, "a", "b", "c")
		if name == "" {
			seen = "no leader"
			return false
		}
		l := tc.node(name)
		gm := l.gossip.snapshot()[before.ID]
		seen = fmt.Sprintf("leader %s; gossip of c: state %s raft %s", name, gm.State, gm.Meta.RaftAddr)
		f := l.rs.raft.GetConfiguration()
		if f.Error() != nil {
			return false
		}
		for _, srv := range f.Configuration().Servers {
			if string(srv.ID) == before.ID {
				return string(srv.Address) == s.cfg.RaftAddr
			}
		}
		return false
	})
	if next := tc.issue(tc.node("c"), 100); next[0] <= last[len(last)-1] {
		t.Fatalf("issued %d after the move, not above %d", next[0], last[len(last)-1])
	}
	tc.checkContainment()
}

func TestLaggingNodeCatchesUpFromSnapshot(t *testing.T) {
	tc := newTestCluster(t)
	for _, name := range []string{"a", "b", "c"} {
		var join []string
		if name != "a" {
			join = []string{"a"}
		}
		s := tc.add(name, 3, join...)
		s.cfg.SnapshotThreshold = 16
		s.cfg.SnapshotInterval = 200 * time.Millisecond
	}
	for _, name := range []string{"a", "b", "c"} {
		tc.start(name)
	}
	for _, name := range []string{"a", "b", "c"} {
		waitReady(t, tc.node(name))
	}
	var lagger string
	harness.WaitFor(t, 10*time.Second, "a follower to stop", func() bool {
		l := leaderOf(tc, "a", "b", "c")
		for _, name := range []string{"a", "b", "c"} {
			if l != "" && name != l {
				lagger = name
				return true
			}
		}
		return false
	})
	tc.issue(tc.node(lagger), 1000)
	tc.stop(lagger)
	// Write enough entries for the leader to snapshot and compact past
	// everything the stopped node has.
	var leader *Node
	harness.WaitFor(t, 20*time.Second, "the leader to snapshot past the stopped node", func() bool {
		leader = tc.node(leaderOf(tc, "a", "b", "c"))
		if leader == nil || leader.Name() == lagger {
			return false
		}
		slot := leader.Status().Slot
		for i := 0; i < 20; i++ {
			if _, _, err := leader.gate.raftApply(context.Background(), core.Command{Type: core.CmdReserve, NodeID: leader.ID(), Slot: slot, Tenure: leader.agent.tenure.Load()}); err != nil {
				return false
			}
		}
		first, err := leader.rs.boltStore.FirstIndex()
		return err == nil && first > tc.specs[lagger].lastIndex
	})
	tc.start(lagger)
	n := tc.node(lagger)
	waitReady(t, n)
	harness.WaitFor(t, 20*time.Second, "the restarted node to install a snapshot and catch up", func() bool {
		return n.rs.raft.Stats()["last_snapshot_index"] != "0" && n.rs.raft.AppliedIndex() >= leader.rs.raft.AppliedIndex()-5
	})
	// The installed snapshot replaced the state: both now hold the same tenures.
	harness.WaitFor(t, 20*time.Second, "the restarted node's state to match the leader's", func() bool {
		mine, _ := n.History(context.Background())
		theirs, _ := leader.History(context.Background())
		return reflect.DeepEqual(mine, theirs)
	})
	tc.issue(n, 1000)
	tc.checkContainment()
}

// TestForwardToADeadLeaderEndsWhenRaftMovesOn: a follower's command
// forwarded to a leader that died waits on a dial nothing answers (a killed
// container's address) until the command's deadline, even after the
// follower's Raft has noticed and named a new leader. Every member's Reserve
// did (2 s), so after `docker kill` of the leader no node issued for 2 s
// whenever the next leader took less (scripts/chaos-docker: each member out
// of room for 1.95-2.10 s, new leaders elected 0.1-1.8 s after the kill). The
// forward ends once this node's Raft no longer names the leader it went to.
func TestForwardToADeadLeaderEndsWhenRaftMovesOn(t *testing.T) {
	tc := startThree(t)
	var lead string
	harness.WaitFor(t, 10*time.Second, "a leader", func() bool { lead = leaderOf(tc, "a", "b", "c"); return lead != "" })
	var follower *Node
	for _, name := range []string{"a", "b", "c"} {
		if name == lead {
			continue
		}
		harness.WaitFor(t, 10*time.Second, name+" to know the leader", func() bool {
			_, id := tc.node(name).rs.raft.LeaderWithID()
			return string(id) == tc.node(lead).ID()
		})
		follower = tc.node(name)
		break
	}
	tc.fwd.blackHole(tc.specs[lead].cfg.GRPCAddr)

	// A deadline far past the test's waits: only a leader change can end
	// the forward in time.
	waiting := make(chan struct{})
	ctx, cancel := context.WithTimeout(context.WithValue(context.Background(), holeCall{}, waiting), 10*time.Minute)
	defer cancel()
	type answer struct {
		err error
		at  time.Time
	}
	done := make(chan answer, 1)
	go func() {
		_, err := follower.proposer.propose(ctx, core.Command{Type: core.CmdReserve, NodeID: follower.ID(), Slot: follower.Status().Slot,
			Tenure: follower.agent.tenure.Load(), UpTo: 1})
		done <- answer{err, time.Now()}
	}()
	select {
	case <-waiting:
	case a := <-done:
		t.Fatalf("the forward to the black-holed leader ended before the leader died: %v", a.err)
	case <-time.After(harness.Scale(10 * time.Second)):
		t.Fatalf("the forward never reached the black-holed leader%s", harness.SlowdownNote())
	}

	stopped := time.Now()
	tc.stop(lead)
	harness.WaitFor(t, 20*time.Second, follower.Name()+"'s raft to stop naming the dead leader", func() bool {
		_, id := follower.rs.raft.LeaderWithID()
		return string(id) != tc.specs[lead].node.ID()
	})
	var a answer
	select {
	case a = <-done:
	case <-time.After(harness.Scale(5 * time.Second)):
		t.Fatalf("the forward to the dead leader still waits %s after %s's raft stopped naming it%s",
			harness.Scale(5*time.Second), follower.Name(), harness.SlowdownNote())
	}
	if !errors.Is(a.err, ErrNotLeader) {
		t.Fatalf("the forward ended with %v, want an error that is ErrNotLeader (the caller retries at once)", a.err)
	}
	t.Logf("forward ended %s after the leader stopped: %v", a.at.Sub(stopped).Round(time.Millisecond), a.err)
	// And the follower issues again under the next leader.
	waitReady(t, follower)
}

// TestEffectiveMaxAhead: the max-ahead Open applies is the one the method
// says (idgend reports it as a metric), for every combination of zeros.
func TestEffectiveMaxAhead(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want time.Duration
	}{
		{Config{}, DefaultLead + DefaultMaxSkew},
		{Config{Lead: 3 * time.Second}, 3*time.Second + DefaultMaxSkew},
		{Config{MaxSkew: time.Second}, DefaultLead + time.Second},
		{Config{Lead: 3 * time.Second, MaxSkew: time.Second}, 4 * time.Second},
		{Config{Lead: 3 * time.Second, MaxSkew: time.Second, MaxAhead: time.Minute}, time.Minute},
	} {
		if got := c.cfg.EffectiveMaxAhead(); got != c.want {
			t.Errorf("lead %v, max-skew %v, max-ahead %v: EffectiveMaxAhead %v, want %v", c.cfg.Lead, c.cfg.MaxSkew, c.cfg.MaxAhead, got, c.want)
		}
		applied := c.cfg
		applied.applyDefaults()
		if applied.MaxAhead != c.want {
			t.Errorf("lead %v, max-skew %v, max-ahead %v: applyDefaults set MaxAhead %v, want %v", c.cfg.Lead, c.cfg.MaxSkew, c.cfg.MaxAhead, applied.MaxAhead, c.want)
		}
	}
}
