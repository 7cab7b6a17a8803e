package sim

// A deterministic simulated world for the slot protocol (cluster/DESIGN.md,
// "The simulator"). Every virtual node runs the shipped decision code of
// cluster/core: the replicated state (core.State.ApplyEntry over encoded
// entries, and core.EncodeSnapshot and DecodeSnapshot for Raft's
// snapshots), the generator (generator.Generator on a virtual clock), the
// agent's rule (core.SlotAgent.Step, driven as the node drives it), the
// leader's (HandleCheck, LeaderCheck, AppliedResult, LeaderAnswer,
// InitCommand, EstablishNext, FounderCheck), reconcile's sweeps
// (SweepProbes, SweepActions), the way between them (ProposeRoute,
// ForwardCheck, AcceptAnswer), cluster time (ClockBook, ClusterTime) and
// where clusters meet (ClusterAge, FenceCommands). Raft,
// the transport and gossip are modelled: one log per cluster that commits
// only with a quorum, replicas that lag or install the leader's snapshot,
// restarts from a snapshot, elections, deposed and paused leaders that still
// answer, failed Inits, forwards and answers that are delayed, lost,
// duplicated and reordered, and delivered to whoever listens at an address
// now; nodes pause, leave, and keep a prefetch buffer (generator.TakeRuleFor).
// After the faults a quiet phase checks liveness. Every choice comes from one seeded math/rand
// source, so a seed replays its run exactly.
//
// The world (this file: its timing, config, nodes and clusters, the step
// loop and run) composes one part per concern, each owning its state:
//   - sim_raft_test.go: the modelled Raft, on simCluster (its log,
//     configuration, quorum and elections) and simNode (its replica,
//     snapshots, stepping down, crash and restart);
//   - sim_leader_test.go: simLeaders, the leader's side of the shell
//     (Barrier, establish, handle, ApplyForwarded, hand-off, reconcile);
//   - sim_agent_test.go: simAgents, the agent's shell, and simClients, the
//     rpc server's prefetch buffer and draws;
//   - sim_net_test.go: simNet, the messages in flight, gossip and probes;
//   - sim_faults_test.go: the planted faults (simFaults) and simFaultPlan
//     (wipes, a quorum lost for good, the meetings and their fences);
//   - sim_check_test.go: simChecker (IDs, tenures, liveness, membership).
//
// The tests that run it are in sim_run_test.go.

import (
	"context"
	"fmt"
	"math/rand"
	"strings"
	"time"

	"github.com/idgen/idgen/cluster/core"
	"github.com/idgen/idgen/generator"
)

// The world's timing, in virtual time.
const (
	simUnit     = 100 * time.Millisecond
	simLead     = time.Second
	simMaxSkew  = 300 * time.Millisecond
	simMaxAhead = simLead + simMaxSkew
	simTimeout  = 2 * time.Second // a proposal's answer is awaited this long
)

// The quiet phase: once faults stop (no crashes, wipes, elections, removals
// or clock jumps; crashed nodes restart; clocks are back within a quarter of
// max-skew; the network no longer loses, duplicates or holds messages), the
// world keeps the timing promises a fault-free network and Raft keep, and
// liveness is checked against them (DESIGN.md, "The simulator").
const (
	simElection  = time.Second            // a cluster without a leader has one again (Raft's election timeout)
	simBarrierIn = 100 * time.Millisecond // a new leader's Barrier completes
	simHeartbeat = 100 * time.Millisecond // every follower hears from its leader; gossip re-adds a removed live member
	simReplicate = 50 * time.Millisecond  // a follower's replica applies every committed entry (CommitTimeout)
	simReapAfter = 2 * time.Second        // reconcile removes a member gone from gossip this long (ReapAfter)
	simSweep     = 500 * time.Millisecond // the leader runs a reconcile sweep (ReconcileInterval)
	simNetDelay  = 30 * time.Millisecond  // a message's longest delay once the network heals
	// simRoomGrace: a window used up by a burst is extended within this (the
	// gap between reserves, a round trip, a replication, an agent tick).
	simRoomGrace = 500 * time.Millisecond
	// simLiveBound: within this of the quiet phase's start every live node
	// holding a slot can mint and no free slot leaves a live node slotless,
	// and so until the run ends simLiveTail later. The derivation is in
	// DESIGN.md, "The simulator".
	simLiveBound = 10 * time.Second
	simLiveTail  = 2 * time.Second
)

