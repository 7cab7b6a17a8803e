package sim

// The simulator's leader side (sim_world_test.go): the node's leader shell
// around the shipped decisions, over the modelled Raft.

import (
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/hashicorp/raft"

	"github.com/idgen/idgen/cluster/core"
)

// simLeaders is the leader's side of the node's shell, run by whichever
// node leads (or believes it does): the leader loop's Barrier and establish
// (leader.go), handle and ApplyForwarded (apply.go), the hand-off, and
// reconcile's sweep with its clock poll. The shipped decisions decide; Raft
// is the modelled one (simCluster).
type simLeaders struct {
	w *simWorld
	// memberActs counts the reconcile actions carried out, by kind.
	memberActs [core.ActPromote + 1]int
}

// barrier: a new leader's Barrier completes; its leader loop then
// establishes the cluster (leaderLoop).
func (ld *simLeaders) barrier(n *simNode) {
	n.catchUp(len(n.cl.log))
	n.ready = true
	ld.establish(n)
}

// establish is the leader loop's establish (leader.go): initCommand when the
// state holds no Init, and establishNext deciding whether and when to try
// again. While the faults last an apply fails with the world's initFail
// chance, and half of the failed ones are committed all the same.
func (ld *simLeaders) establish(l *simNode) {
	l.initAt = 0
	if l.cl.leader != l || !l.ready {
		return // the leader loop ended with the leadership
	}
	var err error
	now := l.clock().Now()
	ct, known := ld.clusterNow(l, now)
	if l.replica.Layout == nil {
		err = core.FounderCheck(simLayout, now, ct, known, simMaxSkew)
	}
	if l.replica.Layout == nil && err == nil {
		c := core.InitCommand(simLayout, fmt.Sprintf("%s-%08x", l.cl.id, ld.w.r.Uint32()), ct, simMaxAhead)
		quorum := l.cl.quorum()
		failed := !quorum || (ld.w.quietAt == 0 && ld.w.r.Float64() < ld.w.cfg.initFail)
		if quorum && (!failed || ld.w.r.Intn(2) == 0) {
			idx, res := l.cl.appendEntry(c)
			l.catchUp(int(idx))
			_, err = core.AppliedResult(c.Type, idx, res)
			ld.w.logf("%s commits init of %s at %d: %v", l.name(), c.ClusterID, idx, res)
		}
		switch {
		case !quorum:
			err = fmt.Errorf("raft apply %s: %w", c.Type, raft.ErrLeadershipLost)
			l.stepDown()
		case failed:
			err = fmt.Errorf("raft apply %s: %w", c.Type, raft.ErrEnqueueTimeout)
		}
	}
	again, wait := core.EstablishNext(err, l.initWait)
	if again {
		l.initWait, l.initAt = wait, ld.w.now+wait
		ld.w.logf("%s establish failed, retrying in %v: %v", l.name(), wait, err)
	}
}

// clusterNow is Node.clusterNow for leader l whose clock reads now: the
// shipped clockQuorum and clusterTime over its voters' reports.
func (ld *simLeaders) clusterNow(l *simNode, now time.Time) (time.Time, bool) {
	var others []string
	real, awaited := ld.w.base.Add(ld.w.now), 0
	founded, led := l.replica.Layout != nil, ld.w.now-l.ledAt
	if !founded {
		led = 0
	}
	for _, m := range l.cl.voters() {
		if m == l.id {
			continue
		}
		others = append(others, m)
		// (gone is not modelled here: a voter the world's gossip shows gone
		// is awaited, as a live one that has not reported is.)
		if core.ClockAwaited(len(l.clocks.ByID([]string{m}, real, core.ClockSampleTTL)) > 0, false, founded) {
			awaited++
		}
	}
	est, quorum := core.ClockQuorum(l.clocks.ByID(others, real, core.ClockSampleTTL), awaited, led, core.ClockSampleTTL)
	return core.ClusterTime(now, est, quorum)
}

