package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
)

// applyTimeout bounds a Raft apply when the caller's context has no deadline.
const applyTimeout = 5 * time.Second

// propose sends a command to the leader: applied here when this node leads,
// forwarded otherwise (proposeRoute and acceptAnswer decide, decide.go). Any
// error means the outcome is unknown or refused; callers treat both as "not
// granted".
func (pr *proposer) propose(ctx context.Context, c command) (result, error) {
	n := pr.n
	c.SentAt = n.clock.Now().UnixNano()
	in := proposeIn{Conflict: n.Conflict(), CanForward: n.cfg.Forwarder != nil}
	if in.Conflict == nil {
		in.Own = n.ident.ownCluster()
		in.Leader = n.rs.raft.State() == raft.Leader
		if !in.Leader && in.Own != "" {
			_, id := n.rs.raft.LeaderWithID()
			if in.LeaderID = string(id); in.LeaderID != "" {
				in.LeaderAddr = n.members.grpcAddrOf(in.LeaderID)
			}
		}
	}
	c.ClusterID = in.Own
	_, c.Protocol, _ = n.versions.clusterProtocol()
	switch rt, err := proposeRoute(in); rt {
	case routeLocal:
		return n.lead.handle(ctx, c)
	case routeRefuse:
		return result{}, err
	}
	data, err := encodeCommand(c)
	if err != nil {
		return result{}, err
	}
	fctx, stop := pr.whileLeader(ctx, in.LeaderID)
	out, err := n.cfg.Forwarder.Forward(fctx, in.LeaderAddr, data)
	stop()
	if err != nil {
		if cause := context.Cause(fctx); errors.Is(cause, errLeaderMoved) && ctx.Err() == nil {
			return result{}, fmt.Errorf("%w (%w)", cause, err)
		}
		return result{}, err
	}
	r, err := decodeResult(out)
	if err != nil {
		return result{}, err
	}
	if err := acceptAnswer(in.Own, in.LeaderAddr, r, n.cfg.protocols); err != nil {
		n.peerLog.Refused("answer:"+in.LeaderAddr, "ignored the leader's answer", "leader", in.LeaderID, "err", err)
		return result{}, err
	}
	return r, nil
}

// errLeaderMoved ends a forward whose leader this node's Raft no longer
// names; it is ErrNotLeader, so the caller asks again at once.
var errLeaderMoved = fmt.Errorf("%w: this node's raft no longer names the leader the command went to", ErrNotLeader)

// whileLeader is ctx, ended with errLeaderMoved as soon as this node's Raft
// names another leader than id, or none (a heartbeat timeout clears it),
// and stop releases it. A forward to a leader that died otherwise waits out
// its whole deadline: a dial to an address where nothing answers, not even
// with a refusal (a killed container's), waits for the connection to become
// ready. Every member's Reserve did (2 s) after a `docker kill` of the
// leader, so no node issued for 2 s however soon the next leader was
// elected. The outcome of an ended forward is unknown, as after a timeout;
// callers treat it as not granted and read the log.
func (pr *proposer) whileLeader(ctx context.Context, id string) (_ context.Context, stop func()) {
	n := pr.n
	ctx, cancel := context.WithCancelCause(ctx)
	seen := make(chan raft.Observation, 1)
	obs := raft.NewObserver(seen, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.LeaderObservation)
		return ok
	})
	n.rs.raft.RegisterObserver(obs)
	go func() {
		defer n.rs.raft.DeregisterObserver(obs)
		for {
			// Read after registering, so a change between the caller's
			// read of the leader and the registration is not missed.
			if _, cur := n.rs.raft.LeaderWithID(); string(cur) != id {
				cancel(errLeaderMoved)
				return
			}
			select {
			case <-seen:
			case <-ctx.Done():
				return
			}
		}
	}()
	return ctx, func() { cancel(context.Canceled) }
}

// grpcAddrOf is where this node dials node id. For a slot holder, the gRPC
// address the replicated state records for it: its own Claim of that slot
// put it there, over the authenticated transport, and every restart claims
// again. For the others (a standby, a node that never claimed), the one
// gossip shows, else the last one recorded. Gossip comes second because
// anyone with the gossip key can make a member show any address: followers
// dialling a leader's forged one stalled for about 50 s.
func (ms *membership) grpcAddrOf(id string) string {
	n := ms.n
	var recorded string
	var holds bool
	n.fsm.view(func(s *state) { recorded, holds = s.Nodes[id].GRPCAddr, s.slotOf(id) >= 0 })
	if holds && recorded != "" {
		return recorded
	}
	if m, ok := n.gossip.snapshot()[id]; ok && m.Parsed && m.Meta.GRPCAddr != "" {
		return m.Meta.GRPCAddr
	}
	return recorded
}

