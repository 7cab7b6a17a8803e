package cluster

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/idgen/idgen/cluster/core"
	"github.com/idgen/idgen/generator"
	"github.com/idgen/idgen/scripts/harness"
)

// TestMeetingFencesAHeldSlot: the serving cluster's slot 0 has a live
// holder d whose granted window reaches past real time, when a wiped seed
// with its clock 12 s behind founds a cluster of its own on slot 0 and
// issues there: its window lies inside d's. When the two meet, the fence
// must end d's tenure, or d goes on stamping, from a cursor near real
// time, the seconds the wiped cluster already issued. (The fence used to be
// skipped whenever the slot's highWater already reached past the other
// cluster's window, which is exactly this case: a duplicate.)
func TestMeetingFencesAHeldSlot(t *testing.T) {
	tc := startServing(t)
	if slot := tc.node("a").Status().Slot; slot != 0 {
		t.Fatalf("the seed holds slot %d, want 0", slot)
	}
	tc.stop("a")
	waitSlotFree(t, tc.node("b"), 0)
	tc.add("d", 1, "b")
	d := tc.start("d")
	harness.WaitFor(t, 30*time.Second, "d to hold slot 0", func() bool { return d.Status().Slot == 0 })
	waitReady(t, d)
	layout := d.Layout()
	floor := d.Status().Floor
	harness.WaitFor(t, 30*time.Second, "real time to pass d's floor", func() bool { return layout.Units(time.Now()) > floor+1 })
	tc.issue(d, 100) // d's cursor at real time; its agent keeps its window at least half the lead past it

	// a, wiped, on a new gossip address and with its clock 12 s behind: its
	// window, its clock plus max-ahead, lies about 3 s ahead of real time,
	// and below d's window's end. d draws nothing until the fence, so none of
	// its IDs can repeat one of the young cluster's before the meeting.
	tc.specs["a"].cfg.DataDir = t.TempDir()
	tc.specs["a"].cfg.GossipAddr = fmt.Sprintf("127.0.0.1:%d", harness.NextPort(t))
	tc.specs["a"].cfg.Clock = skewedClock{-12 * time.Second}
	wiped := tc.start("a")
	waitReady(t, wiped)
	if slot := wiped.Status().Slot; slot != 0 {
		t.Fatalf("the wiped seed holds slot %d in its new cluster, want 0", slot)
	}
	for range 2 {
		tc.issue(wiped, 2048)
	}
	young := wiped.Status()
	if hw := d.Status().Granted; hw < young.Granted {
		t.Fatalf("d's window ends at %d, below the young cluster's %d: the sequence under test needs it above", hw, young.Granted)
	}
	tenure := d.agent.tenure.Load()
	// A batch d mints in that tenure and does not hand out, as its prefetch
	// buffer holds them: once the fence ends the tenure it is withdrawn (a
	// buffer that kept it could hand out the young cluster's IDs; the
	// simulator's seed 867 with simFaults{keepEnded: true}).
	held := tc.mint(d, 16)
	if d.Withdrawn(held[0]) {
		t.Fatalf("a batch of d's current tenure %d is withdrawn before any fence", tenure)
	}
	if _, err := wiped.Join([]string{tc.specs["b"].cfg.GossipAddr}); err != nil {
		t.Fatal(err)
	}
	harness.WaitFor(t, 20*time.Second, "the wiped seed to stop", func() bool { return wiped.Conflict() != nil })
	// The fence ends d's tenure; d claims again above the young window.
	fenced := harness.Eventually(20*time.Second, func() bool { return d.agent.tenure.Load() != tenure && d.Status().Floor >= young.Granted })
	if !fenced {
		t.Errorf("the meeting did not end d's tenure %d (now %d, floor %d; the young window ends at %d)", tenure, d.agent.tenure.Load(), d.Status().Floor, young.Granted)
	}
	if !d.Withdrawn(held[0]) || !d.Withdrawn(held[len(held)-1]) {
		t.Errorf("the batch d minted in its fenced tenure %d is not withdrawn", tenure)
	}
	if fresh := tc.mint(d, 1); d.Withdrawn(fresh[0]) {
		t.Errorf("an ID of d's new tenure %d is withdrawn", d.agent.tenure.Load())
	}
	// d serves at real time's pace until real time has passed the young
	// cluster's window: a duplicate fails the test in tc.issue.
	harness.WaitFor(t, 60*time.Second, "real time to pass the young cluster's window", func() bool {
		if ok, _ := d.Ready(); ok {
			tc.issue(d, 64)
		}
		return layout.Units(time.Now()) > young.Granted+1
	})
	// (No containment check: the young cluster's IDs lie in windows of
	// its own log, which the serving cluster's history does not hold.)
}

