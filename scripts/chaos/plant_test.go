package chaos

import (
	"testing"
	"time"
)

// TestVerifyCatchesSplitBrain plants real duplicates at process level, without
// any test hook in idgend: two nodes that each bootstrap a cluster of their own
// (no --join), started a moment apart, both claim slot 0 from floors a second
// or two apart (each new cluster starts at its leader's clock plus max-ahead)
// and, drawn at the layout's rate, stamp the same seconds with the same
// sequence numbers. They never meet in gossip, so neither stops. One `idctl verify` across both must count
// duplicates and exit 3, or a green chaos run would mean nothing.
func TestVerifyCatchesSplitBrain(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test skipped in -short mode")
	}
	bin := buildBinaries(t)
	c := newCluster(t, bin, []string{"--gossip-profile=local", "--datacenter=0"})
	a := c.add("brain-a", 1, nil)
	b := c.add("brain-b", 1, nil)
	a.Start()
	b.Start()
	for _, n := range []*node{a, b} {
		if !waitFor(30*time.Second, func() bool {
			st, err := n.status(time.Second)
			return err == nil && st.GetReady()
		}) {
			t.Fatalf("%s never became ready", n.Name)
		}
	}
	sa, _ := a.status(time.Second)
	sb, _ := b.status(time.Second)
	if sa.GetSlot() != sb.GetSlot() {
		t.Fatalf("the two single-node clusters hold slots %d and %d; the plant needs the same slot", sa.GetSlot(), sb.GetSlot())
	}
	c.logf("two clusters, both on slot %d: %s and %s", sa.GetSlot(), sa.GetId(), sb.GetId())

	v, err := startVerify(c, 5*time.Second, 4000)
	if err != nil {
		t.Fatal(err)
	}
	defer v.stop()
	rep, code, err := v.wait(time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	line := summary("chaos-plant", 1, rep)
	c.logf("%s (exit %d, per_slot %v)", line, code, rep.PerSlot)
	if rep.Acknowledged == 0 {
		t.Fatalf("verify acknowledged nothing: %q", rep.Errors)
	}
	if rep.Duplicates == 0 {
		t.Errorf("verify found no duplicate among %d IDs drawn from two owners of slot %d", rep.Acknowledged, sa.GetSlot())
	}
	if code != verifyExitViolation {
		t.Errorf("verify exited %d, want %d for a duplicate", code, verifyExitViolation)
	}
	if rep.ContainmentViolations == 0 {
		// Both histories record a tenure of the same slot from nearly the same
		// floor: the windows of two owners overlap, which the checker must
		// report too.
		t.Errorf("verify reported no containment violation for two overlapping tenures of slot %d", sa.GetSlot())
	}
}