// handle is the leader's side of a command (apply.go's handle and
// leaderApply, with Raft modelled): handleCheck, leaderCheck, appliedResult
// and leaderAnswer decide.
func (ld *simLeaders) handle(l *simNode, c core.Command) (core.Result, error) {
	current := l.cl.leader == l
	if current && l.ready {
		l.catchUp(len(l.cl.log)) // a leader applies what it commits
	}
	h, err := core.HandleCheck(l.replica, c, l.ready)
	if err != nil {
		return core.Result{}, err
	}
	if h != core.HandleApply {
		return core.Result{}, fmt.Errorf("command %s is not forwarded in the simulated world", c.Type)
	}
	now := l.clock().Now()
	in := core.LeaderIn{Now: now, Member: c.Type != core.CmdClaim || l.cl.member(c.Node.ID), MaxAhead: simMaxAhead, MaxSkew: simMaxSkew}
	if c.Type == core.CmdClaim && !in.Member && ld.w.cfg.faults.adoptForwards {
		in.Member = true // (a voter it cannot reach would cost it its quorum)
	}
	// (A command's clock is checked, never counted: the clocks come from
	// the leader's polls, pollClocks.)
	in.ClusterNow, in.Known = ld.clusterNow(l, now)
	d := core.LeaderCheck(l.replica, c, in)
	if d.Handoff && current {
		ld.handoff(l)
	}
	if current && errors.Is(d.Err, core.ErrNotOwner) && l.cl.truth.Holds(c.NodeID, c.Slot, c.Tenure) {
		// A deposed leader may not know the claims its successor committed,
		// but the current one answers from its whole log (past its
		// Barrier): a false "not owner" from it is a leader reading a stale
		// state. No ID is at risk (the agent takes the answer as a hint),
		// but every such answer is a reserve wasted.
		ld.w.fail("%s, the current leader of %s, answered \"not owner\" to the reserve of %s for slot %d tenure %d, "+
			"which its cluster's log shows as current: %v", l.name(), l.cl.id, c.NodeID, c.Slot, c.Tenure, d.Err)
	}
	if d.Err != nil {
		return core.Result{}, d.Err
	}
	if !d.Propose {
		return d.Answer, nil
	}
	if current && !l.cl.quorum() {
		// Raft commits nothing without a quorum of its configuration; the
		// leader steps down when its lease runs out.
		l.stepDown()
		return core.LeaderAnswer(d, core.Result{}), fmt.Errorf("raft apply %s: %w", c.Type, raft.ErrLeadershipLost)
	}
	if !current {
		// A deposed leader's entry may still be committed by its successor,
		// but its caller hears only that leadership was lost.
		if ld.w.r.Intn(2) == 0 && l.cl.quorum() {
			idx, _ := l.cl.appendEntry(d.Cmd)
			ld.w.logf("%s (deposed) proposed %s of %s: committed at %d", l.name(), d.Cmd.Type, d.Cmd.SpeaksFor(), idx)
		}
		return core.LeaderAnswer(d, core.Result{}), fmt.Errorf("raft apply %s: %w", c.Type, raft.ErrLeadershipLost)
	}
	idx, res := l.cl.appendEntry(d.Cmd)
	l.catchUp(int(idx))
	ld.w.logf("%s commits %s of %s at %d: %v", l.name(), d.Cmd.Type, d.Cmd.SpeaksFor(), idx, res)
	r, err := core.AppliedResult(d.Cmd.Type, idx, res)
	return core.LeaderAnswer(d, r), err
}

// applyForwarded is ApplyForwarded in front of handle: forwardCheck decides.
func (ld *simLeaders) applyForwarded(l *simNode, c core.Command) (core.Result, error) {
	in := core.ForwardIn{Leader: l.believesLeader(), Own: l.ownCluster(), Speaks: core.OwnProtocols}
	if l.conflict {
		in.Conflict = core.ErrClusterConflict
	}
	if err := core.ForwardCheck(in, c, nil); err != nil {
		if !errors.Is(err, core.ErrWrongCluster) || !ld.w.cfg.faults.adoptForwards {
			return core.Result{}, err
		}
		c.ClusterID = in.Own
	}
	return ld.handle(l, c)
}

// handoff hands leadership to another live member (the shell's handoff;
// which one is not modelled).
func (ld *simLeaders) handoff(l *simNode) {
	if to := l.cl.pickMember(l); to != nil {
		ld.w.logf("%s hands off", l.name())
		l.cl.elect(to)
	}
}

