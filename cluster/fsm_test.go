package cluster

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/idgen/idgen/cluster/core"
	"github.com/idgen/idgen/generator"
)

// applyAll feeds commands to a fresh FSM as Raft would, returning the results.
func applyAll(t *testing.T, f *fsm, cmds ...core.Command) []interface{} {
	t.Helper()
	var out []interface{}
	for _, c := range cmds {
		data, err := core.EncodeCommand(withTenure(f, c))
		if err != nil {
			t.Fatal(err)
		}
		idx := f.state.Index + 1
		out = append(out, f.Apply(&raft.Log{Index: idx, Type: raft.LogCommand, Data: data}))
	}
	return out
}

// tenureCurrent in a test command stands for the node's current tenure,
// filled in by withTenure just before the command is applied.
const tenureCurrent = ^uint64(0)

func withTenure(f *fsm, c core.Command) core.Command {
	if c.Tenure == tenureCurrent {
		c.Tenure = 0
		if i := f.state.SlotOf(c.NodeID); i >= 0 {
			c.Tenure = f.state.Slots[i].Tenure
		}
	}
	return c
}

func initCmd() core.Command {
	l := generator.DefaultLayout()
	return core.Command{Type: core.CmdInit, Layout: &l, ClusterID: "test-cluster"}
}

func releaseCmd(id string) core.Command {
	return core.Command{Type: core.CmdRelease, NodeID: id, Tenure: tenureCurrent}
}

func claimCmd(id string, dc int) core.Command {
	l := generator.DefaultLayout()
	return core.Command{Type: core.CmdClaim, Node: &NodeInfo{ID: id, Name: id, Datacenter: dc}, Layout: &l}
}

func reserveCmd(id string, slot int, upTo int64) core.Command {
	return core.Command{Type: core.CmdReserve, NodeID: id, Slot: slot, UpTo: upTo, Tenure: tenureCurrent}
}

func mustResult(t *testing.T, v interface{}) core.Result {
	t.Helper()
	r, ok := v.(core.Result)
	if !ok {
		t.Fatalf("want result, got %T: %v", v, v)
	}
	return r
}

func mustErr(t *testing.T, v interface{}, target error) {
	t.Helper()
	err, ok := v.(error)
	if !ok || !errors.Is(err, target) {
		t.Fatalf("want error %v, got %T: %v", target, v, v)
	}
}

func TestReclaimKeepsSlotAndOpensNewTenure(t *testing.T) {
	f := newFSM()
	res := applyAll(t, f, initCmd(), claimCmd("a", -1), reserveCmd("a", 0, 50), claimCmd("a", -1))
	first, again := mustResult(t, res[1]), mustResult(t, res[3])
	if first.Slot != again.Slot {
		t.Fatalf("second claim moved the owner from slot %d to %d", first.Slot, again.Slot)
	}
	if again.Floor != 50 {
		t.Fatalf("re-claim floor = %d, want the high-water 50 so a restart starts above its old IDs", again.Floor)
	}
	if first.Tenure != 2 || again.Tenure != 4 {
		t.Fatalf("tenures %d, %d; want the claims' log indexes 2 and 4", first.Tenure, again.Tenure)
	}
	if n := len(f.state.Tenures); n != 2 || f.state.Tenures[0].ReleasedIndex != 4 {
		t.Fatalf("re-claim should close the first tenure and open a second: %+v", f.state.Tenures)
	}
	// The first claim's generator is fenced: its reserve grants nothing.
	old := reserveCmd("a", 0, 90)
	old.Tenure = first.Tenure
	mustErr(t, applyAll(t, f, old)[0], ErrNotOwner)
	if hw := f.state.Slots[0].HighWater; hw != 50 {
		t.Fatalf("a fenced tenure moved the high-water to %d", hw)
	}
}

