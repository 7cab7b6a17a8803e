package cluster

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idgen/idgen/scripts/harness"
)

// TestMeetingFencesAHeldSlot: the serving cluster's slot 0 has a live
// holder d whose granted window reaches past real time, when a wiped seed
// with its clock 10 s behind founds a cluster of its own on slot 0 and
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
	// d serves at real time's pace throughout, as a holder under load does:
	// every condition below draws from it while it waits.
	draw := func() {
		if ok, _ := d.Ready(); ok {
			tc.issue(d, 64)
		}
	}
	floor := d.Status().Floor
	harness.WaitFor(t, 30*time.Second, "real time to pass d's floor", func() bool {
		draw()
		return layout.Units(time.Now()) > floor+1
	})

	// a, wiped, on a new gossip address and with its clock 10 s behind: its
	// window, its clock plus max-ahead, lies 5 s ahead of real time.
	tc.specs["a"].cfg.DataDir = t.TempDir()
	tc.specs["a"].cfg.GossipAddr = fmt.Sprintf("127.0.0.1:%d", harness.NextPort(t))
	tc.specs["a"].cfg.Clock = skewedClock{-10 * time.Second}
	wiped := tc.start("a")
	waitReady(t, wiped)
	if slot := wiped.Status().Slot; slot != 0 {
		t.Fatalf("the wiped seed holds slot %d in its new cluster, want 0", slot)
	}
	for range 3 {
		tc.issue(wiped, 2048)
	}
	young := wiped.Status()
	if hw := d.Status().Granted; hw < young.Granted {
		t.Fatalf("d's window ends at %d, below the young cluster's %d: the sequence under test needs it above", hw, young.Granted)
	}
	if now := layout.Units(time.Now()); young.Floor < now {
		t.Fatalf("the young cluster's window starts at %d, behind real time %d: the sequence under test needs it ahead", young.Floor, now)
	}
	tenure := d.tenure.Load()
	if _, err := wiped.Join([]string{tc.specs["b"].cfg.GossipAddr}); err != nil {
		t.Fatal(err)
	}
	harness.WaitFor(t, 20*time.Second, "the wiped seed to stop", func() bool {
		draw()
		return wiped.Conflict() != nil
	})
	// d serves on until real time has passed the young cluster's window:
	// a duplicate fails the test in tc.issue.
	harness.WaitFor(t, 60*time.Second, "real time to pass the young cluster's window", func() bool {
		draw()
		return layout.Units(time.Now()) > young.Granted+1
	})
	if st := d.Status(); d.tenure.Load() == tenure || st.Floor < young.Granted {
		t.Errorf("the meeting did not end d's tenure %d (now %d, floor %d; the young window ends at %d)", tenure, d.tenure.Load(), st.Floor, young.Granted)
	}
	// (No containment check: the young cluster's IDs lie in windows of
	// its own log, which the serving cluster's history does not hold.)
}

// waitSlotFree waits until n's replica shows slot free (its holder reaped
// or released): a node that claims before then takes another slot.
func waitSlotFree(t *testing.T, n *Node, slot int) {
	t.Helper()
	harness.WaitFor(t, 60*time.Second, fmt.Sprintf("slot %d to be free in %s's replica", slot, n.Name()), func() bool {
		free := false
		n.fsm.view(func(s *state) { free = slot < len(s.Slots) && s.Slots[slot].Owner == "" })
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
	harness.WaitFor(t, 20*time.Second, "a to lose its leader", func() bool { return !a.leaderKnown() })

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
