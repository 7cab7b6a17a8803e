package cluster

import (
	"fmt"
	"time"

	"github.com/hashicorp/raft"

	"github.com/idgen/idgen/cluster/core"
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

// forkConfirm: how long this node's group must have ranked below another
// group of its cluster ID, on every check, before it stops. The ranking
// counts only while a member of the other group and that group's leader
// both answer, without a break (answers at most three of their probe
// intervals apart, sightingGap), as serving members of another log, and
// only while this node has led throughout. A member of this group seen so
// only for a moment (removed with its leader, and not yet told), a leader
// that was paused and deposed meanwhile, inputs read at different moments
// (a promotion between the two sides' answers), and a group whose leader
// stopped (whatever its older members say) stop nothing.
const forkConfirm = 5 * time.Second

// forkSide is what ranks one Raft group against another of its cluster ID.
type forkSide struct {
	voters     int
	history    uint64 // coarse applied index
	leaderID   string // the group leader's node ID
	leaderAddr string // and its Raft address, for the operator
}

// forkRanks reports whether the group mine stops when it meets the group
// other (both serving): the larger group keeps serving; between groups of
// one size, the one with clearly more history (clusterAge's rule); else the
// one whose leader's node ID sorts first (each side reads both IDs in one
// form, unlike addresses, which a node may advertise as a name and its
// group record as an IP). A pure decision.
func forkRanks(mine, other forkSide) (stop bool) {
	switch {
	case mine.voters != other.voters:
		return mine.voters < other.voters
	case other.history >= 2*mine.history+core.HistoryMargin:
		return true
	case mine.history >= 2*other.history+core.HistoryMargin:
		return false
	case mine.leaderID != other.leaderID:
		return mine.leaderID > other.leaderID
	}
	return mine.leaderAddr > other.leaderAddr
}

// forkVerdict is the leader's decision over its book (b.mu held): the
// member of another log whose group this node's group (mine) has ranked
// below on every check for confirm, counted from the latest of when the
// ranking began, when the member's unbroken sighting began, and led (when
// this node last became the leader). It keeps b.losing; losing reports
// whether this group ranks below one on this check (whatever the count),
// and lose is then that group's member.
func (b *foreignBook) forkVerdict(mine forkSide, led time.Time, confirm time.Duration, now time.Time) (lose core.ForeignProof, stop, losing bool) {
	servingFork := func(p core.ForeignProof) bool {
		return p.Fork && p.Serving && now.Sub(p.At) <= p.SightingGap()
	}
	for id, p := range b.proofs {
		since, seen := b.forkSince[id]
		leader, known := b.proofs[p.LeaderID]
		other := forkSide{voters: p.Voters, history: p.History, leaderID: p.LeaderID, leaderAddr: p.LeaderAddr}
		if !seen || p.LeaderID == "" || !servingFork(p) || !known || !servingFork(leader) || !forkRanks(mine, other) {
			delete(b.losing, id)
			continue
		}
		losing, lose = true, p
		from, ok := b.losing[id]
		if !ok {
			from = now
			b.losing[id] = now
		}
		for _, t := range []time.Time{since, led} {
			if t.After(from) {
				from = t
			}
		}
		if now.Sub(from) >= confirm {
			return p, true, true
		}
	}
	return lose, false, losing
}

// checkForks is the leader's side: it stops the group once forkVerdict
// says so. A copy of an identity in both groups decides first (twins.go):
// while a copy this node proved served within foreignConflictTTL, it
// waits (the copies' decision, and the losing group's following it, take
// a few seconds, and forkRanks might answer otherwise meanwhile); a copy
// that stopped long ago and lingers does not keep it waiting.
//
// While this group ranks below another on the latest check, before the
// count is done, the leader holds every Claim and Reserve (forkHold,
// contested in apply.go): the group issues only what it was granted
// before, which the other group fences, and its windows stop growing
// under the other's. A group that came back from a lost quorum, with a
// leader whose book is new, issues only in the second before that leader
// has proved the other group. A hold that was wrong (the ranking flipped)
// ends on the next check.
func (rc *reconciler) checkForks() {
	n := rc.n
	if n.ident.conflictErr() != nil || n.rs.raft.State() != raft.Leader {
		n.gate.forkHold.Store(nil)
		return
	}
	now := time.Now()
	for _, p := range n.ident.copies.copies() {
		if p.Serving && now.Sub(p.At) < core.ForeignConflictTTL {
			rc.copyServed = now
		}
	}
	led := n.clusterClock.ledSince.Load()
	if now.Sub(rc.copyServed) < core.ForeignConflictTTL || led == 0 {
		n.gate.forkHold.Store(nil)
		return
	}
	mine := forkSide{voters: n.members.voters(), history: n.ident.history(), leaderID: n.id, leaderAddr: n.cfg.RaftAdvertise}
	b := &rc.n.members.foreign
	b.mu.Lock()
	lose, stop, losing := b.forkVerdict(mine, time.Unix(0, led), forkConfirm, now)
	b.mu.Unlock()
	if !losing {
		n.gate.forkHold.Store(nil)
		return
	}
	if stop {
		n.twins.stopForGood(forkAdvice(lose, mine), false, lose.Addr, n.cfg.GRPCAddr)
		return
	}
	hold := fmt.Sprintf("node %s at %s serves another raft group of this cluster ID that outranks this one (%d voters against %d): "+
		"this leader grants nothing until the two are settled (this group stops, or the other)", lose.ID, lose.Addr, lose.Voters, mine.voters)
	n.gate.forkHold.Store(&hold)
}

// forkAdvice is the reason a leader gives when its Raft group ranks lower
// than another group of its cluster ID that p is a member of.
func forkAdvice(p core.ForeignProof, mine forkSide) string {
	why := fmt.Sprintf("a raft group of %d voters against this one's %d", p.Voters, mine.voters)
	if p.Voters == mine.voters {
		why = fmt.Sprintf("a raft group of as many voters, with about %d log entries against this one's %d, led from %s "+
			"(this one from %s)", p.History, mine.history, p.LeaderAddr, mine.leaderAddr)
	}
	return fmt.Sprintf("node %s at %s belongs to cluster %s too but to another raft group, %s: the two logs are forks of "+
		"one (a copied data dir grew a group of its own), and both grant the same slots, so this group stopped "+
		"issuing. Wipe this node's data dir and start it again with --join to the other group's nodes (a wiped node "+
		"joins as a new node)", p.ID, p.Addr, p.Cluster, why)
}