// TestGrantNeverCrossesTenures is the sequence that produced duplicates when
// the fence was the node ID: X's first claim is delayed in flight while X
// claims again (generator gB), X is removed, Y holds the slot and is removed,
// then X's delayed claim commits. gB must not be granted anything more.
func TestGrantNeverCrossesTenures(t *testing.T) {
	f := newFSM()
	applyAll(t, f, initCmd())
	gB := mustResult(t, applyAll(t, f, claimCmd("X", -1))[0])
	mustResult(t, applyAll(t, f, reserveCmd("X", gB.Slot, 100))[0])
	applyAll(t, f, core.Command{Type: core.CmdRemove, NodeID: "X"})
	y := mustResult(t, applyAll(t, f, claimCmd("Y", -1))[0])
	mustResult(t, applyAll(t, f, reserveCmd("Y", y.Slot, 200))[0])
	applyAll(t, f, core.Command{Type: core.CmdRemove, NodeID: "Y"})
	late := mustResult(t, applyAll(t, f, claimCmd("X", -1))[0]) // the delayed claim
	if late.Slot != gB.Slot || late.Floor != 200 {
		t.Fatalf("late claim got slot %d floor %d, want slot %d floor 200", late.Slot, late.Floor, gB.Slot)
	}
	stale := reserveCmd("X", gB.Slot, 300)
	stale.Tenure = gB.Tenure
	mustErr(t, applyAll(t, f, stale)[0], ErrNotOwner)
	if hw := f.state.Slots[gB.Slot].HighWater; hw != 200 {
		t.Fatalf("gB's reserve moved the high-water to %d", hw)
	}
	// The tenure that did commit (and that no generator holds) may still be reserved.
	mustResult(t, applyAll(t, f, reserveCmd("X", gB.Slot, 300))[0])
}

// TestMalformedCommandsAreRefused: every replica must refuse these with an
// error result, never panic (a panic in Apply crash-loops every replica on
// each replay of the log), and never change the state.
func TestMalformedCommandsAreRefused(t *testing.T) {
	f := newFSM()
	applyAll(t, f, initCmd(), claimCmd("a", -1), reserveCmd("a", 0, 10))
	before := f.state.Clone()
	long := claimCmd("long", -1)
	long.Node.Name = strings.Repeat("x", 1<<20)
	longAddr := claimCmd("addr", -1)
	longAddr.Node.GRPCAddr = strings.Repeat("x", 300)
	for name, c := range map[string]core.Command{
		"reserve with empty node on a free slot": {Type: core.CmdReserve, Slot: 3, UpTo: 100, Tenure: 1},
		"reserve without tenure":                 {Type: core.CmdReserve, NodeID: "a", Slot: 0, UpTo: 100},
		"reserve of a slot out of range":         {Type: core.CmdReserve, NodeID: "a", Slot: 99, UpTo: 100, Tenure: 2},
		"reserve of a negative slot":             {Type: core.CmdReserve, NodeID: "a", Slot: -1, UpTo: 100, Tenure: 2},
		"reserve naming another tenure":          {Type: core.CmdReserve, NodeID: "a", Slot: 0, UpTo: 100, Tenure: 1},
		"release with empty node":                {Type: core.CmdRelease, Tenure: 2},
		"release without tenure":                 {Type: core.CmdRelease, NodeID: "a"},
		"remove with empty node":                 {Type: core.CmdRemove},
		"claim without node":                     {Type: core.CmdClaim},
		"claim with empty node ID":               claimCmd("", -1),
		"claim with a 1 MiB name":                long,
		"claim with a 300-byte address":          longAddr,
		"second init":                            initCmd(),
		"init without cluster ID":                {Type: core.CmdInit, Layout: initCmd().Layout},
	} {
		res := applyAll(t, f, c)[0]
		if _, ok := res.(error); !ok {
			t.Errorf("%s: accepted (%v)", name, res)
		}
		after := f.state.Clone()
		after.Index = before.Index
		if !reflect.DeepEqual(before, after) {
			t.Errorf("%s: changed the state", name)
		}
	}
}

// TestRefusedClaimStoresNothing: a claim refused because every slot is taken
// must not leave its node behind (twelve such claims once grew raft.db to
// 16 MB and broke Members).
func TestRefusedClaimStoresNothing(t *testing.T) {
	f := newFSM()
	applyAll(t, f, initCmd())
	for i := 0; i < 8; i++ {
		mustResult(t, applyAll(t, f, claimCmd(string(rune('a'+i)), -1))[0])
	}
	mustErr(t, applyAll(t, f, claimCmd("ninth", -1))[0], ErrClusterFull)
	if _, ok := f.state.Nodes["ninth"]; ok || len(f.state.Nodes) != 8 || len(f.state.Tenures) != 8 {
		t.Fatalf("a refused claim was stored: %d nodes, %d tenures", len(f.state.Nodes), len(f.state.Tenures))
	}
}

