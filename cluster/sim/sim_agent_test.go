package sim

// The simulator's agent and rpc sides (sim_world_test.go): the agent's
// shell around slotAgent.step, and the prefetch buffer clients draw from.

import (
	"context"
	"errors"

	"github.com/idgen/idgen/cluster/core"
	"github.com/idgen/idgen/generator"
)

// simAgents is the agent's shell as every node runs it (agent.go's
// agentShell): the rule's inputs gathered from the node's replica and
// generator, what it decides carried out, its claims and reserves proposed
// and their answers stepped, and a graceful leave.
type simAgents struct {
	w *simWorld
}

// agent is one pass of the slot agent (agentShell.run's look).
func (sh *simAgents) agent(n *simNode) {
	if !n.awake() || n.cl == nil || n.pending != nil {
		return
	}
	if n.leaving == 2 {
		sh.leaveRaft(n)
		return
	}
	sh.drive(n, core.AgentEvent{Kind: core.AgentLook})
}

// drive is agent.go's agentShell.drive: a claim or a reserve goes out as a
// proposal; an answer that comes later is stepped when it arrives
// (answered).
func (sh *simAgents) drive(n *simNode, ev core.AgentEvent) {
	out := sh.agentStep(n, ev)
	var c core.Command
	switch {
	case out.Claim:
		l := simLayout
		c = core.Command{Type: core.CmdClaim, Node: &core.NodeInfo{ID: n.id, Name: n.name(), Datacenter: n.dc,
			GRPCAddr: grpcAddr(n.addr), RaftAddr: raftAddr(n.addr)}, Layout: &l}
	case out.Reserve && n.gen != nil:
		c = core.Command{Type: core.CmdReserve, NodeID: n.id, Slot: n.gen.Slot(), Tenure: n.tenure, UpTo: out.UpTo}
	case out.Start:
		sh.drive(n, core.AgentEvent{Kind: core.AgentLook}) // the first reserve goes at once
		return
	default:
		return
	}
	later, r, err := sh.w.net.propose(n, c)
	if !later {
		sh.answered(n, c, r, err)
	}
}

// agentStep is agent.go's agentShell.step: the rule for ev (after an
// answer, a look again), and what needs no leader carried out.
func (sh *simAgents) agentStep(n *simNode, ev core.AgentEvent) core.AgentOut {
	out := n.rule.Step(ev, sh.agentInput(n))
	if (ev.Kind == core.AgentClaimAnswered || ev.Kind == core.AgentReserveAnswered) && out.GaveUp == nil {
		sh.carryOut(n, out) // (an answer's worth: no grant)
		out = n.rule.Step(core.AgentEvent{Kind: core.AgentLook}, sh.agentInput(n))
	}
	if !sh.carryOut(n, out) {
		n.rule.Step(core.AgentEvent{Kind: core.AgentStartFailed}, sh.agentInput(n))
		return core.AgentOut{}
	}
	if out.Start {
		sh.carryOut(n, n.rule.Step(core.AgentEvent{Kind: core.AgentApplied}, sh.agentInput(n)))
	}
	return out
}

// agentInput is the rule's input for n now (agent.go's agentShell.input).
func (sh *simAgents) agentInput(n *simNode) core.AgentIn {
	in := core.AgentIn{Now: sh.w.base.Add(sh.w.now), Leaving: n.leaving != 0, NeverClaim: n.stranger() && sh.w.cfg.legacy, // (a node under another layout never claims)
		Conflict: n.conflict, Running: n.gen != nil}
	s := n.replica
	in.Own, in.Applied, in.Held = core.OwnTenure(s, n.id, n.rule.Tenure())
	if g := n.gen; g != nil {
		in.Slot, in.Granted, in.Head, in.Lead = g.Slot(), g.Granted(), g.Head(), core.UnitsCeil(simLead, simUnit)
		if g.Slot() < len(s.Slots) {
			in.SlotOwner, in.SlotTenure = s.Slots[g.Slot()].Owner, s.Slots[g.Slot()].Tenure
		}
	}
	return in
}

