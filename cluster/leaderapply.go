package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"

	"github.com/idgen/idgen/cluster/core"
)

// ApplyForwarded runs a command a follower forwarded to this node, which must
// be the leader. It is the server side of Forwarder; forwardCheck (decide.go)
// makes the identity checks.
func (n *Node) ApplyForwarded(ctx context.Context, data []byte) ([]byte, error) {
	in := core.ForwardIn{Leader: n.rs.raft.State() == raft.Leader, Speaks: n.cfg.protocols}
	var (
		c      core.Command
		decErr error
	)
	if in.Leader {
		if in.Conflict = n.ident.conflictErr(); in.Conflict == nil {
			c, decErr = core.DecodeCommand(data)
			in.Own = n.ident.ownCluster()
		}
	}
	if err := core.ForwardCheck(in, c, decErr); err != nil {
		if in.Leader && !errors.Is(err, ErrClusterConflict) {
			n.peerLog.Refused("forward:"+c.SpeaksFor(), "refused a forwarded command", "from", c.SpeaksFor(), "type", c.Type.String(),
				"its_protocol", core.VersionOf(c.Protocol), "own_protocols", in.Speaks.String(), "err", err)
		}
		if in.Leader {
			n.gate.refused(err)
		}
		return nil, err
	}
	r, err := n.gate.handle(ctx, c)
	if err != nil {
		return nil, err
	}
	_, r.Protocol, _ = n.versions.clusterProtocol()
	return core.EncodeResult(r)
}

// handle runs a command on the leader, past handleCheck (decide.go): a new
// leader answers only after its post-election Barrier, and the checks Apply
// makes against the layout come before anything is proposed (after the
// Barrier, so "not initialized" means it).
func (lg *leaderGate) handle(ctx context.Context, c core.Command) (core.Result, error) {
	n := lg.n
	var (
		h   core.Handling
		err error
	)
	ready := lg.leaderReady.Load()
	if n.fsm.view(func(s *core.State) { h, err = core.HandleCheck(s, c, ready) }); err != nil {
		return core.Result{}, lg.refused(err)
	}
	if h == core.HandleRemove {
		slot, err := lg.leaderRemove(ctx, c.NodeID)
		return core.Result{Slot: slot, ClusterID: n.ident.ownCluster()}, err
	}
	return lg.leaderApply(ctx, c)
}

// leaderApply is the leader-side guard in front of the log (DESIGN.md,
// "The safety argument, in our words"): it gathers the inputs of
// leaderCheck (decide.go: the skew refusals, and the clamp of a reserve's
// UpTo to the cluster's time plus max-ahead) and carries out its decision. The cluster's time is the
// quorum-th latest of this leader's clock and the voters' latest reports
// (clustertime.go); a leader whose own clock is off it by more than max-skew
// grants nothing and hands off. Apply itself never reads a clock.
func (lg *leaderGate) leaderApply(ctx context.Context, c core.Command) (core.Result, error) {
	n := lg.n
	now := n.clock.Now()
	// A command's clock (SentAt) is checked against the cluster's time, and
	// counted in it only from a voter of the release before protocol 2,
	// whose Status carries none: the other clocks are the voters' own
	// answers to this leader's polls (clustertime.go), since a node
	// certificate does not say which node sent a command (cluster/DESIGN.md,
	// "The leader believes nothing of a sender before checking it").
	id := c.SpeaksFor()
	member := n.members.inRaftConfig(id)
	proven, ok := n.versions.protocols.Get(id)
	var counts bool
	n.fsm.view(func(s *core.State) { counts = core.CountsCommandClock(s, c, member, ok && proven.Max < 2) })
	if counts {
		lg.n.clusterClock.clocks.Observe(id, core.ClockSample{Reported: time.Unix(0, c.SentAt), Leader: now, At: time.Now()})
	}
	in := core.LeaderIn{Now: now, Member: c.Type != core.CmdClaim || member, MaxAhead: n.cfg.MaxAhead, MaxSkew: n.cfg.MaxSkew}
	in.ClusterNow, in.Known = lg.n.clusterClock.clusterNow(now)
	var d core.LeaderOut
	n.fsm.view(func(s *core.State) { d = core.LeaderCheck(s, c, in) })
	if d.Handoff {
		select {
		case lg.handoff <- struct{}{}:
		default:
		}
	}
	if d.Err != nil {
		return core.Result{}, lg.refused(d.Err)
	}
	if err := lg.contested(d); err != nil {
		return core.Result{}, lg.refused(err)
	}
	d.Answer.ClusterID = n.ident.ownCluster()
	if !d.Propose {
		return d.Answer, nil
	}
	r, _, err := lg.raftApply(ctx, d.Cmd)
	return core.LeaderAnswer(d, r), lg.refusedByLog(err)
}

// refused counts err as a refusal of this leader's checks, by its reason
// (ReasonOther for none), and returns it.
func (lg *leaderGate) refused(err error) error {
	lg.n.events.count(eventRefusal, reasonName(err))
	return err
}

// refusedByLog counts the error of a proposal as a refusal when it is one
// of the cluster's (Apply refused the entry: CLUSTER_FULL, NOT_OWNER; or
// the entry's protocol is not written), and returns it; a proposal that
// failed to commit (Raft's errors, a timeout) was refused by nobody.
func (lg *leaderGate) refusedByLog(err error) error {
	if _, ok := ReasonOf(err); ok {
		lg.refused(err)
	}
	return err
}

