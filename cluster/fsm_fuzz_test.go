package cluster

import (
	"bytes"
	"fmt"
	"io"
	"reflect"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/idgen/idgen/cluster/core"
)

// Apply and Restore must never panic on their input: every replica applies
// the same log, so one entry (or snapshot) that panics one replica panics all
// of them, on every replay, for good. The only panic allowed is the
// deliberate one on an entry of an unknown command type ("upgrade this node").
//
//	go test -run '^$' -fuzz '^FuzzApply$' -fuzztime 20s ./cluster
//	go test -run '^$' -fuzz '^FuzzRestore$' -fuzztime 20s ./cluster

// fuzzEntrySep splits FuzzApply's input into several log entries, so the
// fuzzer can also build sequences (a claim, then a reserve of its tenure).
// No JSON text contains a raw NUL byte, so no command is lost by it.
const fuzzEntrySep = 0

// fuzzCluster is the state FuzzApply starts from: an initialized cluster with
// held, reserved, released and free slots.
func fuzzCluster(tb testing.TB) *fsm {
	f := newFSM()
	for _, c := range []core.Command{initCmd(), claimCmd("a", -1), claimCmd("b", 1), claimCmd("c", 3),
		reserveCmd("a", 0, 40), reserveCmd("b", 2, 50), releaseCmd("c"), claimCmd("d", 0)} {
		if r, _ := applyEntry(f, mustEncode(tb, withTenure(f, c))); !isResult(r) {
			tb.Fatalf("building the fuzz state: %s: %v", c.Type, r)
		}
	}
	return f
}

func isResult(v interface{}) bool { _, ok := v.(core.Result); return ok }

func mustEncode(tb testing.TB, c core.Command) []byte {
	tb.Helper()
	data, err := core.EncodeCommand(c)
	if err != nil {
		tb.Fatal(err)
	}
	return data
}

// applyEntry applies one entry and reports whether Apply panicked.
func applyEntry(f *fsm, data []byte) (res interface{}, panicked interface{}) {
	defer func() { panicked = recover() }()
	return f.Apply(&raft.Log{Index: f.state.Index + 1, Type: raft.LogCommand, Data: data}), nil
}