// ApplyForwarded runs a command a follower forwarded to this node, which must
// be the leader. It is the server side of Forwarder; forwardCheck (decide.go)
// makes the identity checks.
func (n *Node) ApplyForwarded(ctx context.Context, data []byte) ([]byte, error) {
	in := forwardIn{Leader: n.rs.raft.State() == raft.Leader, Speaks: n.cfg.protocols}
	var (
		c      command
		decErr error
	)
	if in.Leader {
		if in.Conflict = n.Conflict(); in.Conflict == nil {
			c, decErr = decodeCommand(data)
			in.Own = n.ident.ownCluster()
		}
	}
	if err := forwardCheck(in, c, decErr); err != nil {
		if in.Leader && !errors.Is(err, ErrClusterConflict) {
			n.peerLog.Refused("forward:"+c.nodeID(), "refused a forwarded command", "from", c.nodeID(), "type", c.Type.String(),
				"its_protocol", versionOf(c.Protocol), "own_protocols", in.Speaks.String(), "err", err)
		}
		return nil, err
	}
	r, err := n.lead.handle(ctx, c)
	if err != nil {
		return nil, err
	}
	_, r.Protocol, _ = n.versions.clusterProtocol()
	return encodeResult(r)
}

// handle runs a command on the leader, past handleCheck (decide.go): a new
// leader answers only after its post-election Barrier, and the checks Apply
// makes against the layout come before anything is proposed (after the
// Barrier, so "not initialized" means it).
func (ld *leader) handle(ctx context.Context, c command) (result, error) {
	n := ld.n
	var (
		h   handling
		err error
	)
	ready := ld.leaderReady.Load()
	if n.fsm.view(func(s *state) { h, err = handleCheck(s, c, ready) }); err != nil {
		return result{}, err
	}
	if h == handleRemove {
		slot, err := ld.leaderRemove(ctx, c.NodeID)
		return result{Slot: slot, ClusterID: n.ident.ownCluster()}, err
	}
	return ld.leaderApply(ctx, c)
}

// leaderApply is the leader-side guard in front of the log (DESIGN.md,
// "The safety argument, in our words"): it gathers the inputs of
// leaderCheck (decide.go: the skew refusals, and the clamp of a reserve's
// UpTo to the cluster's time plus max-ahead) and carries out its decision. The cluster's time is the
// quorum-th latest of this leader's clock and the voters' latest reports
// (clustertime.go); a leader whose own clock is off it by more than max-skew
// grants nothing and hands off. Apply itself never reads a clock.
func (ld *leader) leaderApply(ctx context.Context, c command) (result, error) {
	n := ld.n
	now := n.clock.Now()
	member := n.members.inRaftConfig(c.nodeID())
	in := leaderIn{Now: now, Member: c.Type != cmdClaim || member, MaxAhead: n.cfg.MaxAhead, MaxSkew: n.cfg.MaxSkew}
	var reports bool
	n.fsm.view(func(s *state) { reports = reportsClock(s, c, member) })
	if reports {
		ld.clocks.observe(c.nodeID(), clockSample{reported: time.Unix(0, c.SentAt), leader: now, at: time.Now()})
	}
	in.ClusterNow, in.Known = ld.clusterNow(now)
	var d leaderOut
	n.fsm.view(func(s *state) { d = leaderCheck(s, c, in) })
	if d.Handoff {
		select {
		case ld.handoff <- struct{}{}:
		default:
		}
	}
	if d.Err != nil {
		return result{}, d.Err
	}
	if err := ld.contested(d); err != nil {
		return result{}, err
	}
	d.Answer.ClusterID = n.ident.ownCluster()
	if !d.Propose {
		return d.Answer, nil
	}
	r, _, err := ld.raftApply(ctx, d.Cmd)
	return leaderAnswer(d, r), err
}

