package cluster

import (
	"math/bits"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/idgen/idgen/generator"
)

// Members of other clusters. Gossip says a member of another cluster may
// exist, but anyone with the gossip key can say so, in its own name or in
// another's. What decides a conflict (which side stops) and what gets fenced
// (which windows) is therefore read only from the member's own answer over the
// authenticated transport (Prober): with TLS a server certificate from the
// deployment's CA, which a wiped seed of the same deployment has and a gossip
// key alone does not give. A forged member can then make nobody stop and burn
// no slot.

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

// foreignBook keeps the latest proof of every member of another cluster, and
// when a failed probe may be retried. Proofs are kept after the member dies:
// its last window is all that is known of it.
type foreignBook struct {
	mu     sync.Mutex
	proofs map[string]foreignProof
	retry  map[string]time.Time
	// forkSince: since when each member has answered, without a break, as
	// a serving member of another log of this cluster ID (forks.go).
	forkSince map[string]time.Time
	// losing: since when, check after check, this node's group has ranked
	// below the group of each such member (forkVerdict).
	losing map[string]time.Time
	// servingSince: since when each member has answered, without a break,
	// that it serves: the contest's longest counts from here, not from
	// its first proof, so a group that could not issue and comes back
	// (its quorum restored) is contested again.
	servingSince map[string]time.Time
}

// sightingGap: the longest silence after p that still counts as an
// unbroken sighting: three of the intervals p is asked at.
func (p foreignProof) sightingGap() time.Duration { return 3 * p.freshFor() }

func (b *foreignBook) init() {
	b.proofs, b.retry = map[string]foreignProof{}, map[string]time.Time{}
	b.forkSince, b.losing, b.servingSince = map[string]time.Time{}, map[string]time.Time{}, map[string]time.Time{}
}

// put records p, the answer of member id at now.
func (b *foreignBook) put(id string, p foreignProof, now time.Time) {
	prev, known := b.proofs[id]
	b.proofs[id] = p
	unbroken := known && prev.serving && now.Sub(prev.at) <= prev.sightingGap()
	noteRun(b.forkSince, id, p.fork && p.serving, unbroken && prev.fork, now)
	noteRun(b.servingSince, id, p.serving, unbroken, now)
}

// unanswered ends id's runs: its probe failed, or it answered as neither
// another cluster's member nor another log's.
func (b *foreignBook) unanswered(id string, now time.Time) {
	noteRun(b.forkSince, id, false, false, now)
	noteRun(b.servingSince, id, false, false, now)
}

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

// contests reports whether a proven member of another cluster that still
// serves on slot closes the slot's reserves to this cluster's leader (see
// contestedBy).
func (b *foreignBook) contests(slot int, now time.Time, longest time.Duration) (foreignProof, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return contestedBy(b.proofs, b.servingSince, "", slot, now, longest)
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

// proveForeign probes the alive gossip members of other clusters whose proof
// is missing or stale, and returns every proof known. own is this node's
// cluster ID. A leader also asks the members of its own cluster ID that its
// Raft configuration does not list (forkOf): a member of another log with
// this cluster's ID is fenced like another cluster's until it stops.
func (ms *membership) proveForeign(own string) []foreignProof {
	n := ms.n
	now := time.Now()
	keys := map[probeKey]bool{}
	claimed := map[string]gossipMember{}
	var servers map[string]string // this leader's configuration, ID to Raft address
	if n.rs.raft.State() == raft.Leader {
		servers = ms.configServers()
	}
	b := &ms.foreign
	b.mu.Lock()
	for id, m := range n.gossip.snapshot() {
		_, listed := servers[id]
		sameID := m.Meta.ClusterID == own && servers != nil && !listed && id != n.id
		if m.State != MemberAlive || !m.Parsed || m.Meta.ClusterID == "" || m.Meta.ClusterID == own && !sameID || m.Meta.GRPCAddr == "" {
			continue
		}
		if p, ok := b.proofs[id]; ok && now.Sub(p.at) < p.freshFor() {
			continue
		}
		if now.Before(b.retry[id]) {
			continue
		}
		keys[probeKey{id, m.Meta.GRPCAddr}] = true
		claimed[id] = m
	}
	b.mu.Unlock()
	answers := ms.probeAll(keys)
	b.mu.Lock()
	defer b.mu.Unlock()
	for k, a := range answers {
		m := claimed[k.id]
		st := a.st
		_, known := b.proofs[k.id]
		fork := st.ClusterID == own && forkOf(st, servers, known && b.proofs[k.id].fork)
		if a.err != nil || st.ID != k.id || st.ClusterID == "" || st.ClusterID == own && !fork || st.ClusterID != m.Meta.ClusterID {
			b.retry[k.id] = now.Add(foreignRetry)
			b.unanswered(k.id, now)
			continue
		}
		p := proofFrom(st, k.addr, now)
		p.fork = fork
		p.created = m.Meta.Created
		b.put(k.id, p, now)
	}
	out := make([]foreignProof, 0, len(b.proofs))
	for _, p := range b.proofs {
		out = append(out, p)
	}
	return out
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
