package cluster

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/idgen/idgen/cluster/core"
	"github.com/idgen/idgen/generator"
)

// entryCommands is one command of every entry type with every field its
// type has set, and the fields of the forwarded message (SentAt, Protocol)
// and of other types set too: what a forward could carry.
func entryCommands() []core.Command {
	l := generator.DefaultLayout()
	node := &NodeInfo{ID: "n1", Name: "a", RaftAddr: "r", GossipAddr: "g", GRPCAddr: "p", HTTPAddr: "h", Datacenter: 1}
	all := core.Command{Layout: &l, Node: node, NodeID: "n1", Slot: 3, UpTo: 99, Foreign: "f", Tenure: 7, ClusterID: "c1",
		Created: 5, Start: 6, SentAt: 8, Protocol: ProtocolMax}
	var out []core.Command
	for _, t := range []core.CommandType{core.CmdInit, core.CmdClaim, core.CmdReserve, core.CmdRelease, core.CmdRemove, core.CmdFence} {
		c := all
		c.Type = t
		out = append(out, c)
	}
	return out
}

// entryFields is what the entry of c's type keeps of c: the fields that
// type's checks and Apply read.
func entryFields(c core.Command) core.Command {
	k := core.Command{Type: c.Type, ClusterID: c.ClusterID}
	switch c.Type {
	case core.CmdInit:
		k.Layout, k.Created, k.Start = c.Layout, c.Created, c.Start
	case core.CmdClaim:
		k.Node, k.Layout = c.Node, c.Layout
	case core.CmdReserve:
		k.NodeID, k.Slot, k.Tenure, k.UpTo = c.NodeID, c.Slot, c.Tenure, c.UpTo
	case core.CmdRelease:
		k.NodeID, k.Tenure = c.NodeID, c.Tenure
	case core.CmdRemove:
		k.NodeID = c.NodeID
	case core.CmdFence:
		k.Slot, k.UpTo, k.Foreign = c.Slot, c.UpTo, c.Foreign
	}
	return k
}

// TestEntriesKeepTheirTypesFields: an entry of each type, written under this
// build's protocol, reads back as its type's fields and that version; the
// release before reads the same values under the same names (it decodes
// every entry into its one flat command and ignores the envelope), and an
// entry a release before the envelope wrote (the flat command, sent_at and
// pv included) reads as its type's fields at version 0.
func TestEntriesKeepTheirTypesFields(t *testing.T) {
	for _, c := range entryCommands() {
		want := entryFields(c)
		data, err := core.EncodeEntry(c, ProtocolMax)
		if err != nil {
			t.Fatal(err)
		}
		got, v, err := core.DecodeEntry(data, core.OwnProtocols)
		if err != nil || v != ProtocolMax || !reflect.DeepEqual(got, want) {
			t.Errorf("%s entry reads back as %+v version %d (%v), want %+v version %d", c.Type, got, v, err, want, ProtocolMax)
		}
		var old v1Command
		if err := json.Unmarshal(data[1:], &old); err != nil || core.CommandType(data[0]) != c.Type {
			t.Fatalf("the release before cannot decode a %s entry: %v", c.Type, err)
		}
		sameFields(t, c.Type.String()+" entry", old, want)

		flat, err := core.EncodeCommand(c)
		if err != nil {
			t.Fatal(err)
		}
		got, v, err = core.DecodeEntry(flat, core.OwnProtocols)
		if err != nil || v != 0 || !reflect.DeepEqual(got, want) {
			t.Errorf("a %s entry of a release before the envelope reads as %+v version %d (%v), want %+v version 0", c.Type, got, v, err, want)
		}
	}
}

// TestMixedReplicasAgree: a log whose entries one release wrote as flat
// commands and this one as typed entries leaves replicas in the same state,
// entry by entry, with the same answers.
func TestMixedReplicasAgree(t *testing.T) {
	l := generator.DefaultLayout()
	now := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	at := l.Units(now)
	cmds := []core.Command{
		core.InitCommand(l, "c1", now, 0),
		{Type: core.CmdClaim, Node: &NodeInfo{ID: "a", Datacenter: -1}, Layout: &l, ClusterID: "c1", SentAt: 1, Protocol: 2},
		{Type: core.CmdClaim, Node: &NodeInfo{ID: "b", Datacenter: -1}, ClusterID: "c1"},
		{Type: core.CmdReserve, NodeID: "a", Slot: 0, Tenure: 2, UpTo: at + 100, ClusterID: "c1", SentAt: 3},
		{Type: core.CmdReserve, NodeID: "b", Slot: 0, Tenure: 3, UpTo: at + 100, ClusterID: "c1"}, // not b's slot
		{Type: core.CmdFence, Slot: 1, UpTo: at + 200, Foreign: "c2", ClusterID: "c1"},
		{Type: core.CmdRelease, NodeID: "a", Tenure: 2, ClusterID: "c1"},
		{Type: core.CmdRemove, NodeID: "b", ClusterID: "c1"},
	}
	flat, typed := newFSM(), newFSM()
	for i, c := range cmds {
		idx := uint64(i + 1)
		a, err := core.EncodeCommand(c)
		if err != nil {
			t.Fatal(err)
		}
		b, err := core.EncodeEntry(c, ProtocolMax)
		if err != nil {
			t.Fatal(err)
		}
		ra := flat.Apply(&raft.Log{Type: raft.LogCommand, Index: idx, Data: a})
		rb := typed.Apply(&raft.Log{Type: raft.LogCommand, Index: idx, Data: b})
		if ea, eb := ra != nil && isErr(ra), rb != nil && isErr(rb); ea != eb || (!ea && !reflect.DeepEqual(ra, rb)) || (ea && ra.(error).Error() != rb.(error).Error()) {
			t.Fatalf("entry %d (%s): the flat entry answered %v, the typed one %v", idx, c.Type, ra, rb)
		}
		if !reflect.DeepEqual(flat.state, typed.state) {
			t.Fatalf("entry %d (%s): the replicas differ:\nflat  %+v\ntyped %+v", idx, c.Type, flat.state, typed.state)
		}
	}
}

func isErr(v interface{}) bool { _, ok := v.(error); return ok }

// TestEntryOfAnUnspokenVersionStopsTheReplica: an entry written under a
// protocol version this build does not speak stops the node before it
// changes anything, as an entry of an unknown type does (a later version
// may give a field a meaning this one would not apply).
func TestEntryOfAnUnspokenVersionStopsTheReplica(t *testing.T) {
	c := core.Command{Type: core.CmdRemove, NodeID: "a", ClusterID: "c1"}
	data, err := core.EncodeEntry(c, ProtocolMax+1)
	if err != nil {
		t.Fatal(err)
	}
	if _, v, err := core.DecodeEntry(data, core.OwnProtocols); !errors.Is(err, core.ErrEntryVersion) || !errors.Is(err, ErrProtocol) || v != ProtocolMax+1 {
		t.Fatalf("decodeEntry of a version %d entry: version %d, %v; want errEntryVersion", ProtocolMax+1, v, err)
	}
	f := newFSM()
	before := f.state.Clone()
	defer func() {
		r := recover()
		if r == nil || !strings.Contains(r.(string), "upgrade this node") {
			t.Fatalf("Apply of a version %d entry: %v; want it to stop the node", ProtocolMax+1, r)
		}
		if !reflect.DeepEqual(f.state, before) {
			t.Fatalf("Apply of a version %d entry changed the state: %+v", ProtocolMax+1, f.state)
		}
	}()
	f.Apply(&raft.Log{Type: raft.LogCommand, Index: 1, Data: data})
}