// carryOut is agent.go's agentShell.carryOut; false when a start failed.
func (sh *simAgents) carryOut(n *simNode, out core.AgentOut) bool {
	switch {
	case out.GaveUp != nil:
		sh.w.logf("%s gives up its claim: %v", n.name(), out.GaveUp)
	case out.Revoke != nil:
		g := n.gen
		if g == nil {
			return true
		}
		sl := n.cl.truth.Slots[g.Slot()] // (not holds: the checker reads the log itself)
		if sl.Owner == n.id && sl.Tenure == n.tenure && !sh.w.cfg.faults.adoptForwards && !errors.Is(out.Revoke, core.ErrClusterConflict) {
			// Stopping is always safe, but only the replica may stop a
			// generator, and a replica is a prefix of the log: a tenure
			// current in the log is current in every replica. (With
			// forwards adopted across clusters the replica may be another
			// cluster's.)
			sh.w.fail("%s's generator of tenure %d on slot %d revoked while that tenure is its slot's current one in %s's log: %v",
				n.name(), n.tenure, g.Slot(), n.cl.id, out.Revoke)
		}
		g.Revoke(out.Revoke)
		n.gen, n.tenure = nil, 0
		sh.w.logf("%s revokes slot %d: %v", n.name(), g.Slot(), out.Revoke)
		return true
	case out.Start:
		g, err := generator.New(simLayout, out.Slot, out.Floor, n.clock())
		if err != nil {
			sh.w.logf("%s cannot start generator: %v", n.name(), err)
			return false
		}
		g.Grant(out.Granted)
		n.gen, n.tenure = g, out.Tenure
		n.minted = core.MintedTenure{Slot: out.Slot, Tenure: out.Tenure}
		sh.w.logf("%s starts slot %d tenure %d floor %d granted %d", n.name(), out.Slot, out.Tenure, out.Floor, out.Granted)
	}
	if n.gen != nil && out.Grant > n.gen.Granted() {
		n.gen.Grant(out.Grant)
	}
	return true
}

// answered steps the agent's rule for an answer to its claim or reserve
// (agent.go's agentShell.drive), or ends a leave's release.
func (sh *simAgents) answered(n *simNode, c core.Command, r core.Result, err error) {
	switch c.Type {
	case core.CmdClaim:
		if sh.w.cfg.faults.trustAnswers && err == nil && n.gen == nil {
			// (Planted: the generator starts from the answer, not the replica.)
			n.rule.Step(core.AgentEvent{Kind: core.AgentClaimAnswered, Tenure: r.Tenure}, sh.agentInput(n))
			sh.carryOut(n, core.AgentOut{Start: true, Tenure: r.Tenure, Slot: r.Slot, Floor: r.Floor, Granted: r.Granted})
			sh.drive(n, core.AgentEvent{Kind: core.AgentLook})
			return
		}
		sh.drive(n, core.AgentEvent{Kind: core.AgentClaimAnswered, Tenure: r.Tenure, Err: err})
	case core.CmdReserve:
		if n.gen == nil || c.Tenure != n.tenure {
			return
		}
		if err == nil && sh.w.cfg.faults.trustAnswers && r.Granted > n.gen.Granted() {
			n.gen.Grant(r.Granted) // (planted: the answer grants)
		}
		sh.drive(n, core.AgentEvent{Kind: core.AgentReserveAnswered, Tenure: c.Tenure, UpTo: c.UpTo, Granted: r.Granted, Err: err})
	case core.CmdRelease:
		// Leave: a release refused as "not owner" needs none (the slot moved
		// on); any other error ends the leave and the node serves on.
		if err != nil && !errors.Is(err, core.ErrNotOwner) {
			n.leaving = 0
			sh.w.logf("%s release failed, stays: %v", n.name(), err)
			return
		}
		n.leaving = 2
		sh.leaveRaft(n)
	}
}

// leave begins a graceful leave (Node.Leave): the generator stops, and a
// Release of its tenure goes to the leader.
func (sh *simAgents) leave(n *simNode) {
	g := n.gen
	g.Revoke(errors.New("node is leaving"))
	n.gen, n.leaving = nil, 1
	sh.w.logf("%s leaves, releasing slot %d tenure %d", n.name(), g.Slot(), n.tenure)
	c := core.Command{Type: core.CmdRelease, NodeID: n.id, Tenure: n.tenure}
	later, r, err := sh.w.net.propose(n, c)
	if !later {
		sh.answered(n, c, r, err)
	}
}

