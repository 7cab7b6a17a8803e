package idclient

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idgen/idgen/cluster"
	"github.com/idgen/idgen/generator"
	"github.com/idgen/idgen/rpc"
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
	c := NewChecker(0)
	var batch []int64
	for seq := range int64(100) {
		batch = append(batch, compose(t, 50, 3, seq))
	}
	c.Add(batch)
	if n, _ := c.Duplicates(); n != 0 {
		t.Fatalf("clean batch: %d duplicates", n)
	}
	planted := batch[42]
	c.Add([]int64{compose(t, 51, 3, 0), planted})
	n, examples := c.Duplicates()
	if n != 1 || !slices.Equal(examples, []int64{planted}) {
		t.Fatalf("duplicates = %d %v, want 1 [%d]", n, examples, planted)
	}
	c.Add([]int64{planted}) // a third copy counts again
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
	c := NewChecker(0)
	inside := []int64{
		compose(t, 11, 0, 0), compose(t, 20, 0, 7), // a's window, both ends
		compose(t, 21, 0, 0), compose(t, 40, 0, 1), // b's window
		compose(t, 1, 1, 0), compose(t, 5, 1, 2047),
	}
	c.Add(inside)
	res := c.CheckContainment(generator.DefaultLayout(), tenures)
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
	c.Add(planted)
	res = c.CheckContainment(generator.DefaultLayout(), tenures)
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
	if v := NewChecker(0).CheckContainment(generator.DefaultLayout(), bad).Violations(); v != 1 {
		t.Fatalf("violations = %d, want 1", v)
	}
}

func TestMergeTenuresKeepsLargestGranted(t *testing.T) {
	leader := []Tenure{{Slot: 1, NodeID: "a", Floor: 5, Granted: 90, ClaimedIndex: 7}}
	lagging := []Tenure{
		{Slot: 1, NodeID: "a", Floor: 5, Granted: 60, ClaimedIndex: 7},
		{Slot: 0, NodeID: "b", Floor: 0, Granted: 10, ClaimedIndex: 3, ReleasedIndex: 12},
	}
	got := MergeTenures(lagging, leader)
	want := []Tenure{
		{Slot: 0, NodeID: "b", Floor: 0, Granted: 10, ClaimedIndex: 3, ReleasedIndex: 12},
		{Slot: 1, NodeID: "a", Floor: 5, Granted: 90, ClaimedIndex: 7},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("merged = %+v, want %+v", got, want)
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

// historyNode is a fakeNode whose History reports one tenure that covers
// everything it mints.
type historyNode struct {
	*fakeNode
}

func (h historyNode) History(context.Context) ([]cluster.Tenure, error) {
	return []cluster.Tenure{{Slot: h.slot, NodeID: "fake", Floor: 0, Granted: 1 << 20, ClaimedIndex: uint64(h.slot) + 1}}, nil
}

func startHistoryNode(t *testing.T, slot int) string {
	t.Helper()
	f := &fakeNode{slot: slot, layout: generator.DefaultLayout(), ready: true}
	srv, err := rpc.NewServer(rpc.ServerConfig{
		Backend:           historyNode{f},
		Logger:            slog.New(slog.NewTextHandler(io.Discard, nil)),
		Registerer:        prometheus.NewRegistry(),
		ReadyPollInterval: 10 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	t.Cleanup(func() { srv.Shutdown(time.Second) })
	return lis.Addr().String()
}

func TestVerifyCleanRun(t *testing.T) {
	target := startHistoryNode(t, 2) + "," + startHistoryNode(t, 5)
	r, err := Verify(context.Background(), target, VerifyOptions{
		LoadOptions: LoadOptions{Duration: 500 * time.Millisecond, Rate: 4000, Batch: 50},
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
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]any
	if err := json.Unmarshal(b, &fields); err != nil {
		t.Fatal(err)
	}
	want := []string{"acknowledged", "attempted", "containment_violations", "duplicates", "duration_ms",
		"errors", "failed", "largest_gap_ms", "per_slot", "success_rate"}
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
	target := startHistoryNode(t, 6) + "," + startHistoryNode(t, 6)
	r, err := Verify(context.Background(), target, VerifyOptions{
		LoadOptions: LoadOptions{Duration: 400 * time.Millisecond, Rate: 5000, Batch: 100},
	})
	if err != nil {
		t.Fatal(err)
	}
	if r.Duplicates == 0 || r.OK() {
		t.Fatalf("duplicates not caught: %+v", r)
	}
}

func TestRunLoadCountsFailedCallsAndGap(t *testing.T) {
	n := startNode(t, 1, rpc.ServerConfig{})
	n.fake.setFail(errors.New("boom"))
	c := dial(t, n.addr)
	checker := NewChecker(0)
	st, err := RunLoad(context.Background(), c, checker, LoadOptions{
		Duration: 300 * time.Millisecond, Rate: 1000, Batch: 10, CallTimeout: 200 * time.Millisecond,
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
