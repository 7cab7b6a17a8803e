package idclient

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idgen/idgen/generator"
	"github.com/idgen/idgen/rpc"
	"github.com/idgen/idgen/rpc/rpctest"
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
	tenures := []Tenure{
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
	ok := []Tenure{
		{Slot: 4, NodeID: "a", Floor: 0, Granted: 100, ClaimedIndex: 5, ReleasedIndex: 30},
		{Slot: 4, NodeID: "b", Floor: 100, Granted: 150, ClaimedIndex: 31},
		{Slot: 5, NodeID: "c", Floor: 0, Granted: 120, ClaimedIndex: 6},
	}
	if o := CheckTenures(ok); len(o) != 0 {
		t.Fatalf("adjacent windows reported as overlapping: %v", o)
	}
	bad := append(slices.Clone(ok), Tenure{Slot: 4, NodeID: "d", Floor: 149, Granted: 200, ClaimedIndex: 40})
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
	leader := []Tenure{{Slot: 1, NodeID: "a", Floor: 5, Granted: 90, ClaimedIndex: 7}}
	lagging := []Tenure{
		{Slot: 1, NodeID: "a", Floor: 5, Granted: 60, ClaimedIndex: 7},
		{Slot: 0, NodeID: "b", Floor: 0, Granted: 10, ClaimedIndex: 3, ReleasedIndex: 12},
	}
	got, disagree := MergeTenures(lagging, leader)
	want := []Tenure{
		{Slot: 0, NodeID: "b", Floor: 0, Granted: 10, ClaimedIndex: 3, ReleasedIndex: 12},
		{Slot: 1, NodeID: "a", Floor: 5, Granted: 90, ClaimedIndex: 7},
	}
	if !slices.Equal(got, want) || len(disagree) != 0 {
		t.Fatalf("merged = %+v, want %+v; disagreements %v", got, want, disagree)
	}
}

func TestMergeTenuresReportsDisagreement(t *testing.T) {
	one := []Tenure{{Slot: 1, NodeID: "a", Floor: 5, Granted: 90, ClaimedIndex: 7, ReleasedIndex: 20}}
	other := []Tenure{{Slot: 1, NodeID: "a", Floor: 8, Granted: 90, ClaimedIndex: 7, ReleasedIndex: 21}}
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
		Tenures: []Tenure{
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
		Tenures: []Tenure{
			{Slot: 0, NodeID: "a1", Floor: 0, Granted: 10, ClaimedIndex: 3, ReleasedIndex: 8},
			{Slot: 0, NodeID: "a2", Floor: 10, Granted: 20, ClaimedIndex: 9},
		},
		Owners: map[string][]string{"a": {"a1", "a2"}},
	}
	c := NewChecker()
	c.Add(checkerKey(Batch{Node: "a", NodeID: "a1"}), []int64{compose(t, 5, 0, 0)})
	c.Add(checkerKey(Batch{Node: "a"}), []int64{compose(t, 15, 0, 0)}) // by name: either ID
	if res := c.CheckContainment(h); res.Violations() != 0 {
		t.Fatalf("IDs inside their owners' windows reported: %+v", res)
	}
	c.Add(checkerKey(Batch{Node: "a", NodeID: "a1"}), []int64{compose(t, 16, 0, 0)}) // a2's window
	if res := c.CheckContainment(h); res.NotOwner != 1 {
		t.Fatalf("an ID of a1 inside a2's window: not owner %d, want 1 (%v)", res.NotOwner, res.Examples)
	}
}

func TestParseLayoutRoundTrip(t *testing.T) {
	l := generator.DefaultLayout()
	got, err := ParseLayout(l.String())
	if err != nil || got != l {
		t.Fatalf("ParseLayout(%q) = %+v, %v", l.String(), got, err)
	}
	other, _ := generator.NewLayout(1700000000, 10*time.Millisecond, 34, 2, 1, 8)
	if got, err := ParseLayout(other.String()); err != nil || got != other {
		t.Fatalf("ParseLayout(%q) = %+v, %v", other.String(), got, err)
	}
	if _, err := ParseLayout("28/2/1 unit=1s"); err == nil {
		t.Fatal("short layout accepted")
	}
}

