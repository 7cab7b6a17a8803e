package core

import (
	"time"

	"github.com/idgen/idgen/generator"
)

// Meta is the node metadata carried by gossip (memberlist caps it at 512 bytes).
type Meta struct {
	Name     string `json:"n"`
	GRPCAddr string `json:"g"`
	RaftAddr string `json:"r"`
	HTTPAddr string `json:"h"`
	Version  string `json:"v"`
	// Member is true once the node has Raft state (it belongs to a cluster);
	// nodes without state use it to tell a new cluster from an existing one.
	Member bool `json:"m"`
	// Expect is the node's --bootstrap-expect.
	Expect int `json:"e"`
	// SkewMS is the node's clock minus the cluster's time, as its last
	// accepted reserve answer gave it (Node.skew).
	SkewMS int64 `json:"s"`
	// Leaving is set before a graceful leave, so others can tell left from dead.
	Leaving bool `json:"l,omitempty"`
	// ClusterID and Created identify the cluster the node belongs to, once
	// known; a leader never adds a member of another cluster.
	ClusterID string `json:"c,omitempty"`
	Created   int64  `json:"ct,omitempty"`
	// PMin and PMax are the protocol versions the node speaks (protocol.go);
	// both 0 from a release before version 2, which speaks version 1.
	PMin int `json:"pn,omitempty"`
	PMax int `json:"px,omitempty"`
	// Revision is the node's build revision, short (Version names the release).
	Revision string `json:"rv,omitempty"`
	// Layout is its cluster's layout (Layout.String), once known: a node
	// that could never claim under it says so before it is added (a hint;
	// the leader decides on the authenticated Status, canTakePart).
	Layout string `json:"ly,omitempty"`
}

// Protocols is the range the member advertises (legacy when none).
func (m Meta) Protocols() ProtocolRange { return ProtocolRange{Min: m.PMin, Max: m.PMax}.OrLegacy() }

// MemberState is what gossip last showed of a member. memberlist's
// notifications give only these three; its "suspect" phase comes to a node
// as nothing at all (the member stays alive until it is declared dead).
type MemberState int

const (
	// MemberUnknown: not seen in gossip (a node only Raft or the state knows).
	MemberUnknown MemberState = iota
	// MemberAlive: joined, or updated its metadata.
	MemberAlive
	// MemberDead: gone from gossip without saying it was leaving.
	MemberDead
	// MemberLeft: gone from gossip after setting its Leaving flag.
	MemberLeft
)

// String is the state's word on the wire and in output (MemberInfo's
// GossipState, the Members RPC, idctl): alive, dead, left or unknown.
func (s MemberState) String() string {
	switch s {
	case MemberAlive:
		return "alive"
	case MemberDead:
		return "dead"
	case MemberLeft:
		return "left"
	}
	return "unknown"
}

// GossipMember is a member as the node last saw it, including dead ones,
// which memberlist's Members() leaves out.
type GossipMember struct {
	ID     string
	Addr   string
	Meta   Meta
	State  MemberState
	Since  time.Time
	Parsed bool
}

// Status is this node's view of itself.
type Status struct {
	ID           string
	Name         string
	Slot         int // -1 when the node holds no slot
	Ready        bool
	Reason       string
	RaftState    string
	LeaderID     string
	LeaderAddr   string
	Granted      int64
	Cursor       int64
	Floor        int64
	IDsIssued    uint64
	Layout       generator.Layout
	AppliedIndex uint64
	LastIndex    uint64
	// ClusterID is the cluster this node belongs to ("" until known).
	ClusterID string
	// ConflictingClusters lists other clusters' IDs met through gossip.
	ConflictingClusters []string
	// LastWindowSlot and LastWindowGranted are the last window this node's
	// generator held (slot -1 if none), kept after it stops: a leader of
	// another cluster that meets this one fences it (foreign.go).
	LastWindowSlot    int
	LastWindowGranted int64
	// RaftAddr is the Raft address the node advertises.
	RaftAddr string
	// Leaving is set once the node has begun a graceful leave.
	Leaving bool
	// Protocols is the range of protocol versions the node speaks, and
	// ClusterProtocol the version its cluster runs as it sees it
	// (protocol.go). A Status from a release before version 2 has neither.
	Protocols       ProtocolRange
	ClusterProtocol int
	// Clock is the node's clock when it answered (Unix ns; 0 from a release
	// before protocol 2): the leader counts it in the cluster's time.
	Clock int64
	// ConfiguredLayout is the layout the node was started with (zero: it
	// takes its cluster's) and Datacenter its preferred datacenter (-1: any;
	// nil from a release before protocol 2). A leader adds or promotes only
	// a member that can claim under the cluster's layout (canTakePart).
	ConfiguredLayout generator.Layout
	Datacenter       *int
	// GrantedWindows is, per slot, the end of the largest window the node's
	// replica of its cluster's log granted there (slots no tenure held are
	// left out; nil from a release before protocol 2). Another cluster that
	// meets this one fences them all (foreign.go).
	GrantedWindows map[int]int64
	// Started is when the answering process started (Unix ns; 0 from older
	// nodes): two processes with one node ID are copies (twins.go).
	Started int64
	// Stopped: the process stopped issuing for good (Conflict is set: it met
	// an older cluster, or a copy of its data dir outranked it). nil from
	// older nodes, which do not say.
	Stopped *bool
	// AppliedCommand and AppliedCommandHash: the last command entry the
	// node's replica applied (logmatch.go; 0 when none since its start or
	// last restore, and from older nodes).
	AppliedCommand     uint64
	AppliedCommandHash uint64
	// Voters is how many voters the node's Raft configuration has (the rpc
	// layer counts them from the node's Members answer). Of two copies of
	// one data dir, the one in the larger Raft group keeps serving.
	Voters int
}

// LeaderGrace is how long a node still counts a leader as known after losing
// sight of it: an election takes about a second, and the granted window, not
// the leader, bounds what the node may issue meanwhile.
const LeaderGrace = 3 * time.Second