// waitSlotFree waits until n's replica shows slot free (its holder reaped
// or released): a node that claims before then takes another slot.
func waitSlotFree(t *testing.T, n *Node, slot int) {
	t.Helper()
	harness.WaitFor(t, 60*time.Second, fmt.Sprintf("slot %d to be free in %s's replica", slot, n.Name()), func() bool {
		free := false
		n.fsm.view(func(s *core.State) { free = slot < len(s.Slots) && s.Slots[slot].Owner == "" })
		return free
	})
}

// TestSurvivorOfADeadClusterDoesNotStopItsReplacement: a, b, c served; b
// and c are gone for good, so a has no quorum and cannot issue. The
// operator builds x, y, z to replace them; when a meets them in gossip, the
// replacement keeps serving and a stops, saying what to do. Decided by
// history alone, every node of the replacement stopped (a's cluster has
// more), a could not issue, and nobody issued.
func TestSurvivorOfADeadClusterDoesNotStopItsReplacement(t *testing.T) {
	tc := startServing(t)
	tc.stop("b")
	tc.stop("c")
	a := tc.node("a")
	harness.WaitFor(t, 20*time.Second, "a to lose its leader", func() bool { return !a.members.leaderKnown() })

	tc.add("x", 3)
	tc.add("y", 3, "x")
	tc.add("z", 3, "x")
	for _, name := range []string{"x", "y", "z"} {
		tc.start(name)
	}
	for _, name := range []string{"x", "y", "z"} {
		waitReady(t, tc.node(name))
	}
	if _, err := a.Join([]string{tc.specs["x"].cfg.GossipAddr}); err != nil {
		t.Fatal(err)
	}
	harness.WaitFor(t, 20*time.Second, "the survivor to stop, saying its cluster has no leader", func() bool {
		err := a.Conflict()
		return err != nil && strings.Contains(err.Error(), "no raft leader")
	})
	harness.WaitFor(t, 20*time.Second, "the replacement to see the other cluster", func() bool {
		return len(tc.node("x").Status().ConflictingClusters) == 1
	})
	for _, name := range []string{"x", "y", "z"} {
		n := tc.node(name)
		if err := n.Conflict(); err != nil {
			t.Fatalf("%s of the replacement stopped: %v", name, err)
		}
		waitReady(t, n)
		tc.issue(n, 500)
	}
	t.Logf("survivor: %v", a.Conflict())
}

// foundWithSkewedLeader bootstraps a, b and s together (s's clock is
// skewed), makes s the leader before anything is written (every Init is
// held back until then), and returns the cluster once its Init is applied.
func foundWithSkewedLeader(t *testing.T, skew time.Duration) *testCluster {
	var hold atomic.Bool
	hold.Store(true)
	gate := func(c core.Command) error {
		if c.Type == core.CmdInit && hold.Load() {
			return errors.New("init held back by the test")
		}
		return nil
	}
	tc := threeFoundersLedByS(t, func(name string, spec *nodeSpec) {
		spec.cfg.applyFault = gate
		if name == "s" {
			spec.cfg.Clock = skewedClock{skew}
		}
	})
	hold.Store(false)
	for _, name := range []string{"a", "b", "s"} {
		n := tc.node(name)
		harness.WaitFor(t, 30*time.Second, name+" to apply the Init", func() bool { _, ok := n.log.clusterLayout(); return ok })
	}
	return tc
}

