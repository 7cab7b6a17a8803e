package cluster

import (
	"fmt"
	"sync"
	"time"
)

// One node identity runs in one process at a time. A copied data dir (a
// cloned VM or volume, a backup restored beside the node it came from) is a
// second process with the same node ID and cluster ID, and no other check
// sees it: its greeting, its cluster and its slot are the node's own. A copy
// of a lone seed is even a second cluster that issues the same slot from
// its own log. Two copies find each other when their gossip meets:
// memberlist then reports this node's own name alive at another address
// (NotifyConflict), which a restart on a new address does too, and anyone
// with the gossip key can forge. So a sighting is only a reason to ask: the
// other address's authenticated Status must name this node's ID and cluster,
// and a process start time other than this one's. Then, as between two
// clusters, a copy that cannot issue stops nobody; of two that serve, the
// one that started later stops for good (it says why and what to do), and
// the other fences everything the stopped copy's log granted (its leader's
// fenceForeign, with the copy's proof), ending its own tenure if the copy's
// window overlaps it, so nothing the copy issued is issued again. What both
// issued before they met is not taken back: the meeting's window, as
// between two clusters.

const (
	// twinSightingTTL: a sighting is asked about while this recent.
	twinSightingTTL = 30 * time.Second
	// maxTwinSightings bounds what forged sightings can make a node keep.
	maxTwinSightings = 16
)

// twinSighting is an address gossip showed this node's own name alive at.
type twinSighting struct {
	grpcAddr string
	at       time.Time
}

// twinBook keeps sightings by gossip address, and the proofs of copies that
// answered.
type twinBook struct {
	mu     sync.Mutex
	seen   map[string]twinSighting
	proofs map[string]foreignProof // by gRPC address
	retry  map[string]time.Time
}

// sighted records a sighting, keeping the newest maxTwinSightings.
func (b *twinBook) sighted(gossipAddr, grpcAddr string, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.seen == nil {
		b.seen = map[string]twinSighting{}
	}
	b.seen[gossipAddr] = twinSighting{grpcAddr: grpcAddr, at: now}
	for len(b.seen) > maxTwinSightings {
		oldest := ""
		for a, s := range b.seen {
			if oldest == "" || s.at.Before(b.seen[oldest].at) {
				oldest = a
			}
		}
		delete(b.seen, oldest)
	}
}

// due returns the gRPC addresses of recent sightings not proven lately and
// not waiting for a retry.
func (b *twinBook) due(now time.Time, self string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, s := range b.seen {
		p, proven := b.proofs[s.grpcAddr]
		switch {
		case now.Sub(s.at) > twinSightingTTL, s.grpcAddr == "", s.grpcAddr == self:
		case proven && now.Sub(p.at) < foreignFresh:
		case now.Before(b.retry[s.grpcAddr]):
		default:
			out = append(out, s.grpcAddr)
		}
	}
	return out
}

// copies returns the proofs of every copy that answered.
func (b *twinBook) copies() []foreignProof {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]foreignProof, 0, len(b.proofs))
	for _, p := range b.proofs {
		out = append(out, p)
	}
	return out
}

// copyRanks is the decision between this process (serving, started at
// mine) and a proven copy: whether this one stops. A copy that cannot issue
// stops nobody; one that can stops this process if this one cannot, or
// started later (the gRPC address breaks a tie). A pure decision: both
// copies reach opposite answers from the same two start times.
func copyRanks(mineServing bool, mine int64, mineAddr string, other foreignProof) (stop bool) {
	switch {
	case !other.serving:
		return false
	case !mineServing:
		return true
	case mine != other.started:
		return mine > other.started
	}
	return mineAddr > other.addr
}

// checkCopies asks every recent sighting of this node's own name who it is,
// and stops this process if a proven copy outranks it (copyRanks).
func (n *Node) checkCopies() {
	own := n.ownCluster()
	if own == "" || n.Conflict() != nil {
		return
	}
	now := time.Now()
	b := &n.copies
	keys := map[probeKey]bool{}
	for _, addr := range b.due(now, n.cfg.GRPCAddr) {
		keys[probeKey{n.id, addr}] = true
	}
	for k, a := range n.probeAll(keys) {
		st := a.st
		b.mu.Lock()
		if a.err != nil || st.ID != n.id || st.ClusterID != own || st.Started == 0 || st.Started == n.started {
			// Nobody there, another node, or this very process.
			if b.retry == nil {
				b.retry = map[string]time.Time{}
			}
			b.retry[k.addr] = now.Add(foreignRetry)
			b.mu.Unlock()
			continue
		}
		if b.proofs == nil {
			b.proofs = map[string]foreignProof{}
		}
		p := foreignProof{
			id: n.id, cluster: own, history: coarseIndex(st.AppliedIndex), slot: st.LastWindowSlot, granted: st.LastWindowGranted,
			windows: st.GrantedWindows, layout: st.Layout, serving: st.Ready || st.LeaderID != "", at: now,
			started: st.Started, addr: k.addr,
		}
		_, known := b.proofs[k.addr]
		b.proofs[k.addr] = p
		b.mu.Unlock()
		if !known {
			n.logger.Error("another process runs this node's identity: a copy of its data dir", "copy_grpc_addr", k.addr,
				"copy_started", time.Unix(0, p.started).UTC().Format(time.RFC3339Nano), "copy_serving", p.serving)
		}
	}
	serving := n.leaderKnown()
	for _, p := range b.copies() {
		if now.Sub(p.at) > foreignConflictTTL || !copyRanks(serving, n.started, n.cfg.GRPCAddr, p) {
			continue
		}
		reason := copyAdvice(serving, n.cfg.GRPCAddr, p)
		n.conflict.Store(&reason)
		n.logger.Error("stopping issuing: " + n.Conflict().Error())
		return
	}
}

// copyAdvice is the reason a process gives when a copy of its data dir
// outranks it.
func copyAdvice(serving bool, addr string, other foreignProof) string {
	why := "which started earlier"
	if !serving {
		why = "which serves while this process's cluster has no raft leader"
	}
	return fmt.Sprintf("another process runs this node's identity (node %s of cluster %s) at %s, %s: its data dir and this "+
		"one are copies of one another, and two copies issue the same IDs, so this process (at %s) stopped issuing. Stop the "+
		"copy that should not run and wipe its data dir (a wiped node joins as a new node); restart this one only if it is "+
		"the one to keep", other.id, other.cluster, other.addr, why, addr)
}
