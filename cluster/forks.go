package cluster

import (
	"fmt"
	"time"

	"github.com/hashicorp/raft"
)

// Two Raft groups with one cluster ID are two clusters. A copy of a lone
// seed's data dir that grows a group of its own is one; while a process of
// the copied identity runs in both groups, the copies rank themselves and
// the loser's group follows it (twins.go). Once one group has dropped its
// process of that ID (it left, or was wiped and rejoined as a new node), no
// identity is shared and nothing else told the two apart: the fourth
// outside attack had such groups issue 165,900 IDs twice in 40 s. So a
// leader ranks its group against every member of its cluster ID that its
// configuration does not list and that has followed a leader outside it for
// forkConfirm (forkOf, foreign.go), and the group that ranks lower stops:
// its leader stops for good, tells its members, and each member that then
// sees a member of its own group stopped and a serving member of the other
// log stops too.
//
// Which evidence counts. Inside one Raft group two leaders coexist only
// for the moments of a hand-over, and each leader's configuration lists
// the servers it leads; a member this leader does not list that follows a
// leader it does not list, for seconds on end while this leader keeps its
// quorum, is of another log. The ranks are read from both sides' own
// answers, so the two leaders reach opposite answers.

// forkConfirm: how long a member of another log must have been seen
// following a leader outside this configuration, in answers no more than
// forkSightingGap apart and while this node led throughout, before the
// groups rank. A member of this group seen so only for a moment (removed
// with its leader, and not yet told), or seen by a leader that was paused
// and deposed, never stops a group.
const (
	forkConfirm     = 5 * time.Second
	forkSightingGap = 3 * copyRecheck
)

// forkSide is what ranks one Raft group against another of its cluster ID.
type forkSide struct {
	voters     int
	history    uint64 // coarse applied index
	leaderAddr string // the group leader's Raft address
}

// forkRanks reports whether the group mine stops when it meets the group
// other (both serving): the larger group keeps serving; between groups of
// one size, the one with clearly more history (clusterAge's rule); else the
// one whose leader's Raft address sorts first. A pure decision.
func forkRanks(mine, other forkSide) (stop bool) {
	switch {
	case mine.voters != other.voters:
		return mine.voters < other.voters
	case other.history >= 2*mine.history+historyMargin:
		return true
	case mine.history >= 2*other.history+historyMargin:
		return false
	}
	return mine.leaderAddr > other.leaderAddr
}

// checkForks is the leader's side: it ranks its group against each member
// of another log that has been proven long enough, and stops the group if
// it ranks lower. A copy of an identity in both groups decides first
// (twins.go): while this node holds a recent proof of a copy, it waits.
func (n *Node) checkForks() {
	if n.Conflict() != nil || n.rs.raft.State() != raft.Leader {
		return
	}
	now := time.Now()
	for _, p := range n.copies.copies() {
		if now.Sub(p.at) < foreignConflictTTL {
			return
		}
	}
	confirm := forkConfirm
	if n.cfg.forkConfirm > 0 {
		confirm = n.cfg.forkConfirm
	}
	mine := forkSide{voters: n.voters(), history: n.history(), leaderAddr: n.cfg.RaftAdvertise}
	led := time.Unix(0, n.ledSince.Load())
	b := &n.foreign
	b.mu.Lock()
	var lose *foreignProof
	for id, p := range b.proofs {
		since, seen := b.forkSince[id]
		if !seen || !p.fork || !p.serving || p.leaderAddr == "" || now.Sub(p.at) > forkSightingGap || now.Sub(since) < confirm ||
			n.ledSince.Load() == 0 || since.Before(led) {
			continue
		}
		if forkRanks(mine, forkSide{voters: p.voters, history: p.history, leaderAddr: p.leaderAddr}) {
			lose = &p
			break
		}
	}
	b.mu.Unlock()
	if lose != nil {
		n.stopForGood(forkAdvice(*lose, mine), false, lose.addr, n.cfg.GRPCAddr)
	}
}

// forkAdvice is the reason a leader gives when its Raft group ranks lower
// than another group of its cluster ID that p is a member of.
func forkAdvice(p foreignProof, mine forkSide) string {
	why := fmt.Sprintf("a raft group of %d voters against this one's %d", p.voters, mine.voters)
	if p.voters == mine.voters {
		why = fmt.Sprintf("a raft group of as many voters, with about %d log entries against this one's %d, led from %s "+
			"(this one from %s)", p.history, mine.history, p.leaderAddr, mine.leaderAddr)
	}
	return fmt.Sprintf("node %s at %s belongs to cluster %s too but to another raft group, %s: the two logs are forks of "+
		"one (a copied data dir grew a group of its own), and both grant the same slots, so this group stopped "+
		"issuing. Wipe this node's data dir and start it again with --join to the other group's nodes (a wiped node "+
		"joins as a new node)", p.id, p.addr, p.cluster, why)
}

// configServers is this node's Raft configuration, ID to Raft address.
func (n *Node) configServers() map[string]string {
	out := map[string]string{}
	for _, srv := range n.rs.raft.GetConfiguration().Configuration().Servers {
		out[string(srv.ID)] = string(srv.Address)
	}
	return out
}