// TestInitStartsEverySlotAtStart: a new cluster's slots begin at the
// founding voters' time plus max-ahead, so no earlier life overlaps.
func TestInitStartsEverySlotAtStart(t *testing.T) {
	f := newFSM()
	c := initCmd()
	c.Start, c.Created = 12345, 99
	r := applyAll(t, f, c, claimCmd("a", -1))
	if fl := mustResult(t, r[1]).Floor; fl != 12345 {
		t.Fatalf("first claim floor %d, want 12345", fl)
	}
	for i, sl := range f.state.Slots {
		if sl.HighWater != 12345 {
			t.Fatalf("slot %d starts at %d", i, sl.HighWater)
		}
	}
	if f.state.ClusterID != "test-cluster" || f.state.Created != 99 {
		t.Fatalf("cluster identity not recorded: %q %d", f.state.ClusterID, f.state.Created)
	}
}

func TestClaimPrefersDatacenterAndFillsUp(t *testing.T) {
	f := newFSM()
	res := applyAll(t, f, initCmd(), claimCmd("a", 2), claimCmd("b", 2), claimCmd("c", 2))
	got := []int{mustResult(t, res[1]).Slot, mustResult(t, res[2]).Slot, mustResult(t, res[3]).Slot}
	if want := []int{4, 5, 0}; !reflect.DeepEqual(got, want) {
		t.Fatalf("slots = %v, want %v (datacenter 2 first, then lowest free)", got, want)
	}
	for i := 0; i < 5; i++ {
		mustResult(t, applyAll(t, f, claimCmd(string(rune('d'+i)), -1))[0])
	}
	mustErr(t, applyAll(t, f, claimCmd("ninth", -1))[0], ErrClusterFull)
}

func TestClaimBeforeInitAndLayoutMismatch(t *testing.T) {
	f := newFSM()
	if _, ok := applyAll(t, f, claimCmd("a", -1))[0].(error); !ok {
		t.Fatal("claim before init succeeded")
	}
	applyAll(t, f, initCmd())
	other := generator.DefaultLayout()
	other.SequenceBits = 10
	other.TimestampBits = 29
	c := claimCmd("a", -1)
	c.Layout = &other
	mustErr(t, applyAll(t, f, c)[0], ErrLayoutMismatch)
	mustErr(t, applyAll(t, f, core.Command{Type: core.CmdInit, Layout: &other, ClusterID: "x"})[0], ErrLayoutMismatch)
}

func TestReserveFencesNonOwner(t *testing.T) {
	f := newFSM()
	res := applyAll(t, f, initCmd(), claimCmd("a", -1), claimCmd("b", -1), reserveCmd("b", 0, 99))
	if mustResult(t, res[1]).Slot != 0 {
		t.Fatal("a should hold slot 0")
	}
	mustErr(t, res[3], ErrNotOwner)
	mustErr(t, applyAll(t, f, reserveCmd("a", 9, 99))[0], ErrBadCommand) // no slot 9 in 8
	if hw := f.state.Slots[0].HighWater; hw != 0 {
		t.Fatalf("non-owner moved high-water to %d", hw)
	}
}

func TestHighWaterNeverDecreases(t *testing.T) {
	f := newFSM()
	res := applyAll(t, f, initCmd(), claimCmd("a", -1),
		reserveCmd("a", 0, 100), reserveCmd("a", 0, 40),
		releaseCmd("a"),
		claimCmd("b", -1),
		reserveCmd("b", 0, 90),
		core.Command{Type: core.CmdRemove, NodeID: "b"},
		claimCmd("c", -1))
	if g := mustResult(t, res[3]).Granted; g != 100 {
		t.Fatalf("lower reserve returned granted %d, want 100", g)
	}
	if fl := mustResult(t, res[5]).Floor; fl != 100 {
		t.Fatalf("new owner floor %d, want 100 (the old owner's high-water)", fl)
	}
	if g := mustResult(t, res[6]).Granted; g != 100 {
		t.Fatalf("granted %d after lower reserve by the new owner, want 100", g)
	}
	if fl := mustResult(t, res[8]).Floor; fl != 100 {
		t.Fatalf("floor after remove %d, want 100", fl)
	}
	if _, ok := f.state.Nodes["b"]; ok {
		t.Fatal("remove kept the node")
	}
	// Tenures of slot 0 never overlap: each starts at or above the last one's end.
	var last int64 = -1
	for _, tn := range f.state.Tenures {
		if tn.Floor < last {
			t.Fatalf("tenure %+v starts below the previous grant %d", tn, last)
		}
		last = tn.Granted
	}
	if len(f.state.Tenures) != 3 || f.state.Tenures[0].ReleasedIndex == 0 || f.state.Tenures[1].ReleasedIndex == 0 {
		t.Fatalf("tenures not closed: %+v", f.state.Tenures)
	}
}

