package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/idgen/idgen/cluster/core"
	"github.com/idgen/idgen/generator"
	"github.com/idgen/idgen/scripts/harness"
)

func TestClusterTimeIsTheQuorumthLatestClock(t *testing.T) {
	base := time.Unix(1_800_000_000, 0)
	at := func(d time.Duration) time.Time { return base.Add(d) }
	cases := []struct {
		own    time.Duration
		others []time.Duration
		quorum int
		want   time.Duration
		known  bool
	}{
		{0, nil, 1, 0, true},                                         // a lone voter
		{time.Hour, []time.Duration{0}, 2, 0, true},                  // a leader an hour ahead of its one follower
		{-time.Hour, []time.Duration{0, 0}, 2, 0, true},              // an hour behind
		{time.Hour, []time.Duration{time.Hour, 0, 0, 0}, 3, 0, true}, // two of five an hour ahead
		{time.Hour, nil, 2, time.Hour, false},                        // nobody else heard from yet
		{time.Hour, []time.Duration{time.Hour, 0}, 3, 0, true},       // two of five ahead, among the first three heard
		{0, []time.Duration{time.Second, 2 * time.Second}, 2, time.Second, true},
	}
	for i, c := range cases {
		var others []time.Time
		for _, o := range c.others {
			others = append(others, at(o))
		}
		got, known := core.ClusterTime(at(c.own), others, c.quorum)
		if !got.Equal(at(c.want)) || known != c.known {
			t.Errorf("case %d: clusterTime = %v, %v; want %v, %v", i, got.Sub(base), known, c.want, c.known)
		}
	}
}

// aheadWatch fails the test if any slot of any live node's state is granted
// further past real time than max-ahead (plus the unit the clamp rounds to).
func aheadWatch(tc *testCluster) func() error {
	return func() error {
		for _, s := range tc.liveSpecs() {
			n := s.node
			var err error
			n.fsm.view(func(st *core.State) {
				if st.Layout == nil {
					return
				}
				for i, sl := range st.Slots {
					if sl.Owner == "" {
						continue
					}
					if ahead := st.Layout.Time(sl.HighWater + 1).Sub(time.Now()); ahead > n.cfg.MaxAhead+2*st.Layout.Unit {
						err = fmt.Errorf("%s's state grants slot %d %v past real time (max-ahead %v)", n.Name(), i, ahead.Round(time.Second), n.cfg.MaxAhead)
					}
				}
			})
			if err != nil {
				return err
			}
		}
		return nil
	}
}

// drawAll draws a batch from every live node that serves, checking each ID
// decodes to no more than max-ahead past real time.
func drawAll(t *testing.T, tc *testCluster) {
	t.Helper()
	for _, s := range tc.liveSpecs() {
		n := s.node
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		ids, _, err := n.NextBatch(ctx, 1000)
		cancel()
		if err != nil {
			continue
		}
		tc.record(issuer{n.Name(), n.ID()}, ids)
		l := n.Layout()
		for _, id := range ids {
			p, _ := l.Decompose(id)
			if ahead := l.Time(p.Timestamp).Sub(time.Now()); ahead > n.cfg.MaxAhead+l.Unit {
				var hw []core.SlotState
				n.fsm.view(func(st *core.State) { hw = append(hw, st.Slots...) })
				t.Fatalf("%s issued ID %d stamped %v ahead of real time (status %+v, slots %+v, now %d)", n.Name(), id, ahead.Round(time.Second), n.Status(), hw, l.Units(time.Now()))
			}
		}
	}
}

// TestLeaderClockJumpLendsNoHour: the leader's clock moves an hour ahead for
// a few seconds, then back. No slot may be granted past the cluster's time
// plus max-ahead, and every node serves again within seconds. Bounded by the
// leader's clock alone, the leader granted its own slot an hour ahead and that
// node then stayed out for the hour.
func TestLeaderClockJumpLendsNoHour(t *testing.T) {
	tc := startThree(t, func(c *Config) { c.EnableFaultInjection = true })
	watch := aheadWatch(tc)
	var leader string
	harness.WaitFor(t, 10*time.Second, "a leader", func() bool { leader = leaderOf(tc, "a", "b", "c"); return leader != "" })
	drawAll(t, tc)
	if err := tc.node(leader).SetClockOffset(time.Hour); err != nil {
		t.Fatal(err)
	}
	until := time.Now().Add(4 * time.Second)
	for time.Now().Before(until) {
		drawAll(t, tc)
		if err := watch(); err != nil {
			t.Fatal(err)
		}
	}
	if err := tc.node(leader).SetClockOffset(0); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b", "c"} {
		harness.WaitFor(t, 20*time.Second, name+" ready again", func() bool {
			drawAll(t, tc)
			if err := watch(); err != nil {
				t.Fatal(err)
			}
			ok, _ := tc.node(name).Ready()
			return ok
		})
	}
	drawAll(t, tc)
	if err := watch(); err != nil {
		t.Fatal(err)
	}
	tc.checkContainment()
}

