package cluster

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/idgen/idgen/cluster/core"
	"github.com/idgen/idgen/generator"
)

// The wire shapes of protocol version 1, as the release recorded in
// scripts/upgrade/PREVIOUS (add9da0) declares them: what a node of that
// release reads from a node of this one. A version 2 node in a cluster
// running 1 writes only what these read with the same meaning: every field
// they know keeps its name, type and value, and the fields version 2 added
// are ones they ignore (Go's encoding/json skips unknown keys).
type v1Command struct {
	Layout    *generator.Layout `json:"layout,omitempty"`
	Node      *NodeInfo         `json:"node,omitempty"`
	NodeID    string            `json:"node_id,omitempty"`
	Slot      int               `json:"slot,omitempty"`
	UpTo      int64             `json:"up_to,omitempty"`
	Foreign   string            `json:"foreign,omitempty"`
	Tenure    uint64            `json:"tenure,omitempty"`
	ClusterID string            `json:"cluster_id,omitempty"`
	Created   int64             `json:"created,omitempty"`
	Start     int64             `json:"start,omitempty"`
	SentAt    int64             `json:"sent_at,omitempty"`
}

type v1Result struct {
	Slot        int    `json:"slot"`
	Floor       int64  `json:"floor"`
	Granted     int64  `json:"granted"`
	Tenure      uint64 `json:"tenure,omitempty"`
	Index       uint64 `json:"index,omitempty"`
	LeaderTime  int64  `json:"leader_time,omitempty"`
	ClusterTime int64  `json:"cluster_time,omitempty"`
	ClusterID   string `json:"cluster_id,omitempty"`
}

type v1Meta struct {
	Name      string `json:"n"`
	GRPCAddr  string `json:"g"`
	RaftAddr  string `json:"r"`
	HTTPAddr  string `json:"h"`
	Version   string `json:"v"`
	Member    bool   `json:"m"`
	Expect    int    `json:"e"`
	SkewMS    int64  `json:"s"`
	Leaving   bool   `json:"l,omitempty"`
	ClusterID string `json:"c,omitempty"`
	Created   int64  `json:"ct,omitempty"`
}

// sameFields fails unless every field of v1 (a v1 shape) equals the field
// of the same name in v2 (this build's).
func sameFields(t *testing.T, what string, v1, v2 any) {
	t.Helper()
	a, b := reflect.ValueOf(v1), reflect.ValueOf(v2)
	for i := range a.NumField() {
		name := a.Type().Field(i).Name
		if got, want := a.Field(i).Interface(), b.FieldByName(name).Interface(); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: a version 1 node reads %s = %v, this build wrote %v", what, name, got, want)
		}
	}
}

// TestVersion1ReadsWhatThisBuildWrites: a forwarded command, an answer and
// the gossip metadata, every field set (the version 2 ones too), decoded as
// the release before decodes them.
func TestVersion1ReadsWhatThisBuildWrites(t *testing.T) {
	l := generator.DefaultLayout()
	c := core.Command{Type: core.CmdClaim, Layout: &l, Node: &NodeInfo{ID: "n1", Name: "a", RaftAddr: "r", GossipAddr: "g", GRPCAddr: "p", HTTPAddr: "h", Datacenter: 1},
		NodeID: "n1", Slot: 3, UpTo: 99, Foreign: "f", Tenure: 7, ClusterID: "c1", Created: 5, Start: 6, SentAt: 8, Protocol: ProtocolMax}
	data, err := core.EncodeCommand(c)
	if err != nil {
		t.Fatal(err)
	}
	var oc v1Command
	if err := json.Unmarshal(data[1:], &oc); err != nil {
		t.Fatalf("a version 1 node cannot decode this build's command: %v", err)
	}
	if core.CommandType(data[0]) != core.CmdClaim {
		t.Fatalf("type byte %d", data[0])
	}
	sameFields(t, "command", oc, c)

	r := core.Result{Slot: 2, Floor: 3, Granted: 4, Tenure: 5, Index: 6, LeaderTime: 7, ClusterTime: 8, ClusterID: "c1", Protocol: ProtocolMax}
	rb, err := core.EncodeResult(r)
	if err != nil {
		t.Fatal(err)
	}
	var or v1Result
	if err := json.Unmarshal(rb, &or); err != nil {
		t.Fatalf("a version 1 node cannot decode this build's answer: %v", err)
	}
	sameFields(t, "answer", or, r)

	m := core.Meta{Name: "a", GRPCAddr: "p", RaftAddr: "r", HTTPAddr: "h", Version: "v", Member: true, Expect: 3, SkewMS: 100, Leaving: true,
		ClusterID: "c1", Created: 9, PMin: ProtocolMin, PMax: ProtocolMax, Revision: "abc", Layout: l.String()}
	mb, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var om v1Meta
	if err := json.Unmarshal(mb, &om); err != nil {
		t.Fatalf("a version 1 node cannot decode this build's gossip metadata: %v", err)
	}
	sameFields(t, "gossip metadata", om, m)
	if len(mb) > 512-64 {
		t.Errorf("gossip metadata of %d bytes with short fields leaves little of memberlist's 512 for long names and addresses", len(mb))
	}
}