var simLayout = generator.Layout{Epoch: generator.DefaultEpoch, Unit: simUnit, TimestampBits: 32, DatacenterBits: 1, MachineBits: 2, SequenceBits: 4}

// simConfig shapes a world; newSimConfig draws one from the seed.
type simConfig struct {
	nodes  int
	events int
	// per-event weights of the fault events
	crash, wipe, jump, elect, remove, leave, pause float64
	// wipeNewCluster: chance that a wiped node bootstraps a cluster of its own.
	wipeNewCluster float64
	loss, dup      float64
	// initFail: chance that an establish's Init apply fails (a commit
	// timeout: half of them are committed all the same).
	initFail float64
	// calm: the first cluster's leader never changes while the faults last
	// (no elections, and it is never crashed or wiped): one in eight worlds,
	// so that a failed Init meets a leader that stays.
	calm bool
	// strangers: nodes 1..strangers are started with a datacenter outside
	// the layout (as a node of another --datacenter or --layout is): every
	// claim of theirs is refused. They gossip like the others, and the
	// leader must never make them voters (canTakePart). One world in three.
	strangers int
	// legacy: the strangers are of the release before protocol 2, started
	// under another --layout: they never claim, and their Status carries no
	// clock, datacenter or layout. The leader must not make them voters
	// either (shownToTakePart): they would never report a clock. Half the
	// worlds with strangers.
	legacy bool
	// doom: at a third of the faults the first cluster loses its quorum
	// for good (a majority of its voters crash and never come back); one
	// node of it survives, and the operator builds a replacement cluster
	// from the others, which meets the survivor only after leaderGrace.
	// The replacement serves and the survivor cannot: the replacement must
	// win. One world in five of four or more nodes.
	doom   bool // (cleared once tried)
	doomed bool // it happened
	faults simFaults
}

func newSimConfig(r *rand.Rand) simConfig {
	c := simConfig{
		nodes:  3 + r.Intn(3),
		events: 1500 + r.Intn(1500),
		crash:  0.3 + r.Float64(), wipe: 0.2 * r.Float64(), jump: 0.5 * r.Float64(),
		elect: 0.5 + r.Float64(), remove: 0.4 * r.Float64(), leave: 0.3 * r.Float64(), pause: 0.4 * r.Float64(),
		wipeNewCluster: r.Float64(),
		loss:           0.1 * r.Float64(), dup: 0.1 * r.Float64(),
		initFail: 0.8 * r.Float64(),
		calm:     r.Intn(8) == 0,
	}
	if c.calm {
		c.elect = 0
	}
	return c
}

// simEvent is one line of the trace, formatted only when the trace is
// printed (every argument is a value, never a pointer the world changes).
type simEvent struct {
	at     time.Duration
	format string
	args   []any
}

type simWorld struct {
	seed   int64
	r      *rand.Rand // every choice the world makes, in order
	cfg    simConfig
	now    time.Duration
	base   time.Time
	nodes  []*simNode
	cls    []*simCluster
	events int
	// quietAt: when faults stopped (0: not yet).
	quietAt time.Duration
	trace   []simEvent // ring of the last simTraceLen events
	traceN  int
	err     error // the first violation

	// The concerns, each owning its part of the world's state.
	net     simNet       // forwards and answers in flight, gossip and Status probes
	lead    simLeaders   // the leader's side of every node's shell
	agents  simAgents    // the agent's side of every node's shell
	clients simClients   // draws from every node's rpc server
	plan    simFaultPlan // wipes, a doomed quorum, and the meetings they lead to
	check   simChecker   // every ID handed out, the tenures, liveness
}

const simTraceLen = 50

// simMint is who handed out an ID.
type simMint struct {
	node, cluster string
	tenure        uint64
	slot          int
	ts            int64
}

func (m simMint) String() string {
	return fmt.Sprintf("%s of %s tenure %d slot %d ts %d", m.node, m.cluster, m.tenure, m.slot, m.ts)
}