// sweep is one reconcile sweep of c's leader (leader.go): the shipped
// sweepProbes and sweepActions decide from the leader's Raft configuration,
// gossip and replica, and the probes' answers; the world carries out each
// action as the shell does, a configuration change or a Remove only with a
// quorum (one without fails, as Raft's would).
func (ld *simLeaders) sweep(c *simCluster) {
	c.lastSweep = ld.w.now
	l := c.leader
	if l == nil || !l.ready || !l.awake() || l.conflict {
		return
	}
	v := &core.MemberView{Self: l.id, SelfRaftAddr: raftAddr(l.addr), Own: l.ownCluster(),
		Servers: coreServers(c.servers), Members: ld.w.net.gossipView(), Addable: map[string]bool{},
		StateAddr: map[string]string{}, LeaderApplied: uint64(l.applied), Now: ld.w.base.Add(ld.w.now), ReapAfter: simReapAfter}
	if l.replica.Layout != nil {
		v.Layout = l.replica.Layout
	}
	for id, m := range v.Members {
		v.Addable[id] = core.Addable(m, v.Own)
	}
	// A fresh node joins the cluster the world sent it to: another
	// cluster's leader, on the same gossip network, got to it first.
	for _, n := range ld.w.nodes {
		if n.cl != nil && n.cl != c {
			v.Addable[n.id] = false
		}
	}
	st := l.replica
	v.Holders = st.Holders()
	for _, id := range st.SortedNodeIDs() {
		v.StateAddr[id] = st.Nodes[id].GRPCAddr
		if !c.member(id) && id != l.id {
			v.StateOnly = append(v.StateOnly, id)
		}
	}
	probes, gone := l.ls.SweepProbes(v)
	keys := make([]core.ProbeKey, 0, len(probes))
	for k := range probes {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].ID+" "+keys[i].Addr < keys[j].ID+" "+keys[j].Addr })
	answers := map[core.ProbeKey]core.ProbeAnswer{}
	for _, k := range keys {
		st, err := ld.w.net.probe(k.Addr)
		answers[k] = core.ProbeAnswer{Status: st, Err: err}
	}
	ld.pollClocks(c, l)
	for _, a := range l.ls.SweepActions(v, gone, answers) {
		if a.Kind == core.ActRefuse || a.Kind == core.ActNote || a.Kind == core.ActWait {
			continue
		}
		if !c.quorum() {
			ld.w.logf("%s cannot %v %s: no quorum", l.name(), a.Kind, a.ID)
			continue
		}
		ld.memberActs[a.Kind]++
		switch a.Kind {
		case core.ActReap:
			idx, res := c.appendEntry(core.Command{Type: core.CmdRemove, NodeID: a.ID, ClusterID: c.id})
			c.removeMember(a.ID)
			l.catchUp(int(idx))
			l.ls.Reaped(a.ID)
			ld.w.logf("%s reaps %s at %d (%s): %v", l.name(), a.ID, idx, a.Why, res)
		case core.ActAddNonvoter:
			c.servers = append(c.servers, raft.Server{Suffrage: raft.Nonvoter, ID: raft.ServerID(a.ID), Address: raft.ServerAddress(a.Addr)})
			l.ls.Added(a.ID, v.Now)
			ld.w.logf("%s adds %s as a non-voter", l.name(), a.ID)
		case core.ActPromote, core.ActMoveAddr:
			for i := range c.servers {
				if string(c.servers[i].ID) == a.ID {
					c.servers[i].Address = raft.ServerAddress(a.Addr)
					if a.Kind == core.ActPromote {
						c.servers[i].Suffrage = raft.Voter
					}
				}
			}
			if a.Kind == core.ActPromote {
				l.ls.Promoted(a.ID)
			} else {
				l.ls.Moved(a.ID)
			}
			ld.w.logf("%s %v %s at %s", l.name(), a.Kind, a.ID, a.Addr)
		}
	}
}

// pollClocks is the leader's clock poll (Node.pollClocks), run on each
// sweep: the voters it has not heard from within clockPollEvery are asked
// for their Status, and statusClock decides which answers count.
func (ld *simLeaders) pollClocks(c *simCluster, l *simNode) {
	real := ld.w.base.Add(ld.w.now)
	for _, id := range core.ClockPollTargets(c.voters(), l.id, l.clocks.HeardSince, real, core.ClockPollEvery) {
		var addr string
		for _, n := range ld.w.nodes {
			if n.id == id {
				addr = grpcAddr(n.addr)
			}
		}
		st, err := ld.w.net.probe(addr)
		if err != nil {
			continue
		}
		if s, ok := core.StatusClock(id, l.ownCluster(), st, l.clock().Now(), real); ok {
			l.clocks.Observe(id, s)
		}
	}
}
