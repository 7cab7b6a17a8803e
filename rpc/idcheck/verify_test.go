package idcheck

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idgen/idgen/rpc"
	"github.com/idgen/idgen/rpc/idclient"
	"github.com/idgen/idgen/rpc/rpctest"
)

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
	f := rpctest.NewNode(1)
	f.SetFail(errors.New("boom"))
	_, addr := rpctest.Serve(t, rpc.ServerConfig{Backend: f, NodeName: "node-1"})
	c, err := idclient.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
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
