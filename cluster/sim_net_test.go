package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idgen/idgen/generator"
)

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

type simReq struct {
	id       int
	c        command
	deadline time.Duration
}

// simNet is the network between the nodes: the forwards and answers in
// flight (delayed, lost, duplicated and reordered while the faults last),
// the Status probes of the authenticated transport, and the gossip view.
type simNet struct {
	w      *simWorld
	msgs   []*simMsg
	nextID int // the last request's ID
	// ghosts: the identities wipes ended, as gossip keeps showing them (dead).
	ghosts []gossipMember
	// wrongCluster counts forwards refused because they name another
	// cluster than the leader's (a wiped leader's new cluster at its old
	// address); forgedRefused counts forged forwards a leader refused by
	// the layout checks.
	wrongCluster, forgedRefused int
}

// simMsg is a forward (c set) or an answer (to a forward).
type simMsg struct {
	at      time.Duration
	to      int // address
	forward bool
	c       command
	req     int
	from    int // sender's address and life, for the answer
	life    int
	r       result
	err     error
	// forged: a forward no agent sent (a buggy or hostile peer's), which
	// every leader must refuse.
	forged bool
}

// answered steps the agent's rule for an answer to its claim or reserve
// (agent.go's agentShell.drive), or ends a leave's release.
func (w *simWorld) answered(n *simNode, c command, r result, err error) {
	switch c.Type {
	case cmdClaim:
		if w.cfg.faults.trustAnswers && err == nil && n.gen == nil {
			// (Planted: the generator starts from the answer, not the replica.)
			n.rule.tenure = r.Tenure
			w.carryOut(n, agentOut{Start: true, Tenure: r.Tenure, Slot: r.Slot, Floor: r.Floor, Granted: r.Granted})
			w.drive(n, agentEvent{Kind: agentLook})
			return
		}
		w.drive(n, agentEvent{Kind: agentClaimAnswered, Tenure: r.Tenure, Err: err})
	case cmdReserve:
		if n.gen == nil || c.Tenure != n.tenure {
			return
		}
		if err == nil && w.cfg.faults.trustAnswers && r.Granted > n.gen.Granted() {
			n.gen.Grant(r.Granted) // (planted: the answer grants)
		}
		w.drive(n, agentEvent{Kind: agentReserveAnswered, Tenure: c.Tenure, UpTo: c.UpTo, Granted: r.Granted, Err: err})
	case cmdRelease:
		// Leave: a release refused as "not owner" needs none (the slot moved
		// on); any other error ends the leave and the node serves on.
		if err != nil && !errors.Is(err, ErrNotOwner) {
			n.leaving = 0
			w.logf("%s release failed, stays: %v", n.name(), err)
			return
		}
		n.leaving = 2
		w.leaveRaft(n)
	}
}

// leave begins a graceful leave (Node.Leave): the generator stops, and a
// Release of its tenure goes to the leader.
func (w *simWorld) leave(n *simNode) {
	g := n.gen
	g.Revoke(errors.New("node is leaving"))
	n.gen, n.leaving = nil, 1
	w.logf("%s leaves, releasing slot %d tenure %d", n.name(), g.Slot(), n.tenure)
	c := command{Type: cmdRelease, NodeID: n.id, Tenure: n.tenure}
	later, r, err := w.net.propose(n, c)
	if !later {
		w.answered(n, c, r, err)
	}
}

// leaveRaft is the rest of a leave once released: the leader removes the
// node (its leaderRemove, modelled as its Remove entry) and the node shuts
// down. Without a ready leader it waits (agent passes ask again).
func (w *simWorld) leaveRaft(n *simNode) {
	c := n.cl
	l := c.leader
	if l == nil || !l.ready || !l.awake() || !c.quorum() {
		return
	}
	idx, res := c.appendEntry(command{Type: cmdRemove, NodeID: n.id, ClusterID: c.id})
	l.catchUp(int(idx))
	c.removeMember(n.id)
	w.logf("%s removes leaving %s at %d: %v", l.name(), n.name(), idx, res)
	n.crash()
	n.left = true
}

