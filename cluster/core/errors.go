package core

import (
	"errors"
	"fmt"
)

// Errors returned by the cluster layer. reasons.go names each one's reason
// string and kind, by which the rpc layer maps them to gRPC codes.
var (
	// ErrNotReady: the node holds no slot or cannot issue right now.
	ErrNotReady = errors.New("node not ready")
	// ErrClusterFull: every slot is owned by a live node.
	ErrClusterFull = errors.New("cluster full: all slots are owned")
	// ErrLayoutMismatch: the node's configured layout differs from the cluster's.
	ErrLayoutMismatch = errors.New("layout mismatch")
	// ErrClockSkew: the node's clock differs from the cluster's time (the
	// quorum-th latest of the voters' clocks, not the leader's clock) by
	// more than max skew, so the leader refuses its Claim or Reserve.
	ErrClockSkew = errors.New("clock skew too large")
	// ErrNotOwner: the node does not hold the slot under the tenure a
	// Reserve or Release names (the tenure ended: a Release, Remove, fence
	// or later claim). From a leader it is only a hint (a deposed leader
	// whose state lacks the claim says it too): the node's own replica
	// decides when its generator stops (DESIGN.md, "A node mints only from
	// its own log").
	ErrNotOwner = errors.New("not the slot owner")
	// ErrUnknownNode: no such node in the cluster state.
	ErrUnknownNode = errors.New("unknown node")
	// ErrNoLeader: no leader is known, so the command cannot be applied now.
	ErrNoLeader = errors.New("no raft leader known")
	// ErrNotLeader: a forwarded command reached a node that is not the leader.
	ErrNotLeader = errors.New("not the raft leader")
	// ErrShutdown: the node is shutting down.
	ErrShutdown = errors.New("node shutting down")
	// ErrFaultInjectionDisabled: fault injection was not enabled at start.
	ErrFaultInjectionDisabled = errors.New("fault injection disabled: start idgend with --enable-fault-injection")
	// ErrRemoveSelf: a node was asked to remove itself; use Leave instead.
	ErrRemoveSelf = errors.New("a node cannot remove itself; use leave")
	// ErrQuorum: the removal would leave the cluster without a quorum of voters.
	ErrQuorum = errors.New("removal would break quorum")
	// ErrBadCommand: a command is malformed (missing or oversized fields).
	ErrBadCommand = errors.New("malformed cluster command")
	// ErrLeaderNotReady: a new leader has not passed its post-election
	// Barrier yet, so its state may lack entries an earlier leader committed.
	// The command is retried (ErrLeaderClockOff is one too).
	ErrLeaderNotReady = errors.New("raft leader is still catching up")
	// ErrLeaderClockOff: this leader's clock is more than max-skew off the
	// cluster's time, so it grants nothing and hands leadership off. It is
	// an ErrLeaderNotReady (errors.Is), which every caller retries as before.
	ErrLeaderClockOff = fmt.Errorf("%w: this leader's clock is off the cluster's time", ErrLeaderNotReady)
	// ErrClusterConflict: this node met members of another, older cluster.
	ErrClusterConflict = errors.New("cluster conflict")
	// ErrWrongCluster: a forwarded command or its answer belongs to another
	// cluster than the receiver's (a wiped node now listening at an old
	// leader's address, or a node of another deployment).
	ErrWrongCluster = errors.New("command of another cluster")
	// ErrNotMember: a Claim for a node that is not a server in the leader's
	// Raft configuration; a leader gives slots only to its own servers.
	ErrNotMember = errors.New("not a server of this cluster")
)