func FuzzApply(f *testing.F) {
	base := fuzzCluster(f)
	layout := *base.state.Layout
	// Valid commands of every type, against the base state's tenures.
	for _, c := range []core.Command{
		initCmd(),
		claimCmd("e", -1),
		claimCmd("a", -1),
		claimCmd("f", 2),
		{Type: core.CmdClaim, Node: &NodeInfo{ID: "g", Datacenter: 1}, Layout: &layout, ClusterID: "test-cluster"},
		{Type: core.CmdReserve, NodeID: "a", Slot: 0, Tenure: 2, UpTo: 90},
		{Type: core.CmdReserve, NodeID: "b", Slot: 2, Tenure: 3, UpTo: layout.MaxTimestamp()},
		{Type: core.CmdRelease, NodeID: "a", Tenure: 2},
		{Type: core.CmdRemove, NodeID: "b"},
		{Type: core.CmdRemove, NodeID: "c"},
		{Type: core.CmdFence, Slot: 0, UpTo: 500, Foreign: "other-cluster", ClusterID: "test-cluster"},
		{Type: core.CmdFence, Slot: 7, UpTo: 5, Foreign: "other-cluster"},
	} {
		f.Add(mustEncode(f, c))
	}
	// The crash that motivated all this, and its neighbours.
	f.Add(mustEncode(f, claimCmd("big", 1<<62)))
	f.Add(append([]byte{byte(core.CmdClaim)}, `{"node":{"id":"x","datacenter":4611686018427387904}}`...))
	f.Add(mustEncode(f, claimCmd("four", 4)))
	f.Add(mustEncode(f, core.Command{Type: core.CmdReserve, NodeID: "a", Slot: 99, Tenure: 2, UpTo: 90}))
	f.Add(mustEncode(f, core.Command{Type: core.CmdReserve, NodeID: "a", Slot: -1, Tenure: 2, UpTo: 90}))
	f.Add(mustEncode(f, core.Command{Type: core.CmdReserve, NodeID: "a", Slot: 0, Tenure: 2, UpTo: 1 << 62}))
	f.Add(mustEncode(f, core.Command{Type: core.CmdFence, Slot: 1 << 40, UpTo: 5, Foreign: "x"}))
	f.Add(mustEncode(f, core.Command{Type: core.CmdReserve, NodeID: "a", Slot: 0, Tenure: 2, UpTo: 90, ClusterID: "another"}))
	// A sequence: a claim, then a reserve of the tenure it opens.
	claim := mustEncode(f, claimCmd("h", -1))
	r, _ := applyEntry(base, claim)
	if !isResult(r) {
		f.Fatalf("seed claim: %v", r)
	}
	reserve := mustEncode(f, core.Command{Type: core.CmdReserve, NodeID: "h", Slot: r.(core.Result).Slot, Tenure: r.(core.Result).Tenure, UpTo: 70})
	if r, _ := applyEntry(base, reserve); !isResult(r) {
		f.Fatalf("seed reserve: %v", r)
	}
	f.Add(append(append(claim, fuzzEntrySep), reserve...))
	// Corrupt and unknown entries.
	f.Add([]byte{})
	f.Add([]byte{byte(core.CmdClaim), '{'})
	f.Add([]byte{byte(core.CmdReserve)})
	f.Add([]byte{99, '{', '}'})
	f.Add([]byte{0xff})

	f.Fuzz(func(t *testing.T, data []byte) {
		entries := bytes.Split(data, []byte{fuzzEntrySep})
		if len(entries) > 16 {
			entries = entries[:16]
		}
		// The initialized cluster, and a node that has applied nothing yet.
		for _, m := range []*fsm{fuzzCluster(t), newFSM()} {
			twin := newFSM()
			twin.state = m.state.Clone()
			for _, e := range entries {
				before := m.state.Clone()
				res, p := applyEntry(m, e)
				unknown := len(e) > 0 && !core.CommandType(e[0]).Known()
				if unknown != (p != nil) {
					t.Fatalf("entry %q: panicked %v, want a panic only for an unknown command type", e, p)
				}
				if err := m.state.Check(); err != nil {
					t.Fatalf("entry %q (result %v) broke the state: %v\n%+v", e, res, err, m.state)
				}
				if p != nil {
					if !reflect.DeepEqual(before, m.state) {
						t.Fatalf("entry %q panicked after changing the state", e)
					}
					break
				}
				switch r := res.(type) {
				case error:
					after := m.state.Clone()
					after.Index = before.Index
					if !reflect.DeepEqual(before, after) {
						t.Fatalf("entry %q was refused (%v) but changed the state", e, r)
					}
				case core.Result:
				default:
					t.Fatalf("entry %q: Apply returned %T %v", e, res, res)
				}
				// Apply is deterministic: another replica gets the same answer.
				res2, _ := applyEntry(twin, e)
				if fmt.Sprint(res) != fmt.Sprint(res2) || !reflect.DeepEqual(m.state, twin.state) {
					t.Fatalf("entry %q: replicas differ: %v vs %v", e, res, res2)
				}
			}
			exercise(t, m)
		}
	})
}

