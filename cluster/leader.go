package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// leaderState is what the leader loop remembers between sweeps.
type leaderState struct {
	// absentSince: Raft servers that gossip does not show as alive, and since when.
	absentSince map[string]time.Time
	// nonvoterSince: when a server was first seen as a non-voter, to promote
	// only members that have been stable for a sweep.
	nonvoterSince map[string]time.Time
}

// monitorLeadership starts and stops the leader loop as leadership changes.
// It watches NotifyCh, which unlike LeaderCh does not drop changes.
func (n *Node) monitorLeadership() {
	var stop, done chan struct{}
	stopLeader := func() {
		if stop != nil {
			close(stop)
			<-done
			stop, done = nil, nil
		}
	}
	for {
		select {
		case isLeader := <-n.rs.notifyCh:
			if isLeader && stop == nil {
				stop, done = make(chan struct{}), make(chan struct{})
				go func(stop, done chan struct{}) {
					defer close(done)
					n.leaderLoop(stop)
				}(stop, done)
			} else if !isLeader {
				stopLeader()
			}
		case <-n.shutdownCh:
			stopLeader()
			return
		}
	}
}

// leaderLoop runs while this node leads: Barrier first (so the state holds
// everything committed by earlier leaders), then a full reconcile, then
// reconciles on gossip events and on a periodic sweep.
func (n *Node) leaderLoop(stop chan struct{}) {
	n.logger.Info("gained leadership")
	defer n.logger.Info("lost leadership")
	defer n.leaderReady.Store(false)
	n.leaderState = leaderState{absentSince: map[string]time.Time{}, nonvoterSince: map[string]time.Time{}}
	for {
		if err := n.rs.raft.Barrier(applyTimeout).Error(); err == nil {
			break
		} else {
			n.logger.Warn("leader barrier", "err", err)
		}
		select {
		case <-stop:
			return
		case <-time.After(time.Second):
		}
	}
	n.leaderReady.Store(true)
	// Until the Init entry is applied every Claim is refused, so a failed
	// establish (a slow disk, a commit timeout) is retried with backoff for as
	// long as this node leads; it is never left to a leadership change.
	var retryInit <-chan time.Time
	backoff := establishBackoff
	if err := n.establish(); err != nil {
		n.logger.Error("establish leadership; retrying", "err", err, "in", backoff)
		retryInit = time.After(backoff)
	}
	tick := time.NewTicker(n.cfg.ReconcileInterval)
	defer tick.Stop()
	for {
		n.reconcile()
		n.fenceForeign()
		if n.leaderClockIsOutlier() {
			return
		}
		select {
		case <-stop:
			return
		case <-tick.C:
		case <-n.gossip.events:
		case <-retryInit:
			retryInit = nil
			if err := n.establish(); err != nil {
				backoff = min(2*backoff, maxEstablishBackoff)
				n.logger.Error("establish leadership; retrying", "err", err, "in", backoff)
				retryInit = time.After(backoff)
			}
		}
	}
}

// The first retry of a failed establish comes after establishBackoff, each
// next one after twice the wait, up to maxEstablishBackoff.
const (
	establishBackoff    = 100 * time.Millisecond
	maxEstablishBackoff = 5 * time.Second
)

// establish writes the Init entry of a new cluster: a fresh random identity,
// and every slot's highWater at this clock plus max-ahead, above anything an
// earlier life of any node could have stamped (it could borrow at most
// max-ahead past its own leader's clock).
func (n *Node) establish() error {
	var inited bool
	n.fsm.view(func(s *state) { inited = s.Layout != nil })
	if inited {
		return nil
	}
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return err
	}
	l := n.cfg.Layout
	now := n.clock.Now()
	_, _, err := n.raftApply(context.Background(), command{
		Type: cmdInit, Layout: &l, ClusterID: hex.EncodeToString(b[:]), Created: now.UnixNano(),
		Start: l.Units(now) + unitsCeil(n.cfg.MaxAhead, l.Unit),
	})
	return err
}