func TestReleaseUnknownNode(t *testing.T) {
	f := newFSM()
	mustErr(t, applyAll(t, f, initCmd(), core.Command{Type: core.CmdRemove, NodeID: "ghost"})[1], ErrUnknownNode)
}

func TestUnknownCommandStopsTheNode(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("unknown command type was skipped instead of stopping the node")
		}
	}()
	newFSM().Apply(&raft.Log{Index: 1, Type: raft.LogCommand, Data: []byte{99, '{', '}'}})
}

type memSink struct {
	bytes.Buffer
	cancelled bool
}

func (s *memSink) ID() string    { return "mem" }
func (s *memSink) Cancel() error { s.cancelled = true; return nil }
func (s *memSink) Close() error  { return nil }

// persisted is f's snapshot, persisted as Raft's store would keep it.
func persisted(t *testing.T, f *fsm) *memSink {
	t.Helper()
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var sink memSink
	if err := snap.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	return &sink
}

func TestSnapshotRestoreRoundTrip(t *testing.T) {
	f := newFSM()
	applyAll(t, f, initCmd(), claimCmd("a", -1), claimCmd("b", 1), reserveCmd("a", 0, 77), releaseCmd("b"))
	sink := persisted(t, f)
	g := newFSM()
	applyAll(t, g, initCmd(), claimCmd("stale", -1)) // Restore must replace, not merge
	if err := g.Restore(io.NopCloser(sink)); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(f.state, g.state) {
		t.Fatalf("restored state differs:\n got %+v\nwant %+v", g.state, f.state)
	}
}

func TestReplayGivesSameState(t *testing.T) {
	cmds := []core.Command{initCmd(), claimCmd("a", -1), claimCmd("b", 3), reserveCmd("a", 0, 10),
		reserveCmd("b", 6, 12), core.Command{Type: core.CmdRemove, NodeID: "a"}, claimCmd("c", -1), reserveCmd("c", 0, 30)}
	f, g := newFSM(), newFSM()
	r1, r2 := applyAll(t, f, cmds...), applyAll(t, g, cmds...)
	if !reflect.DeepEqual(f.state, g.state) || !reflect.DeepEqual(r1, r2) {
		t.Fatal("replaying the same log gave a different state or results")
	}
}

// TestRestoreRefusesBrokenSnapshots: a snapshot that breaks the state's
// invariants is refused with an error instead of being loaded.
func TestRestoreRefusesBrokenSnapshots(t *testing.T) {
	for name, body := range map[string]string{
		"not JSON":                    `{`,
		"no cluster ID":               `{"layout":{"epoch":1777939200,"unit":1000000000,"timestamp_bits":28,"datacenter_bits":2,"machine_bits":1,"sequence_bits":11},"slots":[{},{},{},{},{},{},{},{}]}`,
		"owner without tenure record": `{"cluster_id":"c","layout":{"epoch":1777939200,"unit":1000000000,"timestamp_bits":28,"datacenter_bits":2,"machine_bits":1,"sequence_bits":11},"slots":[{"owner":"a","tenure_id":2},{},{},{},{},{},{},{}]}`,
		"slots without a layout":      `{"slots":[{}]}`,
		"wrong number of slots":       `{"cluster_id":"c","layout":{"epoch":1777939200,"unit":1000000000,"timestamp_bits":28,"datacenter_bits":2,"machine_bits":1,"sequence_bits":11},"slots":[{}]}`,
	} {
		f := newFSM()
		if err := f.Restore(io.NopCloser(strings.NewReader(body))); err == nil {
			t.Errorf("%s: restored", name)
		}
	}
}

