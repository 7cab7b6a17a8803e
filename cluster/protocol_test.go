package cluster

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/idgen/idgen/cluster/core"
	"github.com/idgen/idgen/generator"
	"github.com/idgen/idgen/scripts/harness"
)

// TestEveryEntryIsReadableByTheOldestVersionSpoken: a node of this build may
// sit in a cluster running ProtocolMin, so every entry type it writes there
// must be one that version applies; a new type comes with its own version in
// entryProtocol, and the leader writes it only once the cluster runs it.
func TestEveryEntryIsReadableByTheOldestVersionSpoken(t *testing.T) {
	for typ := core.CommandType(0); typ < 255; typ++ {
		if !typ.Known() {
			continue
		}
		v, ok := core.EntryProtocol[typ]
		if !ok {
			t.Errorf("entry type %s has no protocol version in entryProtocol", typ)
			continue
		}
		if v > ProtocolMax {
			t.Errorf("entry type %s needs protocol %d, above what this build speaks (%d)", typ, v, ProtocolMax)
		}
		if err := core.Writable(typ, ProtocolMin); v <= ProtocolMin && err != nil {
			t.Errorf("entry type %s refused in a cluster running %d: %v", typ, ProtocolMin, err)
		}
	}
}

// TestWritableRefusesAnEntryNewerThanTheCluster: the gate in front of the
// log, for an entry type a later version brings.
func TestWritableRefusesAnEntryNewerThanTheCluster(t *testing.T) {
	const future core.CommandType = 200
	core.EntryProtocol[future] = ProtocolMax + 1
	defer delete(core.EntryProtocol, future)
	err := core.Writable(future, ProtocolMax)
	if !errors.Is(err, ErrProtocol) {
		t.Fatalf("writable(a version %d entry, cluster at %d) = %v, want ErrProtocol", ProtocolMax+1, ProtocolMax, err)
	}
	for _, want := range []string{"needs protocol 3", "the cluster runs 2", "nothing was written"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not say %q", err, want)
		}
	}
	if err := core.Writable(future, ProtocolMax+1); err != nil {
		t.Errorf("writable in a cluster running the entry's version: %v", err)
	}
	if err := core.Writable(core.CommandType(201), ProtocolMax); !errors.Is(err, ErrProtocol) {
		t.Errorf("an entry type without a version was writable: %v", err)
	}
}

// TestMessagesOfAnUnspokenVersionAreRefused: a forward or an answer written
// in a version the receiver does not speak is refused, naming both versions
// and the node to upgrade; one without a version is version 1.
func TestMessagesOfAnUnspokenVersionAreRefused(t *testing.T) {
	c := core.Command{Type: core.CmdReserve, NodeID: "n1", Slot: 0, Tenure: 3, UpTo: 10, ClusterID: "c1"}
	in := core.ForwardIn{Leader: true, Own: "c1", Speaks: core.OwnProtocols}
	for _, v := range []int{0, 1, 2} {
		c.Protocol = v
		if err := core.ForwardCheck(in, c, nil); err != nil {
			t.Errorf("forward of protocol %d refused: %v", v, err)
		}
	}
	c.Protocol = 3
	err := core.ForwardCheck(in, c, nil)
	if !errors.Is(err, ErrProtocol) {
		t.Fatalf("forward of protocol 3 to a 1..2 leader: %v, want ErrProtocol", err)
	}
	for _, want := range []string{"protocol 3", "speaks 1..2", "upgrade this node", "nothing was applied"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not say %q", err, want)
		}
	}
	c.Protocol = -5
	if err := core.ForwardCheck(in, c, nil); !errors.Is(err, ErrProtocol) {
		t.Errorf("forward of protocol -5: %v, want ErrProtocol", err)
	}
	c.Protocol = 1
	in.Speaks = ProtocolRange{Min: 2, Max: 3} // a later release that dropped version 1
	if err := core.ForwardCheck(in, c, nil); !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), "upgrade node n1") {
		t.Errorf("forward of protocol 1 to a 2..3 leader: %v, want ErrProtocol naming node n1 to upgrade", err)
	}

	r := core.Result{ClusterID: "c1", Protocol: 3}
	if err := core.AcceptAnswer("c1", "10.0.0.1:50051", r, core.OwnProtocols); !errors.Is(err, ErrProtocol) {
		t.Errorf("answer of protocol 3 accepted by a 1..2 node: %v", err)
	}
	r.Protocol = 0
	if err := core.AcceptAnswer("c1", "10.0.0.1:50051", r, core.OwnProtocols); err != nil {
		t.Errorf("answer without a version (an older leader's) refused: %v", err)
	}
}

