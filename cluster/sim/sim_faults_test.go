package sim

// The simulator's faults (sim_world_test.go): those planted to prove the
// checker bites, and those that change which clusters there are.

import (
	"fmt"
	"time"

	"github.com/idgen/idgen/cluster/core"
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

// simFaultPlan carries out the faults that change which clusters there
// are: a wipe (a node's new identity joins its old cluster or bootstraps a
// younger one), the first cluster's quorum lost for good (doom) and the
// operator's replacement, and the meetings of a younger cluster with its
// older one that follow, with the winner's fence of the loser.
type simFaultPlan struct {
	w *simWorld
	// replacement: the cluster a doomed world's operator built.
	replacement *simCluster
	// fences counts the commands the older leaders' fences wrote.
	fences int
}

// wipe crashes n, and brings it back with an empty data dir: a new node at
// the same address that joins its old cluster, or bootstraps its own.
func (fp *simFaultPlan) wipe(n *simNode) {
	old := n.cl
	if n.up {
		n.crash()
	}
	fp.w.net.ghosts = append(fp.w.net.ghosts, core.GossipMember{ID: n.id, Parsed: true, State: core.MemberDead, Since: fp.w.base.Add(fp.w.now),
		Meta: core.Meta{Name: n.name(), GRPCAddr: grpcAddr(n.addr), RaftAddr: raftAddr(n.addr), ClusterID: n.ownCluster(), Member: true}})
	n.life++
	n.left = false
	n.id, n.nm = fp.w.newNodeID(n.addr, n.life), fmt.Sprintf("%d.%d", n.addr, n.life)
	n.dc = fp.w.r.Intn(1<<simLayout.DatacenterBits+1) - 1
	if n.stranger() {
		n.dc = simStrangerDC
	}
	n.replica, n.applied, n.cl, n.conflict = core.NewState(), 0, nil, false
	n.snap, n.snapAt = nil, 0
	n.up = true
	n.believed, n.rule = nil, core.SlotAgent{}
	fp.w.logf("%s is wiped", n.name())
	doomed := fp.w.cfg.doomed && old == fp.w.cls[0]
	if doomed && fp.replacement == nil {
		// The operator's replacement for a cluster that lost its quorum for
		// good: it meets the survivor later (doom).
		c := fp.w.bootstrap(n)
		c.younger, c.older = true, old
		return
	}
	// (A stranger never founds a cluster of its own: nobody in it could
	// claim, and what it would outrank is not modelled.)
	if old != nil && !old.stopped && !doomed && fp.w.r.Float64() < fp.w.cfg.wipeNewCluster && !n.stranger() {
		c := fp.w.bootstrap(n)
		c.younger, c.older = true, old
		c.meetAt = fp.w.now + time.Duration(fp.w.r.Int63n(int64(simMaxAhead)))
		return
	}
	if old == nil || old.stopped || doomed {
		old = fp.home()
	}
	if old == nil { // every cluster stopped: the node founds one of its own
		fp.w.bootstrap(n)
		return
	}
	n.cl = old // its leader's reconcile sweep adds it to the configuration
}

// doom is the first cluster losing its quorum for good (simConfig.doom):
// one up node of it survives; of the others, each crashes for good or is
// wiped by the operator into the replacement cluster (at least one is),
// and those already down never come back. The replacement meets the
// survivor after leaderGrace.
func (fp *simFaultPlan) doom() {
	fp.w.cfg.doom = false
	c := fp.w.cls[0]
	if c.stopped || c.truth.Layout == nil {
		return
	}
	var mine []*simNode
	for _, n := range fp.w.nodes {
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
	survivor := up[fp.w.r.Intn(len(up))]
	var wipe []*simNode
	for _, n := range mine {
		switch {
		case n == survivor:
		case !n.up:
			n.gone = true
		case len(wipe) == 0 || fp.w.r.Intn(2) == 0:
			wipe = append(wipe, n)
		default:
			n.crash()
			n.gone = true
		}
	}
	fp.w.cfg.doomed = true
	fp.w.logf("%s loses its quorum for good; %s survives", c.id, survivor.name())
	for _, n := range wipe {
		fp.wipe(n)
		if fp.replacement == nil {
			fp.replacement = n.cl
		}
	}
	fp.replacement.meetAt = fp.w.now + core.LeaderGrace + time.Duration(fp.w.r.Int63n(int64(simMaxAhead)))
}

// home is the cluster a node without one joins: the replacement a doomed
// world's operator built, else the first cluster that still serves its
// clients (not stopped, and not a younger one that has not won).
func (fp *simFaultPlan) home() *simCluster {
	if fp.replacement != nil && !fp.replacement.stopped {
		return fp.replacement
	}
	for _, c := range fp.w.cls {
		if !c.stopped && (!c.younger || c.won) {
			return c
		}
	}
	return nil
}

// meet is a younger cluster y and an older one o in each other's gossip,
// each step until one stops: whenever both have a node awake (to ask and
// to answer), each side runs the shipped rule (clusterAge.outranks) on
// what the other's member says; a side that does not keep serving stops,
// every node of it (and drops its buffer), and the other's leader fences
// it. A cluster that can issue stopped for one that cannot fails the run:
// nobody would issue.
func (fp *simFaultPlan) meet(y, o *simCluster) {
	awake := func(c *simCluster) bool {
		for _, n := range fp.w.nodes {
			if n.cl == c && n.awake() {
				return true
			}
		}
		return false
	}
	if !awake(y) || !awake(o) {
		return
	}
	ay, ao := fp.age(y), fp.age(o)
	var win, lose *simCluster
	switch {
	case !ay.Outranks(ao):
		win, lose = o, y
	case !ao.Outranks(ay):
		win, lose = y, o
	default:
		return // neither serves: neither stops, and the meeting goes on
	}
	win.won = win.won || win.younger
	if aw, al := fp.age(win), fp.age(lose); al.Serving && !aw.Serving {
		fp.w.fail("%s stopped on meeting %s: it serves (%s) and the other cannot (%s)", lose.id, win.id, al, aw)
		return
	}
	lose.stopped, lose.fencedBy = true, win
	for _, n := range fp.w.nodes {
		if n.cl == lose {
			n.conflict = true
		}
	}
	fp.w.logf("%s (%s) meets %s (%s): %s stops", y.id, ay, o.id, ao, lose.id)
}

// age is what a member of c says of its cluster when another cluster's
// node asks (its Status): serving while it knows a leader, within
// leaderGrace of the last ready one (Node.leaderKnown).
func (fp *simFaultPlan) age(c *simCluster) core.ClusterAge {
	serving := c.servedAt != 0 && fp.w.now-c.servedAt < core.LeaderGrace
	return core.ClusterAge{Identity: core.Identity{ID: c.id, Created: c.truth.Created}, History: core.CoarseIndex(uint64(len(c.log))), Serving: serving}
}

// inGossip: c's nodes are in the network's gossip: a younger cluster
// once its meeting is due.
func (fp *simFaultPlan) inGossip(c *simCluster) bool { return !c.younger || c.met }

// fenceMet is fenceForeign of the cluster that won a meeting (c.fencedBy)
// for the cluster c that stopped: its leader, once ready, takes c's windows
// as c's members prove them (every slot's largest window in c's log, and
// each member's own) and writes what fenceCommands decides, one command a
// step, until nothing is left to fence.
func (fp *simFaultPlan) fenceMet(c *simCluster) {
	o := c.fencedBy
	l := o.leader
	if l == nil || !l.ready || !l.awake() || l.conflict || !o.quorum() {
		return
	}
	proofs := []core.ForeignProof{{ID: c.id, Cluster: c.id, Slot: -1, Windows: c.truth.GrantedWindows(), Layout: simLayout}}
	for _, n := range fp.w.nodes {
		if n.cl == c && n.up && n.gen != nil {
			proofs = append(proofs, core.ForeignProof{ID: n.id, Cluster: c.id, Slot: n.gen.Slot(), Granted: n.gen.Granted(), Layout: simLayout})
		}
	}
	l.catchUp(len(o.log))
	for _, f := range core.ForeignFences(proofs, simLayout) {
		for _, cmd := range core.FenceCommands(l.replica, f, o.id) {
			idx, res := o.appendEntry(cmd)
			l.catchUp(int(idx))
			fp.fences++
			fp.w.logf("%s fences slot %d of %s up to %d: %s at %d: %v", l.name(), f.Slot, c.id, f.UpTo, cmd.Type, idx, res)
			return
		}
	}
	c.fencedAt = len(o.log)
	fp.w.logf("%s has fenced every window of %s (at %d)", l.name(), c.id, c.fencedAt)
}

// afterFence: n, of the cluster that met the younger cluster other and
// fenced it, hands out with a replica that has applied the fence.
func (fp *simFaultPlan) afterFence(n *simNode, other string) bool {
	for _, c := range fp.w.cls {
		if c.id == other && c.fencedBy == n.cl && c.fencedAt != 0 {
			return n.applied >= c.fencedAt
		}
	}
	return false
}
