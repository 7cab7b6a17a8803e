package cluster

import (
	"fmt"
	"math/bits"
	"time"

	"github.com/idgen/idgen/cluster/core"
	"github.com/idgen/idgen/generator"
)

// clusterAge is what decides which of two clusters that meet keeps serving.
type clusterAge struct {
	identity
	history uint64 // coarse applied log index (coarseIndex)
	// serving: the cluster can issue now (it has a leader).
	serving bool
}

// historyMargin: below this many entries of difference (on top of a factor of
// two) two clusters' histories count as a tie.
const historyMargin = 16

// outranks reports whether a keeps serving when it meets b. Only a cluster
// that can issue stops another: one that cannot (no leader known for
// leaderGrace) stops nobody, so a survivor of a cluster that lost its
// quorum for good never stops the cluster built to replace it, and two that
// both lack a leader for a moment (a restart, an election) stop neither for
// good; once one serves again it decides. A cluster that serves outranks
// one that does not. Between two that serve, the cluster with clearly more
// committed history wins (at least twice b's, plus a margin); only when the
// two are close does the creation time decide, then the ID. Creation times
// are the bootstrapping nodes' clocks: a wiped seed whose clock is behind
// would otherwise stop the cluster that has been serving.
func (a clusterAge) outranks(b clusterAge) bool {
	switch {
	case !b.serving:
		return true
	case !a.serving:
		return false
	case a.history >= 2*b.history+historyMargin:
		return true
	case b.history >= 2*a.history+historyMargin:
		return false
	}
	return a.identity.olderThan(b.identity)
}

func (a clusterAge) String() string {
	return fmt.Sprintf("%s with about %d log entries", a.identity, a.history)
}

// conflictAdvice is the reason a node of cluster mine gives when it stops
// because it met node name (at addr) of cluster other, which outranks it:
// what happened and what the operator should do, for each way of losing.
func conflictAdvice(mine, other clusterAge, name, addr string) string {
	met := fmt.Sprintf("this node belongs to cluster %s, but gossip reached node %s (%s) of cluster %s", mine, name, addr, other)
	if !mine.serving && other.serving {
		return met + ", which serves while this node's cluster has no raft leader (it lost its quorum, or this node is " +
			"cut off from it). Two clusters would issue the same slots, so this node stopped issuing. If the rest of this " +
			"node's cluster is gone for good, stop this node, wipe its data dir and start it again with --join to the " +
			"serving cluster's nodes; if the rest comes back, restart this node once its cluster has a leader again"
	}
	return met + ", which has more history. Two clusters would issue the same slots, so this node stopped issuing. Its " +
		"data dir was probably wiped, or it was bootstrapped apart: stop it, wipe its data dir and start it again with " +
		"--join to the other cluster's nodes; or keep the two deployments on separate gossip networks"
}

// addable reports whether the leader of cluster own may add a gossip member
// to Raft: a member of this cluster, or a fresh node that belongs to no
// cluster yet. A member of another cluster, or one that has state but does
// not (yet) say which cluster it is in, is never added: its log would mix
// two clusters' slots. (A pure decision: reconcile and the simulator call it.)
func addable(m gossipMember, own string) bool {
	if !m.Parsed {
		return false
	}
	if m.Meta.ClusterID == "" {
		return !m.Meta.Member
	}
	return m.Meta.ClusterID == own
}

const (
	// foreignFresh: a proof younger than this is not asked again.
	foreignFresh = 5 * time.Second
	// foreignRetry: a member whose probe failed is asked again after this.
	foreignRetry = 5 * time.Second
	// foreignConflictTTL: a conflict counts while the other cluster's member
	// proved itself within this (it may stop answering once it stops issuing,
	// but then it is stopped).
	foreignConflictTTL = 30 * time.Second
)

// foreignProof is what a member of another cluster said of itself over the
// authenticated transport.
type foreignProof struct {
	id      string
	cluster string
	created int64 // from gossip: only breaks a near tie of histories
	history uint64
	slot    int // its last window's slot, -1 for none
	granted int64
	// windows: per slot, the largest window its cluster's log granted there
	// (protocol 2 on; nil from an older node, whose own last window is all
	// that is known).
	windows map[int]int64
	// layout is its cluster's layout (zero when it names none).
	layout generator.Layout
	// serving: its cluster can issue, as far as its answer shows (it is
	// ready, or knows a Raft leader).
	serving bool
	// saysStopped: its answer says whether it stopped for good (older nodes
	// do not); one that says so and is not serving stopped, and the fence of
	// its windows is final.
	saysStopped bool
	at          time.Time
	// started and addr: the answering process's start (Unix ns; a copy of
	// a data dir has another than the original's, twins.go) and the gRPC
	// address it answered at.
	started int64
	addr    string
	// voters: how many voters its Raft configuration has (0: unknown).
	voters int
	// leaderID and leaderAddr: the ID and Raft address of the leader it
	// follows ("" for none).
	leaderID, leaderAddr string
	// fork: a member of this very cluster ID that is not in this leader's
	// Raft configuration and follows a leader outside it: a member of
	// another log with this cluster's ID (a copy's Raft group). It is
	// fenced and contests its slot like another cluster's member, but
	// which group stops is the copies' decision (twins.go), not the
	// clusters' ranking.
	fork bool
}