func (w *simWorld) logf(format string, args ...any) {
	e := simEvent{at: w.now, format: format, args: args}
	if len(w.trace) < simTraceLen {
		w.trace = append(w.trace, e)
	} else {
		w.trace[w.traceN%simTraceLen] = e
	}
	w.traceN++
}

// traceText is the last events, oldest first.
func (w *simWorld) traceText() string {
	var b strings.Builder
	start := 0
	if len(w.trace) == simTraceLen {
		start = w.traceN % simTraceLen
	}
	for i := range w.trace {
		e := w.trace[(start+i)%len(w.trace)]
		fmt.Fprintf(&b, "  %9.3fs %s\n", e.at.Seconds(), fmt.Sprintf(e.format, e.args...))
	}
	return b.String()
}

func (w *simWorld) fail(format string, args ...any) {
	if w.err == nil {
		w.err = fmt.Errorf(format, args...)
		w.logf("VIOLATION: %v", w.err)
	}
}

func newSimWorld(seed int64, faults simFaults, tweak func(*simConfig)) *simWorld {
	r := rand.New(rand.NewSource(seed))
	cfg := newSimConfig(r)
	// Drawn from a stream of their own, so that a world without strangers
	// plays exactly as before they were modelled (the known seeds).
	if sr := rand.New(rand.NewSource(seed ^ 0x57a4)); sr.Intn(3) == 0 {
		cfg.strangers = 1 + sr.Intn(cfg.nodes-2)
		// (A stream of their own too, its constant chosen so that the
		// recorded seeds with strangers play as they did: simKnownSeeds,
		// the replay test's 445, the mutation table's 13.)
		cfg.legacy = rand.New(rand.NewSource(seed^0x1ecb)).Intn(2) == 0
	}
	if dr := rand.New(rand.NewSource(seed ^ 0xd00d)); cfg.nodes-cfg.strangers >= 4 && !cfg.calm && dr.Intn(5) == 0 {
		cfg.doom = true
	}
	cfg.faults = faults
	if tweak != nil {
		tweak(&cfg)
	}
	w := &simWorld{seed: seed, r: r, cfg: cfg,
		base: time.Unix(generator.DefaultEpoch+1e6, 0)}
	w.net, w.lead, w.agents, w.clients = simNet{w: w}, simLeaders{w: w}, simAgents{w: w}, simClients{w: w}
	w.plan, w.check = simFaultPlan{w: w}, simChecker{w: w, ids: map[int64]simMint{}}
	for a := 0; a < cfg.nodes; a++ {
		n := &simNode{w: w, addr: a, up: true, replica: core.NewState()}
		n.id, n.nm = w.newNodeID(a, 0), fmt.Sprintf("%d.0", a)
		n.dc = w.r.Intn(1<<simLayout.DatacenterBits+1) - 1
		n.offset = time.Duration(r.Int63n(int64(simMaxSkew))) - simMaxSkew/2
		w.nodes = append(w.nodes, n)
	}
	// The first node bootstraps; the others have joined (their replicas
	// catch up by replication).
	c := w.bootstrap(w.nodes[0])
	for _, n := range w.nodes[1:] {
		n.cl = c
		if n.stranger() {
			n.dc = simStrangerDC // its leader's sweep decides whether it joins
			continue
		}
		c.addServer(n, true)
	}
	return w
}

func (w *simWorld) newNodeID(addr, life int) string {
	return fmt.Sprintf("node%d-life%d-%08x", addr, life, w.r.Uint32())
}

// bootstrap makes n the leader of a new cluster with an empty log; its
// first entry is the Init its leader's establish writes.
func (w *simWorld) bootstrap(n *simNode) *simCluster {
	c := &simCluster{w: w, id: fmt.Sprintf("cluster%d", len(w.cls)), truth: core.NewState(), created: len(w.cls)}
	c.addServer(n, true)
	w.cls = append(w.cls, c)
	n.cl = c
	w.logf("%s bootstraps %s", n.name(), c.id)
	c.elect(n)
	w.lead.barrier(n)
	return c
}

func (w *simWorld) pickNode(pred func(*simNode) bool) *simNode {
	var cands []*simNode
	for _, n := range w.nodes {
		if pred(n) {
			cands = append(cands, n)
		}
	}
	if len(cands) == 0 {
		return nil
	}
	return cands[w.r.Intn(len(cands))]
}