// unchanged fails unless f's state equals before, but for the Index that
// Apply sets for every entry.
func unchanged(t *testing.T, name string, f *fsm, before *core.State) {
	t.Helper()
	after := f.state.Clone()
	after.Index = before.Index
	if !reflect.DeepEqual(before, after) {
		t.Errorf("%s: changed the state:\n got %+v\nwant %+v", name, after, before)
	}
}

// TestCommandsOutsideTheLayoutAreRefused: every field Apply uses as an index
// or a bound is checked against the cluster's layout. A Claim with datacenter
// 2^62 once passed validate, was committed, and panicked freeSlot on every
// replica on every replay of the log.
func TestCommandsOutsideTheLayoutAreRefused(t *testing.T) {
	f := newFSM()
	applyAll(t, f, initCmd(), claimCmd("a", -1), reserveCmd("a", 0, 10))
	max := f.state.Layout.MaxTimestamp()
	cases := []struct {
		name string
		c    core.Command
		want string
	}{
		{"claim with datacenter 2^62", claimCmd("big", 1<<62), "datacenter 4611686018427387904"},
		{"claim with datacenter MaxInt", claimCmd("big", math.MaxInt), "datacenter"},
		{"claim with datacenter 4 of 4", claimCmd("four", 4), "datacenter 4 not in -1..3"},
		{"claim with datacenter -2", claimCmd("neg", -2), "datacenter -2"},
		{"claim with datacenter MinInt", claimCmd("neg", math.MinInt), "datacenter"},
		{"reserve of slot 99", reserveCmd("a", 99, 20), "slot 99"},
		{"reserve of slot 8 of 8", reserveCmd("a", 8, 20), "slot 8"},
		{"reserve of slot -1", reserveCmd("a", -1, 20), "slot -1"},
		{"reserve of slot MinInt", reserveCmd("a", math.MinInt, 20), "slot"},
		{"reserve past the layout's last timestamp", reserveCmd("a", 0, max+1), "up to"},
		{"reserve up to MaxInt64", reserveCmd("a", 0, math.MaxInt64), "up to"},
		{"reserve up to a negative timestamp", reserveCmd("a", 0, -1), "negative"},
	}
	for _, tc := range cases {
		before := f.state.Clone()
		c := withTenure(f, tc.c)
		if err := before.Admit(c); !errors.Is(err, ErrBadCommand) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: admit = %v, want %v naming %q", tc.name, err, ErrBadCommand, tc.want)
		}
		res := applyAll(t, f, c)[0]
		if err, ok := res.(error); !ok || !errors.Is(err, ErrBadCommand) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Apply = %v, want %v naming %q", tc.name, res, ErrBadCommand, tc.want)
		}
		unchanged(t, tc.name, f, before)
		if err := f.state.Check(); err != nil {
			t.Errorf("%s: state no longer passes check: %v", tc.name, err)
		}
	}
	if _, ok := f.state.Nodes["big"]; ok {
		t.Fatal("the refused claim stored its node")
	}
	// The bounds themselves are accepted.
	mustResult(t, applyAll(t, f, reserveCmd("a", 0, max))[0])
	mustResult(t, applyAll(t, f, claimCmd("b", 3))[0])
}

// TestInitOutsideItsLayoutIsRefused: an Init cannot ask for more slots than
// a replica can allocate, nor start past its layout's last timestamp.
func TestInitOutsideItsLayoutIsRefused(t *testing.T) {
	huge := initCmd()
	huge.Layout.TimestampBits, huge.Layout.DatacenterBits, huge.Layout.MachineBits, huge.Layout.SequenceBits = 1, 30, 31, 1
	late := initCmd()
	late.Start = late.Layout.MaxTimestamp() + 1
	negative := initCmd()
	negative.Start = -1
	for name, c := range map[string]core.Command{"2^61 slots": huge, "start past the layout": late, "negative start": negative} {
		f := newFSM()
		mustErr(t, applyAll(t, f, c)[0], ErrBadCommand)
		unchanged(t, name, f, core.NewState())
	}
}

