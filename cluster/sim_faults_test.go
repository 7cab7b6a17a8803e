package cluster

import (
	"fmt"
	"time"
)

// simFaults are faults planted in the simulated world (never in product code),
// to prove that the checker reports what they break.
type simFaults struct {
	// adoptForwards: a leader answers forwards from any cluster as if they were
	// its own (no identity checks on either side), and gives a slot to whoever
	// claims, member or not; trustAnswers: the agent starts and extends its
	// generator from answers, not from its replica. Together they are the
	// wiped leader's duplicate of DESIGN.md, "A node mints only from its own log".
	adoptForwards bool
	trustAnswers  bool
	// lateStop: a replica's apply does not stop a generator whose tenure it
	// ended (no fsm.afterApply); only the agent's next pass does, as before
	// the meeting model found the gap a fence falls into.
	lateStop bool
	// keepEnded: the buffer hands out batches minted in a tenure that has
	// ended (no Node.Withdrawn), as before the check at hand-out time found
	// a fenced holder's buffered batches repeating the other cluster's IDs.
	keepEnded bool
}

// age is what a member of c says of its cluster when another cluster's
// node asks (its Status): serving while it knows a leader, within
// leaderGrace of the last ready one (Node.leaderKnown).
func (w *simWorld) age(c *simCluster) clusterAge {
	serving := c.servedAt != 0 && w.now-c.servedAt < leaderGrace
	return clusterAge{identity: identity{ID: c.id, Created: c.truth.state.Created}, history: coarseIndex(uint64(len(c.log))), serving: serving}
}

// inGossip: c's nodes are in the network's gossip: a younger cluster
// once its meeting is due.
func (w *simWorld) inGossip(c *simCluster) bool { return !c.younger || c.met }

// meet is a younger cluster y and an older one o in each other's gossip,
// each step until one stops: whenever both have a node awake (to ask and
// to answer), each side runs the shipped rule (clusterAge.outranks) on
// what the other's member says; a side that does not keep serving stops,
// every node of it (and drops its buffer), and the other's leader fences
// it. A cluster that can issue stopped for one that cannot fails the run:
// nobody would issue.
func (w *simWorld) meet(y, o *simCluster) {
	awake := func(c *simCluster) bool {
		for _, n := range w.nodes {
			if n.cl == c && n.awake() {
				return true
			}
		}
		return false
	}
	if !awake(y) || !awake(o) {
		return
	}
	ay, ao := w.age(y), w.age(o)
	var win, lose *simCluster
	switch {
	case !ay.outranks(ao):
		win, lose = o, y
	case !ao.outranks(ay):
		win, lose = y, o
	default:
		return // neither serves: neither stops, and the meeting goes on
	}
	win.won = win.won || win.younger
	if aw, al := w.age(win), w.age(lose); al.serving && !aw.serving {
		w.fail("%s stopped on meeting %s: it serves (%s) and the other cannot (%s)", lose.id, win.id, al, aw)
		return
	}
	lose.stopped, lose.fencedBy = true, win
	for _, n := range w.nodes {
		if n.cl == lose {
			n.conflict = true
		}
	}
	w.logf("%s (%s) meets %s (%s): %s stops", y.id, ay, o.id, ao, lose.id)
}

// home is the cluster a node without one joins: the replacement a doomed
// world's operator built, else the first cluster that still serves its
// clients (not stopped, and not a younger one that has not won).
func (w *simWorld) home() *simCluster {
	if w.replacement != nil && !w.replacement.stopped {
		return w.replacement
	}
	for _, c := range w.cls {
		if !c.stopped && (!c.younger || c.won) {
			return c
		}
	}
	return nil
}

// doom is the first cluster losing its quorum for good (simConfig.doom):
// one up node of it survives; of the others, each crashes for good or is
// wiped by the operator into the replacement cluster (at least one is),
// and those already down never come back. The replacement meets the
// survivor after leaderGrace.
func (w *simWorld) doom() {
	w.cfg.doom = false
	c := w.cls[0]
	if c.stopped || c.truth.state.Layout == nil {
		return
	}
	var mine []*simNode
	for _, n := range w.nodes {
		if n.cl == c && !n.stranger() {
			mine = append(mine, n)
		}
	}
	var up []*simNode
	for _, n := range mine {
		if n.up {
			up = append(up, n)
		}
	}
	if len(up) < 2 {
		return
	}
	survivor := up[w.r.Intn(len(up))]
	var wipe []*simNode
	for _, n := range mine {
		switch {
		case n == survivor:
		case !n.up:
			n.gone = true
		case len(wipe) == 0 || w.r.Intn(2) == 0:
			wipe = append(wipe, n)
		default:
			n.crash()
			n.gone = true
		}
	}
	w.cfg.doomed = true
	w.logf("%s loses its quorum for good; %s survives", c.id, survivor.name())
	for _, n := range wipe {
		w.wipe(n)
		if w.replacement == nil {
			w.replacement = n.cl
		}
	}
	w.replacement.meetAt = w.now + leaderGrace + time.Duration(w.r.Int63n(int64(simMaxAhead)))
}