// step runs one event chosen by the seed.
func (w *simWorld) step() {
	w.events++
	w.now += time.Duration(w.r.Intn(20)+1) * time.Millisecond
	if w.quietAt == 0 && w.events > w.cfg.events*4/5 {
		w.beginQuiet()
	}
	if w.cfg.doom && w.events > w.cfg.events/3 {
		w.plan.doom()
	}
	defer func() {
		if w.quietAt != 0 {
			w.check.live()
		}
	}()
	w.tickClusters()
	w.tickNodes()
	faults := w.quietAt == 0
	if !faults {
		w.keepPromises()
	}
	w.event(w.pickEvent(faults), faults)
}

// tickClusters is what goes on in every cluster each step: a leader without
// a quorum steps down, a paused one is replaced, a younger cluster meets
// the older ones once due, and a winner fences the cluster it stopped.
func (w *simWorld) tickClusters() {
	for _, c := range w.cls {
		if l := c.leader; l != nil && !c.quorum() {
			l.stepDown() // its lease runs out: it has not heard from a quorum
		}
		if l := c.leader; l != nil && !l.awake() && w.now >= l.pausedAt+simElection {
			// The followers stop hearing a paused leader and elect another.
			if n := c.pickMember(l); n != nil {
				c.elect(n)
			}
		}
		if l := c.leader; l != nil && l.ready && l.awake() && c.quorum() {
			c.servedAt = w.now
		}
		if c.younger && c.meetAt != 0 && w.now >= c.meetAt {
			c.meetAt, c.met = 0, true
		}
		// Every cluster on the gossip network (a younger one once its
		// meeting is due) meets every other there that has not stopped.
		for _, d := range w.cls {
			if d != c && w.plan.inGossip(c) && w.plan.inGossip(d) && !c.stopped && !d.stopped && c.younger && (!d.younger || d.created < c.created) {
				w.plan.meet(c, d)
			}
		}
		if c.stopped && c.fencedAt == 0 && c.fencedBy != nil {
			w.plan.fenceMet(c)
		}
	}
}

// tickNodes fires the timers of every awake node: a proposal's deadline,
// and an establish retry.
func (w *simWorld) tickNodes() {
	for _, n := range w.nodes {
		if !n.awake() {
			continue // its timers fire when it wakes
		}
		if n.pending != nil && w.now > n.pending.deadline {
			c := n.pending.c
			n.pending = nil
			w.agents.answered(n, c, core.Result{}, context.DeadlineExceeded)
		}
		if n.initAt != 0 && w.now >= n.initAt {
			w.lead.establish(n)
		}
	}
}

// pickEvent draws the step's event by weight: faults only while they last.
func (w *simWorld) pickEvent(faults bool) int {
	weights := []float64{30, 30, 25, 20, 6, 4, 0, 0, 0, 0, 0, 0, 15, 0, 3, 0, 0, 0}
	if faults {
		weights[6], weights[7], weights[8], weights[9], weights[10], weights[11] = w.cfg.elect, w.cfg.crash, w.cfg.wipe, w.cfg.jump, w.cfg.remove, 2
		weights[13], weights[15], weights[16], weights[17] = w.cfg.leave, w.cfg.pause, 1, 4
	} else {
		weights[11] = 2
	}
	sum := 0.0
	for _, x := range weights {
		sum += x
	}
	x := w.r.Float64() * sum
	ev := 0
	for ev = range weights {
		if x < weights[ev] {
			break
		}
		x -= weights[ev]
	}
	return ev
}