// threeFoundersLedByS starts a, b and s, each with --bootstrap-expect 3 and
// the others as seeds, shaped by tweak, and waits until s leads (asking
// whoever else leads to hand it over).
func threeFoundersLedByS(t *testing.T, tweak func(name string, spec *nodeSpec)) *testCluster {
	tc := newTestCluster(t)
	names := []string{"a", "b", "s"}
	for _, name := range names {
		tweak(name, tc.add(name, 3))
	}
	for _, name := range names {
		for _, other := range names {
			if other != name {
				tc.specs[name].cfg.Join = append(tc.specs[name].cfg.Join, tc.specs[other].cfg.GossipAddr)
			}
		}
	}
	for _, name := range names {
		tc.start(name)
	}
	s := tc.node("s")
	harness.WaitFor(t, 30*time.Second, "s to lead", func() bool {
		if s.rs.raft.State() == raft.Leader {
			return true
		}
		for _, name := range []string{"a", "b"} {
			if n := tc.node(name); n.rs.raft.State() == raft.Leader {
				n.rs.raft.LeadershipTransferToServer(raft.ServerID(s.ID()), raft.ServerAddress(tc.specs["s"].cfg.RaftAddr))
			}
		}
		return false
	})
	return tc
}

// TestInitStartsFromTheFoundersTime: the leader that founds a cluster has
// its clock an hour ahead. Every slot's first highWater comes from the
// founding voters' time (a quorum of their clocks) plus max-ahead: one
// clock an hour ahead used to put every slot an hour ahead, and no node had
// room once that clock was fixed.
func TestInitStartsFromTheFoundersTime(t *testing.T) {
	tc := foundWithSkewedLeader(t, time.Hour)
	checkInitStart(t, tc.node("a"))
	for _, name := range []string{"a", "b"} {
		waitReady(t, tc.node(name))
		tc.issue(tc.node(name), 100)
	}
}

// TestFounderBeforeTheEpochHandsOff: the founding leader's clock reads 2000
// (an RTC reset), before the layout's epoch. It hands leadership to a voter
// that can found the cluster; it used to retry an Init it could never
// write, for as long as it led.
func TestFounderBeforeTheEpochHandsOff(t *testing.T) {
	year2000 := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	tc := foundWithSkewedLeader(t, year2000.Sub(time.Now()))
	checkInitStart(t, tc.node("a"))
	for _, name := range []string{"a", "b"} {
		waitReady(t, tc.node(name))
		tc.issue(tc.node(name), 100)
	}
}

// checkInitStart: the highWater of a slot nobody claims (the last, in a
// cluster of three) is still Init's start: it must lie within max-ahead
// (and two units) of real time.
func checkInitStart(t *testing.T, n *Node) {
	t.Helper()
	var (
		start int64
		l     generator.Layout
	)
	n.fsm.view(func(s *core.State) { l, start = *s.Layout, s.Slots[len(s.Slots)-1].HighWater })
	limit := l.Units(time.Now()) + core.UnitsCeil(n.cfg.MaxAhead, l.Unit) + 2
	if start > limit {
		t.Fatalf("Init started the slots at %d, %v ahead of real time plus max-ahead", start, l.Time(start).Sub(l.Time(limit)))
	}
}