// afterFence: n, of the cluster that met the younger cluster other and
// fenced it, hands out with a replica that has applied the fence.
func (w *simWorld) afterFence(n *simNode, other string) bool {
	for _, c := range w.cls {
		if c.id == other && c.fencedBy == n.cl && c.fencedAt != 0 {
			return n.applied >= c.fencedAt
		}
	}
	return false
}

// fenceMet is fenceForeign of the cluster that won a meeting (c.fencedBy)
// for the cluster c that stopped: its leader, once ready, takes c's windows
// as c's members prove them (every slot's largest window in c's log, and
// each member's own) and writes what fenceCommands decides, one command a
// step, until nothing is left to fence.
func (w *simWorld) fenceMet(c *simCluster) {
	o := c.fencedBy
	l := o.leader
	if l == nil || !l.ready || !l.awake() || l.conflict || !o.quorum() {
		return
	}
	proofs := []foreignProof{{id: c.id, cluster: c.id, slot: -1, windows: c.truth.state.grantedWindows(), layout: simLayout}}
	for _, n := range w.nodes {
		if n.cl == c && n.up && n.gen != nil {
			proofs = append(proofs, foreignProof{id: n.id, cluster: c.id, slot: n.gen.Slot(), granted: n.gen.Granted(), layout: simLayout})
		}
	}
	l.catchUp(len(o.log))
	for _, f := range foreignFences(proofs, simLayout) {
		for _, cmd := range fenceCommands(l.replica.state, f, o.id) {
			idx, res := o.appendEntry(cmd)
			l.catchUp(int(idx))
			w.fences++
			w.logf("%s fences slot %d of %s up to %d: %s at %d: %v", l.name(), f.slot, c.id, f.upTo, cmd.Type, idx, res)
			return
		}
	}
	c.fencedAt = len(o.log)
	w.logf("%s has fenced every window of %s (at %d)", l.name(), c.id, c.fencedAt)
}

// wipe crashes n, and brings it back with an empty data dir: a new node at
// the same address that joins its old cluster, or bootstraps its own.
func (w *simWorld) wipe(n *simNode) {
	old := n.cl
	if n.up {
		n.crash()
	}
	w.net.ghosts = append(w.net.ghosts, gossipMember{ID: n.id, Parsed: true, State: MemberDead, Since: w.base.Add(w.now),
		Meta: meta{Name: n.name(), GRPCAddr: grpcAddr(n.addr), RaftAddr: raftAddr(n.addr), ClusterID: n.ownCluster(), Member: true}})
	n.life++
	n.left = false
	n.id, n.nm = w.newNodeID(n.addr, n.life), fmt.Sprintf("%d.%d", n.addr, n.life)
	n.dc = w.r.Intn(1<<simLayout.DatacenterBits+1) - 1
	if n.stranger() {
		n.dc = simStrangerDC
	}
	n.replica, n.applied, n.cl, n.conflict = newFSM(), 0, nil, false
	n.snap, n.snapAt = nil, 0
	n.up = true
	n.believed, n.rule = nil, slotAgent{}
	w.logf("%s is wiped", n.name())
	doomed := w.cfg.doomed && old == w.cls[0]
	if doomed && w.replacement == nil {
		// The operator's replacement for a cluster that lost its quorum for
		// good: it meets the survivor later (doom).
		c := w.bootstrap(n)
		c.younger, c.older = true, old
		return
	}
	// (A stranger never founds a cluster of its own: nobody in it could
	// claim, and what it would outrank is not modelled.)
	if old != nil && !old.stopped && !doomed && w.r.Float64() < w.cfg.wipeNewCluster && !n.stranger() {
		c := w.bootstrap(n)
		c.younger, c.older = true, old
		c.meetAt = w.now + time.Duration(w.r.Int63n(int64(simMaxAhead)))
		return
	}
	if old == nil || old.stopped || doomed {
		old = w.home()
	}
	if old == nil { // every cluster stopped: the node founds one of its own
		w.bootstrap(n)
		return
	}
	n.cl = old // its leader's reconcile sweep adds it to the configuration
}