// TestCorruptEntryOfAKnownTypeIsRefused: every replica holds the same bytes,
// so an entry of a known type that does not decode is refused with an error
// result, deterministically, instead of crash-looping the cluster.
func TestCorruptEntryOfAKnownTypeIsRefused(t *testing.T) {
	f := newFSM()
	applyAll(t, f, initCmd(), claimCmd("a", -1))
	for name, data := range map[string][]byte{
		"not JSON":            {byte(core.CmdClaim), '{'},
		"no body":             {byte(core.CmdReserve)},
		"wrong field type":    append([]byte{byte(core.CmdClaim)}, `{"node":{"id":"x","datacenter":"one"}}`...),
		"datacenter too wide": append([]byte{byte(core.CmdClaim)}, `{"node":{"id":"x","datacenter":1e30}}`...),
		"empty entry":         {},
	} {
		before := f.state.Clone()
		idx := f.state.Index + 1
		res := f.Apply(&raft.Log{Index: idx, Type: raft.LogCommand, Data: data})
		mustErr(t, res, ErrBadCommand)
		if f.state.Index != idx {
			t.Errorf("%s: Index %d, want %d: Apply sets it for every entry", name, f.state.Index, idx)
		}
		unchanged(t, name, f, before)
	}
}

// TestKnownCommandTypes: Apply stops the node on exactly the types this
// version does not know, and known() agrees with String().
func TestKnownCommandTypes(t *testing.T) {
	for b := 0; b < 256; b++ {
		typ := core.CommandType(b)
		if typ.Known() == strings.HasPrefix(typ.String(), "unknown(") {
			t.Errorf("type %d: known() = %v but String() = %q", b, typ.Known(), typ.String())
		}
		f := newFSM()
		applyAll(t, f, initCmd())
		panicked := func() (p bool) {
			defer func() { p = recover() != nil }()
			f.Apply(&raft.Log{Index: 2, Type: raft.LogCommand, Data: []byte{byte(b), '{', '}'}})
			return false
		}()
		if panicked == typ.Known() {
			t.Errorf("type %s: Apply panicked = %v", typ, panicked)
		}
	}
}

// TestMissingTenureRecordIsRefused: a state without the record of an owned
// slot's tenure (which check refuses to restore) still never panics Apply:
// every command that would touch the record is refused and changes nothing.
func TestMissingTenureRecordIsRefused(t *testing.T) {
	f := newFSM()
	applyAll(t, f, initCmd(), claimCmd("a", -1), claimCmd("b", -1))
	f.state.Tenures = f.state.Tenures[1:] // a's record is gone
	for name, c := range map[string]core.Command{
		"re-claim": claimCmd("a", -1),
		"reserve":  reserveCmd("a", 0, 50),
		"release":  releaseCmd("a"),
		"remove":   {Type: core.CmdRemove, NodeID: "a"},
	} {
		before := f.state.Clone()
		mustErr(t, applyAll(t, f, c)[0], core.ErrStateCorrupt)
		unchanged(t, name, f, before)
	}
	mustResult(t, applyAll(t, f, reserveCmd("b", 1, 50))[0])
}

// TestFreeSlotTakesAnyDatacenter: freeSlot never indexes outside the slots,
// whatever datacenter it is asked for.
func TestFreeSlotTakesAnyDatacenter(t *testing.T) {
	f := newFSM()
	applyAll(t, f, initCmd(), claimCmd("a", -1))
	for _, dc := range []int{math.MinInt, -2, -1, 0, 3, 4, 1 << 30, 1 << 62, math.MaxInt} {
		if got := f.state.FreeSlot(dc); got < 1 || got >= len(f.state.Slots) {
			t.Errorf("freeSlot(%d) = %d", dc, got)
		}
	}
}