// agentInput is the rule's input for n now (agent.go's agentShell.input).
func (w *simWorld) agentInput(n *simNode) agentIn {
	in := agentIn{Now: w.base.Add(w.now), Leaving: n.leaving != 0, NeverClaim: n.stranger() && w.cfg.legacy, // (a node under another layout never claims)
		Conflict: n.conflict, Running: n.gen != nil}
	s := n.replica.state
	in.Own, in.Applied, in.Held = ownTenure(s, n.id, n.rule.Tenure())
	if g := n.gen; g != nil {
		in.Slot, in.Granted, in.Head, in.Lead = g.Slot(), g.Granted(), g.Head(), unitsCeil(simLead, simUnit)
		if g.Slot() < len(s.Slots) {
			in.SlotOwner, in.SlotTenure = s.Slots[g.Slot()].Owner, s.Slots[g.Slot()].Tenure
		}
	}
	return in
}

// agentStep is agent.go's agentShell.step: the rule for ev (after an
// answer, a look again), and what needs no leader carried out.
func (w *simWorld) agentStep(n *simNode, ev agentEvent) agentOut {
	out := n.rule.step(ev, w.agentInput(n))
	if (ev.Kind == agentClaimAnswered || ev.Kind == agentReserveAnswered) && out.GaveUp == nil {
		w.carryOut(n, out) // (an answer's worth: no grant)
		out = n.rule.step(agentEvent{Kind: agentLook}, w.agentInput(n))
	}
	if !w.carryOut(n, out) {
		n.rule.step(agentEvent{Kind: agentStartFailed}, w.agentInput(n))
		return agentOut{}
	}
	if out.Start {
		w.carryOut(n, n.rule.step(agentEvent{Kind: agentApplied}, w.agentInput(n)))
	}
	return out
}

// carryOut is agent.go's agentShell.carryOut; false when a start failed.
func (w *simWorld) carryOut(n *simNode, out agentOut) bool {
	switch {
	case out.GaveUp != nil:
		w.logf("%s gives up its claim: %v", n.name(), out.GaveUp)
	case out.Revoke != nil:
		g := n.gen
		if g == nil {
			return true
		}
		sl := n.cl.truth.state.Slots[g.Slot()] // (not holds: the checker reads the log itself)
		if sl.Owner == n.id && sl.Tenure == n.tenure && !w.cfg.faults.adoptForwards && !errors.Is(out.Revoke, ErrClusterConflict) {
			// Stopping is always safe, but only the replica may stop a
			// generator, and a replica is a prefix of the log: a tenure
			// current in the log is current in every replica. (With
			// forwards adopted across clusters the replica may be another
			// cluster's.)
			w.fail("%s's generator of tenure %d on slot %d revoked while that tenure is its slot's current one in %s's log: %v",
				n.name(), n.tenure, g.Slot(), n.cl.id, out.Revoke)
		}
		g.Revoke(out.Revoke)
		n.gen, n.tenure = nil, 0
		w.logf("%s revokes slot %d: %v", n.name(), g.Slot(), out.Revoke)
		return true
	case out.Start:
		g, err := generator.New(simLayout, out.Slot, out.Floor, n.clock())
		if err != nil {
			w.logf("%s cannot start generator: %v", n.name(), err)
			return false
		}
		g.Grant(out.Granted)
		n.gen, n.tenure = g, out.Tenure
		n.minted = mintedTenure{slot: out.Slot, tenure: out.Tenure}
		w.logf("%s starts slot %d tenure %d floor %d granted %d", n.name(), out.Slot, out.Tenure, out.Floor, out.Granted)
	}
	if n.gen != nil && out.Grant > n.gen.Granted() {
		n.gen.Grant(out.Grant)
	}
	return true
}

// drive is agent.go's agentShell.drive: a claim or a reserve goes out as a
// proposal; an answer that comes later is stepped when it arrives
// (answered).
func (w *simWorld) drive(n *simNode, ev agentEvent) {
	out := w.agentStep(n, ev)
	var c command
	switch {
	case out.Claim:
		l := simLayout
		c = command{Type: cmdClaim, Node: &NodeInfo{ID: n.id, Name: n.name(), Datacenter: n.dc,
			GRPCAddr: grpcAddr(n.addr), RaftAddr: raftAddr(n.addr)}, Layout: &l}
	case out.Reserve && n.gen != nil:
		c = command{Type: cmdReserve, NodeID: n.id, Slot: n.gen.Slot(), Tenure: n.tenure, UpTo: out.UpTo}
	case out.Start:
		w.drive(n, agentEvent{Kind: agentLook}) // the first reserve goes at once
		return
	default:
		return
	}
	later, r, err := w.net.propose(n, c)
	if !later {
		w.answered(n, c, r, err)
	}
}