// reconcile brings Raft membership and slot ownership in line with gossip:
// alive members join as non-voters and are promoted while voters < 5; left
// members are removed at once, dead or missing ones after ReapAfter. It never
// removes the leader itself nor breaks quorum.
func (n *Node) reconcile() {
	// A leader whose cluster is outranked by another it meets in gossip
	// changes no membership: it would race the other cluster's leader for
	// the same fresh nodes, and a fresh node's log would mix both clusters.
	// Checked here, not only on the housekeeping tick, because a gossip
	// event that shows a new member may show the other cluster as well.
	n.checkConflict()
	if n.Conflict() != nil {
		return
	}
	cf := n.rs.raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		n.logger.Warn("reconcile: raft configuration", "err", err)
		return
	}
	servers := cf.Configuration().Servers
	members := n.gossip.snapshot()
	now := time.Now()
	ls := &n.leaderState

	inRaft := map[string]raft.Server{}
	voters := 0
	for _, s := range servers {
		inRaft[string(s.ID)] = s
		if s.Suffrage == raft.Voter {
			voters++
		}
	}

	// A leader that restarted on a new address still has its old one in the
	// configuration; other servers would dial that after it steps down.
	if s, ok := inRaft[n.id]; ok && string(s.Address) != n.cfg.RaftAdvertise {
		add := n.rs.raft.AddNonvoter
		if s.Suffrage == raft.Voter {
			add = n.rs.raft.AddVoter
		}
		if err := add(s.ID, raft.ServerAddress(n.cfg.RaftAdvertise), 0, applyTimeout).Error(); err != nil {
			n.logger.Warn("reconcile: update own raft address", "err", err)
		} else {
			n.logger.Info("updated own raft address", "from", s.Address, "to", n.cfg.RaftAdvertise)
		}
	}

	// Remove servers that left, or that have been gone longer than ReapAfter.
	for _, s := range servers {
		id := string(s.ID)
		if id == n.id {
			continue
		}
		m, seen := members[id]
		if seen && (m.State == "alive" || m.State == "suspect") {
			delete(ls.absentSince, id)
			continue
		}
		if _, ok := ls.absentSince[id]; !ok {
			since := now
			if seen && m.State == "dead" && m.Since.Before(now) {
				since = m.Since
			}
			ls.absentSince[id] = since
		}
		if (seen && m.State == "left") || now.Sub(ls.absentSince[id]) >= n.cfg.ReapAfter {
			n.reap(id, "gone from gossip")
		}
	}

	// Nodes in the state (holding a slot) but not in Raft: free their slots
	// on the same terms.
	var stateOnly []string
	n.fsm.view(func(s *state) {
		for _, id := range s.sortedNodeIDs() {
			if _, ok := inRaft[id]; !ok && id != n.id {
				stateOnly = append(stateOnly, id)
			}
		}
	})
	for _, id := range stateOnly {
		m, seen := members[id]
		if seen && (m.State == "alive" || m.State == "suspect") {
			continue // about to be added back below
		}
		if seen && m.State == "left" {
			n.reap(id, "left")
			continue
		}
		if _, ok := ls.absentSince[id]; !ok {
			ls.absentSince[id] = now
		}
		if now.Sub(ls.absentSince[id]) >= n.cfg.ReapAfter {
			n.reap(id, "not in raft and gone from gossip")
		}
	}

	// Add alive members as non-voters; promote stable non-voters.
	ids := make([]string, 0, len(members))
	for id := range members {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		m := members[id]
		if m.State != "alive" || !m.Parsed || m.Meta.RaftAddr == "" || id == n.id {
			continue
		}
		if !n.addable(m) {
			if _, known := inRaft[id]; !known {
				n.logger.Debug("not adding a member of another or an unnamed cluster", "id", id, "cluster", m.Meta.ClusterID)
			}
			continue
		}
		s, ok := inRaft[id]
		if !ok {
			// A wiped data dir comes back as a new ID on the old address;
			// Raft refuses two servers on one address, so the old one goes,
			// but only once gossip no longer sees it alive: otherwise the two
			// would take the address from each other on every sweep.
			taken := false
			for _, old := range servers {
				if string(old.Address) != m.Meta.RaftAddr || string(old.ID) == id || string(old.ID) == n.id {
					continue
				}
				if om, seen := members[string(old.ID)]; seen && (om.State == "alive" || om.State == "suspect") {
					taken = true
					continue
				}
				n.reap(string(old.ID), "address taken over by "+id)
			}
			if taken {
				n.logger.Info("waiting for the old owner of a raft address to fail before adding its successor", "id", id, "raft", m.Meta.RaftAddr)
				continue
			}
			if err := n.rs.raft.AddNonvoter(raft.ServerID(id), raft.ServerAddress(m.Meta.RaftAddr), 0, applyTimeout).Error(); err != nil {
				n.logger.Warn("reconcile: add non-voter", "id", id, "err", err)
				continue
			}
			n.logger.Info("added non-voter", "id", id, "name", m.Meta.Name, "raft", m.Meta.RaftAddr)
			ls.nonvoterSince[id] = now
			continue
		}
		if string(s.Address) != m.Meta.RaftAddr {
			// The node restarted on a new address with its old state: adding
			// it again under the same ID updates the address.
			add := n.rs.raft.AddNonvoter
			if s.Suffrage == raft.Voter {
				add = n.rs.raft.AddVoter
			}
			if err := add(raft.ServerID(id), raft.ServerAddress(m.Meta.RaftAddr), 0, applyTimeout).Error(); err != nil {
				n.logger.Warn("reconcile: update raft address", "id", id, "err", err)
			} else {
				n.logger.Info("updated raft address", "id", id, "from", s.Address, "to", m.Meta.RaftAddr)
			}
			continue
		}
		if s.Suffrage == raft.Voter {
			delete(ls.nonvoterSince, id)
			continue
		}
		since, ok := ls.nonvoterSince[id]
		if !ok {
			ls.nonvoterSince[id] = now
			continue
		}
		if voters < maxVoters && now.Sub(since) >= time.Second {
			if err := n.rs.raft.AddVoter(raft.ServerID(id), s.Address, 0, applyTimeout).Error(); err != nil {
				n.logger.Warn("reconcile: promote", "id", id, "err", err)
				continue
			}
			voters++
			delete(ls.nonvoterSince, id)
			n.logger.Info("promoted to voter", "id", id, "voters", voters)
		}
	}
}

