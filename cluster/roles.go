package cluster

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/idgen/idgen/cluster/core"
	"github.com/idgen/idgen/generator"
)

// The node's roles. Node builds them, starts them and answers the public
// API; each role is a type with the methods of its concern and owns its
// fields, and reaches the node's shared parts (its configuration, Raft, the
// replica, gossip, the logger, the event counts) through n. The decisions
// they carry out are cluster/core's. Who calls whom, one way
// (TestNoFileCallsBackIntoItsCaller holds the files to it):
//
//	Node         -> every role
//	house        -> recon, twins, agent, ident, members, versions, log
//	lead         -> recon, gate, clusterClock, members, versions
//	recon        -> twins, gate, clusterClock, ident, members, versions, log
//	twins        -> agent, ident, members
//	agent        -> proposer, ident, members, versions, log
//	proposer     -> gate, ident, members, versions
//	gate         -> clusterClock, ident, members, versions
//	clusterClock -> ident, members, versions, log
//	ident        -> members, log
//	members, versions, log -> the shared parts only

// leader is the leader loop: establish, reconcile's turns, the hand-offs
// when this leader's clock or protocol is off.
type leader struct{ n *Node }

// clusterClock is cluster time as this node reckons it while leading: the
// voters' latest clock reports and the quorum-th latest of them
// (clustertime.go).
type clusterClock struct {
	n      *Node
	clocks core.ClockBook // the nodes' latest clock reports, while leading
	// ledSince is when this node last gained leadership (Unix ns, 0 while
	// it does not lead): a voter silent for clockTTL since then is absent.
	ledSince atomic.Int64
}

// leaderGate is the guard in front of the log (leaderapply.go): a
// command's checks on the leader, what it proposes, and removals.
type leaderGate struct {
	n           *Node
	leaderReady atomic.Bool // this node leads and has passed its Barrier
	// forkHold: while set, this leader's group ranks below another group
	// of its cluster ID, and it grants no Claim or Reserve (forks.go).
	forkHold atomic.Pointer[string]
	// handoff asks the leader loop to hand leadership on (its clock is off
	// the cluster's time).
	handoff chan struct{}
}

// reconciler is the leader's sweeps: members added, promoted, reaped and
// removed, foreign clusters fenced, forks held.
type reconciler struct {
	n           *Node
	leaderState core.LeaderState // the sweeps' bookkeeping, new with each leadership
	// copyServed: when checkForks last saw a proven copy serve (only the
	// housekeeping goroutine reads and writes it).
	copyServed time.Time
	// sweeps counts the reconcile sweeps this node ran as leader (tests).
	sweeps atomic.Uint64
}

// membership is who is in the cluster: the Raft configuration's views,
// the probes of members over the authenticated transport, and bootstrap.
type membership struct {
	n          *Node
	leaderSeen atomic.Int64 // when a leader was last known, Unix ns
	// foreign: what members of other clusters proved of themselves.
	foreign foreignBook
}

// identityWatch is which cluster this node belongs to and who else runs
// its identity: its cluster's identity and history, conflicts with other
// clusters, copies of its data dir.
type identityWatch struct {
	n         *Node
	identity  atomic.Pointer[core.Identity] // the cluster this node belongs to, once known
	conflict  atomic.Pointer[string]        // set for good once an older cluster is met
	conflicts sync.Map                      // other clusters met: ID -> identity
	// copies: processes running this node's identity elsewhere (twins.go).
	copies twinBook
}

// copyWatch finds copies of this node's data dir and stops the one that
// should (twins.go, stopped.go).
type copyWatch struct {
	n *Node
	// copyChecks counts checkCopies' rounds (tests).
	copyChecks atomic.Uint64
}

// versionView is the protocol versions the cluster and this node speak.
type versionView struct {
	n         *Node
	protocols core.ProvenBook // the servers' proven protocol ranges, while leading
}

// logView reads what the local log and data dir record: the layout, the
// last applied command.
type logView struct {
	n *Node
	// recorded is the layout the data dir records for the node's cluster
	// (nil until its log's first entry has been seen; layoutrecord.go).
	recorded atomic.Pointer[generator.Layout]
	// appliedSaved is the last applied command entry recorded in the data
	// dir (logmatch.go), nil for none.
	appliedSaved atomic.Pointer[appliedEntry]
}

// proposer is the follower's half of a command's way to the log: routed to
// this node's leader side or forwarded to the leader.
type proposer struct{ n *Node }

// housekeeper is the node's once-a-second chores: join retries, gossip
// metadata, readiness and its log line.
type housekeeper struct {
	n          *Node
	lastReason string // the last logged reason kind
	// odd is protocolOdd as housekeeping last found it (every second), so
	// that Ready, on every call's path, reads no Raft configuration.
	odd atomic.Pointer[string]
}