// agent is one pass of the slot agent (agentShell.run's look).
func (w *simWorld) agent(n *simNode) {
	if !n.awake() || n.cl == nil || n.pending != nil {
		return
	}
	if n.leaving == 2 {
		w.leaveRaft(n)
		return
	}
	w.drive(n, agentEvent{Kind: agentLook})
}

var simCanceled = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

// produce is the prefetch producer (generator.Producer over the node's
// NextBatch) filling n's buffer by one batch, if it has room.
func (w *simWorld) produce(n *simNode) {
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
func (w *simWorld) takeBuffered(n *simNode) (simBatchOf, bool) {
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
		if !n.withdrawn.covers(b.slot, simStamp(b.ids[0])) {
			return b, true
		}
		w.withdrawn += len(b.ids)
	}
	return simBatchOf{}, false
}

// draw is a client asking n for a batch, from its prefetch buffer or minted
// directly; every ID is checked as it is handed out. A younger cluster has
// clients of its own until it meets the older one (a wiped seed that
// bootstrapped alone serves whoever dials it).
func (w *simWorld) draw(n *simNode) {
	if !n.awake() || n.cl == nil {
		return
	}
	if w.r.Intn(2) == 0 {
		if b, ok := w.takeBuffered(n); ok {
			w.handOut(n, b)
		}
		return
	}
	if n.gen == nil || n.conflict {
		return
	}
	// Draws of every size a call may ask: mostly a few IDs, now and then
	// several units' worth (a unit holds 1<<SequenceBits per slot).
	k := 1 + w.r.Intn(12)
	if w.r.Intn(8) == 0 {
		k = 1 + w.r.Intn(6<<simLayout.SequenceBits)
	}
	ids, err := n.gen.NextBatch(simCanceled, k)
	if err != nil {
		if w.quietAt != 0 && errors.Is(err, generator.ErrWindowExhausted) {
			w.agent(n) // a caller waits: the agent reserves at once (Generator.Waiting)
		}
		return
	}
	w.handOut(n, simBatchOf{ids: ids, cl: n.cl, nodeID: n.id, tenure: n.tenure, slot: n.gen.Slot(), applied: n.applied})
}

// propose sends c from n (apply.go's propose): proposeRoute decides whether
// it is handled here (n acts as leader) or forwarded to the leader n
// believes in. It reports whether an answer will come later (the request is
// then pending); deliver checks it with acceptAnswer.
func (net *simNet) propose(n *simNode, c command) (later bool, r result, err error) {
	c.SentAt = n.clock().Now().UnixNano()
	in := proposeIn{Own: n.ownCluster(), Leader: n.believesLeader(), CanForward: true}
	if n.conflict {
		in.Conflict = ErrClusterConflict
	}
	if b := n.believed; b != nil {
		in.LeaderID, in.LeaderAddr = b.id, fmt.Sprint(b.addr)
	}
	c.ClusterID = in.Own
	switch rt, err := proposeRoute(in); rt {
	case routeLocal:
		r, err = net.w.lead.handle(n, c)
		return false, r, err
	case routeRefuse:
		return false, result{}, err
	}
	net.nextID++
	n.pending = &simReq{id: net.nextID, c: c, deadline: net.w.now + simTimeout}
	net.send(&simMsg{to: n.believed.addr, forward: true, c: c, req: net.nextID, from: n.addr, life: n.life})
	return true, result{}, nil
}

func (net *simNet) send(m *simMsg) {
	quiet := net.w.quietAt != 0 // the network has healed
	if !quiet && net.w.r.Float64() < net.w.cfg.loss {
		return
	}
	copies := 1
	if !quiet && net.w.r.Float64() < net.w.cfg.dup {
		copies = 2
	}
	for i := 0; i < copies; i++ {
		mm := *m
		d := time.Duration(1+net.w.r.Intn(int(simNetDelay/time.Millisecond))) * time.Millisecond
		if !quiet && net.w.r.Intn(20) == 0 {
			d = time.Duration(net.w.r.Int63n(int64(3 * time.Second)))
		}
		mm.at = net.w.now + d
		net.msgs = append(net.msgs, &mm)
	}
}