// TestMeetingFencesEverySlotTheOtherLogGranted: the younger cluster's node
// that issued on slot 0 is dead by the time the clusters meet; only its
// peer y2, which held slot 1, answers. y2's Status reports every window its
// cluster's log granted, so slot 0 is fenced too (from y2's own window
// alone, the serving cluster knew only of slot 1, and a, holding slot 0,
// would have stamped y1's seconds again 20 s later).
func TestMeetingFencesEverySlotTheOtherLogGranted(t *testing.T) {
	tc := startServing(t)
	a := tc.node("a")
	if slot := a.Status().Slot; slot != 0 {
		t.Fatalf("a holds slot %d, want 0", slot)
	}
	// Its clocks 20 s ahead: its windows lie above everything the serving
	// cluster granted so far (none of its IDs repeats one issued before the
	// meeting), and the serving cluster's holder of slot 0 would reach them
	// as real time does.
	ahead := skewedClock{20 * time.Second}
	tc.add("y1", 1).cfg.Clock = ahead
	y2s := tc.add("y2", 1, "y1")
	y2s.cfg.Clock = ahead
	y1 := tc.start("y1")
	waitReady(t, y1)
	y2 := tc.start("y2")
	waitReady(t, y2)
	if y1.Status().Slot != 0 || y2.Status().Slot != 1 {
		t.Fatalf("young slots: y1 %d, y2 %d; want 0 and 1", y1.Status().Slot, y2.Status().Slot)
	}
	for range 3 {
		tc.issue(y1, 2048)
	}
	young := y1.Status().Granted
	harness.WaitFor(t, 10*time.Second, "y2's replica to have y1's last grant", func() bool {
		return y2.Status().GrantedWindows[0] >= young
	})
	tc.stop("y1")
	tenure := a.agent.tenure.Load()
	if _, err := y2.Join([]string{tc.specs["b"].cfg.GossipAddr}); err != nil {
		t.Fatal(err)
	}
	harness.WaitFor(t, 20*time.Second, "the younger cluster's survivor to stop", func() bool { return y2.Conflict() != nil })
	harness.WaitFor(t, 20*time.Second, "slot 0 fenced above the younger log's window", func() bool {
		var hw int64
		a.fsm.view(func(s *core.State) { hw = s.Slots[0].HighWater })
		return hw >= young && a.agent.tenure.Load() != tenure
	})
	waitReady(t, a)
	tc.issue(a, 2048)
}

