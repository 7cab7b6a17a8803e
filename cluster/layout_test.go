package cluster

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idgen/idgen/generator"
	"github.com/idgen/idgen/scripts/harness"
)

// A cluster founded with a layout of its own keeps it: a node that joins
// with no layout configured takes the cluster's from its log (and mints
// under it), records it in its data dir, restarts under it without being
// told, and is refused at Open when restarted with another.
func TestJoinersTakeTheClusterLayout(t *testing.T) {
	fast, err := generator.ParseSpec("35/2/1/11 unit=10ms")
	if err != nil {
		t.Fatal(err)
	}
	tc := newTestCluster(t)
	tc.add("a", 1).cfg.Layout = fast
	a := tc.start("a")
	waitReady(t, a)
	tc.add("b", 1, "a")
	b := tc.start("b")
	waitReady(t, b)
	for _, n := range []*Node{a, b} {
		if n.Layout() != fast || n.Status().Layout != fast {
			t.Fatalf("%s: Layout %s, Status.Layout %s; want the cluster's %s", n.Name(), n.Layout(), n.Status().Layout, fast)
		}
		ids := tc.issue(n, 5000) // more than a 1 s unit's 2048: several 10 ms units
		for _, id := range ids {
			p, err := fast.Decompose(id)
			if err != nil || p.Slot != n.Status().Slot {
				t.Fatalf("%s: ID %d under %s: %+v, %v; want slot %d", n.Name(), id, fast, p, err, n.Status().Slot)
			}
		}
	}
	var recorded generator.Layout
	harness.WaitFor(t, 10*time.Second, "b's data dir to record the cluster's layout", func() bool {
		raw, err := os.ReadFile(filepath.Join(tc.specs["b"].cfg.DataDir, layoutFile))
		return err == nil && json.Unmarshal(raw, &recorded) == nil && recorded == fast
	})

	tc.stop("b")
	cfg := tc.specs["b"].cfg
	cfg.Layout = generator.DefaultLayout()
	_, err = Open(cfg)
	if !errors.Is(err, ErrLayoutMismatch) || !strings.Contains(err.Error(), fast.String()) ||
		!strings.Contains(err.Error(), generator.DefaultLayout().String()) || !strings.Contains(err.Error(), "with none") {
		t.Fatalf("restart with another layout: %v; want ErrLayoutMismatch naming both layouts and what to do", err)
	}
	b = tc.start("b") // no layout: the recorded one, at once
	if b.Layout() != fast {
		t.Fatalf("restarted b: Layout %s before its log is replayed, want the recorded %s", b.Layout(), fast)
	}
	waitReady(t, b)
	tc.issue(b, 100)
	tc.checkContainment()
}