// contested refuses a Claim by a node whose identity a proven copy still
// serves, and a Reserve on a slot that a copy or a member of another
// cluster still issues (contestedBy): whatever a fence closes off now,
// their windows grow past it until they stop. The holder waits, not ready,
// until the other answers that it stopped (a second or so after the two
// meet) and the fence of its windows is final.
func (lg *leaderGate) contested(d core.LeaderOut) error {
	n := lg.n
	if !d.Propose || (d.Cmd.Type != core.CmdClaim && d.Cmd.Type != core.CmdReserve) {
		return nil
	}
	if hold := lg.forkHold.Load(); hold != nil {
		return fmt.Errorf("%w: %s", ErrNotReady, *hold)
	}
	id, slot := d.Cmd.SpeaksFor(), -1
	if d.Cmd.Type == core.CmdReserve {
		id, slot = "", d.Cmd.Slot
	}
	now := time.Now()
	fenced := func(slot int, upTo int64) bool {
		ok := true
		n.fsm.view(func(s *core.State) { ok = slot >= len(s.Slots) || s.Slots[slot].HighWater >= upTo })
		return ok
	}
	if p, ok := n.ident.copies.contests(id, slot, now, fenced); ok {
		return fmt.Errorf("%w: a copy of node %s's data dir still issues slot %d at %s; the slot waits until it stops and its "+
			"windows are fenced", ErrNotReady, p.ID, p.Slot, p.Addr)
	}
	if p, ok := n.members.foreign.contests(slot, now, n.cfg.contestMax); ok {
		return fmt.Errorf("%w: node %s of cluster %s, which met this one, still issues slot %d; the slot waits until it stops "+
			"and its windows are fenced", ErrNotReady, p.ID, p.Cluster, p.Slot)
	}
	return nil
}

// raftApply proposes c and waits for it to be applied on this (leader) node.
func (lg *leaderGate) raftApply(ctx context.Context, c core.Command) (core.Result, uint64, error) {
	n := lg.n
	if f := n.cfg.applyFault; f != nil {
		if err := f(c); err != nil {
			return core.Result{}, 0, fmt.Errorf("raft apply %s: %w", c.Type, err)
		}
	}
	v := max(n.versions.writeProtocol(), 1)
	if err := core.Writable(c.Type, v); err != nil {
		return core.Result{}, 0, err
	}
	data, err := core.EncodeEntry(c, v)
	if err != nil {
		return core.Result{}, 0, err
	}
	timeout := core.ApplyTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
		if timeout <= 0 {
			return core.Result{}, 0, context.DeadlineExceeded
		}
	}
	f := n.rs.raft.Apply(data, timeout)
	if err := f.Error(); err != nil {
		return core.Result{}, 0, fmt.Errorf("raft apply %s: %w", c.Type, err)
	}
	r, err := core.AppliedResult(c.Type, f.Index(), f.Response())
	return r, f.Index(), err
}

// leaderRemove frees id's slot in the state and removes it from Raft,
// refusing to remove the leader itself or to break quorum.
func (lg *leaderGate) leaderRemove(ctx context.Context, id string) (int, error) {
	n := lg.n
	if id == n.id {
		return -1, lg.refused(ErrRemoveSelf)
	}
	cf := n.rs.raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		return -1, err
	}
	var inRaft, voter bool
	for _, s := range cf.Configuration().Servers {
		if string(s.ID) == id {
			inRaft, voter = true, s.Suffrage == raft.Voter
		}
	}
	var inState bool
	n.fsm.view(func(s *core.State) { _, inState = s.Nodes[id]; inState = inState || s.SlotOf(id) >= 0 })
	if !inRaft && !inState {
		return -1, lg.refused(fmt.Errorf("%w: %s is not in the cluster", ErrUnknownNode, id))
	}
	if voter && !lg.quorumSurvives(cf.Configuration(), id) {
		return -1, lg.refused(fmt.Errorf("%w: removing %s would leave fewer live voters than a quorum", ErrQuorum, id))
	}
	slot := -1
	if inState {
		r, _, err := lg.raftApply(ctx, core.Command{Type: core.CmdRemove, NodeID: id})
		if err != nil {
			return -1, lg.refusedByLog(err)
		}
		slot = r.Slot
	}
	if inRaft {
		if err := n.rs.raft.RemoveServer(raft.ServerID(id), 0, core.ApplyTimeout).Error(); err != nil {
			return slot, fmt.Errorf("remove %s from raft: %w", id, err)
		}
	}
	n.gossip.forget(id)
	n.logger.Info("removed node", "id", id, "freed_slot", slot)
	return slot, nil
}

// quorumSurvives reports whether the voters left after removing id include a
// quorum of live ones (alive in gossip, or this node).
func (lg *leaderGate) quorumSurvives(cfg raft.Configuration, id string) bool {
	n := lg.n
	members := n.gossip.snapshot()
	voters, live := 0, 0
	for _, s := range cfg.Servers {
		if s.Suffrage != raft.Voter || string(s.ID) == id {
			continue
		}
		voters++
		if string(s.ID) == n.id || members[string(s.ID)].State == MemberAlive {
			live++
		}
	}
	return voters > 0 && live >= voters/2+1
}
