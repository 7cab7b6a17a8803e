package cluster

import (
	"fmt"
	"time"

	"github.com/idgen/idgen/cluster/core"
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
	// maxTwinSightings bounds what forged sightings and hints can make a
	// node keep.
	maxTwinSightings = 16
	// copyRankGrace: a process whose group knew a Raft leader this recently
	// counts as serving when it ranks itself against a copy.
	copyRankGrace = 15 * time.Second
	// copyContestMax: how long a proven copy that still serves keeps its
	// identity's claims and its slot's reserves refused.
	copyContestMax = 30 * time.Second
)

// copyRanks is the decision between this process (serving, in a Raft
// group of mineVoters voters, started at mine) and a proven copy: whether
// this one stops. A copy that cannot issue stops nobody; one that can stops
// this process if this one cannot, or leads a larger Raft group (a copy of
// a lone seed that met the cluster the original grew into must be the one
// that stops: the cluster frees and reissues the original's slot, the
// copy's lone log never learns of it), or, in groups of one size, started
// earlier (the gRPC address breaks a tie). A pure decision: both copies
// reach opposite answers from the same two answers.
func copyRanks(mineServing bool, mineVoters int, mine int64, mineAddr string, other core.ForeignProof) (stop bool) {
	switch {
	case !other.Serving:
		return false
	case !mineServing:
		return true
	case other.Voters > 0 && mineVoters != other.Voters:
		return mineVoters < other.Voters
	case mine != other.Started:
		return mine > other.Started
	}
	return mineAddr > other.Addr
}

// checkCopies asks every recent sighting who it is. An answer of this
// cluster under this node's ID, or under a member's ID from another
// address than the one the cluster records for that member, with another
// process start than the member's own answer, is a copy. A first proof is
// told to the leader (which fences the copy's windows) and to both copies
// (which rank themselves); this process stops if a proven copy of its own
// identity outranks it (copyRanks).
func (cw *copyWatch) checkCopies() {
	n := cw.n
	defer cw.copyChecks.Add(1)
	own := cw.n.ident.ownCluster()
	if own == "" || n.ident.conflictErr() != nil {
		return
	}
	now := time.Now()
	b := &cw.n.ident.copies
	keys := map[core.ProbeKey]bool{}
	for _, addr := range b.due(now, n.cfg.GRPCAddr) {
		keys[core.ProbeKey{ID: "", Addr: addr}] = true
	}
	answers := n.members.probeAll(keys)
	// A member's copy is told from the member by the member's own answer at
	// the address the cluster records for it.
	registered := map[string]string{n.id: n.cfg.GRPCAddr}
	originals := map[core.ProbeKey]bool{}
	for k, a := range answers {
		if id := a.Status.ID; a.Err == nil && a.Status.ClusterID == own && id != n.id && id != "" {
			if reg := n.members.grpcAddrOf(id); reg != "" && reg != k.Addr {
				registered[id] = reg
				originals[core.ProbeKey{ID: id, Addr: reg}] = true
			}
		}
	}
	startOf := map[string]int64{n.id: n.started}
	stoppedHere := map[string]bool{} // members whose registered process stopped for good
	for k, a := range n.members.probeAll(originals) {
		if a.Err == nil && a.Status.ID == k.ID && a.Status.ClusterID == own {
			startOf[k.ID] = a.Status.Started
			stoppedHere[k.ID] = a.Status.Stopped != nil && *a.Status.Stopped
		}
	}
	// A member of this node's group that says it stopped, and a serving
	// member of another log with this cluster's ID (forks.go): this
	// group lost to the other, and this node follows.
	servers := n.members.configServers()
	var memberStopped string
	var forkSeen *core.ForeignProof
	for k, a := range answers {
		st := a.Status
		if a.Err != nil || st.ClusterID != own || st.ID == n.id {
			continue
		}
		_, listed := servers[st.ID]
		if listed && n.members.grpcAddrOf(st.ID) == k.Addr && st.Stopped != nil && *st.Stopped {
			memberStopped = k.Addr
		} else if p := core.ProofFrom(st, k.Addr, now); !listed && p.Serving && core.ForkOf(st, servers, false) {
			forkSeen = &p
		}
	}
	for id, stopped := range stoppedHere {
		if stopped {
			memberStopped = registered[id]
		}
	}
	for k, a := range answers {
		st := a.Status
		orig := startOf[st.ID]
		if a.Err != nil || st.ClusterID != own || st.Started == 0 || orig == 0 || st.Started == orig {
			// Nobody there, another cluster, the member itself, or this very process.
			b.failed(k.Addr, now)
			continue
		}
		p := core.ProofFrom(st, k.Addr, now)
		if !b.prove(p) {
			continue
		}
		n.logger.Error("another process runs a node identity of this cluster: a copy of its data dir", "node_id", p.ID,
			"copy_grpc_addr", k.Addr, "copy_started", time.Unix(0, p.Started).UTC().Format(time.RFC3339Nano),
			"copy_serving", p.Serving, "original_grpc_addr", registered[p.ID])
		go cw.tellOfCopy(p, registered[p.ID])
	}
	// Whether this process's group serves is taken over copyRankGrace, not
	// the moment: a stop is recorded for good, and an election or a pause
	// of a few seconds at the meeting would otherwise stop a group that
	// outranks the copy (the fourth outside attack paused two of three
	// voters for 6.7 s and the original stopped for good).
	serving, voters := n.members.leaderWithin(copyRankGrace), n.members.voters()
	for _, p := range b.copies() {
		// A copy of this identity whose windows on this node's slot reach
		// into this tenure issued inside it: the generator stops here and
		// now (what the fence's Release would do, without waiting for the
		// leader), and claims again once the copy has stopped and its
		// windows are fenced (contested, apply.go).
		if g := n.agent.gen.Load(); p.ID == n.id && g != nil && p.Slot == g.Slot() && g.Floor() < max(p.Granted, p.Windows[p.Slot]) {
			n.agent.revoke(g, fmt.Errorf("%w: a copy of this node's data dir at %s issued slot %d inside this tenure", ErrNotReady, p.Addr, p.Slot), revokedCopy)
		}
		if now.Sub(p.At) > core.ForeignConflictTTL || !p.Serving {
			continue
		}
		if p.ID == n.id && copyRanks(serving, voters, n.started, n.cfg.GRPCAddr, p) {
			cw.stopForGood(copyAdvice(serving, voters, n.cfg.GRPCAddr, p), true, p.Addr)
			return
		}
		// A member of this node's Raft group stopped because its copy
		// outranks it: the copy's Raft group is the one that keeps serving,
		// and this group's log is a fork of the copy's with the same cluster
		// ID (a copy of a lone seed that both grew). Its other members hold
		// slots the copy's group also grants, so they stop too, as the
		// member did (whose decision this follows, so two groups never
		// both stop on one meeting).
		if p.ID != n.id && stoppedHere[p.ID] {
			cw.stopForGood(followAdvice(p, registered[p.ID]), false, p.Addr)
			return
		}
	}
	if memberStopped != "" && forkSeen != nil {
		cw.stopForGood(followForkAdvice(*forkSeen, memberStopped), false, forkSeen.Addr)
	}
}

