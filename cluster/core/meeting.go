package core

import (
	"fmt"
	"math/bits"
	"time"

	"github.com/idgen/idgen/generator"
)

// ClusterAge is what decides which of two clusters that meet keeps serving.
type ClusterAge struct {
	Identity
	History uint64 // coarse applied log index (coarseIndex)
	// Serving: the cluster can issue now (it has a leader).
	Serving bool
}

// HistoryMargin: below this many entries of difference (on top of a factor of
// two) two clusters' histories count as a tie.
const HistoryMargin = 16

// Outranks reports whether a keeps serving when it meets b. Only a cluster
// that can issue stops another: one that cannot (no leader known for
// leaderGrace) stops nobody, so a survivor of a cluster that lost its
// quorum for good never stops the cluster built to replace it, and two that
// both lack a leader for a moment (a restart, an election) stop neither for
// good; once one serves again it decides. A cluster that serves Outranks
// one that does not. Between two that serve, the cluster with clearly more
// committed history wins (at least twice b's, plus a margin); only when the
// two are close does the creation time decide, then the ID. Creation times
// are the bootstrapping nodes' clocks: a wiped seed whose clock is behind
// would otherwise stop the cluster that has been serving.
func (a ClusterAge) Outranks(b ClusterAge) bool {
	switch {
	case !b.Serving:
		return true
	case !a.Serving:
		return false
	case a.History >= 2*b.History+HistoryMargin:
		return true
	case b.History >= 2*a.History+HistoryMargin:
		return false
	}
	return a.Identity.olderThan(b.Identity)
}

func (a ClusterAge) String() string {
	return fmt.Sprintf("%s with about %d log entries", a.Identity, a.History)
}

// ConflictAdvice is the reason a node of cluster mine gives when it stops
// because it met node name (at addr) of cluster other, which outranks it:
// what happened and what the operator should do, for each way of losing.
func ConflictAdvice(mine, other ClusterAge, name, addr string) string {
	met := fmt.Sprintf("this node belongs to cluster %s, but gossip reached node %s (%s) of cluster %s", mine, name, addr, other)
	if !mine.Serving && other.Serving {
		return met + ", which serves while this node's cluster has no raft leader (it lost its quorum, or this node is " +
			"cut off from it). Two clusters would issue the same slots, so this node stopped issuing. If the rest of this " +
			"node's cluster is gone for good, stop this node, wipe its data dir and start it again with --join to the " +
			"serving cluster's nodes; if the rest comes back, restart this node once its cluster has a leader again"
	}
	return met + ", which has more history. Two clusters would issue the same slots, so this node stopped issuing. Its " +
		"data dir was probably wiped, or it was bootstrapped apart: stop it, wipe its data dir and start it again with " +
		"--join to the other cluster's nodes; or keep the two deployments on separate gossip networks"
}

// Addable reports whether the leader of cluster own may add a gossip member
// to Raft: a member of this cluster, or a fresh node that belongs to no
// cluster yet. A member of another cluster, or one that has state but does
// not (yet) say which cluster it is in, is never added: its log would mix
// two clusters' slots. (A pure decision: reconcile and the simulator call it.)
func Addable(m GossipMember, own string) bool {
	if !m.Parsed {
		return false
	}
	if m.Meta.ClusterID == "" {
		return !m.Meta.Member
	}
	return m.Meta.ClusterID == own
}

const (
	// ForeignFresh: a proof younger than this is not asked again.
	ForeignFresh = 5 * time.Second
	// ForeignRetry: a member whose probe failed is asked again after this.
	ForeignRetry = 5 * time.Second
	// ForeignConflictTTL: a conflict counts while the other cluster's member
	// proved itself within this (it may stop answering once it stops issuing,
	// but then it is stopped).
	ForeignConflictTTL = 30 * time.Second
)

// ForeignProof is what a member of another cluster said of itself over the
// authenticated transport.
type ForeignProof struct {
	ID      string
	Cluster string
	Created int64 // from gossip: only breaks a near tie of histories
	History uint64
	Slot    int // its last window's slot, -1 for none
	Granted int64
	// Windows: per slot, the largest window its cluster's log granted there
	// (protocol 2 on; nil from an older node, whose own last window is all
	// that is known).
	Windows map[int]int64
	// Layout is its cluster's Layout (zero when it names none).
	Layout generator.Layout
	// Serving: its cluster can issue, as far as its answer shows (it is
	// ready, or knows a Raft leader).
	Serving bool
	// SaysStopped: its answer says whether it stopped for good (older nodes
	// do not); one that says so and is not serving stopped, and the fence of
	// its windows is final.
	SaysStopped bool
	At          time.Time
	// Started and addr: the answering process's start (Unix ns; a copy of
	// a data dir has another than the original's, twins.go) and the gRPC
	// address it answered at.
	Started int64
	Addr    string
	// Voters: how many Voters its Raft configuration has (0: unknown).
	Voters int
	// LeaderID and LeaderAddr: the ID and Raft address of the leader it
	// follows ("" for none).
	LeaderID, LeaderAddr string
	// Fork: a member of this very cluster ID that is not in this leader's
	// Raft configuration and follows a leader outside it: a member of
	// another log with this cluster's ID (a copy's Raft group). It is
	// fenced and contests its slot like another cluster's member, but
	// which group stops is the copies' decision (twins.go), not the
	// clusters' ranking.
	Fork bool
}