// TestJoinProtocol: a node that shares no version with the cluster's
// servers is told which side to upgrade.
func TestJoinProtocol(t *testing.T) {
	for _, tc := range []struct {
		node, cluster ProtocolRange
		want          string
	}{
		{ProtocolRange{Min: 1, Max: 2}, ProtocolRange{Min: 1, Max: 2}, ""},
		{ProtocolRange{}, ProtocolRange{Min: 1, Max: 2}, ""}, // a release before 2 speaks 1
		{ProtocolRange{Min: 2, Max: 3}, ProtocolRange{Min: 1, Max: 2}, ""},
		{ProtocolRange{Min: 3, Max: 3}, ProtocolRange{Min: 1, Max: 2}, "too new"},
		{ProtocolRange{}, ProtocolRange{Min: 2, Max: 3}, "too old"},
	} {
		err := core.JoinProtocol(tc.node, tc.cluster)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("node %v, cluster %v: refused: %v", tc.node, tc.cluster, err)
		case tc.want != "" && (!errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("node %v, cluster %v: %v, want ErrProtocol saying %q", tc.node, tc.cluster, err, tc.want)
		}
	}
}

// TestClockQuorum: a voter not heard from counts until the leader has led
// for the report TTL, then it is absent and the quorum is a majority of the
// voters present.
func TestClockQuorum(t *testing.T) {
	ttl := time.Minute
	now := time.Unix(1_800_000_000, 0)
	for _, tc := range []struct {
		name       string
		fresh      int
		others     int
		led        time.Duration
		wantQuorum int
		wantKnown  bool
	}{
		{"new leader, nobody heard yet", 0, 2, time.Second, 2, false},
		{"new leader, one of two heard", 1, 2, time.Second, 2, true},
		{"two silent voters of three, after the TTL", 0, 2, 2 * time.Minute, 1, true},
		{"one silent of five, after the TTL", 3, 4, 2 * time.Minute, 3, true},
		{"five voters, all heard", 4, 4, 2 * time.Minute, 3, true},
	} {
		fresh := make([]time.Time, tc.fresh)
		for i := range fresh {
			fresh[i] = now
		}
		est, q := core.ClockQuorum(fresh, tc.others, tc.led, ttl)
		_, known := core.ClusterTime(now, est, q)
		if q != tc.wantQuorum || known != tc.wantKnown {
			t.Errorf("%s: quorum %d known %v, want %d %v", tc.name, q, known, tc.wantQuorum, tc.wantKnown)
		}
	}
}

// silentVoterCluster starts a (the seed, leading), b and x; x is a voter
// that never claims, and so never sends the leader a command with its clock
// (a standby, or a node of another --layout or --datacenter made a voter
// before the leader checked that). statusClock says whether x's Status
// carries its clock (a release before protocol 2's does not). The leader
// counts a report as stale after 3 s.
func silentVoterCluster(t *testing.T, statusClock bool) *testCluster {
	tc := newTestCluster(t)
	a := tc.add("a", 1)
	a.cfg.clockTTL = 3 * time.Second
	a.cfg.ReapAfter = time.Minute // b stays a voter while the test looks
	tc.add("b", 1, "a").cfg.ReapAfter = time.Minute
	x := tc.add("x", 1, "a")
	x.cfg.neverClaim = true
	x.cfg.noClockInStatus = !statusClock
	waitReady(t, tc.start("a"))
	waitReady(t, tc.start("b"))
	tc.start("x")
	waitVoters(t, tc.node("a"), 3)
	return tc
}