// contested refuses a Claim by a node whose identity a proven copy still
// serves, and a Reserve on a slot that a copy or a member of another
// cluster still issues (contestedBy): whatever a fence closes off now,
// their windows grow past it until they stop. The holder waits, not ready,
// until the other answers that it stopped (a second or so after the two
// meet) and the fence of its windows is final.
func (ld *leader) contested(d leaderOut) error {
	n := ld.n
	if !d.Propose || (d.Cmd.Type != cmdClaim && d.Cmd.Type != cmdReserve) {
		return nil
	}
	if hold := ld.forkHold.Load(); hold != nil {
		return fmt.Errorf("%w: %s", ErrNotReady, *hold)
	}
	id, slot := d.Cmd.nodeID(), -1
	if d.Cmd.Type == cmdReserve {
		id, slot = "", d.Cmd.Slot
	}
	now := time.Now()
	fenced := func(slot int, upTo int64) bool {
		ok := true
		n.fsm.view(func(s *state) { ok = slot >= len(s.Slots) || s.Slots[slot].HighWater >= upTo })
		return ok
	}
	if p, ok := n.ident.copies.contests(id, slot, now, fenced); ok {
		return fmt.Errorf("%w: a copy of node %s's data dir still issues slot %d at %s; the slot waits until it stops and its "+
			"windows are fenced", ErrNotReady, p.id, p.slot, p.addr)
	}
	if p, ok := n.recon.foreign.contests(slot, now, n.cfg.contestMax); ok {
		return fmt.Errorf("%w: node %s of cluster %s, which met this one, still issues slot %d; the slot waits until it stops "+
			"and its windows are fenced", ErrNotReady, p.id, p.cluster, p.slot)
	}
	return nil
}

// raftApply proposes c and waits for it to be applied on this (leader) node.
func (ld *leader) raftApply(ctx context.Context, c command) (result, uint64, error) {
	n := ld.n
	if f := n.cfg.applyFault; f != nil {
		if err := f(c); err != nil {
			return result{}, 0, fmt.Errorf("raft apply %s: %w", c.Type, err)
		}
	}
	if err := writable(c.Type, max(n.versions.writeProtocol(), 1)); err != nil {
		return result{}, 0, err
	}
	data, err := encodeCommand(c)
	if err != nil {
		return result{}, 0, err
	}
	timeout := applyTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
		if timeout <= 0 {
			return result{}, 0, context.DeadlineExceeded
		}
	}
	f := n.rs.raft.Apply(data, timeout)
	if err := f.Error(); err != nil {
		return result{}, 0, fmt.Errorf("raft apply %s: %w", c.Type, err)
	}
	r, err := appliedResult(c.Type, f.Index(), f.Response())
	return r, f.Index(), err
}

// unitsCeil converts a duration into whole layout units, rounding up.
func unitsCeil(d, unit time.Duration) int64 {
	return int64((d + unit - 1) / unit)
}

// Remove force-removes another node: it frees its slot and takes it out of
// Raft. node is an ID or a name.
func (n *Node) Remove(ctx context.Context, node string) (string, int, error) {
	id, err := n.members.resolveNode(node)
	if err != nil {
		return "", -1, err
	}
	if id == n.id {
		return "", -1, ErrRemoveSelf
	}
	r, err := n.proposer.propose(ctx, command{Type: cmdRemove, NodeID: id})
	return id, r.Slot, err
}

// resolveNode finds a node's ID by ID or name among the state, Raft and gossip.
func (ms *membership) resolveNode(node string) (string, error) {
	n := ms.n
	members, _ := n.Members()
	var byName []string
	for _, m := range members {
		if m.ID == node {
			return m.ID, nil
		}
		if m.Name == node {
			byName = append(byName, m.ID)
		}
	}
	switch len(byName) {
	case 1:
		return byName[0], nil
	case 0:
		return "", fmt.Errorf("%w: no node has ID or name %q; see idctl members", ErrUnknownNode, node)
	default:
		return "", fmt.Errorf("%w: name %q is ambiguous (%v); use the node ID", ErrUnknownNode, node, byName)
	}
}