// TestRestoreRefusesStatesApplyCannotMake: each snapshot here breaks a bound
// Apply or a reader indexes by (or an invariant Apply keeps); each must be
// refused rather than loaded.
func TestRestoreRefusesStatesApplyCannotMake(t *testing.T) {
	valid := func() *core.State {
		f := newFSM()
		applyAll(t, f, initCmd(), claimCmd("a", -1), claimCmd("b", 1), reserveCmd("a", 0, 77), releaseCmd("b"), claimCmd("c", 2))
		return f.state.Clone()
	}
	restore := func(s *core.State) error {
		body, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		return newFSM().Restore(io.NopCloser(bytes.NewReader(body)))
	}
	if err := restore(valid()); err != nil {
		t.Fatalf("a valid state was refused: %v", err)
	}
	for name, breakIt := range map[string]func(s *core.State){
		"tenure with empty node ID":      func(s *core.State) { s.Tenures[0].NodeID = "" },
		"tenure with a 65-byte node ID":  func(s *core.State) { s.Tenures[1].NodeID = strings.Repeat("x", 65) },
		"tenure of slot 8 of 8":          func(s *core.State) { s.Tenures[1].Slot = 8 },
		"tenure of slot -1":              func(s *core.State) { s.Tenures[1].Slot = -1 },
		"tenure with a negative floor":   func(s *core.State) { s.Tenures[1].Floor, s.Tenures[1].Granted = -5, -5 },
		"tenure granted past the layout": func(s *core.State) { s.Tenures[1].Granted = s.Layout.MaxTimestamp() + 1 },
		"two tenures of one claim":       func(s *core.State) { s.Tenures[1].ClaimedIndex = s.Tenures[0].ClaimedIndex },
		"tenure released before claimed": func(s *core.State) { s.Tenures[1].ReleasedIndex = 1 },
		"tenure claimed after the index": func(s *core.State) { s.Tenures[1].ClaimedIndex = s.Index + 1 },
		"negative highWater":             func(s *core.State) { s.Slots[5].HighWater = -1 },
		"highWater past the layout":      func(s *core.State) { s.Slots[5].HighWater = s.Layout.MaxTimestamp() + 1 },
		"one slot too many":              func(s *core.State) { s.Slots = append(s.Slots, core.SlotState{}) },
		"one slot too few":               func(s *core.State) { s.Slots = s.Slots[:7] },
		"owner that is not a node":       func(s *core.State) { delete(s.Nodes, "a") },
		"owner of two slots":             func(s *core.State) { s.Slots[5] = s.Slots[0] },
		"node under another ID":          func(s *core.State) { s.Nodes["z"] = s.Nodes["a"] },
		"node with datacenter 2^62":      func(s *core.State) { n := s.Nodes["b"]; n.Datacenter = 1 << 62; s.Nodes["b"] = n },
		"node with datacenter -2":        func(s *core.State) { n := s.Nodes["b"]; n.Datacenter = -2; s.Nodes["b"] = n },
		"node with a 300-byte address":   func(s *core.State) { n := s.Nodes["b"]; n.RaftAddr = strings.Repeat("x", 300); s.Nodes["b"] = n },
		"cluster ID of 65 bytes":         func(s *core.State) { s.ClusterID = strings.Repeat("c", 65) },
		"layout of 2^20 slots":           func(s *core.State) { s.Layout.DatacenterBits = 19 },
		"invalid layout":                 func(s *core.State) { s.Layout.Unit = 0 },
		"nodes without a layout":         func(s *core.State) { s.Layout, s.Slots, s.Tenures, s.ClusterID = nil, nil, nil, "" },
		"owned slot without tenure":      func(s *core.State) { s.Slots[0].Tenure = 0 },
		"owned slot with a closed tenure": func(s *core.State) {
			s.Tenures[0].ReleasedIndex = s.Index
		},
	} {
		s := valid()
		breakIt(s)
		if err := restore(s); err == nil {
			t.Errorf("%s: restored", name)
		}
	}
}

// TestAfterApplySeesEachEntryBeforeTheNext: the hook the node stops an
// ended tenure's generator from runs after every applied entry and every
// restored snapshot, outside the lock (it reads the state through view),
// and sees the state that entry made, before the next is applied.
func TestAfterApplySeesEachEntryBeforeTheNext(t *testing.T) {
	f := newFSM()
	var seen []uint64
	var owners []string
	f.afterApply = func() {
		f.view(func(s *core.State) {
			seen = append(seen, s.Index)
			owner := "-"
			if len(s.Slots) > 0 {
				owner = s.Slots[0].Owner
			}
			owners = append(owners, owner)
		})
	}
	applyAll(t, f, initCmd(), claimCmd("a", -1), releaseCmd("a"))
	if !reflect.DeepEqual(seen, []uint64{1, 2, 3}) || !reflect.DeepEqual(owners, []string{"", "a", ""}) {
		t.Fatalf("after each apply the hook saw indexes %v and slot 0 owners %v, want [1 2 3] and [\"\" a \"\"]", seen, owners)
	}
	sink := persisted(t, f)
	g := newFSM()
	called := 0
	g.afterApply = func() { g.view(func(s *core.State) { called += int(s.Index) }) }
	if err := g.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	if called != 3 {
		t.Fatalf("after a restore the hook saw index sum %d, want 3 (called once, on the restored state)", called)
	}
}