// TestFenceCommands: the fence's decision, slot by slot, over a state with
// slot 0 held (floor 10, highWater 40) and slot 1 free (highWater 40).
func TestFenceCommands(t *testing.T) {
	s := core.NewState()
	l := generator.DefaultLayout()
	mustApply := func(c core.Command, index uint64) {
		t.Helper()
		if err, ok := s.Apply(c, index).(error); ok {
			t.Fatalf("apply %s: %v", c.Type, err)
		}
	}
	mustApply(core.Command{Type: core.CmdInit, Layout: &l, ClusterID: "c1", Start: 10}, 1)
	mustApply(core.Command{Type: core.CmdClaim, Node: &NodeInfo{ID: "n1", Datacenter: -1}}, 2)
	mustApply(core.Command{Type: core.CmdReserve, NodeID: "n1", Slot: 0, Tenure: 2, UpTo: 40}, 3)
	mustApply(core.Command{Type: core.CmdFence, Slot: 1, UpTo: 40, Foreign: "x"}, 4)
	for _, tc := range []struct {
		name string
		f    core.ForeignFence
		want []core.CommandType
	}{
		{"held, window inside the holder's: end the tenure", core.ForeignFence{Slot: 0, UpTo: 25, Foreign: "x"}, []core.CommandType{core.CmdRelease}},
		{"held, window above highWater: fence (ends it too)", core.ForeignFence{Slot: 0, UpTo: 50, Foreign: "x"}, []core.CommandType{core.CmdFence}},
		{"held, window below the tenure's floor: nothing", core.ForeignFence{Slot: 0, UpTo: 9, Foreign: "x"}, nil},
		{"free, window below highWater: nothing", core.ForeignFence{Slot: 1, UpTo: 30, Foreign: "x"}, nil},
		{"free, window above: fence", core.ForeignFence{Slot: 1, UpTo: 41, Foreign: "x"}, []core.CommandType{core.CmdFence}},
		{"another layout: nothing", core.ForeignFence{Slot: 0, UpTo: 50, Foreign: "x", OtherLayout: true}, nil},
		{"past the layout's end: nothing", core.ForeignFence{Slot: 0, UpTo: l.MaxTimestamp() + 1, Foreign: "x"}, nil},
		{"no such slot: nothing", core.ForeignFence{Slot: len(s.Slots), UpTo: 50, Foreign: "x"}, nil},
	} {
		var got []core.CommandType
		for _, c := range core.FenceCommands(s, tc.f, "c1") {
			if err := c.Validate(); err != nil {
				t.Errorf("%s: %s is not a valid command: %v", tc.name, c.Type, err)
			}
			got = append(got, c.Type)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestOutranks is the meeting rule: only a cluster that serves stops
// another; one that serves outranks one that does not; between two that
// serve, clearly more history wins, and close histories go to the older
// creation time.
func TestOutranks(t *testing.T) {
	old := core.Identity{ID: "old", Created: 1}
	young := core.Identity{ID: "young", Created: 2}
	age := func(id core.Identity, history uint64, serving bool) core.ClusterAge {
		return core.ClusterAge{Identity: id, History: history, Serving: serving}
	}
	for _, c := range []struct {
		name           string
		a, b           core.ClusterAge
		aKeeps, bKeeps bool
	}{
		{"the serving replacement of a dead cluster's survivor", age(young, 10, true), age(old, 5000, false), true, false},
		{"two without a leader for a moment: neither stops for good", age(young, 10, false), age(old, 5000, false), true, true},
		{"two serving: clearly more history wins", age(young, 10, true), age(old, 5000, true), false, true},
		{"two serving: clearly more history wins, even if younger", age(young, 5000, true), age(old, 10, true), true, false},
		{"two serving, close histories: the older creation wins", age(young, 100, true), age(old, 90, true), false, true},
	} {
		if got := c.a.Outranks(c.b); got != c.aKeeps {
			t.Errorf("%s: a.outranks(b) = %v, want %v", c.name, got, c.aKeeps)
		}
		if got := c.b.Outranks(c.a); got != c.bKeeps {
			t.Errorf("%s: b.outranks(a) = %v, want %v", c.name, got, c.bKeeps)
		}
	}
}

// TestFoundersWithoutClocksFoundNothing (outside attack 8): founders a and
// b are of a release that reports no clock before Init (none in its
// Status); s, the founding leader, runs an hour ahead. Treated as absent (at
// once as quiet, or after the TTL), a and b left founderCheck passing on
// s's clock alone, and Init put every slot an hour ahead. Init's start is
// never from fewer than a quorum of all the founding voters' clocks
// (clockAwaited): s founds nothing, and says whose clocks it awaits.
func TestFoundersWithoutClocksFoundNothing(t *testing.T) {
	tc := threeFoundersLedByS(t, func(name string, spec *nodeSpec) {
		if name == "s" {
			spec.cfg.Clock = skewedClock{time.Hour}
			spec.cfg.clockTTL = 2 * time.Second // the TTL's absence, within the test's wait
		} else {
			spec.cfg.previousStatus, spec.cfg.protocols = true, core.LegacyProtocols
		}
	})
	s := tc.node("s")
	led := time.Now()
	for time.Since(led) < 3*s.cfg.clockTTL+4*time.Second {
		if tc.node("a").ident.ownCluster() != "" {
			checkInitStart(t, tc.node("a"))
			t.Fatalf("Init written %v after s led, from s's clock alone: the founders a and b never reported one", time.Since(led).Round(time.Millisecond))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if s.rs.raft.State() == raft.Leader {
		if err := s.lead.establish(); !errors.Is(err, core.ErrAwaitingClocks) || !strings.Contains(err.Error(), tc.node("a").ID()) {
			t.Errorf("s's establish: %v; want it awaiting the founders' clocks, naming a", err)
		}
	}
}
