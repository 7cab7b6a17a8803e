package cluster

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/idgen/idgen/generator"
)

// entryCommands is one command of every entry type with every field its
// type has set, and the fields of the forwarded message (SentAt, Protocol)
// and of other types set too: what a forward could carry.
func entryCommands() []Command {
	l := generator.DefaultLayout()
	node := &NodeInfo{ID: "n1", Name: "a", RaftAddr: "r", GossipAddr: "g", GRPCAddr: "p", HTTPAddr: "h", Datacenter: 1}
	all := Command{Layout: &l, Node: node, NodeID: "n1", Slot: 3, UpTo: 99, Foreign: "f", Tenure: 7, ClusterID: "c1",
		Created: 5, Start: 6, SentAt: 8, Protocol: ProtocolMax}
	var out []Command
	for _, t := range []CommandType{CmdInit, CmdClaim, CmdReserve, CmdRelease, CmdRemove, CmdFence} {
		c := all
		c.Type = t
		out = append(out, c)
	}
	return out
}

// entryFields is what the entry of c's type keeps of c: the fields that
// type's checks and Apply read.
func entryFields(c Command) Command {
	k := Command{Type: c.Type, ClusterID: c.ClusterID}
	switch c.Type {
	case CmdInit:
		k.Layout, k.Created, k.Start = c.Layout, c.Created, c.Start
	case CmdClaim:
		k.Node, k.Layout = c.Node, c.Layout
	case CmdReserve:
		k.NodeID, k.Slot, k.Tenure, k.UpTo = c.NodeID, c.Slot, c.Tenure, c.UpTo
	case CmdRelease:
		k.NodeID, k.Tenure = c.NodeID, c.Tenure
	case CmdRemove:
		k.NodeID = c.NodeID
	case CmdFence:
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
		data, err := EncodeEntry(c, ProtocolMax)
		if err != nil {
			t.Fatal(err)
		}
		got, v, err := DecodeEntry(data, OwnProtocols)
		if err != nil || v != ProtocolMax || !reflect.DeepEqual(got, want) {
			t.Errorf("%s entry reads back as %+v version %d (%v), want %+v version %d", c.Type, got, v, err, want, ProtocolMax)
		}
		var old v1Command
		if err := json.Unmarshal(data[1:], &old); err != nil || CommandType(data[0]) != c.Type {
			t.Fatalf("the release before cannot decode a %s entry: %v", c.Type, err)
		}
		sameFields(t, c.Type.String()+" entry", old, want)

		flat, err := EncodeCommand(c)
		if err != nil {
			t.Fatal(err)
		}
		got, v, err = DecodeEntry(flat, OwnProtocols)
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
	cmds := []Command{
		InitCommand(l, "c1", now, 0),
		{Type: CmdClaim, Node: &NodeInfo{ID: "a", Datacenter: -1}, Layout: &l, ClusterID: "c1", SentAt: 1, Protocol: 2},
		{Type: CmdClaim, Node: &NodeInfo{ID: "b", Datacenter: -1}, ClusterID: "c1"},
		{Type: CmdReserve, NodeID: "a", Slot: 0, Tenure: 2, UpTo: at + 100, ClusterID: "c1", SentAt: 3},
		{Type: CmdReserve, NodeID: "b", Slot: 0, Tenure: 3, UpTo: at + 100, ClusterID: "c1"}, // not b's slot
		{Type: CmdFence, Slot: 1, UpTo: at + 200, Foreign: "c2", ClusterID: "c1"},
		{Type: CmdRelease, NodeID: "a", Tenure: 2, ClusterID: "c1"},
		{Type: CmdRemove, NodeID: "b", ClusterID: "c1"},
	}
	flat, typed := newFSM(), newFSM()
	for i, c := range cmds {
		idx := uint64(i + 1)
		a, err := EncodeCommand(c)
		if err != nil {
			t.Fatal(err)
		}
		b, err := EncodeEntry(c, ProtocolMax)
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
	c := Command{Type: CmdRemove, NodeID: "a", ClusterID: "c1"}
	data, err := EncodeEntry(c, ProtocolMax+1)
	if err != nil {
		t.Fatal(err)
	}
	if _, v, err := DecodeEntry(data, OwnProtocols); !errors.Is(err, ErrEntryVersion) || !errors.Is(err, ErrProtocol) || v != ProtocolMax+1 {
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
