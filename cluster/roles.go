package cluster

// The node's roles. Node builds them, starts them and answers the public
// API; each role is a type with the methods of its concern, and reaches the
// node's shared parts (its configuration, Raft, the replica, gossip, the
// logger) through n. Who calls whom (no role calls back into one that calls
// it):
//
//	Node (public API) -> agent, lead, recon, members, ident, versions, log, proposer, house
//	house    -> ident, members, recon, versions, log
//	agent    -> proposer, log, ident
//	lead     -> recon, members, versions, ident, log
//	recon    -> members, ident, log
//	proposer -> lead (when this node leads), members, ident, versions
//	ident, members, versions, log -> the shared parts only

// leader is the leader's side: the leader loop (establish, hand-offs),
// cluster time, and the guard in front of the log (handle, leaderApply,
// raftApply, leaderRemove).
type leader struct{ n *Node }

// reconciler is the leader's sweeps: members added, promoted, reaped and
// removed, foreign clusters fenced, forks held.
type reconciler struct{ n *Node }

// membership is who is in the cluster: the Raft configuration's views,
// the probes of members over the authenticated transport, and bootstrap.
type membership struct{ n *Node }

// identityWatch is which cluster this node belongs to and who else runs
// its identity: its cluster's identity and history, conflicts with other
// clusters, copies of its data dir.
type identityWatch struct{ n *Node }

// versionView is the protocol versions the cluster and this node speak.
type versionView struct{ n *Node }

// logView reads what the local log and data dir record: the layout, the
// last applied command.
type logView struct{ n *Node }

// proposer is the follower's half of a command's way to the log: routed to
// this node's leader side or forwarded to the leader.
type proposer struct{ n *Node }

// housekeeper is the node's once-a-second chores: join retries, gossip
// metadata, readiness and its log line.
type housekeeper struct{ n *Node }