func TestVerifyCleanRun(t *testing.T) {
	view := (&rpctest.View{}).Member("a", 2, 0, 1<<20, 1).Member("b", 5, 0, 1<<20, 2)
	_, a := rpctest.Planted(t, view, "a", 2, 1)
	_, b := rpctest.Planted(t, view, "b", 5, 1)
	target := a + "," + b
	r, err := Verify(context.Background(), target, VerifyOptions{
		LoadOptions: LoadOptions{Duration: 500 * time.Millisecond, Rate: 4000, Counts: []int{50}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !r.OK() || r.Failed != 0 || r.Acknowledged == 0 || r.Attempted != r.Acknowledged {
		t.Fatalf("report %+v", r)
	}
	// About rate x duration; generous bounds for a loaded CI machine.
	if r.Acknowledged > 2000+50 || r.Acknowledged < 500 {
		t.Fatalf("acknowledged %d IDs, want about 2000", r.Acknowledged)
	}
	if r.PerSlot["2"] == 0 || r.PerSlot["5"] == 0 || r.PerSlot["2"]+r.PerSlot["5"] != int(r.Acknowledged) {
		t.Fatalf("per slot %v, acknowledged %d", r.PerSlot, r.Acknowledged)
	}
	js, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]any
	if err := json.Unmarshal(js, &fields); err != nil {
		t.Fatal(err)
	}
	want := []string{"acknowledged", "attempted", "bad_batch_examples", "bad_batches", "containment_violations",
		"duplicates", "duration_ms", "errors", "failed", "largest_gap_ms", "owner_violations", "per_slot", "success_rate"}
	var got []string
	for k := range fields {
		got = append(got, k)
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("JSON fields %v, want %v", got, want)
	}
}

// Two nodes minting from the same slot with the same counter: the IDs
// collide, as they would from a generator started below its floor.
func TestVerifyCatchesTwoOwnersOfOneSlot(t *testing.T) {
	view := (&rpctest.View{}).Member("a", 6, 0, 1<<20, 1).Member("b", 6, 0, 1<<20, 2)
	_, a := rpctest.Planted(t, view, "a", 6, 1)
	_, b := rpctest.Planted(t, view, "b", 6, 1)
	target := a + "," + b
	r, err := Verify(context.Background(), target, VerifyOptions{
		LoadOptions: LoadOptions{Duration: 400 * time.Millisecond, Rate: 5000, Counts: []int{100}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if r.Duplicates == 0 || r.OK() {
		t.Fatalf("duplicates not caught: %+v", r)
	}
}

// A node that ends its batches with another slot's ID: the client refuses
// every such batch, and verify must fail the run on them, not count them as
// failed calls of an otherwise clean run.
func TestVerifyFailsOnBadBatches(t *testing.T) {
	view := (&rpctest.View{}).Member("a", 1, 0, 1<<20, 1).Member("b", 2, 0, 1<<20, 2)
	_, a := rpctest.Planted(t, view, "a", 1, 1)
	fb, b := rpctest.Planted(t, view, "b", 2, 1)
	fb.SetTamper(rpctest.OtherSlotLast)
	r, err := Verify(context.Background(), a+","+b, VerifyOptions{
		LoadOptions: LoadOptions{Duration: 500 * time.Millisecond, Rate: 4000, Counts: []int{50}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if r.OK() || r.BadBatches == 0 || r.Duplicates != 0 || r.ContainmentViolations != 0 {
		t.Fatalf("run with node b serving another slot's IDs: ok=%v bad_batches=%d: %+v", r.OK(), r.BadBatches, r)
	}
	if len(r.BadBatchExamples) == 0 || !strings.Contains(r.BadBatchExamples[0], `node "b" slot 2`) {
		t.Fatalf("evidence does not name node b: %q", r.BadBatchExamples)
	}
}

// An old owner stamping into the next owner's window, with no ID drawn
// twice: every ID lies in some window of its slot, but a's lie in b's.
func TestVerifyChecksContainmentPerOwner(t *testing.T) {
	view := (&rpctest.View{}).Member("a", 3, 0, 100, 1).Member("b", 3, 100, 1<<20, 2)
	view.Tenures[0].ReleasedIndex = 2
	_, a := rpctest.Planted(t, view, "a", 3, 301) // a's window ended at 100
	_, b := rpctest.Planted(t, view, "b", 3, 102)
	r, err := Verify(context.Background(), a+","+b, VerifyOptions{
		LoadOptions: LoadOptions{Duration: 500 * time.Millisecond, Rate: 4000, Counts: []int{50}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if r.Duplicates != 0 || r.Containment.Outside != 0 {
		t.Fatalf("the plant drew duplicates or IDs outside slot 3's windows: %+v", r)
	}
	if r.OK() || r.OwnerViolations == 0 || r.ContainmentViolations != r.OwnerViolations {
		t.Fatalf("run with node a stamping into node b's window: ok=%v owner_violations=%d: %v", r.OK(), r.OwnerViolations, r.Containment.Examples)
	}
	for _, ex := range r.Containment.Examples {
		if !strings.Contains(ex, `from node "a"`) {
			t.Fatalf("an ID of node b reported: %s", ex)
		}
	}
}

// Two nodes whose Raft logs disagree on the floor of one tenure have
// diverged; the run fails and says so, rather than keeping one view.
func TestVerifyFailsOnDisagreeingTenureViews(t *testing.T) {
	view := (&rpctest.View{}).Member("a", 1, 0, 1<<20, 1).Member("b", 2, 0, 1<<20, 2)
	other := &rpctest.View{Members: view.Members, Tenures: slices.Clone(view.Tenures)}
	other.Tenures[1].Floor = 5
	_, a := rpctest.Planted(t, view, "a", 1, 10)
	_, b := rpctest.Planted(t, other, "b", 2, 10)
	r, err := Verify(context.Background(), a+","+b, VerifyOptions{
		LoadOptions: LoadOptions{Duration: 300 * time.Millisecond, Rate: 2000, Counts: []int{50}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if r.OK() || len(r.Containment.Disagreements) != 1 {
		t.Fatalf("run with two views disagreeing on the floor of b's tenure: ok=%v %v", r.OK(), r.Containment.Disagreements)
	}
}

// Count 0 asks for the node's default batch, served from its prefetch
// buffer (40 IDs here): verify draws that path and paces by what the
// batches really hold, not by its first guess of 1000.
func TestVerifyDrawsBufferedBatches(t *testing.T) {
	view := (&rpctest.View{}).Member("a", 4, 0, 1<<20, 1)
	_, a := rpctest.Planted(t, view, "a", 4, 1)
	r, err := Verify(context.Background(), a, VerifyOptions{
		LoadOptions: LoadOptions{Duration: 500 * time.Millisecond, Rate: 2000, Counts: []int{0}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !r.OK() || r.Failed != 0 || r.Acknowledged%40 != 0 || r.Acknowledged < 400 || r.Acknowledged > 1100 {
		t.Fatalf("ok=%v acknowledged %d (want about 1000, whole batches of 40), failed %d: %v",
			r.OK(), r.Acknowledged, r.Failed, r.Errors)
	}
}

func TestRunLoadCountsFailedCallsAndGap(t *testing.T) {
	n := startNode(t, 1, rpc.ServerConfig{})
	n.fake.SetFail(errors.New("boom"))
	c := dial(t, n.addr)
	checker := NewChecker()
	st, err := RunLoad(context.Background(), c, checker, LoadOptions{
		Duration: 300 * time.Millisecond, Rate: 1000, Counts: []int{10}, CallTimeout: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if st.Calls == 0 || st.FailedCalls != st.Calls || st.AcknowledgedIDs != 0 || checker.Len() != 0 {
		t.Fatalf("stats %+v", st)
	}
	if st.FailedIDs != st.AttemptedIDs || st.SuccessRate() != 0 {
		t.Fatalf("failed IDs %d of %d", st.FailedIDs, st.AttemptedIDs)
	}
	if st.LargestGap < 250*time.Millisecond || len(st.Errors) == 0 || len(st.Errors) > 10 {
		t.Fatalf("gap %s, errors %v", st.LargestGap, st.Errors)
	}
}

func TestTargetAddrs(t *testing.T) {
	got, err := TargetAddrs(context.Background(), "a:1, b:2,a:1")
	if err != nil || !slices.Equal(got, []string{"a:1", "b:2"}) {
		t.Fatalf("list: %v %v", got, err)
	}
	got, err = TargetAddrs(context.Background(), "dns:///localhost:50051")
	if err != nil || len(got) == 0 || !strings.HasSuffix(got[0], ":50051") {
		t.Fatalf("dns: %v %v", got, err)
	}
	if _, err := TargetAddrs(context.Background(), "unix:///tmp/x"); err == nil {
		t.Fatal("unix target listed")
	}
}