// reap removes a node from the state and from Raft, logging the reason.
func (n *Node) reap(id, why string) {
	ctx, cancel := context.WithTimeout(context.Background(), applyTimeout)
	defer cancel()
	slot, err := n.leaderRemove(ctx, id)
	if err != nil {
		n.logger.Warn("reap", "id", id, "reason", why, "err", err)
		return
	}
	delete(n.leaderState.absentSince, id)
	n.logger.Info("reaped node", "id", id, "reason", why, "freed_slot", slot)
}

// skewTracker remembers the clock differences the leader measured on recent
// requests, per node.
type skewTracker struct {
	mu   sync.Mutex
	last map[string]skewSample
}

type skewSample struct {
	skew time.Duration
	at   time.Time
}

func (t *skewTracker) observe(id string, skew time.Duration, at time.Time) {
	if id == "" {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.last == nil {
		t.last = map[string]skewSample{}
	}
	t.last[id] = skewSample{skew, at}
}

// recent counts the nodes heard from within window whose clocks were off by
// more than max, and those within it.
func (t *skewTracker) recent(self string, window, max time.Duration, now time.Time) (off, within int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for id, s := range t.last {
		if id == self || now.Sub(s.at) > window {
			continue
		}
		if s.skew > max || s.skew < -max {
			off++
		} else {
			within++
		}
	}
	return off, within
}

// leaderClockIsOutlier hands leadership away when most nodes that spoke to
// this leader recently are refused for clock skew: then the leader's clock,
// not theirs, is the one that is off, and while it leads nobody else can get
// room. It returns true when leadership was handed off.
func (n *Node) leaderClockIsOutlier() bool {
	off, within := n.skews.recent(n.id, 5*time.Second, n.cfg.MaxSkew, time.Now())
	if off < 2 || off <= within {
		return false
	}
	n.logger.Warn("most nodes are refused for clock skew; this leader's clock looks wrong, handing off leadership",
		"skewed_nodes", off, "in_step_nodes", within)
	if err := n.rs.raft.LeadershipTransfer().Error(); err != nil {
		n.logger.Warn("leadership transfer", "err", err)
		return false
	}
	n.skews.mu.Lock()
	n.skews.last = nil
	n.skews.mu.Unlock()
	return true
}

// fenceForeign closes off, in this cluster's log, every window that members
// of another cluster report having held (their gossip metadata): a slot's
// highWater rises above it before any node of this cluster may claim there
// again, and a tenure holding such a slot ends. Without it, a wiped seed that
// formed a cluster of its own and issued on slot k until the clusters met
// would have its IDs issued again by whoever took slot k here next (starting
// at this cluster's highWater, which knew nothing of them). Members that are
// dead still count: their last window is all that is known of them.
func (n *Node) fenceForeign() {
	own := n.ownCluster()
	if own == "" || n.Conflict() != nil {
		return
	}
	type fence struct {
		upTo    int64
		foreign string
	}
	want := map[int]fence{}
	for _, m := range n.gossip.snapshot() {
		if !m.Parsed || m.Meta.ClusterID == "" || m.Meta.ClusterID == own || m.Meta.WindowSlot <= 0 {
			continue
		}
		slot := m.Meta.WindowSlot - 1
		if f := want[slot]; m.Meta.WindowGranted > f.upTo {
			want[slot] = fence{m.Meta.WindowGranted, m.Meta.ClusterID}
		}
	}
	if len(want) == 0 {
		return
	}
	slots := make([]int, 0, len(want))
	for slot := range want {
		slots = append(slots, slot)
	}
	sort.Ints(slots)
	for _, slot := range slots {
		f := want[slot]
		var below, valid bool
		n.fsm.view(func(s *state) {
			valid = s.Layout != nil && slot < len(s.Slots) && f.upTo <= s.Layout.MaxTimestamp()
			below = valid && s.Slots[slot].HighWater < f.upTo
		})
		if !below {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), applyTimeout)
		_, _, err := n.raftApply(ctx, command{Type: cmdFence, Slot: slot, UpTo: f.upTo, Foreign: f.foreign, ClusterID: own})
		cancel()
		if err != nil {
			n.logger.Warn("fence a window of another cluster", "slot", slot, "up_to", f.upTo, "other_cluster", f.foreign, "err", err)
			continue
		}
		n.logger.Warn("fenced a window another cluster held: the slot's next tenure starts above it",
			"slot", slot, "up_to", f.upTo, "other_cluster", f.foreign)
	}
}
