package sim

// The simulator's checks (sim_world_test.go): what a run must never do, and
// what it must do once the faults stop.

import (
	"fmt"
	"sort"
	"time"

	"github.com/idgen/idgen/cluster/core"
)

// simChecker judges the world: every ID as it is handed out (never twice,
// always inside its tenure's window in its cluster's log), the tenures of
// every log (never overlapping), and in the quiet phase liveness and
// membership.
type simChecker struct {
	w *simWorld
	// ids maps every ID handed out to who minted it; minted counts them.
	ids    map[int64]simMint
	minted int
	// beforeFence counts IDs two clusters both handed out before the older
	// one had fenced the younger (the meeting's window).
	beforeFence int
	// unliveAt: the last time the liveness check found a problem in the
	// quiet phase.
	unliveAt time.Duration
}

// handOut checks every ID of b as n hands it out: never handed out before,
// and inside the window its own cluster's log granted to the tenure that
// minted it.
func (ck *simChecker) handOut(n *simNode, b simBatchOf) {
	tr := b.cl.truth.FindTenure(b.slot, b.tenure)
	for _, id := range b.ids {
		ts := simStamp(id)
		slot := int(id>>simLayout.SequenceBits) & (simLayout.Slots() - 1)
		who := simMint{n.name(), b.cl.id, b.tenure, slot, ts}
		if prev, dup := ck.ids[id]; dup {
			if prev.cluster != who.cluster && !ck.w.plan.afterFence(n, prev.cluster) {
				// Two clusters before they met, or an ID the older one
				// handed out before its fence: the meeting's window, which
				// no fence can take back (DESIGN.md, "A node mints only
				// from its own log"). Once n's replica has applied the
				// fence, nothing n hands out may repeat the other's, its
				// buffered batches included (withdraw.go).
				ck.beforeFence++
				continue
			}
			ck.w.fail("ID %d handed out twice: by %s and earlier by %s", id, who, prev)
			return
		}
		ck.ids[id] = who
		switch {
		case tr == nil || tr.NodeID != b.nodeID || tr.Slot != slot:
			ck.w.fail("ID %d (%s) in no tenure of this node in its cluster's log (record %+v)", id, who, tr)
			return
		case ts <= tr.Floor || ts > tr.Granted:
			ck.w.fail("ID %d (%s) outside its tenure's window (%d, %d] in its cluster's log", id, who, tr.Floor, tr.Granted)
			return
		}
	}
	ck.minted += len(b.ids)
}

// tenures: no two tenures of a slot overlap, in a cluster's log.
func (ck *simChecker) tenures(c *simCluster) {
	ts := c.truth.Tenures
	byFloor := make([]core.Tenure, 0, len(ts))
	for _, t := range ts {
		if t.Granted > t.Floor {
			byFloor = append(byFloor, t)
		}
	}
	sort.Slice(byFloor, func(i, j int) bool {
		if byFloor[i].Slot != byFloor[j].Slot {
			return byFloor[i].Slot < byFloor[j].Slot
		}
		return byFloor[i].Floor < byFloor[j].Floor
	})
	for i := 1; i < len(byFloor); i++ {
		a, b := byFloor[i-1], byFloor[i]
		if a.Slot == b.Slot && b.Floor < a.Granted {
			ck.w.fail("tenures %d and %d of slot %d in %s overlap: (%d, %d] and (%d, %d]", a.ClaimedIndex, b.ClaimedIndex, a.Slot, c.id, a.Floor, a.Granted, b.Floor, b.Granted)
		}
	}
}

// live is the liveness check of the quiet phase: simLiveBound after the
// faults stopped, every live node of a cluster that has not met an older one
// that holds a slot in its cluster's log runs a generator for that tenure
// with room to mint, and no such node is slotless while a slot is free.
func (ck *simChecker) live() {
	p := ck.liveProblem()
	if p == "" {
		return
	}
	ck.unliveAt = ck.w.now
	if ck.w.now >= ck.w.quietAt+simLiveBound {
		ck.w.fail("liveness: %v after the faults stopped, %s", ck.w.now-ck.w.quietAt, p)
	}
}

// settled is how long after the faults stopped the liveness check last found
// a problem (0: none).
func (ck *simChecker) settled() time.Duration {
	if ck.w.quietAt == 0 || ck.unliveAt < ck.w.quietAt {
		return 0
	}
	return ck.unliveAt - ck.w.quietAt
}

