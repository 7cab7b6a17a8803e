package cluster

import (
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/idgen/idgen/cluster/core"
)

// Members of other clusters. Gossip says a member of another cluster may
// exist, but anyone with the gossip key can say so, in its own name or in
// another's. What decides a conflict (which side stops) and what gets fenced
// (which windows) is therefore read only from the member's own answer over the
// authenticated transport (Prober): with TLS a server certificate from the
// deployment's CA, which a wiped seed of the same deployment has and a gossip
// key alone does not give. A forged member can then make nobody stop and burn
// no slot.

// foreignBook keeps the latest proof of every member of another cluster, and
// when a failed probe may be retried. Proofs are kept after the member dies:
// its last window is all that is known of it.
type foreignBook struct {
	mu     sync.Mutex
	proofs map[string]core.ForeignProof
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

func (b *foreignBook) init() {
	b.proofs, b.retry = map[string]core.ForeignProof{}, map[string]time.Time{}
	b.forkSince, b.losing, b.servingSince = map[string]time.Time{}, map[string]time.Time{}, map[string]time.Time{}
}

// put records p, the answer of member id at now.
func (b *foreignBook) put(id string, p core.ForeignProof, now time.Time) {
	prev, known := b.proofs[id]
	b.proofs[id] = p
	unbroken := known && prev.Serving && now.Sub(prev.At) <= prev.SightingGap()
	core.NoteRun(b.forkSince, id, p.Fork && p.Serving, unbroken && prev.Fork, now)
	core.NoteRun(b.servingSince, id, p.Serving, unbroken, now)
}

// unanswered ends id's runs: its probe failed, or it answered as neither
// another cluster's member nor another log's.
func (b *foreignBook) unanswered(id string, now time.Time) {
	core.NoteRun(b.forkSince, id, false, false, now)
	core.NoteRun(b.servingSince, id, false, false, now)
}

// contests reports whether a proven member of another cluster that still
// serves on slot closes the slot's reserves to this cluster's leader (see
// contestedBy).
func (b *foreignBook) contests(slot int, now time.Time, longest time.Duration) (core.ForeignProof, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return core.ContestedBy(b.proofs, b.servingSince, "", slot, now, longest)
}

// proveForeign probes the alive gossip members of other clusters whose proof
// is missing or stale, and returns every proof known. own is this node's
// cluster ID. A leader also asks the members of its own cluster ID that its
// Raft configuration does not list (forkOf): a member of another log with
// this cluster's ID is fenced like another cluster's until it stops.
func (ms *membership) proveForeign(own string) []core.ForeignProof {
	n := ms.n
	now := time.Now()
	keys := map[core.ProbeKey]bool{}
	claimed := map[string]core.GossipMember{}
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
		if p, ok := b.proofs[id]; ok && now.Sub(p.At) < p.FreshFor() {
			continue
		}
		if now.Before(b.retry[id]) {
			continue
		}
		keys[core.ProbeKey{ID: id, Addr: m.Meta.GRPCAddr}] = true
		claimed[id] = m
	}
	b.mu.Unlock()
	answers := ms.probeAll(keys)
	b.mu.Lock()
	defer b.mu.Unlock()
	for k, a := range answers {
		m := claimed[k.ID]
		st := a.Status
		_, known := b.proofs[k.ID]
		fork := st.ClusterID == own && core.ForkOf(st, servers, known && b.proofs[k.ID].Fork)
		if a.Err != nil || st.ID != k.ID || st.ClusterID == "" || st.ClusterID == own && !fork || st.ClusterID != m.Meta.ClusterID {
			b.retry[k.ID] = now.Add(core.ForeignRetry)
			b.unanswered(k.ID, now)
			continue
		}
		p := core.ProofFrom(st, k.Addr, now)
		p.Fork = fork
		p.Created = m.Meta.Created
		b.put(k.ID, p, now)
	}
	out := make([]core.ForeignProof, 0, len(b.proofs))
	for _, p := range b.proofs {
		out = append(out, p)
	}
	return out
}
