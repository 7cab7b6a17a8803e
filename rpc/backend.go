// Package rpc holds idgen's gRPC servers (IDService, ClusterService,
// PeerService, health, reflection), their interceptors, the HTTP admin handler
// with Prometheus metrics, the mapping of errors to gRPC codes, and the
// Forwarder followers use to reach the leader. The Go client library for
// shortener services lives in rpc/idclient.
package rpc

import (
	"context"
	"time"

	"github.com/idgen/idgen/cluster"
)

// What the servers need from a node comes in roles, one per service, so
// that each service holds only what it calls and a decorator or fake of one
// role has to provide every method of it: a check the role declares cannot
// be dropped by a wrapper that forgets it.

// Issuer is the serving role: what IDService, the prefetch producer, health
// and /readyz need.
type Issuer interface {
	// NextBatch mints n IDs inside the node's granted window and returns them
	// with the slot they were stamped with.
	NextBatch(ctx context.Context, n int) (ids []int64, slot int, err error)
	// Ready reports whether the node can issue IDs now, and why not.
	Ready() (ok bool, reason string)
	// Conflict is non-nil (wrapping cluster.ErrClusterConflict) once the
	// node met an older cluster: from then on the server hands out nothing,
	// not even IDs it minted before, since the node's window may overlap the
	// older cluster's. The server checks it before every mint and every
	// batch it serves, whatever NextBatch and Ready say.
	Conflict() error
	// Withdrawn reports whether id, a buffered ID, was minted in a tenure
	// of the node that has ended since: the server drops its batch instead
	// of handing it out (after a fence its IDs may repeat another
	// cluster's).
	Withdrawn(id int64) bool
	// Status is the node's view of itself; serving reads the layout from
	// it, to recover a buffered batch's slot.
	Status() cluster.Status
}

// Admin is the role ClusterService's administrative calls need.
type Admin interface {
	// Members lists the cluster's nodes and the current leader's ID.
	Members() (members []cluster.MemberInfo, leaderID string)
	// Status is the node's view of itself.
	Status() cluster.Status
	// Join gossip-joins the given addresses and reports how many answered.
	Join(addrs []string) (contacted int, err error)
	// Leave releases the slot and leaves Raft and gossip.
	Leave(ctx context.Context) error
	// Remove force-removes another node (by ID or name) and frees its slot.
	Remove(ctx context.Context, node string) (id string, freedSlot int, err error)
	// History returns the slot tenures recorded in the Raft log.
	History(ctx context.Context) ([]cluster.Tenure, error)
}

// Peer is the role PeerService needs: the leader's end of forwarding.
type Peer interface {
	// ApplyForwarded applies a command a follower forwarded to this (leader) node.
	ApplyForwarded(ctx context.Context, command []byte) ([]byte, error)
	// SightedCopy takes a peer's hint that a process of this node's
	// identity, or of another member's, runs at grpcAddr; the node asks it
	// before it believes anything.
	SightedCopy(grpcAddr string)
}

// FaultInjector is ClusterService.Fault's role (fault injection only).
type FaultInjector interface {
	// SetClockOffset moves the node's clock; the node refuses unless fault
	// injection is enabled.
	SetClockOffset(d time.Duration) error
}

// Backend is a whole node, every role at once: what NewServer takes, each
// service keeping only its own role. cluster.Node implements it; tests use
// fakes.
type Backend interface {
	Issuer
	Admin
	Peer
	FaultInjector
}

var _ Backend = (*cluster.Node)(nil)