// FreshFor is how long p is not asked again. A process that still serves,
// and can say when it stops, is asked every copyRecheck, so that the fence
// follows its windows until it stops; the fence from the answer that says
// it stopped is final (a restarted process is asked again after
// foreignFresh, as every other).
func (p ForeignProof) FreshFor() time.Duration {
	if p.Serving && p.SaysStopped {
		return CopyRecheck
	}
	return ForeignFresh
}

// SightingGap: the longest silence after p that still counts as an
// unbroken sighting: three of the intervals p is asked at.
func (p ForeignProof) SightingGap() time.Duration { return 3 * p.FreshFor() }

// NoteRun keeps since[id], the start of id's current run of answers for
// which a condition holds: on is this answer's, unbroken whether the last
// answer's held too and came soon enough.
func NoteRun(since map[string]time.Time, id string, on, unbroken bool, now time.Time) {
	if !on {
		delete(since, id)
		return
	}
	if _, ok := since[id]; !ok || !unbroken {
		since[id] = now
	}
}

// ForkOf reports whether a member of this cluster ID that this leader's
// configuration (servers, ID to Raft address) does not list answered as a
// member of another log: it follows a leader that the configuration does
// not list at that address (a copy's Raft group), or was proven so before
// (known) and has stopped since, when it may know no leader any more. A
// member this cluster removed follows no leader, or one of this
// configuration, and is not one.
func ForkOf(st Status, servers map[string]string, known bool) bool {
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

// ContestedBy is the contest rule over one book's proofs (keyed as from
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
func ContestedBy(proofs map[string]ForeignProof, from map[string]time.Time, id string, slot int, now time.Time, longest time.Duration) (ForeignProof, bool) {
	for k, p := range proofs {
		since, ok := from[k]
		switch {
		case !p.Serving, !p.SaysStopped, now.Sub(p.At) > ForeignConflictTTL, !ok || now.Sub(since) > longest:
		case id != "" && p.ID == id, slot >= 0 && p.Slot == slot:
			return p, true
		}
	}
	return ForeignProof{}, false
}

// ProofFrom is what the process at addr said of itself.
func ProofFrom(st Status, addr string, now time.Time) ForeignProof {
	stopped := st.Stopped != nil && *st.Stopped
	return ForeignProof{
		ID: st.ID, Cluster: st.ClusterID, History: CoarseIndex(st.AppliedIndex), Slot: st.LastWindowSlot, Granted: st.LastWindowGranted,
		Windows: st.GrantedWindows, Layout: st.Layout, Serving: (st.Ready || st.LeaderID != "") && !stopped,
		SaysStopped: st.Stopped != nil, At: now, Started: st.Started, Addr: addr, Voters: st.Voters, LeaderID: st.LeaderID, LeaderAddr: st.LeaderAddr,
	}
}

// CoarseIndex keeps the top four significant bits of an index: a value that
// changes rarely enough to gossip, within an eighth of the truth.
func CoarseIndex(i uint64) uint64 {
	if i < 16 {
		return i
	}
	return i &^ (uint64(1)<<(bits.Len64(i)-4) - 1)
}

// StatusClock is the clock sample a voter's Status answer gives the leader
// of cluster own: only an answer from the voter itself (st.ID == id), of
// this cluster (before Init, when the leader knows none, of none: the
// founding voters' clocks decide Init's start), with a clock (a release
// before protocol 2 sends none). leaderNow is the leader's clock and at the
// real time when it arrived.
func StatusClock(id, own string, st Status, leaderNow, at time.Time) (ClockSample, bool) {
	if st.ID != id || st.ClusterID != own || st.Clock == 0 {
		return ClockSample{}, false
	}
	return ClockSample{Reported: time.Unix(0, st.Clock), Leader: leaderNow, At: at}, true
}

// Identity is a cluster's Identity: a random ID and the founding voters'
// time when the cluster was made (Init's Created).
type Identity struct {
	ID      string `json:"id"`
	Created int64  `json:"created"` // Unix ns
}

// olderThan orders clusters by age; the ID breaks ties.
func (i Identity) olderThan(o Identity) bool {
	if i.Created != o.Created {
		return i.Created < o.Created
	}
	return i.ID < o.ID
}

func (i Identity) String() string {
	return fmt.Sprintf("%s (bootstrapped %s)", i.ID, time.Unix(0, i.Created).UTC().Format(time.RFC3339))
}

const (
	// CopyRecheck: a proven copy that still serves is asked again this
	// often, so that the fence of its windows follows it until it stops.
	CopyRecheck = time.Second
)
