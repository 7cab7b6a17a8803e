package cluster

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/idgen/idgen/generator"
)

// applyAll feeds commands to a fresh FSM as Raft would, returning the results.
func applyAll(t *testing.T, f *fsm, cmds ...command) []interface{} {
	t.Helper()
	var out []interface{}
	for _, c := range cmds {
		data, err := encodeCommand(c)
		if err != nil {
			t.Fatal(err)
		}
		idx := f.state.Index + 1
		out = append(out, f.Apply(&raft.Log{Index: idx, Type: raft.LogCommand, Data: data}))
	}
	return out
}

func initCmd() command {
	l := generator.DefaultLayout()
	return command{Type: cmdInit, Layout: &l}
}

func claimCmd(id string, dc int) command {
	l := generator.DefaultLayout()
	return command{Type: cmdClaim, Node: &NodeInfo{ID: id, Name: id, Datacenter: dc}, Layout: &l}
}

func reserveCmd(id string, slot int, upTo int64) command {
	return command{Type: cmdReserve, NodeID: id, Slot: slot, UpTo: upTo}
}

func mustResult(t *testing.T, v interface{}) result {
	t.Helper()
	r, ok := v.(result)
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

func TestClaimIsIdempotentForOwner(t *testing.T) {
	f := newFSM()
	res := applyAll(t, f, initCmd(), claimCmd("a", -1), reserveCmd("a", 0, 50), claimCmd("a", -1))
	first, again := mustResult(t, res[1]), mustResult(t, res[3])
	if first.Slot != again.Slot {
		t.Fatalf("second claim moved the owner from slot %d to %d", first.Slot, again.Slot)
	}
	if again.Floor != 50 {
		t.Fatalf("re-claim floor = %d, want the high-water 50 so a restart starts above its old IDs", again.Floor)
	}
	if n := len(f.state.Tenures); n != 1 {
		t.Fatalf("idempotent claim opened %d tenures, want 1", n)
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
	mustErr(t, applyAll(t, f, command{Type: cmdInit, Layout: &other})[0], ErrLayoutMismatch)
}

func TestReserveFencesNonOwner(t *testing.T) {
	f := newFSM()
	res := applyAll(t, f, initCmd(), claimCmd("a", -1), claimCmd("b", -1), reserveCmd("b", 0, 99))
	if mustResult(t, res[1]).Slot != 0 {
		t.Fatal("a should hold slot 0")
	}
	mustErr(t, res[3], ErrNotOwner)
	mustErr(t, applyAll(t, f, reserveCmd("a", 9, 99))[0], ErrNotOwner)
	if hw := f.state.Slots[0].HighWater; hw != 0 {
		t.Fatalf("non-owner moved high-water to %d", hw)
	}
}

func TestHighWaterNeverDecreases(t *testing.T) {
	f := newFSM()
	res := applyAll(t, f, initCmd(), claimCmd("a", -1),
		reserveCmd("a", 0, 100), reserveCmd("a", 0, 40),
		command{Type: cmdRelease, NodeID: "a"},
		claimCmd("b", -1),
		reserveCmd("b", 0, 90),
		command{Type: cmdRemove, NodeID: "b"},
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
	mustErr(t, applyAll(t, f, initCmd(), command{Type: cmdRemove, NodeID: "ghost"})[1], ErrUnknownNode)
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

func TestSnapshotRestoreRoundTrip(t *testing.T) {
	f := newFSM()
	applyAll(t, f, initCmd(), claimCmd("a", -1), claimCmd("b", 1), reserveCmd("a", 0, 77), command{Type: cmdRelease, NodeID: "b"})
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var sink memSink
	if err := snap.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	g := newFSM()
	applyAll(t, g, initCmd(), claimCmd("stale", -1)) // Restore must replace, not merge
	if err := g.Restore(io.NopCloser(&sink)); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(f.state, g.state) {
		t.Fatalf("restored state differs:\n got %+v\nwant %+v", g.state, f.state)
	}
}

func TestReplayGivesSameState(t *testing.T) {
	cmds := []command{initCmd(), claimCmd("a", -1), claimCmd("b", 3), reserveCmd("a", 0, 10),
		reserveCmd("b", 6, 12), command{Type: cmdRemove, NodeID: "a"}, claimCmd("c", -1), reserveCmd("c", 0, 30)}
	f, g := newFSM(), newFSM()
	r1, r2 := applyAll(t, f, cmds...), applyAll(t, g, cmds...)
	if !reflect.DeepEqual(f.state, g.state) || !reflect.DeepEqual(r1, r2) {
		t.Fatal("replaying the same log gave a different state or results")
	}
}