// leaveRaft is the rest of a leave once released: the leader removes the
// node (its leaderRemove, modelled as its Remove entry) and the node shuts
// down. Without a ready leader it waits (agent passes ask again).
func (sh *simAgents) leaveRaft(n *simNode) {
	c := n.cl
	l := c.leader
	if l == nil || !l.ready || !l.awake() || !c.quorum() {
		return
	}
	idx, res := c.appendEntry(core.Command{Type: core.CmdRemove, NodeID: n.id, ClusterID: c.id})
	l.catchUp(int(idx))
	c.removeMember(n.id)
	sh.w.logf("%s removes leaving %s at %d: %v", l.name(), n.name(), idx, res)
	n.crash()
	n.left = true
}

// simClients are the clients of every node's rpc server: the prefetch
// producer fills its buffer, and draws take from the buffer or mint
// directly; every ID handed out goes to the checker (handOut).
type simClients struct {
	w *simWorld
	// withdrawn counts buffered IDs dropped for a tenure that had ended.
	withdrawn int
}

// The prefetch buffer (rpc's Server): batches of simBatch IDs minted ahead,
// at most simBufDepth of them.
const (
	simBatch    = 8
	simBufDepth = 4
)

// simBatchOf is a batch in a prefetch buffer and who minted it; applied
// is how much of its cluster's log the minting replica had applied.
type simBatchOf struct {
	ids     []int64
	cl      *simCluster
	nodeID  string
	tenure  uint64
	slot    int
	applied int
}

var simCanceled = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

// produce is the prefetch producer (generator.Producer over the node's
// NextBatch) filling n's buffer by one batch, if it has room.
func (cs *simClients) produce(n *simNode) {
	if !n.awake() || n.gen == nil || n.conflict || len(n.buf) >= simBufDepth {
		return
	}
	ids, err := n.gen.NextBatch(simCanceled, simBatch)
	if err != nil {
		return
	}
	n.buf = append(n.buf, simBatchOf{ids: ids, cl: n.cl, nodeID: n.id, tenure: n.tenure, slot: n.gen.Slot(), applied: n.applied})
}

// takeBuffered is rpc's takeBuffered: generator.TakeRuleFor decides from
// the node's conflict, readiness (a running generator) and buffer. Drop
// empties the buffer; Wait and Briefly hand out the oldest batch if there is
// one (nothing blocks in the world: a caller that would wait takes nothing
// now); Refuse hands out nothing.
func (cs *simClients) takeBuffered(n *simNode) (simBatchOf, bool) {
	switch generator.TakeRuleFor(n.conflict, n.gen != nil, len(n.buf)) {
	case generator.TakeDrop:
		n.buf = nil
		return simBatchOf{}, false
	case generator.TakeRefuse:
		return simBatchOf{}, false
	}
	for len(n.buf) > 0 {
		b := n.buf[0]
		n.buf = n.buf[1:]
		if !n.withdrawn.Covers(b.slot, simStamp(b.ids[0])) {
			return b, true
		}
		cs.withdrawn += len(b.ids)
	}
	return simBatchOf{}, false
}

// draw is a client asking n for a batch, from its prefetch buffer or minted
// directly; every ID is checked as it is handed out. A younger cluster has
// clients of its own until it meets the older one (a wiped seed that
// bootstrapped alone serves whoever dials it).
func (cs *simClients) draw(n *simNode) {
	if !n.awake() || n.cl == nil {
		return
	}
	if cs.w.r.Intn(2) == 0 {
		if b, ok := cs.takeBuffered(n); ok {
			cs.w.check.handOut(n, b)
		}
		return
	}
	if n.gen == nil || n.conflict {
		return
	}
	// Draws of every size a call may ask: mostly a few IDs, now and then
	// several units' worth (a unit holds 1<<SequenceBits per slot).
	k := 1 + cs.w.r.Intn(12)
	if cs.w.r.Intn(8) == 0 {
		k = 1 + cs.w.r.Intn(6<<simLayout.SequenceBits)
	}
	ids, err := n.gen.NextBatch(simCanceled, k)
	if err != nil {
		if cs.w.quietAt != 0 && errors.Is(err, generator.ErrWindowExhausted) {
			cs.w.agents.agent(n) // a caller waits: the agent reserves at once (Generator.Waiting)
		}
		return
	}
	cs.w.check.handOut(n, simBatchOf{ids: ids, cl: n.cl, nodeID: n.id, tenure: n.tenure, slot: n.gen.Slot(), applied: n.applied})
}
