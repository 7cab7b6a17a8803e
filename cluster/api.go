package cluster

import (
	"context"
	"time"

	"github.com/idgen/idgen/cluster/core"
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

// Status is what a node says of itself (its own, in Node.Status, and every
// member's answer to a probe); MemberState a member's state in gossip
// (cluster/core).
type (
	Status      = core.Status
	MemberState = core.MemberState
)

// The gossip states of a member.
const (
	MemberUnknown = core.MemberUnknown
	MemberAlive   = core.MemberAlive
	MemberDead    = core.MemberDead
	MemberLeft    = core.MemberLeft
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