// event runs event ev of the step (pickEvent's).
func (w *simWorld) event(ev int, faults bool) {
	up := func(n *simNode) bool { return n.awake() }
	// In a calm world the first cluster's leader is never crashed or wiped.
	spare := func(n *simNode) bool { return !w.cfg.calm || n != w.cls[0].leader }
	switch ev {
	case 0:
		if n := w.pickNode(up); n != nil {
			w.agents.agent(n)
		}
	case 1:
		if n := w.pickNode(up); n != nil {
			w.clients.draw(n)
		}
	case 2:
		w.net.deliver()
	case 3: // replication: a follower's replica catches up some of the way, or, far behind, installs the leader's snapshot
		if n := w.pickNode(up); n != nil && n.cl != nil && n.applied < len(n.cl.log) {
			if l := n.cl.leader; l != nil && l != n && l.awake() && l.applied-n.applied > 8 && w.r.Intn(3) == 0 {
				n.installSnapshot(l)
			} else {
				n.catchUp(n.applied + 1 + w.r.Intn(len(n.cl.log)-n.applied))
			}
		}
	case 4:
		if n := w.pickNode(up); n != nil {
			w.heartbeat(n)
		}
	case 5: // a new leader's Barrier completes
		for _, c := range w.cls {
			if c.leader != nil && !c.leader.ready {
				w.lead.barrier(c.leader)
				break
			}
		}
	case 6:
		c := w.cls[w.r.Intn(len(w.cls))]
		if n := c.pickMember(nil); n != nil && n != c.leader {
			c.elect(n)
		}
	case 7:
		if n := w.pickNode(func(n *simNode) bool { return n.up && spare(n) }); n != nil {
			n.crash()
		}
	case 8:
		if n := w.pickNode(func(n *simNode) bool { return spare(n) && !n.gone && n.cl.keepsQuorum(n.id, false) }); n != nil {
			w.plan.wipe(n)
		}
	case 9:
		if n := w.pickNode(up); n != nil {
			n.offset += time.Duration(w.r.Int63n(int64(2*time.Second))) - time.Second
			switch w.r.Intn(16) {
			case 0, 1, 2, 3, 4, 5, 6, 7:
				n.offset = time.Duration(w.r.Int63n(int64(simMaxSkew))) - simMaxSkew/2
			case 8: // minutes or hours off, either way (a bad NTP step, a VM's RTC)
				n.offset = time.Duration(w.r.Int63n(int64(4*time.Hour))) - 2*time.Hour
			case 9: // before the layout's epoch (an RTC reset to 2000)
				n.offset = -w.base.Sub(time.Unix(946684800, 0))
			}
			w.logf("%s clock offset now %v", n.name(), n.offset)
		}
	case 10: // an operator removes a member (idctl remove): its slot is freed
		c := w.cls[0]
		if l := c.leader; l != nil && l.ready && !l.conflict && len(c.servers) > 1 && c.quorum() {
			id := string(c.servers[w.r.Intn(len(c.servers))].ID)
			if id != l.id && c.keepsQuorum(id, true) {
				idx, res := c.appendEntry(core.Command{Type: core.CmdRemove, NodeID: id, ClusterID: c.id})
				c.removeMember(id)
				l.catchUp(int(idx))
				w.logf("%s removes %s at %d: %v", l.name(), id, idx, res)
			}
		}
	case 11: // restart a crashed node (not in the quiet phase: all restarted at its start, and one that leaves in it stays away), or elect where there is no leader
		if n := w.pickNode(func(n *simNode) bool { return !n.up && !n.gone }); n != nil && w.r.Intn(2) == 0 && faults {
			n.restart()
			return
		}
		for _, c := range w.cls {
			if c.leader == nil {
				if n := c.pickMember(nil); n != nil {
					c.elect(n)
				}
			}
		}
	case 12:
		if n := w.pickNode(up); n != nil {
			w.clients.produce(n)
		}
	case 13: // a graceful leave (the leader's own hands off first: not modelled)
		if n := w.pickNode(func(n *simNode) bool {
			return n.awake() && n.gen != nil && n.leaving == 0 && n.pending == nil && !n.conflict && n.cl.leader != n &&
				n.cl.keepsQuorum(n.id, true)
		}); n != nil {
			w.agents.leave(n)
		}
	case 14: // a node takes a Raft snapshot of its replica (SnapshotThreshold)
		if n := w.pickNode(func(n *simNode) bool { return n.awake() && n.cl != nil && n.applied > n.snapAt }); n != nil {
			n.snap, n.snapAt = n.snapshot()
		}
	case 15: // a node's process stops for up to 3 s, and resumes with its state
		if n := w.pickNode(func(n *simNode) bool { return n.awake() && spare(n) }); n != nil {
			n.pausedAt, n.pausedUntil = w.now, w.now+time.Duration(1+w.r.Int63n(int64(3*time.Second)))
			w.logf("%s pauses until %.3fs", n.name(), n.pausedUntil.Seconds())
		}
	case 16: // a forged forward: a claim whose datacenter is outside the layout, in the name of a real node
		if n := w.pickNode(up); n != nil {
			l := simLayout
			dc := []int{1 << simLayout.DatacenterBits, 1 << 62, -2, 1<<31 - 1}[w.r.Intn(4)]
			c := core.Command{Type: core.CmdClaim, Node: &core.NodeInfo{ID: n.id, Name: n.name(), Datacenter: dc}, Layout: &l,
				ClusterID: n.ownCluster(), SentAt: n.clock().Now().UnixNano()}
			to := w.r.Intn(len(w.nodes))
			if n.believed != nil {
				to = n.believed.addr
			}
			w.net.send(&simMsg{to: to, forward: true, c: c, from: n.addr, life: -1, forged: true})
		}
	case 17: // a leader's reconcile sweep (on a gossip event or its ticker)
		w.lead.sweep(w.cls[w.r.Intn(len(w.cls))])
	}
}