// followForkAdvice is the reason a process gives when a member of its Raft
// group (at stopped) stopped and p serves another Raft group of its
// cluster ID.
func followForkAdvice(p core.ForeignProof, stopped string) string {
	return fmt.Sprintf("a member of this node's raft group (at %s) stopped, and node %s at %s serves another raft group of "+
		"cluster %s: the two logs are forks of one, and both grant the same slots, so this process stopped issuing as "+
		"well. Wipe this node's data dir and start it again with --join to the other group's nodes (a wiped node joins "+
		"as a new node)", stopped, p.ID, p.Addr, p.Cluster)
}

// tellOfCopy tells the copy at p.addr and the original at orig about each
// other, and this node's leader about the copy: the two rank themselves, and
// the leader fences the windows of the one that stops. Each asks the
// address itself before it believes the hint.
func (cw *copyWatch) tellOfCopy(p core.ForeignProof, orig string) {
	n := cw.n
	cw.tellAll([]string{p.Addr}, orig)
	about := []string{}
	if orig != n.cfg.GRPCAddr {
		about = append(about, orig)
	}
	if _, leader := n.rs.raft.LeaderWithID(); leader != "" && string(leader) != n.id {
		if la := n.members.grpcAddrOf(string(leader)); la != "" && la != p.Addr && la != orig {
			about = append(about, la)
		}
	}
	cw.tellAll(about, p.Addr)
}

// followAdvice is the reason a process gives when a member of its Raft
// group (at reg) stopped because the member's copy p outranks it.
func followAdvice(p core.ForeignProof, reg string) string {
	return fmt.Sprintf("node %s of this node's raft group (cluster %s) stopped at %s because a copy of its data dir at %s "+
		"outranks it: this raft group's log and the copy's are forks of one log, and both grant the same slots, so this "+
		"process stopped issuing as well. Wipe this node's data dir and start it again with --join to the copy's cluster "+
		"(a wiped node joins as a new node); restart it as it is only if the copy's cluster is gone for good", p.ID, p.Cluster, reg, p.Addr)
}

// copyAdvice is the reason a process gives when a copy of its data dir
// outranks it.
func copyAdvice(serving bool, voters int, addr string, other core.ForeignProof) string {
	why := "which started earlier"
	switch {
	case !serving:
		why = "which serves while this process's cluster has no raft leader"
	case other.Voters > 0 && other.Voters != voters:
		why = fmt.Sprintf("which serves a raft group of %d voters against this process's %d", other.Voters, voters)
	}
	return fmt.Sprintf("another process runs this node's identity (node %s of cluster %s) at %s, %s: its data dir and this "+
		"one are copies of one another, and two copies issue the same IDs, so this process (at %s) stopped issuing. Stop the "+
		"copy that should not run and wipe its data dir (a wiped node joins as a new node). If this one is the one to keep, "+
		"stop it, delete the file %s in its data dir (which keeps it stopped across restarts) and start it again", other.ID,
		other.Cluster, other.Addr, why, addr, stoppedFile)
}