// TestMinorityOfWrongClocksKeepsRealTime: two of five voters run an hour
// ahead. They are refused (not ready), and no slot is granted past real time
// plus max-ahead, whichever node leads.
func TestMinorityOfWrongClocksKeepsRealTime(t *testing.T) {
	tc := newTestCluster(t)
	names := []string{"a", "b", "c", "d", "e"}
	for i, name := range names {
		var s *nodeSpec
		if i == 0 {
			s = tc.add(name, 1)
		} else {
			s = tc.add(name, 1, "a")
		}
		s.cfg.EnableFaultInjection = true
	}
	for _, name := range names {
		waitReady(t, tc.start(name))
	}
	waitVoters(t, tc.node("a"), 5)
	watch := aheadWatch(tc)
	for _, name := range []string{"a", "b"} { // a leads: the seed
		if err := tc.node(name).SetClockOffset(time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	until := time.Now().Add(8 * time.Second)
	for time.Now().Before(until) {
		drawAll(t, tc)
		if err := watch(); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"c", "d", "e"} {
		waitReady(t, tc.node(name))
	}
	for _, name := range []string{"a", "b"} {
		if ok, reason := tc.node(name).Ready(); ok {
			t.Errorf("%s, an hour ahead, is ready", name)
		} else {
			t.Logf("%s: %s", name, reason)
		}
	}
	tc.checkContainment()
}

// TestWindowAheadOfClusterTimeIsReported: two of three clocks (a quorum)
// run an hour ahead, so the cluster's time does too and windows are granted
// an hour ahead. With the clocks fixed, a node holding such a window says so
// and is not ready, rather than serving IDs that decode an hour in the future.
func TestWindowAheadOfClusterTimeIsReported(t *testing.T) {
	tc := startThree(t, func(c *Config) { c.EnableFaultInjection = true })
	names := []string{"a", "b", "c"}
	for _, name := range names[:2] {
		if err := tc.node(name).SetClockOffset(time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	var ahead *Node
	harness.WaitFor(t, 20*time.Second, "a window an hour ahead", func() bool {
		for _, name := range names {
			n := tc.node(name)
			if n.Layout().Time(n.Status().Granted).Sub(time.Now()) > 50*time.Minute {
				ahead = n
				return true
			}
		}
		return false
	})
	for _, name := range names[:2] {
		if err := tc.node(name).SetClockOffset(0); err != nil {
			t.Fatal(err)
		}
	}
	harness.WaitFor(t, 20*time.Second, ahead.Name()+" to report its window ahead of the cluster's time", func() bool {
		ok, reason := ahead.Ready()
		return !ok && strings.Contains(reason, "ahead of the cluster's time")
	})
	_, reason := ahead.Ready()
	t.Log(reason)
}

// TestReserveOfANonHolderReportsNoClock: a Reserve's clock counts in the
// cluster's time only once the leader has checked that its node holds what
// it names. Reserves forwarded under a hundred made-up node IDs and one
// under a real node's ID with a wrong tenure, every one an hour ahead, are
// refused as "not owner" and leave the leader's clock book as it was: before
// the fix each added a sample, without bound, and their hour counted in the
// "most nodes think my clock is off" hand-off.
func TestReserveOfANonHolderReportsNoClock(t *testing.T) {
	tc := startThree(t)
	drawAll(t, tc)
	ahead := skewedClock{d: time.Hour}
	var leader *Node
	harness.WaitFor(t, 10*time.Second, "a leader", func() bool { leader = tc.node(leaderOf(tc, "a", "b", "c")); return leader != nil })
	ids := map[string]bool{}
	for _, id := range leader.clusterClock.clocks.IDs() {
		ids[id] = true
	}
	for i := range 100 {
		p := &pseudoNode{id: fmt.Sprintf("%032x", i+1), tc: tc, clock: ahead}
		if _, err := p.deliver(p.command(core.Command{Type: core.CmdReserve, NodeID: p.id, Slot: i % 3, Tenure: uint64(i + 1), UpTo: 1})); !errors.Is(err, ErrNotOwner) && !errors.Is(err, ErrClockSkew) {
			t.Fatalf("a reserve of made-up node %s: %v, want it refused", p.id, err)
		}
	}
	real := &pseudoNode{id: tc.node("b").id, tc: tc, clock: ahead}
	if _, err := real.deliver(real.command(core.Command{Type: core.CmdReserve, NodeID: real.id, Slot: 0, Tenure: 1 << 40, UpTo: 1})); !errors.Is(err, ErrNotOwner) && !errors.Is(err, ErrClockSkew) {
		t.Fatalf("a reserve of b under a wrong tenure: %v, want it refused", err)
	}
	for _, id := range leader.clusterClock.clocks.IDs() {
		if !ids[id] && id != tc.node("b").id && id != tc.node("c").id && id != tc.node("a").id {
			t.Errorf("the leader keeps a clock sample of %s, which holds no slot", id)
		}
		if est := leader.clusterClock.clocks.ByID([]string{id}, time.Now(), time.Minute); len(est) == 1 && time.Until(est[0]) > 30*time.Minute {
			t.Errorf("the leader keeps %s's clock as an hour ahead, from a refused reserve", id)
		}
	}
}

// TestForwardedCommandsReportNoClock: the leader takes a voter's clock only
// from the Status it asks that voter for, at its own address, never from a
// forwarded command, whatever node the command names: a node certificate
// does not say which node sent it. Outside attack round 13 forged Claims
// naming a real member an hour ahead (the leader handed off about 36 times a
// second, every new leader poisoned at once), and Reserves of a member's real
// tenure 4.8 s ahead (cluster time moved with them, and grants ran 4.8 s
// past real time plus max-ahead).
func TestForwardedCommandsReportNoClock(t *testing.T) {
	tc := startThree(t, func(c *Config) { c.MaxSkew = 5 * time.Second })
	drawAll(t, tc)
	var leader *Node
	harness.WaitFor(t, 10*time.Second, "a leader", func() bool { leader = tc.node(leaderOf(tc, "a", "b", "c")); return leader != nil })
	var victim *Node
	for _, name := range []string{"a", "b", "c"} {
		if n := tc.node(name); n != leader {
			victim = n
			break
		}
	}
	st := victim.Status()
	for _, ahead := range []time.Duration{time.Hour, 4800 * time.Millisecond} {
		p := &pseudoNode{id: victim.id, tc: tc, clock: skewedClock{d: ahead}}
		l := generator.DefaultLayout()
		for range 20 {
			_, _ = p.deliver(p.command(core.Command{Type: core.CmdClaim, Layout: &l, Node: &NodeInfo{ID: victim.id, Name: "x", Datacenter: -1}}))
			_, _ = p.deliver(p.command(core.Command{Type: core.CmdReserve, NodeID: victim.id, Slot: st.Slot, Tenure: victim.agent.tenure.Load(), UpTo: 1 << 30}))
		}
		if est := leader.clusterClock.clocks.ByID([]string{victim.id}, time.Now(), time.Minute); len(est) == 1 && time.Until(est[0]) > ahead/2 {
			t.Fatalf("after forged commands %v ahead naming %s, the leader holds its clock as %v ahead", ahead, victim.cfg.Name, time.Until(est[0]).Round(time.Millisecond))
		}
	}
	if now := tc.node(leaderOf(tc, "a", "b", "c")); now != leader {
		t.Fatalf("leadership moved from %s to %s under forged commands", leader.cfg.Name, now.cfg.Name)
	}
}

// TestLegacyVotersReportTheirClockInCommands: a voter of the release before
// protocol 2 puts no clock in its Status, and reports it only in its Claims
// and Reserves; a leader of this release counts those (and no other
// command's clock). The upgrade roll's phase d (this release leading two
// voters of the recorded release) found it: with command clocks never
// counted, the leader knew only its own clock of three, granted nothing, and
// no node was ready until its minute's absent rule.
func TestLegacyVotersReportTheirClockInCommands(t *testing.T) {
	tc := startThree(t)
	lead := leaderOf(tc, "a", "b", "c")
	for _, name := range []string{"a", "b", "c"} {
		if name == lead {
			continue
		}
		tc.stop(name)
		tc.specs[name].cfg.previousStatus, tc.specs[name].cfg.protocols = true, core.LegacyProtocols
		tc.start(name)
		harness.WaitFor(t, 20*time.Second, name+" back in the cluster", func() bool { return leaderOf(tc, "a", "b", "c") != "" })
	}
	// The leader restarts too: a new leader's book is empty, and only the
	// legacy voters' commands can fill it.
	tc.stop(lead)
	l := tc.start(lead)
	harness.WaitFor(t, 20*time.Second, lead+" leads again", func() bool {
		cur := leaderOf(tc, "a", "b", "c")
		if cur == lead {
			return true
		}
		if cur != "" {
			_ = tc.node(cur).rs.raft.LeadershipTransferToServer(raft.ServerID(l.id), raft.ServerAddress(l.cfg.RaftAdvertise)).Error()
		}
		return false
	})
	for _, name := range []string{"a", "b", "c"} {
		harness.WaitFor(t, 15*time.Second, name+" ready under a leader of this release with two legacy voters", func() bool {
			ok, _ := tc.node(name).Ready()
			return ok && leaderOf(tc, "a", "b", "c") == lead
		})
	}
	drawAll(t, tc)
	tc.checkContainment()
}