// heartbeat: n learns its cluster's leader.
func (w *simWorld) heartbeat(n *simNode) {
	if n.cl == nil || !n.awake() {
		return
	}
	if n.cl.leader != nil {
		n.believed = n.cl.leader
	}
}

// beginQuiet stops the faults: crashed nodes restart, clocks come back
// within a quarter of max-skew (time sources fixed), and from now on the
// network neither loses, duplicates nor holds messages (send).
func (w *simWorld) beginQuiet() {
	w.quietAt = w.now
	w.logf("faults stop")
	for _, n := range w.nodes {
		n.pausedUntil = min(n.pausedUntil, w.now)
		if !n.up && !n.gone {
			n.restart()
		}
		n.offset = time.Duration(w.r.Int63n(int64(simMaxSkew/2))) - simMaxSkew/4
	}
}

// keepPromises does, in the quiet phase, whatever a fault-free Raft and
// network would have done by now: every due message is delivered, a cluster
// without a leader elects one within simElection, a new leader's Barrier
// completes within simBarrierIn, every node hears a heartbeat every
// simHeartbeat, has its replica caught up every simReplicate and runs its
// agent every agentTick, and a leader reaps dead identities simReapAfter
// after the faults stopped.
func (w *simWorld) keepPromises() {
	for w.net.deliver() {
	}
	for _, c := range w.cls {
		l := c.leader
		switch {
		case l == nil || !l.up:
			if c.electAt == 0 {
				c.electAt = w.now + simElection
			} else if w.now >= c.electAt {
				if n := c.pickMember(nil); n != nil {
					c.elect(n)
				}
			}
		case !l.ready:
			if w.now-l.ledAt >= simBarrierIn {
				w.lead.barrier(l)
			}
		case w.now-c.lastSweep >= simSweep:
			w.lead.sweep(c)
		}
	}
	for _, n := range w.nodes {
		if !n.up {
			continue
		}
		if w.now-n.lastRepl >= simReplicate && n.cl != nil {
			was := n.applied
			n.catchUp(len(n.cl.log))
			n.lastRepl = w.now
			if n.applied != was {
				w.agents.agent(n) // the agent follows every applied entry (fsm.changed)
			}
		}
		if w.now-n.lastBeat >= simHeartbeat {
			w.heartbeat(n)
			n.lastBeat = w.now
		}
		if w.now-n.lastTick >= core.AgentTick {
			w.agents.agent(n)
			n.lastTick = w.now
		}
	}
}

// run plays the world to its end, or to the first violation: the fault
// phase, then the quiet phase for simLiveBound and simLiveTail.
func (w *simWorld) run() error {
	for w.err == nil && (w.quietAt == 0 || w.now < w.quietAt+simLiveBound+simLiveTail) {
		w.step()
	}
	for _, c := range w.cls {
		w.check.tenures(c)
	}
	return w.err
}

// simStamp is an ID's timestamp under the world's layout.
func simStamp(id int64) int64 {
	return id >> (simLayout.SequenceBits + simLayout.DatacenterBits + simLayout.MachineBits)
}
