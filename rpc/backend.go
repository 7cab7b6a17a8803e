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

// Backend is what the servers need from a node. cluster.Node implements it;
// tests use a fake.
type Backend interface {
	// NextBatch mints n IDs inside the node's granted window and returns them
	// with the slot they were stamped with.
	NextBatch(ctx context.Context, n int) (ids []int64, slot int, err error)
	// Ready reports whether the node can issue IDs now, and why not.
	Ready() (ok bool, reason string)
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
	// ApplyForwarded applies a command a follower forwarded to this (leader) node.
	ApplyForwarded(ctx context.Context, command []byte) ([]byte, error)
	// SetClockOffset moves the node's clock (fault injection only).
	SetClockOffset(d time.Duration) error
}