// leaderRemove frees id's slot in the state and removes it from Raft,
// refusing to remove the leader itself or to break quorum.
func (ld *leader) leaderRemove(ctx context.Context, id string) (int, error) {
	n := ld.n
	if id == n.id {
		return -1, ErrRemoveSelf
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
	n.fsm.view(func(s *state) { _, inState = s.Nodes[id]; inState = inState || s.slotOf(id) >= 0 })
	if !inRaft && !inState {
		return -1, fmt.Errorf("%w: %s is not in the cluster", ErrUnknownNode, id)
	}
	if voter && !ld.quorumSurvives(cf.Configuration(), id) {
		return -1, fmt.Errorf("%w: removing %s would leave fewer live voters than a quorum", ErrQuorum, id)
	}
	slot := -1
	if inState {
		r, _, err := ld.raftApply(ctx, command{Type: cmdRemove, NodeID: id})
		if err != nil {
			return -1, err
		}
		slot = r.Slot
	}
	if inRaft {
		if err := n.rs.raft.RemoveServer(raft.ServerID(id), 0, applyTimeout).Error(); err != nil {
			return slot, fmt.Errorf("remove %s from raft: %w", id, err)
		}
	}
	n.gossip.forget(id)
	n.logger.Info("removed node", "id", id, "freed_slot", slot)
	return slot, nil
}

// quorumSurvives reports whether the voters left after removing id include a
// quorum of live ones (alive in gossip, or this node).
func (ld *leader) quorumSurvives(cfg raft.Configuration, id string) bool {
	n := ld.n
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

// Leave releases the slot, hands off leadership, has the leader take this
// node out of Raft and the state, leaves gossip and shuts the node down.
func (n *Node) Leave(ctx context.Context) error {
	// The only voter that leaves strands its non-voters for good: they
	// cannot elect a leader, and nothing can promote or remove anyone. It
	// is refused before anything changes.
	if others := n.members.otherServers(); others > 0 && n.members.otherVoters() == 0 {
		return fmt.Errorf("%w: this node is its cluster's only voter, and its %d non-voter(s) cannot elect a leader without it; "+
			"wait until one is promoted (idctl members shows each role), or remove them first", ErrQuorum, others)
	}
	if !n.leaving.CompareAndSwap(false, true) {
		return errors.New("already leaving")
	}
	if g := n.agent.gen.Swap(nil); g != nil {
		g.Revoke(errors.New("node is leaving"))
		// A tenure that is no longer current needs no release: the slot
		// moved on without it.
		c := command{Type: cmdRelease, NodeID: n.id, Tenure: n.agent.tenure.Load()}
		if _, err := n.proposer.propose(ctx, c); err != nil && !errors.Is(err, ErrNotOwner) {
			n.leaving.Store(false)
			return fmt.Errorf("release slot: %w", err)
		}
	}
	if n.members.otherVoters() > 0 {
		if n.rs.raft.State() == raft.Leader {
			if err := n.rs.raft.LeadershipTransfer().Error(); err != nil {
				n.leaving.Store(false)
				return fmt.Errorf("hand off leadership: %w", err)
			}
		}
		// The new leader removes this node; a removed node cannot learn of its
		// own removal from the log, so it waits for the leader's answer.
		err := retry(ctx, 200*time.Millisecond, func() error {
			_, err := n.proposer.propose(ctx, command{Type: cmdRemove, NodeID: n.id})
			return err
		})
		if err != nil && !errors.Is(err, ErrUnknownNode) {
			n.leaving.Store(false)
			return fmt.Errorf("leave raft: %w", err)
		}
	}
	n.gossip.updateMeta(func(m *meta) { m.Leaving = true })
	if err := n.gossip.leave(5 * time.Second); err != nil {
		n.logger.Warn("leave: gossip", "err", err)
	}
	n.logger.Info("left the cluster")
	return n.Close()
}

// retry calls f until it succeeds, returns a permanent error, or ctx ends.
func retry(ctx context.Context, every time.Duration, f func() error) error {
	for {
		err := f()
		// ErrQuorum is retried: right after a restart gossip may not yet show
		// every live voter, and the count catches up within seconds.
		if err == nil || errors.Is(err, ErrUnknownNode) || errors.Is(err, ErrRemoveSelf) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
		case <-time.After(every):
		}
	}
}

func (ms *membership) otherVoters() int {
	return ms.otherServersWhere(func(s raft.Server) bool { return s.Suffrage == raft.Voter })
}

func (ms *membership) otherServers() int {
	return ms.otherServersWhere(func(raft.Server) bool { return true })
}

// otherServersWhere counts the servers of this node's Raft configuration,
// other than itself, for which keep holds.
func (ms *membership) otherServersWhere(keep func(raft.Server) bool) int {
	n := ms.n
	cf := n.rs.raft.GetConfiguration()
	if cf.Error() != nil {
		return 0
	}
	c := 0
	for _, s := range cf.Configuration().Servers {
		if string(s.ID) != n.id && keep(s) {
			c++
		}
	}
	return c
}