func FuzzRestore(f *testing.F) {
	snapshotOf := func(m *fsm) []byte {
		snap, err := m.Snapshot()
		if err != nil {
			f.Fatal(err)
		}
		var sink memSink
		if err := snap.Persist(&sink); err != nil {
			f.Fatal(err)
		}
		return sink.Bytes()
	}
	f.Add(snapshotOf(fuzzCluster(f)))
	f.Add(snapshotOf(newFSM()))
	fenced := fuzzCluster(f)
	if r, _ := applyEntry(fenced, mustEncode(f, core.Command{Type: core.CmdFence, Slot: 0, UpTo: 300, Foreign: "other"})); !isResult(r) {
		f.Fatalf("seed fence: %v", r)
	}
	f.Add(snapshotOf(fenced))
	f.Add([]byte(`{"cluster_id":"c","layout":{"epoch":1777939200,"unit":1000000000,"timestamp_bits":28,"datacenter_bits":2,"machine_bits":1,"sequence_bits":11},"slots":[{"owner":"a","tenure_id":2},{},{},{},{},{},{},{}]}`))
	f.Add([]byte(`{"cluster_id":"c","layout":{"epoch":0,"unit":1,"timestamp_bits":1,"datacenter_bits":30,"machine_bits":31,"sequence_bits":1},"slots":[]}`))
	f.Add([]byte(`{"index":9,"cluster_id":"c","layout":{"epoch":1777939200,"unit":1000000000,"timestamp_bits":28,"datacenter_bits":0,"machine_bits":1,"sequence_bits":11},"nodes":{"a":{"id":"a","datacenter":4611686018427387904}},"slots":[{"owner":"a","high_water":-3,"tenure_id":2},{}],"tenures":[{"Slot":0,"NodeID":"a","Floor":-3,"Granted":-3,"ClaimedIndex":2}]}`))
	f.Add([]byte(`{`))
	f.Add([]byte(`null`))

	f.Fuzz(func(t *testing.T, data []byte) {
		m := newFSM()
		if err := m.Restore(io.NopCloser(bytes.NewReader(data))); err != nil {
			return
		}
		if err := m.state.Check(); err != nil {
			t.Fatalf("restored a state that fails check: %v", err)
		}
		// A snapshot of the restored state restores to the same state.
		again := newFSM()
		snap, _ := m.Snapshot()
		var sink memSink
		if err := snap.Persist(&sink); err != nil {
			t.Fatal(err)
		}
		// (clone, since a snapshot does not keep an empty list apart from none)
		if err := again.Restore(io.NopCloser(&sink)); err != nil || !reflect.DeepEqual(m.state.Clone(), again.state.Clone()) {
			t.Fatalf("restored state does not survive a snapshot: %v", err)
		}
		exercise(t, m)
	})
}

// exercise reads the state as the node does and applies valid commands of
// every kind to it: claims by known and new nodes, reserves of each held
// slot under its tenure, releases and removes. None may panic, and the state
// must keep passing check.
func exercise(t *testing.T, m *fsm) {
	t.Helper()
	apply := func(c core.Command) {
		t.Helper()
		if _, p := applyEntry(m, mustEncode(t, c)); p != nil {
			t.Fatalf("valid %s %+v panicked: %v", c.Type, c, p)
		}
		if err := m.state.Check(); err != nil {
			t.Fatalf("valid %s %+v broke the state: %v", c.Type, c, err)
		}
	}
	m.view(func(s *core.State) { // the readers in node.go
		_ = s.SortedNodeIDs()
		for _, sl := range s.Slots {
			if sl.Owner != "" {
				_ = s.Nodes[sl.Owner].GRPCAddr
				_ = s.Layout.Time(sl.HighWater).Add(s.Layout.Unit)
			}
		}
	})
	if m.state.Layout == nil {
		apply(initCmd())
	}
	s := m.state
	dcs := 1 << s.Layout.DatacenterBits
	nodes := append(s.SortedNodeIDs(), "fuzz-new-1", "fuzz-new-2")
	for k, id := range nodes {
		apply(core.Command{Type: core.CmdClaim, Node: &NodeInfo{ID: id, Name: id, Datacenter: k%(dcs+1) - 1}})
	}
	for i := range m.state.Slots {
		sl := m.state.Slots[i]
		if sl.Owner == "" {
			continue
		}
		upTo := sl.HighWater + 1
		if upTo > m.state.Layout.MaxTimestamp() {
			upTo = m.state.Layout.MaxTimestamp()
		}
		apply(core.Command{Type: core.CmdReserve, NodeID: sl.Owner, Slot: i, Tenure: sl.Tenure, UpTo: upTo})
		apply(core.Command{Type: core.CmdReserve, NodeID: sl.Owner, Slot: i, Tenure: sl.Tenure + 1, UpTo: upTo})
	}
	for k, id := range nodes {
		if k%2 == 0 {
			if i := m.state.SlotOf(id); i >= 0 {
				apply(core.Command{Type: core.CmdRelease, NodeID: id, Tenure: m.state.Slots[i].Tenure})
			}
		} else {
			apply(core.Command{Type: core.CmdRemove, NodeID: id})
		}
	}
	apply(claimCmd(nodes[0], -1))
	apply(core.Command{Type: core.CmdFence, Slot: len(m.state.Slots) - 1, UpTo: m.state.Layout.MaxTimestamp(), Foreign: "fuzz-other"})
}