// keepsGranting fails unless n's granted window grows past where it is now
// plus two units, and n issues, within the deadline.
func keepsGranting(t *testing.T, tc *testCluster, n *Node, d time.Duration) {
	t.Helper()
	from := n.Status().Granted
	harness.WaitFor(t, d, n.Name()+"'s window to grow", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if ids, _, err := n.NextBatch(ctx, 64); err == nil {
			tc.record(issuer{n.Name(), n.ID()}, ids)
		}
		return n.Status().Granted >= from+2
	})
}

// TestSilentVoterDoesNotStopTheLeader: voters {a, b, x}, x never claims; b
// dies. With b's report stale, the leader used to have one clock of a
// quorum of two and granted nothing, its own slot included, for good. Now
// it hears x's clock in x's Status, and a voter that says nothing at all is
// absent: at once when it holds no slot and its Status came without a
// clock (clockAwaited), else once it has been silent for the TTL.
func TestSilentVoterDoesNotStopTheLeader(t *testing.T) {
	for _, tc := range []struct {
		name        string
		statusClock bool
	}{{"clock in status", true}, {"no clock anywhere", false}} {
		t.Run(tc.name, func(t *testing.T) {
			c := silentVoterCluster(t, tc.statusClock)
			a := c.node("a")
			b := c.node("b").ID()
			c.stop("b")
			harness.WaitFor(t, 10*time.Second, "b's last clock report to be older than the TTL", func() bool {
				return len(a.clusterClock.clocks.ByID([]string{b}, time.Now(), a.cfg.clockTTL)) == 0
			})
			keepsGranting(t, c, a, 15*time.Second)
			if ok, reason := a.Ready(); !ok {
				t.Errorf("leader not ready with b dead and x silent: %s", reason)
			}
			c.checkContainment()
		})
	}
}

// TestNodeThatShowsNothingIsNotPromoted: x and y are of a release before
// protocol 2 started under another layout: they never claim, and their
// Status says no clock, layout or datacenter. As voters they would never
// report a clock: a leader awaited them for the TTL (a minute) of each
// leadership, and the previous release's leader, which grants nothing
// without a quorum of clocks, stopped the cluster for good once one of them
// led (outside attack 8). They stay non-voters (shownToTakePart); an old
// node that claims is promoted once it holds a slot.
func TestNodeThatShowsNothingIsNotPromoted(t *testing.T) {
	tc := newTestCluster(t)
	tc.add("a", 1)
	for _, name := range []string{"x", "y", "old"} {
		q := tc.add(name, 1, "a")
		q.cfg.previousStatus, q.cfg.protocols = true, core.LegacyProtocols
		q.cfg.neverClaim = name != "old"
	}
	a := tc.start("a")
	waitReady(t, a)
	x, y := tc.start("x"), tc.start("y")
	harness.WaitFor(t, 20*time.Second, "x and y added as non-voters", func() bool {
		return a.members.inRaftConfig(x.ID()) && a.members.inRaftConfig(y.ID())
	})
	for range 3 { // three sweeps at least, past the second a promotion waits
		before := a.recon.sweeps.Load()
		harness.WaitFor(t, 10*time.Second, "a sweep", func() bool { return a.recon.sweeps.Load() > before })
	}
	waitVoters(t, a, 1)
	keepsGranting(t, tc, a, 20*time.Second)
	old := tc.start("old")
	waitReady(t, old)
	waitVoters(t, a, 2)
	members, _ := a.Members()
	for _, m := range members {
		if voter := m.RaftRole == "voter" || m.RaftRole == "leader"; voter != (m.ID == a.ID() || m.ID == old.ID()) {
			t.Errorf("%s (%s) a voter: %v; want only a and the old node that holds a slot", m.Name, m.ID, voter)
		}
	}
	tc.checkContainment()
}

// TestForwardOfAnUnspokenVersionChangesNothing: a real leader refuses a
// forwarded command written in a protocol it does not speak, and its log
// does not move.
func TestForwardOfAnUnspokenVersionChangesNothing(t *testing.T) {
	tc := newTestCluster(t)
	tc.add("a", 1)
	a := tc.start("a")
	waitReady(t, a)
	st := a.Status()
	c := core.Command{Type: core.CmdReserve, NodeID: a.ID(), Slot: st.Slot, Tenure: a.agent.tenure.Load(), UpTo: st.Granted + 100,
		ClusterID: a.ident.ownCluster(), Protocol: ProtocolMax + 1}
	data, err := core.EncodeCommand(c)
	if err != nil {
		t.Fatal(err)
	}
	before := a.rs.raft.LastIndex()
	if _, err := a.ApplyForwarded(context.Background(), data); !errors.Is(err, ErrProtocol) {
		t.Fatalf("forward of protocol %d: %v, want ErrProtocol", ProtocolMax+1, err)
	}
	if after := a.rs.raft.LastIndex(); after != before {
		t.Errorf("the refused forward moved the log from %d to %d", before, after)
	}
}

