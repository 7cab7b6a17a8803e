package cluster

import (
	"context"
	"time"

	"github.com/idgen/idgen/cluster/core"
	"github.com/idgen/idgen/generator"
)

// The errors of the cluster layer, defined by its core (cluster/core) and
// the same values here: errors.Is matches either name. The rpc layer maps
// them to gRPC codes (cluster/core's reason table).
var (
	ErrNotReady               = core.ErrNotReady
	ErrClusterFull            = core.ErrClusterFull
	ErrLayoutMismatch         = core.ErrLayoutMismatch
	ErrClockSkew              = core.ErrClockSkew
	ErrNotOwner               = core.ErrNotOwner
	ErrUnknownNode            = core.ErrUnknownNode
	ErrNoLeader               = core.ErrNoLeader
	ErrNotLeader              = core.ErrNotLeader
	ErrShutdown               = core.ErrShutdown
	ErrFaultInjectionDisabled = core.ErrFaultInjectionDisabled
	ErrRemoveSelf             = core.ErrRemoveSelf
	ErrQuorum                 = core.ErrQuorum
	ErrBadCommand             = core.ErrBadCommand
	ErrLeaderNotReady         = core.ErrLeaderNotReady
	ErrLeaderClockOff         = core.ErrLeaderClockOff
	ErrClusterConflict        = core.ErrClusterConflict
	ErrWrongCluster           = core.ErrWrongCluster
	ErrNotMember              = core.ErrNotMember
	ErrNotInitialized         = core.ErrNotInitialized
	ErrProtocol               = core.ErrProtocol
)

// NodeInfo is what the replicated state knows about a node; ProtocolRange a
// range of protocol versions (cluster/core).
type (
	NodeInfo      = core.NodeInfo
	ProtocolRange = core.ProtocolRange
)

// ProtocolMin and ProtocolMax are the protocol versions this build speaks.
const (
	ProtocolMin = core.ProtocolMin
	ProtocolMax = core.ProtocolMax
)

// MemberInfo describes one node as seen by gossip and the replicated state.
type MemberInfo struct {
	ID          string
	Name        string
	GRPCAddr    string
	RaftAddr    string
	GossipAddr  string
	HTTPAddr    string
	Slot        int    // -1 when the node holds no slot
	RaftRole    string // leader, voter, nonvoter, none
	GossipState string // MemberState's word: alive, dead, left, unknown
	GrantedLead time.Duration
	ClockSkew   time.Duration
	// Version, Revision and Protocols are what the member's gossip metadata
	// says of its build ("" and version 1 for a release before protocol 2,
	// which gossips no revision or range).
	Version   string
	Revision  string
	Protocols ProtocolRange
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

// CopyTeller is what a Prober may also do: tell the node at grpcAddr that
// another process was seen at copyAddr under its identity or another
// member's (ClusterService.Status with a hint, over the same authenticated
// transport). The node asks copyAddr itself before it believes anything
// (twins.go). A Prober that is no CopyTeller tells nobody.
type CopyTeller interface {
	TellCopy(ctx context.Context, grpcAddr, copyAddr string) error
}

// ReasonLeaving is the not-ready reason of a node that is leaving the
// cluster; a Status that travelled over gRPC says Leaving by it.
const ReasonLeaving = "leaving the cluster"

// Tenure is one node's hold on one slot, as recorded by the Raft log. The owner
// may stamp timestamps t with Floor < t <= Granted. The type is defined in
// generator, so that the checker behind idctl verify shares it without
// importing the cluster; it is stored in snapshots under its Go field names.
type Tenure = core.Tenure

// Forwarder sends an encoded command to the leader's gRPC address and returns
// the encoded result. The rpc layer implements it with PeerService.Apply.
type Forwarder interface {
	Forward(ctx context.Context, leaderGRPCAddr string, command []byte) ([]byte, error)
}

// Prober asks the node at a gRPC address for its Status over the
// authenticated transport: with TLS, the call shows this node's server
// certificate and counts only if the answering node shows a server
// certificate from the cluster CA. The leader adds, promotes, moves and
// removes members only on such answers, never on gossip alone; a Status
// here needs ID, ClusterID, AppliedIndex, LastIndex, RaftAddr and Leaving.
// The rpc layer implements it with ClusterService.Status and Members.
type Prober interface {
	Probe(ctx context.Context, grpcAddr string) (Status, error)
}
