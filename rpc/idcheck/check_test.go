package idcheck

import (
	"slices"
	"strings"
	"testing"

	"github.com/idgen/idgen/generator"
	"github.com/idgen/idgen/rpc/idclient"
)

func compose(t *testing.T, ts int64, slot int, seq int64) int64 {
	t.Helper()
	id, err := generator.DefaultLayout().Compose(ts, slot, seq)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func TestCheckerFindsPlantedDuplicate(t *testing.T) {
	c := NewChecker()
	var batch []int64
	for seq := range int64(100) {
		batch = append(batch, compose(t, 50, 3, seq))
	}
	c.Add("n1", batch)
	if n, _ := c.Duplicates(); n != 0 {
		t.Fatalf("clean batch: %d duplicates", n)
	}
	planted := batch[42]
	c.Add("n2", []int64{compose(t, 51, 3, 0), planted}) // the copy came from another node
	n, examples := c.Duplicates()
	if n != 1 || !slices.Equal(examples, []int64{planted}) {
		t.Fatalf("duplicates = %d %v, want 1 [%d]", n, examples, planted)
	}
	c.Add("n1", []int64{planted}) // a third copy counts again
	if n, _ := c.Duplicates(); n != 2 {
		t.Fatalf("three copies: %d duplicates, want 2", n)
	}
}

func TestCheckerFindsIDOutsideEveryWindow(t *testing.T) {
	tenures := []generator.Tenure{
		{Slot: 0, NodeID: "a", Floor: 10, Granted: 20, ClaimedIndex: 3},
		{Slot: 0, NodeID: "b", Floor: 20, Granted: 40, ClaimedIndex: 9},
		{Slot: 1, NodeID: "c", Floor: 0, Granted: 5, ClaimedIndex: 4},
	}
	c := NewChecker()
	inside := []int64{
		compose(t, 11, 0, 0), compose(t, 20, 0, 7), // a's window, both ends
		compose(t, 21, 0, 0), compose(t, 40, 0, 1), // b's window
		compose(t, 1, 1, 0), compose(t, 5, 1, 2047),
	}
	c.Add("a", inside)
	h := History{Layout: generator.DefaultLayout(), Tenures: tenures} // no Owners: per slot only
	res := c.CheckContainment(h)
	if res.Violations() != 0 {
		t.Fatalf("IDs inside windows reported: %+v", res)
	}
	if res.PerSlot[0] != 4 || res.PerSlot[1] != 2 {
		t.Fatalf("per slot = %v", res.PerSlot)
	}

	planted := []int64{
		compose(t, 10, 0, 0), // floor itself is exclusive
		compose(t, 41, 0, 0), // past everything granted to slot 0
		compose(t, 6, 1, 0),  // past slot 1's window
		compose(t, 3, 2, 0),  // slot 2 never had an owner
		-1,                   // does not decode
	}
	c.Add("b", planted)
	res = c.CheckContainment(h)
	if res.Outside != len(planted) || len(res.Overlaps) != 0 {
		t.Fatalf("outside = %d (want %d), overlaps %v; examples %v", res.Outside, len(planted), res.Overlaps, res.Examples)
	}
	if !strings.Contains(strings.Join(res.Examples, "\n"), "slot 2 timestamp 3") {
		t.Fatalf("examples do not name the planted slot-2 ID: %v", res.Examples)
	}
}

func TestCheckTenuresFindsOverlap(t *testing.T) {
	ok := []generator.Tenure{
		{Slot: 4, NodeID: "a", Floor: 0, Granted: 100, ClaimedIndex: 5, ReleasedIndex: 30},
		{Slot: 4, NodeID: "b", Floor: 100, Granted: 150, ClaimedIndex: 31},
		{Slot: 5, NodeID: "c", Floor: 0, Granted: 120, ClaimedIndex: 6},
	}
	if o := CheckTenures(ok); len(o) != 0 {
		t.Fatalf("adjacent windows reported as overlapping: %v", o)
	}
	bad := append(slices.Clone(ok), generator.Tenure{Slot: 4, NodeID: "d", Floor: 149, Granted: 200, ClaimedIndex: 40})
	o := CheckTenures(bad)
	if len(o) != 1 || !strings.Contains(o[0], "node d") {
		t.Fatalf("overlap not found: %v", o)
	}
	// The overlap counts as a containment violation, even with no IDs.
	if v := NewChecker().CheckContainment(History{Layout: generator.DefaultLayout(), Tenures: bad}).Violations(); v != 1 {
		t.Fatalf("violations = %d, want 1", v)
	}
}

func TestMergeTenuresKeepsLargestGranted(t *testing.T) {
	leader := []generator.Tenure{{Slot: 1, NodeID: "a", Floor: 5, Granted: 90, ClaimedIndex: 7}}
	lagging := []generator.Tenure{
		{Slot: 1, NodeID: "a", Floor: 5, Granted: 60, ClaimedIndex: 7},
		{Slot: 0, NodeID: "b", Floor: 0, Granted: 10, ClaimedIndex: 3, ReleasedIndex: 12},
	}
	got, disagree := MergeTenures(lagging, leader)
	want := []generator.Tenure{
		{Slot: 0, NodeID: "b", Floor: 0, Granted: 10, ClaimedIndex: 3, ReleasedIndex: 12},
		{Slot: 1, NodeID: "a", Floor: 5, Granted: 90, ClaimedIndex: 7},
	}
	if !slices.Equal(got, want) || len(disagree) != 0 {
		t.Fatalf("merged = %+v, want %+v; disagreements %v", got, want, disagree)
	}
}

func TestMergeTenuresReportsDisagreement(t *testing.T) {
	one := []generator.Tenure{{Slot: 1, NodeID: "a", Floor: 5, Granted: 90, ClaimedIndex: 7, ReleasedIndex: 20}}
	other := []generator.Tenure{{Slot: 1, NodeID: "a", Floor: 8, Granted: 90, ClaimedIndex: 7, ReleasedIndex: 21}}
	got, disagree := MergeTenures(one, other)
	if len(disagree) != 1 || !strings.Contains(disagree[0], "floor 5 vs 8") || !strings.Contains(disagree[0], "20 vs 21") {
		t.Fatalf("disagreements %v", disagree)
	}
	if got[0].Floor != 5 {
		t.Fatalf("merged floor %d, want the lower, 5", got[0].Floor)
	}
	if v := NewChecker().CheckContainment(History{Layout: generator.DefaultLayout(), Tenures: got, Disagreements: disagree}).Violations(); v != 1 {
		t.Fatalf("violations = %d, want 1 for the disagreement", v)
	}
}

// Per owner: an ID must lie in a window of the node that served it, known
// by name; a name may stand for several node IDs (a wiped node came back).
func TestCheckerPerOwner(t *testing.T) {
	h := History{
		Layout: generator.DefaultLayout(),
		Tenures: []generator.Tenure{
			{Slot: 0, NodeID: "a1", Floor: 0, Granted: 10, ClaimedIndex: 3, ReleasedIndex: 8},
			{Slot: 0, NodeID: "b1", Floor: 10, Granted: 20, ClaimedIndex: 9, ReleasedIndex: 12},
			{Slot: 0, NodeID: "a2", Floor: 20, Granted: 30, ClaimedIndex: 13},
		},
		Owners: map[string][]string{"a": {"a1", "a2"}, "b": {"b1"}},
	}
	c := NewChecker()
	c.Add("a", []int64{compose(t, 5, 0, 0), compose(t, 25, 0, 0)}) // a's first and second tenure
	c.Add("b", []int64{compose(t, 15, 0, 0)})
	if res := c.CheckContainment(h); res.Violations() != 0 {
		t.Fatalf("IDs inside their owners' windows reported: %+v", res)
	}
	c.Add("a", []int64{compose(t, 12, 0, 0)})        // in b's window, no duplicate
	c.Add("b", []int64{compose(t, 21, 0, 0)})        // in a2's window
	c.Add("stranger", []int64{compose(t, 16, 0, 0)}) // no member list named it
	res := c.CheckContainment(h)
	if res.NotOwner != 3 || res.Outside != 0 || res.Violations() != 3 {
		t.Fatalf("not owner %d, outside %d, want 3 and 0: %v", res.NotOwner, res.Outside, res.Examples)
	}
	if !strings.Contains(strings.Join(res.Examples, "\n"), `node "stranger"`) {
		t.Fatalf("examples do not name the unknown node: %v", res.Examples)
	}
}

// TestCheckerPerOwnerByNodeID: a batch that names its node's ID is held to
// that ID's own tenures, even where the name (reused by a wiped node) maps
// to several IDs.
func TestCheckerPerOwnerByNodeID(t *testing.T) {
	h := History{
		Layout: generator.DefaultLayout(),
		Tenures: []generator.Tenure{
			{Slot: 0, NodeID: "a1", Floor: 0, Granted: 10, ClaimedIndex: 3, ReleasedIndex: 8},
			{Slot: 0, NodeID: "a2", Floor: 10, Granted: 20, ClaimedIndex: 9},
		},
		Owners: map[string][]string{"a": {"a1", "a2"}},
	}
	c := NewChecker()
	c.Add(checkerKey(idclient.Batch{Node: "a", NodeID: "a1"}), []int64{compose(t, 5, 0, 0)})
	c.Add(checkerKey(idclient.Batch{Node: "a"}), []int64{compose(t, 15, 0, 0)}) // by name: either ID
	if res := c.CheckContainment(h); res.Violations() != 0 {
		t.Fatalf("IDs inside their owners' windows reported: %+v", res)
	}
	c.Add(checkerKey(idclient.Batch{Node: "a", NodeID: "a1"}), []int64{compose(t, 16, 0, 0)}) // a2's window
	if res := c.CheckContainment(h); res.NotOwner != 1 {
		t.Fatalf("an ID of a1 inside a2's window: not owner %d, want 1 (%v)", res.NotOwner, res.Examples)
	}
}