// TestJoinOfANodeTooNewIsRefused: a node that speaks only a version the
// cluster's servers do not is never added to Raft, and says why in its
// not-ready reason; a node of the release before (version 1 only) is added
// and brings the cluster's running version down to 1 while it is a server.
func TestJoinOfANodeTooNewIsRefused(t *testing.T) {
	tc := newTestCluster(t)
	tc.add("a", 1)
	tc.add("old", 1, "a").cfg.protocols = core.LegacyProtocols
	tc.add("new", 1, "a").cfg.protocols = ProtocolRange{Min: ProtocolMax + 1, Max: ProtocolMax + 1}
	a := tc.start("a")
	waitReady(t, a)
	if _, running, _ := a.versions.clusterProtocol(); running != ProtocolMax {
		t.Fatalf("a lone node of this build runs protocol %d, want %d", running, ProtocolMax)
	}
	old := tc.start("old")
	waitReady(t, old)
	harness.WaitFor(t, 10*time.Second, "the cluster to run protocol 1 with the old node in it", func() bool {
		_, running, _ := a.versions.clusterProtocol()
		return running == 1
	})
	tooNew := tc.start("new")
	harness.WaitFor(t, 10*time.Second, "the too-new node to say why it is not added", func() bool {
		_, reason := tooNew.Ready()
		return strings.Contains(reason, "too new")
	})
	for range 3 { // three sweeps at least
		before := a.recon.sweeps.Load()
		harness.WaitFor(t, 10*time.Second, "a sweep", func() bool { return a.recon.sweeps.Load() > before })
	}
	if a.members.inRaftConfig(tooNew.ID()) {
		t.Fatalf("the leader added a node that speaks only protocol %d", ProtocolMax+1)
	}
	_, reason := tooNew.Ready()
	t.Logf("too-new node: %s", reason)
}

// TestNotReadyReasonsAreLogged: every change of a node's readiness is in
// its log, a not-ready reason at WARN with the reason and the protocols.
func TestNotReadyReasonsAreLogged(t *testing.T) {
	var buf syncBuffer
	tc := newTestCluster(t)
	s := tc.add("a", 1)
	s.cfg.Logger = slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	waitReady(t, tc.start("a"))
	harness.WaitFor(t, 10*time.Second, "the readiness lines", func() bool {
		buf.mu.Lock()
		out := buf.buf.String()
		buf.mu.Unlock()
		return strings.Contains(out, `level=WARN msg="not ready"`) && strings.Contains(out, "ready to issue")
	})
	buf.mu.Lock()
	defer buf.mu.Unlock()
	if out := buf.buf.String(); !strings.Contains(out, "own_protocols=1..2") {
		t.Errorf("the not-ready line names no protocols:\n%s", out)
	}
}