// freshFor is how long p is not asked again. A process that still serves,
// and can say when it stops, is asked every copyRecheck, so that the fence
// follows its windows until it stops; the fence from the answer that says
// it stopped is final (a restarted process is asked again after
// foreignFresh, as every other).
func (p foreignProof) freshFor() time.Duration {
	if p.serving && p.saysStopped {
		return copyRecheck
	}
	return foreignFresh
}

// sightingGap: the longest silence after p that still counts as an
// unbroken sighting: three of the intervals p is asked at.
func (p foreignProof) sightingGap() time.Duration { return 3 * p.freshFor() }

// noteRun keeps since[id], the start of id's current run of answers for
// which a condition holds: on is this answer's, unbroken whether the last
// answer's held too and came soon enough.
func noteRun(since map[string]time.Time, id string, on, unbroken bool, now time.Time) {
	if !on {
		delete(since, id)
		return
	}
	if _, ok := since[id]; !ok || !unbroken {
		since[id] = now
	}
}

// forkOf reports whether a member of this cluster ID that this leader's
// configuration (servers, ID to Raft address) does not list answered as a
// member of another log: it follows a leader that the configuration does
// not list at that address (a copy's Raft group), or was proven so before
// (known) and has stopped since, when it may know no leader any more. A
// member this cluster removed follows no leader, or one of this
// configuration, and is not one.
func forkOf(st Status, servers map[string]string, known bool) bool {
	if servers == nil || st.ID == "" {
		return false
	}
	if _, listed := servers[st.ID]; listed {
		return false
	}
	if known && st.Stopped != nil && *st.Stopped {
		return true
	}
	return st.LeaderID != "" && servers[st.LeaderID] != st.LeaderAddr
}

// contestedBy is the contest rule over one book's proofs (keyed as from
// is): a proof of a process that still serves, and can say when it stops,
// closes the claims of node id (a copy's identity) and the reserves of its
// slot, since its windows grow past any fence until it stops. It lasts
// until the process answers that it stopped (its last fence is final), its
// proof is older than foreignConflictTTL, or longest (copyContestMax) after
// from: its first proof for a copy, and for a member of another cluster or
// log the start of its current run of serving answers (a group that lost
// its quorum at the meeting and has it back is contested again). A process
// that cannot say it stopped (an older release) contests nothing: it would
// contest for as long as it answers.
func contestedBy(proofs map[string]foreignProof, from map[string]time.Time, id string, slot int, now time.Time, longest time.Duration) (foreignProof, bool) {
	for k, p := range proofs {
		since, ok := from[k]
		switch {
		case !p.serving, !p.saysStopped, now.Sub(p.at) > foreignConflictTTL, !ok || now.Sub(since) > longest:
		case id != "" && p.id == id, slot >= 0 && p.slot == slot:
			return p, true
		}
	}
	return foreignProof{}, false
}

// proofFrom is what the process at addr said of itself.
func proofFrom(st Status, addr string, now time.Time) foreignProof {
	stopped := st.Stopped != nil && *st.Stopped
	return foreignProof{
		id: st.ID, cluster: st.ClusterID, history: coarseIndex(st.AppliedIndex), slot: st.LastWindowSlot, granted: st.LastWindowGranted,
		windows: st.GrantedWindows, layout: st.Layout, serving: (st.Ready || st.LeaderID != "") && !stopped,
		saysStopped: st.Stopped != nil, at: now, started: st.Started, addr: addr, voters: st.Voters, leaderID: st.LeaderID, leaderAddr: st.LeaderAddr,
	}
}

// coarseIndex keeps the top four significant bits of an index: a value that
// changes rarely enough to gossip, within an eighth of the truth.
func coarseIndex(i uint64) uint64 {
	if i < 16 {
		return i
	}
	return i &^ (uint64(1)<<(bits.Len64(i)-4) - 1)
}

// statusClock is the clock sample a voter's Status answer gives the leader
// of cluster own: only an answer from the voter itself (st.ID == id), of
// this cluster (before Init, when the leader knows none, of none: the
// founding voters' clocks decide Init's start), with a clock (a release
// before protocol 2 sends none). leaderNow is the leader's clock and at the
// real time when it arrived.
func statusClock(id, own string, st Status, leaderNow, at time.Time) (core.ClockSample, bool) {
	if st.ID != id || st.ClusterID != own || st.Clock == 0 {
		return core.ClockSample{}, false
	}
	return core.ClockSample{Reported: time.Unix(0, st.Clock), Leader: leaderNow, At: at}, true
}

// identity is a cluster's identity: a random ID and the founding voters'
// time when the cluster was made (Init's Created).
type identity struct {
	ID      string `json:"id"`
	Created int64  `json:"created"` // Unix ns
}

// olderThan orders clusters by age; the ID breaks ties.
func (i identity) olderThan(o identity) bool {
	if i.Created != o.Created {
		return i.Created < o.Created
	}
	return i.ID < o.ID
}

func (i identity) String() string {
	return fmt.Sprintf("%s (bootstrapped %s)", i.ID, time.Unix(0, i.Created).UTC().Format(time.RFC3339))
}

const (
	// copyRecheck: a proven copy that still serves is asked again this
	// often, so that the fence of its windows follows it until it stops.
	copyRecheck = time.Second
)