// deliver hands a due message (one of them, chosen by the seed) to whoever
// listens at its address now; it reports whether one was due.
func (net *simNet) deliver() bool {
	var due []int
	for i, m := range net.msgs {
		if to := net.w.nodes[m.to]; m.at <= net.w.now && (!to.up || to.awake()) { // a paused node's messages wait
			due = append(due, i)
		}
	}
	if len(due) == 0 {
		return false
	}
	i := due[net.w.r.Intn(len(due))]
	m := net.msgs[i]
	net.msgs = append(net.msgs[:i], net.msgs[i+1:]...)
	n := net.w.nodes[m.to]
	if !n.up {
		return true
	}
	if m.forward {
		r, err := net.w.lead.applyForwarded(n, m.c)
		net.w.logf("%s answers %s of %s: %+v %v", n.name(), m.c.Type, m.c.nodeID(), r, err)
		if errors.Is(err, ErrWrongCluster) {
			net.wrongCluster++
		}
		if m.forged {
			if err == nil {
				net.w.fail("%s took a forged %s of %s (datacenter %d): %+v", n.name(), m.c.Type, m.c.nodeID(), m.c.Node.Datacenter, r)
			}
			if errors.Is(err, ErrBadCommand) {
				net.forgedRefused++ // by the layout checks, not for want of a leader
			}
			return true
		}
		net.send(&simMsg{to: m.from, from: n.addr, req: m.req, life: m.life, r: r, err: err})
		return true
	}
	if n.life != m.life || n.pending == nil || n.pending.id != m.req {
		return true // an answer for an earlier life or request
	}
	c := n.pending.c
	n.pending = nil
	r, err := m.r, m.err
	if err == nil && !net.w.cfg.faults.trustAnswers {
		err = acceptAnswer(n.ownCluster(), fmt.Sprint(m.from), r, ownProtocols)
	}
	net.w.answered(n, c, r, err)
	return true
}

// gossipView is what gossip shows every member: each node's current
// identity (alive while up, paused ones too; dead since it crashed; left
// once its leave ended in shutdown), and every identity a wipe ended (dead
// since the wipe), with the metadata each node gossips: its addresses, its
// cluster once its replica knows it, and whether it has Raft state.
func (net *simNet) gossipView() map[string]gossipMember {
	out := map[string]gossipMember{}
	for _, g := range net.ghosts {
		out[g.ID] = g
	}
	for _, n := range net.w.nodes {
		m := gossipMember{ID: n.id, Parsed: true, State: MemberAlive, Meta: meta{Name: n.name(),
			GRPCAddr: grpcAddr(n.addr), RaftAddr: raftAddr(n.addr), ClusterID: n.ownCluster(),
			Member: n.applied > 0 || (n.cl != nil && n.cl.member(n.id)), Leaving: n.leaving != 0}}
		switch {
		case n.up:
		case n.left:
			m.State, m.Since = MemberLeft, net.w.base.Add(n.downAt)
		default:
			m.State, m.Since = MemberDead, net.w.base.Add(n.downAt)
		}
		out[n.id] = m
	}
	return out
}

// probe is the leader's Status call to addr over the authenticated
// transport: whoever listens there now answers, unless it is down or paused.
func (net *simNet) probe(addr string) (Status, error) {
	for _, n := range net.w.nodes {
		if grpcAddr(n.addr) != addr {
			continue
		}
		if !n.awake() {
			return Status{}, errors.New("connection refused")
		}
		if n.stranger() && net.w.cfg.legacy {
			return Status{ID: n.id, RaftAddr: raftAddr(n.addr), ClusterID: n.ownCluster(), AppliedIndex: uint64(n.applied),
				LastIndex: uint64(n.applied), Leaving: n.leaving != 0}, nil
		}
		dc := n.dc
		return Status{ID: n.id, RaftAddr: raftAddr(n.addr), ClusterID: n.ownCluster(), AppliedIndex: uint64(n.applied),
			LastIndex: uint64(n.applied), Leaving: n.leaving != 0, Protocols: ownProtocols, Clock: n.clock().Now().UnixNano(),
			Datacenter: &dc}, nil
	}
	return Status{}, errors.New("no such address")
}