// TestNodeThatCannotClaimIsNotAVoter: only a node that can take part is a
// voter. A node started with a datacenter outside the cluster's layout, or
// with another layout, would be refused every claim and count toward the
// quorum without a slot; the leader does not add it.
func TestNodeThatCannotClaimIsNotAVoter(t *testing.T) {
	tc := newTestCluster(t)
	tc.add("a", 1)
	tc.add("dc", 1, "a").cfg.Datacenter = 7 // the default layout has datacenters 0..3
	other := generator.DefaultLayout()
	other.Epoch += 24 * 3600 // a one-day typo
	tc.add("lay", 1, "a").cfg.Layout = other
	a := tc.start("a")
	waitReady(t, a)
	dc, lay := tc.start("dc"), tc.start("lay")
	for range 4 { // four sweeps at least, with both in gossip
		before := a.recon.sweeps.Load()
		harness.WaitFor(t, 10*time.Second, "a sweep", func() bool { return a.recon.sweeps.Load() > before })
	}
	harness.WaitFor(t, 10*time.Second, "both in a's gossip", func() bool {
		m := a.gossip.snapshot()
		return m[dc.ID()].State == MemberAlive && m[lay.ID()].State == MemberAlive
	})
	for range 2 {
		before := a.recon.sweeps.Load()
		harness.WaitFor(t, 10*time.Second, "a sweep", func() bool { return a.recon.sweeps.Load() > before })
	}
	for _, n := range []*Node{dc, lay} {
		if a.members.inRaftConfig(n.ID()) {
			t.Errorf("the leader added %s, which can never claim under the cluster's layout", n.Name())
		}
	}
	st := dc.Status()
	if err := core.CanTakePart(st, ptr(a.Layout())); err == nil || !strings.Contains(err.Error(), "--datacenter 7") {
		t.Errorf("canTakePart(dc) = %v, want the datacenter named", err)
	}
	if err := core.CanTakePart(lay.Status(), ptr(a.Layout())); err == nil || !strings.Contains(err.Error(), "layout") {
		t.Errorf("canTakePart(lay) = %v, want the layout named", err)
	}
}

func ptr[T any](v T) *T { return &v }

// TestClaimAnswerWithoutATenureIsNoClaim: an answer that names no tenure
// never starts a generator (a zero Tenure is slot 0 from floor 0), even
// when the replica shows a hold of slot 0 from floor 0.
func TestClaimAnswerWithoutATenureIsNoClaim(t *testing.T) {
	var a core.SlotAgent
	now := time.Now()
	in := core.AgentIn{Now: now, Own: Tenure{Slot: 0, Floor: 0}, Applied: true, Held: true}
	if out := a.Step(core.AgentEvent{Kind: core.AgentClaimAnswered, Tenure: 0}, in); out.Start || !errors.Is(out.GaveUp, core.ErrTenureNotHeld) {
		t.Fatalf("a claim answered with tenure 0: %+v; want no start, given up with errTenureNotHeld", out)
	}
	for _, at := range []time.Time{now, now.Add(core.ClaimRetry)} {
		in.Now = at
		if out := a.Step(core.AgentEvent{Kind: core.AgentLook}, in); out.Start {
			t.Fatalf("a look at %v after a claim answered with tenure 0 started a generator: %+v", at.Sub(now), out)
		}
	}
}

// TestVoterRolledPastTheClusterHandsOff: a voter restarted on a build that
// shares no protocol version with the other servers (rolled forward too
// far) stays a voter, but it is not ready, says to roll it back, and when it
// wins an election it hands leadership off: its followers refuse every
// answer it gives, and while it led nobody else got room.
func TestVoterRolledPastTheClusterHandsOff(t *testing.T) {
	tc := startThree(t)
	tc.stop("c")
	tc.specs["c"].cfg.protocols = ProtocolRange{Min: ProtocolMax + 1, Max: ProtocolMax + 1}
	c := tc.start("c")
	harness.WaitFor(t, 20*time.Second, "c to say it shares no protocol", func() bool {
		_, reason := c.Ready()
		return strings.Contains(reason, "protocol mismatch") && strings.Contains(reason, "roll this node back")
	})
	var leader *Node
	harness.WaitFor(t, 20*time.Second, "a leader among a and b", func() bool {
		for _, name := range []string{"a", "b"} {
			if n := tc.node(name); n.rs.raft.State() == raft.Leader {
				leader = n
			}
		}
		return leader != nil
	})
	if err := leader.rs.raft.LeadershipTransferToServer(raft.ServerID(c.ID()), raft.ServerAddress(tc.specs["c"].cfg.RaftAddr)).Error(); err != nil {
		t.Logf("transfer to c: %v", err)
	}
	harness.WaitFor(t, 20*time.Second, "a or b to lead again", func() bool {
		return c.rs.raft.State() != raft.Leader &&
			(tc.node("a").rs.raft.State() == raft.Leader || tc.node("b").rs.raft.State() == raft.Leader)
	})
	for _, name := range []string{"a", "b"} {
		waitReady(t, tc.node(name))
		tc.issue(tc.node(name), 100)
	}
}
