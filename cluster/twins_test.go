package cluster

import (
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/idgen/idgen/scripts/harness"
)

// copyDir copies a stopped node's data dir, as a cloned volume would.
func copyDir(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.Walk(from, func(path string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(from, path)
		if err != nil {
			return err
		}
		dst := filepath.Join(to, rel)
		if info.IsDir() {
			return os.MkdirAll(dst, info.Mode().Perm())
		}
		in, err := os.Open(path)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, info.Mode().Perm())
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestCopiedDataDirOfALoneSeedStopsAndIsFenced: a lone seed's data dir is
// copied and both copies run, each the leader of its own log of one cluster
// ID and one slot; the copy's clock is 6 s ahead, so its windows lie where
// the original mints seconds later. When their gossip meets, the copy that
// started later stops, saying why, and the original fences every window the
// copy's log granted: nothing it issues after the meeting repeats an ID the
// copy issued. Before, nothing saw the copy (same node, same cluster) and
// both went on issuing the same slot.
func TestCopiedDataDirOfALoneSeedStopsAndIsFenced(t *testing.T) {
	tc := newTestCluster(t)
	tc.add("a", 1)
	a := tc.start("a")
	waitReady(t, a)
	tc.issue(a, 100)
	tc.stop("a")

	orig := tc.specs["a"].cfg
	cp := tc.add("copy", 1)
	cp.cfg.DataDir = filepath.Join(t.TempDir(), "copy")
	copyDir(t, orig.DataDir, cp.cfg.DataDir)
	cp.cfg.Clock = skewedClock{6 * time.Second}
	a = tc.start("a")
	waitReady(t, a)
	twin := tc.start("copy")
	waitReady(t, twin)
	if twin.ID() != a.ID() || twin.ownCluster() != a.ownCluster() || twin.Status().Slot != a.Status().Slot {
		t.Fatalf("the copy is node %s of cluster %s on slot %d, want a's %s of %s on %d", twin.ID(), twin.ownCluster(),
			twin.Status().Slot, a.ID(), a.ownCluster(), a.Status().Slot)
	}
	// What the copy issues before the meeting; the original's IDs are
	// recorded apart (the two may share some: the meeting's window).
	copyIDs := map[int64]bool{}
	for range 2 {
		for _, id := range tc.mint(twin, 2048) {
			copyIDs[id] = true
		}
	}
	tenure := a.tenure.Load()

	if _, err := twin.Join([]string{orig.GossipAddr}); err != nil {
		t.Fatal(err)
	}
	harness.WaitFor(t, 30*time.Second, "the copy that started later to stop", func() bool { return twin.Conflict() != nil })
	t.Logf("copy: %v", twin.Conflict())
	if err := a.Conflict(); err != nil {
		t.Fatalf("the original stopped too: %v", err)
	}
	var copyGranted int64
	for _, g := range twin.Status().GrantedWindows {
		copyGranted = max(copyGranted, g)
	}
	harness.WaitFor(t, 30*time.Second, "the original to fence the copy's windows", func() bool {
		return a.tenure.Load() != tenure && a.Status().Floor >= copyGranted
	})
	layout := a.Layout()
	harness.WaitFor(t, 60*time.Second, "real time to pass the copy's window", func() bool {
		if ok, _ := a.Ready(); ok {
			for _, id := range tc.mint(a, 64) {
				if copyIDs[id] {
					t.Fatalf("the original issued %d after the meeting, an ID its copy issued", id)
				}
			}
		}
		return layout.Units(time.Now()) > copyGranted+1
	})
}

// TestCopyRanks: a copy that cannot issue stops nobody; otherwise the one
// that started later, or cannot issue, stops, and the two copies always
// reach opposite answers.
func TestCopyRanks(t *testing.T) {
	other := func(serving bool, started int64, addr string) foreignProof {
		return foreignProof{serving: serving, started: started, addr: addr}
	}
	for _, c := range []struct {
		mineServing bool
		mine        int64
		addr        string
		other       foreignProof
		stop        bool
	}{
		{true, 1, "a:1", other(false, 0, "b:1"), false},
		{false, 1, "a:1", other(false, 2, "b:1"), false},
		{false, 1, "a:1", other(true, 2, "b:1"), true},
		{true, 2, "a:1", other(true, 1, "b:1"), true},
		{true, 1, "a:1", other(true, 2, "b:1"), false},
		{true, 1, "b:1", other(true, 1, "a:1"), true},
		{true, 1, "a:1", other(true, 1, "b:1"), false},
	} {
		if got := copyRanks(c.mineServing, c.mine, c.addr, c.other); got != c.stop {
			t.Errorf("copyRanks(%v, %d, %s, %+v) = %v, want %v", c.mineServing, c.mine, c.addr, c.other, got, c.stop)
		}
		if c.mineServing && c.other.serving {
			back := copyRanks(true, c.other.started, c.other.addr, other(true, c.mine, c.addr))
			if back == c.stop {
				t.Errorf("%s and %s both %s", c.addr, c.other.addr, map[bool]string{true: "stop", false: "go on"}[back])
			}
		}
	}
}