// liveProblem is the first problem liveness has now ("" for none); it
// looks at every node, to keep each one's noRoom current.
func (ck *simChecker) liveProblem() string {
	var p string
	for _, n := range ck.w.nodes {
		if q := ck.nodeLiveProblem(n); p == "" {
			p = q
		}
	}
	for _, c := range ck.w.cls {
		if p == "" {
			p = ck.membershipProblem(c)
		}
	}
	return p
}

func (ck *simChecker) nodeLiveProblem(n *simNode) string {
	if !n.up || n.cl == nil || n.conflict || !ck.judged(n.cl) || n.stranger() {
		n.noRoom = false
		return ""
	}
	s := n.cl.truth
	if s.Layout == nil {
		n.noRoom = false
		return fmt.Sprintf("%s's cluster %s has no Init in its log: every claim is refused", n.name(), n.cl.id)
	}
	i := s.SlotOf(n.id)
	g := n.gen
	if i < 0 || g == nil || g.Cursor() < g.Granted() {
		n.noRoom = false
	}
	switch {
	case i < 0:
		if free := s.FreeSlot(-1); free >= 0 {
			return fmt.Sprintf("%s holds no slot while slot %d is free", n.name(), free)
		}
	case g == nil || n.tenure != s.Slots[i].Tenure:
		return fmt.Sprintf("%s holds slot %d under tenure %d in its cluster's log but runs no generator for it (generator tenure %d, the agent's %d)",
			n.name(), i, s.Slots[i].Tenure, n.tenure, n.rule.Tenure())
	case g.Cursor() < g.Granted():
	case s.Slots[i].HighWater > simLayout.Units(ck.w.base.Add(ck.w.now+simMaxAhead)):
		// The log granted past real time + max-ahead while a quorum of
		// the voters' clocks was that far ahead (a lone founder's clock
		// minutes or hours off): the node waits for time to catch up, the
		// design's cost of a wrong quorum of clocks (DESIGN.md).
		n.noRoom = false
	case !n.noRoom:
		n.noRoom, n.noRoomSince = true, ck.w.now
	case ck.w.now-n.noRoomSince > simRoomGrace:
		return fmt.Sprintf("%s has had no room on slot %d for %v: cursor %d, granted %d (log: %d)",
			n.name(), i, ck.w.now-n.noRoomSince, g.Cursor(), g.Granted(), s.Slots[i].HighWater)
	}
	return ""
}

// membershipProblem: reconcile has not brought c's membership in line with
// its live nodes yet: a server or a slot holder is an identity no live node
// of c has (gone for good, or down since the faults stopped: not reaped),
// or a live node of c is not a voter (not added or not promoted; at most
// maxVoters, and the world has fewer addresses).
func (ck *simChecker) membershipProblem(c *simCluster) string {
	if !ck.judged(c) {
		return ""
	}
	live := func(id string) bool {
		for _, n := range ck.w.nodes {
			if n.id == id && n.up && n.cl == c && !n.conflict {
				return true
			}
		}
		return false
	}
	for _, sv := range c.servers {
		if !live(string(sv.ID)) {
			return fmt.Sprintf("server %s of %s is no live node's identity: not reaped", sv.ID, c.id)
		}
	}
	for i, sl := range c.truth.Slots {
		if sl.Owner != "" && !live(sl.Owner) {
			return fmt.Sprintf("slot %d of %s is held by %s, no live node's identity: not reaped", i, c.id, sl.Owner)
		}
	}
	for _, n := range ck.w.nodes {
		if n.stranger() {
			if c.voter(n.id) && ck.w.cfg.legacy {
				return fmt.Sprintf("%s, of the release before protocol 2 under another layout, is a voter of %s: it never claims, nor reports a clock", n.name(), c.id)
			}
			if c.voter(n.id) {
				return fmt.Sprintf("%s, started with datacenter %d outside the layout, is a voter of %s: it can never claim", n.name(), n.dc, c.id)
			}
			continue
		}
		if n.up && n.cl == c && !n.conflict && !c.voter(n.id) {
			return fmt.Sprintf("%s is a live node of %s but not a voter", n.name(), c.id)
		}
	}
	return ""
}

// judged: liveness judges c, a cluster that is to serve its clients: it
// has a node up, has not stopped on a meeting, and is not a younger one
// that has yet to win one (unless no node of its older cluster is up).
func (ck *simChecker) judged(c *simCluster) bool {
	up := func(c *simCluster) bool {
		for _, n := range ck.w.nodes {
			if n.cl == c && n.up {
				return true
			}
		}
		return false
	}
	switch {
	case c.stopped || !up(c):
		return false
	case c.younger && !c.won:
		return c.older != nil && !up(c.older)
	}
	return true
}
