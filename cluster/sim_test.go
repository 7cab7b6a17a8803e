package cluster

// A deterministic simulated world for the slot protocol (DESIGN.md, "The
// simulator"). Every virtual node runs the shipped decision code: the
// replicated state machine (fsm.Apply over encoded entries), the generator
// (generator.Generator on a virtual clock), the agent's rule (slotAgent.step,
// driven as the node drives it), the leader's (handleCheck, leaderCheck, appliedResult,
// leaderAnswer, initCommand, establishNext), the way between them
// (proposeRoute, forwardCheck, acceptAnswer) and cluster time (clockBook,
// clusterTime), and Raft's snapshots (fsm.Snapshot, Persist, Restore). Raft,
// the transport and gossip are modelled: one log per cluster that commits
// only with a quorum, replicas that lag or install the leader's snapshot,
// restarts from a snapshot, elections, deposed and paused leaders that still
// answer, failed Inits, forwards and answers that are delayed, lost,
// duplicated and reordered, and delivered to whoever listens at an address
// now; nodes pause, leave, and keep a prefetch buffer (generator.TakeRuleFor). After the faults a quiet
// phase checks liveness. Every choice comes from one seeded math/rand
// source, so a seed replays its run exactly.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/raft"

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

// The prefetch buffer (rpc's Server): batches of simBatch IDs minted ahead,
// at most simBufDepth of them.
const (
	simBatch    = 8
	simBufDepth = 4
)

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

type simCluster struct {
	id      string
	log     [][]byte // log[i] is entry i+1, as Raft stores it
	truth   *fsm     // the committed log applied: what the checker trusts
	leader  *simNode // nil: no leader
	term    int
	servers []raft.Server // the Raft configuration (addresses: raftAddr)
	younger bool          // bootstrapped by a wiped node: see simNode.conflict
	meetAt  time.Duration
	// older: the cluster a younger one's founder was wiped from, which
	// meets it at meetAt and fences its windows (foreignFences and
	// fenceCommands, as the older leader's fenceForeign runs them); met:
	// the meeting happened; fencedAt: the length of the older log once its
	// leader found nothing left to fence (0: not yet). An ID the older
	// cluster mints from a replica that has applied that far never repeats
	// one of this cluster's.
	older    *simCluster
	met      bool
	fencedAt int
	// The meeting is decided by the shipped rule (clusterAge.outranks)
	// over what each side is: serving (a ready leader within leaderGrace,
	// as a member's leaderKnown says), its history and identity. won: this
	// younger cluster outranked its older one, which stopped (stopped) and
	// is fenced by this one's leader instead (fencedBy: who fences this
	// cluster's windows; nil for the older one when it won).
	won, stopped bool
	fencedBy     *simCluster
	// servedAt: when it last had a ready leader; created: its place in
	// w.cls (bootstrap order).
	servedAt time.Duration
	created  int
	// electAt: the quiet phase elects a leader by then (0: none due).
	electAt time.Duration
	// lastSweep: when its leader last ran a reconcile sweep.
	lastSweep time.Duration
}

// simStrangerDC is a stranger's --datacenter: outside simLayout's.
const simStrangerDC = 1 << 3

// stranger: n is started with a datacenter outside the layout (simConfig).
func (n *simNode) stranger() bool { return n.addr >= 1 && n.addr <= n.w.cfg.strangers }

type simNode struct {
	w      *simWorld
	addr   int
	life   int
	nm     string // addr.life
	id     string
	up     bool
	offset time.Duration // this node's clock minus real time
	dc     int           // its preferred datacenter (--datacenter), -1 for any
	// pausedAt, pausedUntil: the process is stopped (a GC pause, SIGSTOP, a
	// stalled VM) from pausedAt until pausedUntil: it keeps its state but
	// does nothing, and messages to it wait.
	pausedAt, pausedUntil time.Duration

	cl      *simCluster
	replica *fsm
	applied int // entries of cl.log applied to replica
	// snap is the node's latest Raft snapshot (fsm.Snapshot and Persist of
	// its replica), covering the log up to snapAt; nil for none. A restart
	// restores it and applies the rest of the log as replication brings it.
	snap   []byte
	snapAt int

	// conflict: the node's cluster met an older one; it stops for good.
	// (Gossip is not modelled: clients never reach a younger cluster before
	// the meeting, see DESIGN.md.)
	conflict bool

	// downAt: when it last crashed; left: its leave ended in shutdown, and
	// gossip shows it left rather than dead; gone: it crashed for good (a
	// doomed world's lost majority), and never restarts.
	downAt time.Duration
	left   bool
	gone   bool

	// leader side
	ls           leaderState   // reconcile's bookkeeping, new with each leadership
	ready        bool          // past its Barrier
	deposedUntil time.Duration // a deposed leader still answers until then
	clocks       clockBook
	// initWait is the wait before the last establish retry, initAt when the
	// next one is due (0: none).
	initWait, initAt time.Duration

	// leaving: 1 while its Release is on its way, 2 once released and
	// waiting for the leader to remove it (Leave); 0 otherwise.
	leaving int

	// buf is the prefetch buffer: batches minted ahead, handed out later;
	// minted and withdrawn are the node's (withdraw.go): the tenure its
	// generator mints under, and what its ended tenures withdrew.
	buf       []simBatchOf
	minted    mintedTenure
	withdrawn withdrawals

	// agent side
	believed *simNode // the leader it forwards to (may be stale)
	gen      *generator.Generator
	tenure   uint64
	rule     slotAgent // the agent's rule, as the node runs it
	pending  *simReq

	// the quiet phase's timers: when n last ran its agent, heard a
	// heartbeat, had its replica caught up; when it became leader; since
	// when its window has been used up (if noRoom)
	lastTick, lastBeat, lastRepl, ledAt, noRoomSince time.Duration
	noRoom                                           bool
}

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

// simEvent is one line of the trace, formatted only when the trace is
// printed (every argument is a value, never a pointer the world changes).
type simEvent struct {
	at     time.Duration
	format string
	args   []any
}

type simWorld struct {
	seed   int64
	r      *rand.Rand
	cfg    simConfig
	now    time.Duration
	base   time.Time
	nodes  []*simNode
	cls    []*simCluster
	net    []*simMsg
	nextID int
	// ghosts: the identities wipes ended, as gossip keeps showing them (dead).
	ghosts []gossipMember
	// ids maps every ID handed out to who minted it.
	ids    map[int64]simMint
	minted int
	events int
	trace  []simEvent // ring of the last simTraceLen events
	traceN int
	err    error

	// wrongCluster counts forwards refused because they name another
	// cluster than the leader's (a wiped leader's new cluster at its old
	// address); forgedRefused counts forged forwards a leader refused by
	// the layout checks.
	wrongCluster, forgedRefused int
	// beforeFence counts IDs two clusters both handed out before the older
	// one had fenced the younger (the meeting's window).
	beforeFence int
	// withdrawn counts buffered IDs dropped for a tenure that had ended.
	withdrawn int
	// fences counts the commands the older leaders' fences wrote.
	fences int
	// replacement: the cluster a doomed world's operator built.
	replacement *simCluster
	// memberActs counts the reconcile actions carried out, by kind.
	memberActs [actPromote + 1]int
	// quietAt: when faults stopped (0: not yet); unliveAt: the last time
	// the liveness check found a problem in the quiet phase.
	quietAt, unliveAt time.Duration
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

type simClock struct{ n *simNode }

func (c simClock) Now() time.Time { return c.n.w.base.Add(c.n.w.now + c.n.offset) }

func (n *simNode) clock() generator.Clock { return simClock{n} }
func (n *simNode) name() string           { return n.nm }

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
	w := &simWorld{seed: seed, r: r, cfg: cfg, ids: map[int64]simMint{},
		base: time.Unix(generator.DefaultEpoch+1e6, 0)}
	for a := 0; a < cfg.nodes; a++ {
		n := &simNode{w: w, addr: a, up: true, replica: newFSM()}
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
	c := &simCluster{id: fmt.Sprintf("cluster%d", len(w.cls)), truth: newFSM(), created: len(w.cls)}
	c.addServer(n, true)
	w.cls = append(w.cls, c)
	n.cl = c
	w.logf("%s bootstraps %s", n.name(), c.id)
	w.elect(c, n)
	w.barrier(n)
	return c
}

// clusterNow is Node.clusterNow for leader l whose clock reads now: the
// shipped clockQuorum and clusterTime over its voters' reports.
func (w *simWorld) clusterNow(l *simNode, now time.Time) (time.Time, bool) {
	var others []string
	real, awaited := w.base.Add(w.now), 0
	founded, led := l.replica.state.Layout != nil, w.now-l.ledAt
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
		if clockAwaited(len(l.clocks.byID([]string{m}, real, clockSampleTTL)) > 0, false, founded) {
			awaited++
		}
	}
	est, quorum := clockQuorum(l.clocks.byID(others, real, clockSampleTTL), awaited, led, clockSampleTTL)
	return clusterTime(now, est, quorum)
}

// establish is the leader loop's establish (leader.go): initCommand when the
// state holds no Init, and establishNext deciding whether and when to try
// again. While the faults last an apply fails with the world's initFail
// chance, and half of the failed ones are committed all the same.
func (w *simWorld) establish(l *simNode) {
	l.initAt = 0
	if l.cl.leader != l || !l.ready {
		return // the leader loop ended with the leadership
	}
	var err error
	now := l.clock().Now()
	ct, known := w.clusterNow(l, now)
	if l.replica.state.Layout == nil {
		err = founderCheck(simLayout, now, ct, known, simMaxSkew)
	}
	if l.replica.state.Layout == nil && err == nil {
		c := initCommand(simLayout, fmt.Sprintf("%s-%08x", l.cl.id, w.r.Uint32()), ct, simMaxAhead)
		quorum := w.quorum(l.cl)
		failed := !quorum || (w.quietAt == 0 && w.r.Float64() < w.cfg.initFail)
		if quorum && (!failed || w.r.Intn(2) == 0) {
			idx, res := w.appendEntry(l.cl, c)
			l.catchUp(int(idx))
			_, err = appliedResult(c.Type, idx, res)
			w.logf("%s commits init of %s at %d: %v", l.name(), c.ClusterID, idx, res)
		}
		switch {
		case !quorum:
			err = fmt.Errorf("raft apply %s: %w", c.Type, raft.ErrLeadershipLost)
			w.stepDown(l)
		case failed:
			err = fmt.Errorf("raft apply %s: %w", c.Type, raft.ErrEnqueueTimeout)
		}
	}
	again, wait := establishNext(err, l.initWait)
	if again {
		l.initWait, l.initAt = wait, w.now+wait
		w.logf("%s establish failed, retrying in %v: %v", l.name(), wait, err)
	}
}

// appendEntry commits c in cluster c's log and applies it to the truth.
func (w *simWorld) appendEntry(cl *simCluster, c command) (uint64, interface{}) {
	data, err := encodeCommand(c)
	if err != nil {
		w.fail("encode %s: %v", c.Type, err)
		return 0, err
	}
	cl.log = append(cl.log, data)
	idx := uint64(len(cl.log))
	res := simApply(cl.truth, idx, data)
	if id := cl.truth.state.ClusterID; c.Type == cmdInit && id != "" {
		cl.id = id
	}
	w.checkTenures(cl)
	return idx, res
}

func simApply(f *fsm, idx uint64, data []byte) interface{} {
	return f.Apply(&raft.Log{Type: raft.LogCommand, Index: idx, Data: data})
}

// catchUp applies n's cluster's log to n's replica up to entry upTo.
func (n *simNode) catchUp(upTo int) {
	if n.cl == nil {
		return
	}
	for n.applied < upTo && n.applied < len(n.cl.log) {
		n.applied++
		simApply(n.replica, uint64(n.applied), n.cl.log[n.applied-1])
		n.stopIfEnded()
	}
}

// stopIfEnded is the node's fsm.afterApply (Node.stopIfEnded): a generator
// whose tenure the replica just ended stops there and then, by the agent's
// rule, whatever the agent is doing.
func (n *simNode) stopIfEnded() {
	if upTo, ended := endedUpTo(n.replica.state, n.id, n.minted); ended && !n.w.cfg.faults.keepEnded {
		n.withdrawn.add(n.minted.slot, upTo)
	}
	if !n.w.cfg.faults.lateStop {
		n.w.agentStep(n, agentEvent{Kind: agentApplied})
	}
}

func (w *simWorld) elect(c *simCluster, n *simNode) {
	if old := c.leader; old != nil && old != n && old.up {
		w.depose(old)
	}
	c.term++
	c.leader = n
	c.electAt = 0
	n.ledAt = w.now
	n.ls = newLeaderState()
	n.ready = false
	n.initWait, n.initAt = 0, 0
	n.deposedUntil = 0
	n.clocks.reset()
	n.believed = n
	w.logf("%s leads %s (term %d)", n.name(), c.id, c.term)
}

// barrier: a new leader's Barrier completes; its leader loop then
// establishes the cluster (leaderLoop).
func (w *simWorld) barrier(n *simNode) {
	n.catchUp(len(n.cl.log))
	n.ready = true
	w.establish(n)
}

// believesLeader: n acts as a leader (the current one, or deposed and not
// knowing it yet).
func (n *simNode) believesLeader() bool {
	return n.awake() && n.cl != nil && (n.cl.leader == n || n.w.now < n.deposedUntil)
}

func (n *simNode) ownCluster() string { return n.replica.state.ClusterID }

// handle is the leader's side of a command (apply.go's handle and
// leaderApply, with Raft modelled): handleCheck, leaderCheck, appliedResult
// and leaderAnswer decide.
func (w *simWorld) handle(l *simNode, c command) (result, error) {
	current := l.cl.leader == l
	if current && l.ready {
		l.catchUp(len(l.cl.log)) // a leader applies what it commits
	}
	h, err := handleCheck(l.replica.state, c, l.ready)
	if err != nil {
		return result{}, err
	}
	if h != handleApply {
		return result{}, fmt.Errorf("command %s is not forwarded in the simulated world", c.Type)
	}
	now := l.clock().Now()
	in := leaderIn{Now: now, Member: c.Type != cmdClaim || l.cl.member(c.Node.ID), MaxAhead: simMaxAhead, MaxSkew: simMaxSkew}
	if c.Type == cmdClaim && !in.Member && w.cfg.faults.adoptForwards {
		in.Member = true // (a voter it cannot reach would cost it its quorum)
	}
	real := w.base.Add(w.now)
	if reportsClock(l.replica.state, c, l.cl.member(c.nodeID()) || in.Member && c.Type == cmdClaim) {
		l.clocks.observe(c.nodeID(), clockSample{reported: time.Unix(0, c.SentAt), leader: now, at: real})
	}
	in.ClusterNow, in.Known = w.clusterNow(l, now)
	d := leaderCheck(l.replica.state, c, in)
	if d.Handoff && current {
		w.handoff(l)
	}
	if current && errors.Is(d.Err, ErrNotOwner) && l.cl.truth.state.holds(c.NodeID, c.Slot, c.Tenure) {
		// A deposed leader may not know the claims its successor committed,
		// but the current one answers from its whole log (past its
		// Barrier): a false "not owner" from it is a leader reading a stale
		// state. No ID is at risk (the agent takes the answer as a hint),
		// but every such answer is a reserve wasted.
		w.fail("%s, the current leader of %s, answered \"not owner\" to the reserve of %s for slot %d tenure %d, "+
			"which its cluster's log shows as current: %v", l.name(), l.cl.id, c.NodeID, c.Slot, c.Tenure, d.Err)
	}
	if d.Err != nil {
		return result{}, d.Err
	}
	if !d.Propose {
		return d.Answer, nil
	}
	if current && !w.quorum(l.cl) {
		// Raft commits nothing without a quorum of its configuration; the
		// leader steps down when its lease runs out.
		w.stepDown(l)
		return leaderAnswer(d, result{}), fmt.Errorf("raft apply %s: %w", c.Type, raft.ErrLeadershipLost)
	}
	if !current {
		// A deposed leader's entry may still be committed by its successor,
		// but its caller hears only that leadership was lost.
		if w.r.Intn(2) == 0 && w.quorum(l.cl) {
			idx, _ := w.appendEntry(l.cl, d.Cmd)
			w.logf("%s (deposed) proposed %s of %s: committed at %d", l.name(), d.Cmd.Type, d.Cmd.nodeID(), idx)
		}
		return leaderAnswer(d, result{}), fmt.Errorf("raft apply %s: %w", c.Type, raft.ErrLeadershipLost)
	}
	idx, res := w.appendEntry(l.cl, d.Cmd)
	l.catchUp(int(idx))
	w.logf("%s commits %s of %s at %d: %v", l.name(), d.Cmd.Type, d.Cmd.nodeID(), idx, res)
	r, err := appliedResult(d.Cmd.Type, idx, res)
	return leaderAnswer(d, r), err
}

// handoff hands leadership to another live member (the shell's handoff;
// which one is not modelled).
// quorum: a majority of c's voters is up in c. Raft commits an entry,
// elects a leader and changes the configuration only with one.
func (w *simWorld) quorum(c *simCluster) bool {
	live, voters := 0, c.voters()
	for _, id := range voters {
		for _, n := range w.nodes {
			if n.id == id && n.awake() && n.cl == c {
				live++
			}
		}
	}
	return live >= len(voters)/2+1
}

// stepDown: a leader that lost its quorum steps down (its lease runs out);
// like any deposed leader it may answer a while longer from its state.
func (w *simWorld) stepDown(l *simNode) {
	if l.cl.leader != l {
		return
	}
	l.cl.leader = nil
	w.depose(l)
	w.logf("%s steps down: no quorum in %s", l.name(), l.cl.id)
}

// depose: l no longer leads, and learns it up to 1.5 s after it next runs
// (a paused leader wakes up believing it still leads); until then it answers
// from its state.
func (w *simWorld) depose(l *simNode) {
	l.deposedUntil = max(w.now, l.pausedUntil) + time.Duration(w.r.Int63n(int64(1500*time.Millisecond)))
}

// awake: n is up and not paused, so it acts, answers and is heard.
func (n *simNode) awake() bool { return n.up && n.w.now >= n.pausedUntil }

func (w *simWorld) handoff(l *simNode) {
	if to := w.pickMember(l.cl, l); to != nil {
		w.logf("%s hands off", l.name())
		w.elect(l.cl, to)
	}
}

// pickMember picks a live member of c to lead it, if c has a quorum to elect
// one (nil otherwise).
func (w *simWorld) pickMember(c *simCluster, not *simNode) *simNode {
	if !w.quorum(c) {
		return nil
	}
	var cands []*simNode
	for _, n := range w.nodes {
		if n != not && n.awake() && n.cl == c && !n.conflict && c.voter(n.id) {
			cands = append(cands, n)
		}
	}
	if len(cands) == 0 {
		return nil
	}
	return cands[w.r.Intn(len(cands))]
}

// applyForwarded is ApplyForwarded in front of handle: forwardCheck decides.
func (w *simWorld) applyForwarded(l *simNode, c command) (result, error) {
	in := forwardIn{Leader: l.believesLeader(), Own: l.ownCluster(), Speaks: ownProtocols}
	if l.conflict {
		in.Conflict = ErrClusterConflict
	}
	if err := forwardCheck(in, c, nil); err != nil {
		if !errors.Is(err, ErrWrongCluster) || !w.cfg.faults.adoptForwards {
			return result{}, err
		}
		c.ClusterID = in.Own
	}
	return w.handle(l, c)
}

// propose sends c from n (apply.go's propose): proposeRoute decides whether
// it is handled here (n acts as leader) or forwarded to the leader n
// believes in. It reports whether an answer will come later (the request is
// then pending); deliver checks it with acceptAnswer.
func (w *simWorld) propose(n *simNode, c command) (later bool, r result, err error) {
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
		r, err = w.handle(n, c)
		return false, r, err
	case routeRefuse:
		return false, result{}, err
	}
	w.nextID++
	n.pending = &simReq{id: w.nextID, c: c, deadline: w.now + simTimeout}
	w.send(&simMsg{to: n.believed.addr, forward: true, c: c, req: w.nextID, from: n.addr, life: n.life})
	return true, result{}, nil
}

func (w *simWorld) send(m *simMsg) {
	quiet := w.quietAt != 0 // the network has healed
	if !quiet && w.r.Float64() < w.cfg.loss {
		return
	}
	copies := 1
	if !quiet && w.r.Float64() < w.cfg.dup {
		copies = 2
	}
	for i := 0; i < copies; i++ {
		mm := *m
		d := time.Duration(1+w.r.Intn(int(simNetDelay/time.Millisecond))) * time.Millisecond
		if !quiet && w.r.Intn(20) == 0 {
			d = time.Duration(w.r.Int63n(int64(3 * time.Second)))
		}
		mm.at = w.now + d
		w.net = append(w.net, &mm)
	}
}

// deliver hands a due message (one of them, chosen by the seed) to whoever
// listens at its address now; it reports whether one was due.
func (w *simWorld) deliver() bool {
	var due []int
	for i, m := range w.net {
		if to := w.nodes[m.to]; m.at <= w.now && (!to.up || to.awake()) { // a paused node's messages wait
			due = append(due, i)
		}
	}
	if len(due) == 0 {
		return false
	}
	i := due[w.r.Intn(len(due))]
	m := w.net[i]
	w.net = append(w.net[:i], w.net[i+1:]...)
	n := w.nodes[m.to]
	if !n.up {
		return true
	}
	if m.forward {
		r, err := w.applyForwarded(n, m.c)
		w.logf("%s answers %s of %s: %+v %v", n.name(), m.c.Type, m.c.nodeID(), r, err)
		if errors.Is(err, ErrWrongCluster) {
			w.wrongCluster++
		}
		if m.forged {
			if err == nil {
				w.fail("%s took a forged %s of %s (datacenter %d): %+v", n.name(), m.c.Type, m.c.nodeID(), m.c.Node.Datacenter, r)
			}
			if errors.Is(err, ErrBadCommand) {
				w.forgedRefused++ // by the layout checks, not for want of a leader
			}
			return true
		}
		w.send(&simMsg{to: m.from, from: n.addr, req: m.req, life: m.life, r: r, err: err})
		return true
	}
	if n.life != m.life || n.pending == nil || n.pending.id != m.req {
		return true // an answer for an earlier life or request
	}
	c := n.pending.c
	n.pending = nil
	r, err := m.r, m.err
	if err == nil && !w.cfg.faults.trustAnswers {
		err = acceptAnswer(n.ownCluster(), fmt.Sprint(m.from), r, ownProtocols)
	}
	w.answered(n, c, r, err)
	return true
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
	later, r, err := w.propose(n, c)
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
	if l == nil || !l.ready || !l.awake() || !w.quorum(c) {
		return
	}
	idx, res := w.appendEntry(c, command{Type: cmdRemove, NodeID: n.id, ClusterID: c.id})
	l.catchUp(int(idx))
	c.removeMember(n.id)
	w.logf("%s removes leaving %s at %d: %v", l.name(), n.name(), idx, res)
	w.crash(n)
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
	later, r, err := w.propose(n, c)
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

// handOut checks every ID of b as n hands it out: never handed out before,
// and inside the window its own cluster's log granted to the tenure that
// minted it.
func (w *simWorld) handOut(n *simNode, b simBatchOf) {
	tr := b.cl.truth.state.tenure(b.slot, b.tenure)
	for _, id := range b.ids {
		ts := simStamp(id)
		slot := int(id>>simLayout.SequenceBits) & (simLayout.Slots() - 1)
		who := simMint{n.name(), b.cl.id, b.tenure, slot, ts}
		if prev, dup := w.ids[id]; dup {
			if prev.cluster != who.cluster && !w.afterFence(n, prev.cluster) {
				// Two clusters before they met, or an ID the older one
				// handed out before its fence: the meeting's window, which
				// no fence can take back (DESIGN.md, "A node mints only
				// from its own log"). Once n's replica has applied the
				// fence, nothing n hands out may repeat the other's, its
				// buffered batches included (withdraw.go).
				w.beforeFence++
				continue
			}
			w.fail("ID %d handed out twice: by %s and earlier by %s", id, who, prev)
			return
		}
		w.ids[id] = who
		switch {
		case tr == nil || tr.NodeID != b.nodeID || tr.Slot != slot:
			w.fail("ID %d (%s) in no tenure of this node in its cluster's log (record %+v)", id, who, tr)
			return
		case ts <= tr.Floor || ts > tr.Granted:
			w.fail("ID %d (%s) outside its tenure's window (%d, %d] in its cluster's log", id, who, tr.Floor, tr.Granted)
			return
		}
	}
	w.minted += len(b.ids)
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
			w.crash(n)
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
	if l == nil || !l.ready || !l.awake() || l.conflict || !w.quorum(o) {
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
			idx, res := w.appendEntry(o, cmd)
			l.catchUp(int(idx))
			w.fences++
			w.logf("%s fences slot %d of %s up to %d: %s at %d: %v", l.name(), f.slot, c.id, f.upTo, cmd.Type, idx, res)
			return
		}
	}
	c.fencedAt = len(o.log)
	w.logf("%s has fenced every window of %s (at %d)", l.name(), c.id, c.fencedAt)
}

// checkTenures: no two tenures of a slot overlap, in a cluster's log.
func (w *simWorld) checkTenures(c *simCluster) {
	ts := c.truth.state.Tenures
	byFloor := make([]Tenure, 0, len(ts))
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
			w.fail("tenures %d and %d of slot %d in %s overlap: (%d, %d] and (%d, %d]", a.ClaimedIndex, b.ClaimedIndex, a.Slot, c.id, a.Floor, a.Granted, b.Floor, b.Granted)
		}
	}
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

func (w *simWorld) crash(n *simNode) {
	n.up = false
	if n.gen != nil {
		n.gen.Revoke(errors.New("crashed"))
	}
	n.gen, n.tenure, n.rule, n.pending, n.ready, n.deposedUntil = nil, 0, slotAgent{}, nil, false, 0
	n.buf, n.leaving, n.initAt, n.pausedUntil = nil, 0, 0, 0
	n.minted, n.withdrawn = mintedTenure{}, withdrawals{}
	n.downAt = w.now
	n.clocks.reset()
	if n.cl != nil && n.cl.leader == n {
		n.cl.leader = nil
	}
	w.logf("%s crashes", n.name())
}

// restart brings n back from its data dir: Raft restores its latest
// snapshot (none: an empty state) and applies the rest of the log as the
// leader's commit index reaches it (replication).
func (w *simWorld) restart(n *simNode) {
	n.up, n.left = true, false
	n.believed = nil
	if n.snap != nil {
		w.restore(n, n.snap, n.snapAt)
	} else {
		n.replica, n.applied = newFSM(), 0
	}
	w.logf("%s restarts from its snapshot at %d", n.name(), n.applied)
}

// snapshot is the real fsm.Snapshot and Persist of n's replica: the bytes a
// Raft snapshot store keeps, and the log index they cover.
func (w *simWorld) snapshot(n *simNode) ([]byte, int) {
	snap, err := n.replica.Snapshot()
	if err != nil {
		w.fail("%s's snapshot: %v", n.name(), err)
		return nil, 0
	}
	defer snap.Release()
	var sink memSink
	if err := snap.Persist(&sink); err != nil {
		w.fail("%s's snapshot: %v", n.name(), err)
		return nil, 0
	}
	return sink.Bytes(), n.applied
}

// restore replaces n's replica with the real fsm.Restore of a snapshot
// covering the log up to at.
func (w *simWorld) restore(n *simNode, data []byte, at int) {
	f := newFSM()
	if err := f.Restore(io.NopCloser(bytes.NewReader(data))); err != nil {
		w.fail("%s cannot restore its snapshot at %d: %v", n.name(), at, err)
		return
	}
	n.replica, n.applied = f, at
	n.stopIfEnded()
}

// installSnapshot is Raft's InstallSnapshot: a follower far behind gets the
// leader's snapshot instead of the entries, and keeps it as its own. The
// restored state must be the leader's, field for field.
func (w *simWorld) installSnapshot(n, l *simNode) {
	data, at := w.snapshot(l)
	if data == nil {
		return
	}
	w.restore(n, data, at)
	n.snap, n.snapAt = data, at
	if !reflect.DeepEqual(n.replica.state, l.replica.state) {
		w.fail("%s's state restored from %s's snapshot at %d differs from it:\n got %+v\nwant %+v",
			n.name(), l.name(), at, n.replica.state, l.replica.state)
	}
	w.logf("%s installs %s's snapshot at %d", n.name(), l.name(), at)
}

// keepsQuorum: once identity gone is lost for good (a wipe, which leaves it
// in the configuration) or removed from the configuration (remove), a
// majority of c's configuration would still be identities some node has in
// c. The world never goes past that: a cluster whose voters are mostly gone
// for good has no quorum to commit, elect or reap with, which no Raft can
// recover from without an operator, and liveness would have nothing to
// judge. A member whose leave is under way counts as removed already.
func (w *simWorld) keepsQuorum(c *simCluster, gone string, remove bool) bool {
	if c == nil || !c.voter(gone) {
		return true
	}
	voters := c.voters()
	size, kept := len(voters), 0
	if remove {
		size--
	}
	for _, id := range voters {
		if id == gone {
			continue
		}
		for _, m := range w.nodes {
			switch {
			case m.id != id || m.cl != c:
			case m.leaving != 0:
				size--
			default:
				kept++
			}
		}
	}
	return kept >= size/2+1
}

// wipe crashes n, and brings it back with an empty data dir: a new node at
// the same address that joins its old cluster, or bootstraps its own.
func (w *simWorld) wipe(n *simNode) {
	old := n.cl
	if n.up {
		w.crash(n)
	}
	w.ghosts = append(w.ghosts, gossipMember{ID: n.id, Parsed: true, State: MemberDead, Since: w.base.Add(w.now),
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

// step runs one event chosen by the seed.
func (w *simWorld) step() {
	w.events++
	w.now += time.Duration(w.r.Intn(20)+1) * time.Millisecond
	if w.quietAt == 0 && w.events > w.cfg.events*4/5 {
		w.beginQuiet()
	}
	if w.cfg.doom && w.events > w.cfg.events/3 {
		w.doom()
	}
	defer func() {
		if w.quietAt != 0 {
			w.checkLive()
		}
	}()
	for _, c := range w.cls {
		if l := c.leader; l != nil && !w.quorum(c) {
			w.stepDown(l) // its lease runs out: it has not heard from a quorum
		}
		if l := c.leader; l != nil && !l.awake() && w.now >= l.pausedAt+simElection {
			// The followers stop hearing a paused leader and elect another.
			if n := w.pickMember(c, l); n != nil {
				w.elect(c, n)
			}
		}
		if l := c.leader; l != nil && l.ready && l.awake() && w.quorum(c) {
			c.servedAt = w.now
		}
		if c.younger && c.meetAt != 0 && w.now >= c.meetAt {
			c.meetAt, c.met = 0, true
		}
		// Every cluster on the gossip network (a younger one once its
		// meeting is due) meets every other there that has not stopped.
		for _, d := range w.cls {
			if d != c && w.inGossip(c) && w.inGossip(d) && !c.stopped && !d.stopped && c.younger && (!d.younger || d.created < c.created) {
				w.meet(c, d)
			}
		}
		if c.stopped && c.fencedAt == 0 && c.fencedBy != nil {
			w.fenceMet(c)
		}
	}
	for _, n := range w.nodes {
		if !n.awake() {
			continue // its timers fire when it wakes
		}
		if n.pending != nil && w.now > n.pending.deadline {
			c := n.pending.c
			n.pending = nil
			w.answered(n, c, result{}, context.DeadlineExceeded)
		}
		if n.initAt != 0 && w.now >= n.initAt {
			w.establish(n)
		}
	}
	faults := w.quietAt == 0
	if !faults {
		w.keepPromises()
	}
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
	up := func(n *simNode) bool { return n.awake() }
	// In a calm world the first cluster's leader is never crashed or wiped.
	spare := func(n *simNode) bool { return !w.cfg.calm || n != w.cls[0].leader }
	switch ev {
	case 0:
		if n := w.pickNode(up); n != nil {
			w.agent(n)
		}
	case 1:
		if n := w.pickNode(up); n != nil {
			w.draw(n)
		}
	case 2:
		w.deliver()
	case 3: // replication: a follower's replica catches up some of the way, or, far behind, installs the leader's snapshot
		if n := w.pickNode(up); n != nil && n.cl != nil && n.applied < len(n.cl.log) {
			if l := n.cl.leader; l != nil && l != n && l.awake() && l.applied-n.applied > 8 && w.r.Intn(3) == 0 {
				w.installSnapshot(n, l)
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
				w.barrier(c.leader)
				break
			}
		}
	case 6:
		c := w.cls[w.r.Intn(len(w.cls))]
		if n := w.pickMember(c, nil); n != nil && n != c.leader {
			w.elect(c, n)
		}
	case 7:
		if n := w.pickNode(func(n *simNode) bool { return n.up && spare(n) }); n != nil {
			w.crash(n)
		}
	case 8:
		if n := w.pickNode(func(n *simNode) bool { return spare(n) && !n.gone && w.keepsQuorum(n.cl, n.id, false) }); n != nil {
			w.wipe(n)
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
		if l := c.leader; l != nil && l.ready && !l.conflict && len(c.servers) > 1 && w.quorum(c) {
			id := string(c.servers[w.r.Intn(len(c.servers))].ID)
			if id != l.id && w.keepsQuorum(c, id, true) {
				idx, res := w.appendEntry(c, command{Type: cmdRemove, NodeID: id, ClusterID: c.id})
				c.removeMember(id)
				l.catchUp(int(idx))
				w.logf("%s removes %s at %d: %v", l.name(), id, idx, res)
			}
		}
	case 11: // restart a crashed node (not in the quiet phase: all restarted at its start, and one that leaves in it stays away), or elect where there is no leader
		if n := w.pickNode(func(n *simNode) bool { return !n.up && !n.gone }); n != nil && w.r.Intn(2) == 0 && faults {
			w.restart(n)
			return
		}
		for _, c := range w.cls {
			if c.leader == nil {
				if n := w.pickMember(c, nil); n != nil {
					w.elect(c, n)
				}
			}
		}
	case 12:
		if n := w.pickNode(up); n != nil {
			w.produce(n)
		}
	case 13: // a graceful leave (the leader's own hands off first: not modelled)
		if n := w.pickNode(func(n *simNode) bool {
			return n.awake() && n.gen != nil && n.leaving == 0 && n.pending == nil && !n.conflict && n.cl.leader != n &&
				w.keepsQuorum(n.cl, n.id, true)
		}); n != nil {
			w.leave(n)
		}
	case 14: // a node takes a Raft snapshot of its replica (SnapshotThreshold)
		if n := w.pickNode(func(n *simNode) bool { return n.awake() && n.cl != nil && n.applied > n.snapAt }); n != nil {
			n.snap, n.snapAt = w.snapshot(n)
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
			c := command{Type: cmdClaim, Node: &NodeInfo{ID: n.id, Name: n.name(), Datacenter: dc}, Layout: &l,
				ClusterID: n.ownCluster(), SentAt: n.clock().Now().UnixNano()}
			to := w.r.Intn(len(w.nodes))
			if n.believed != nil {
				to = n.believed.addr
			}
			w.send(&simMsg{to: to, forward: true, c: c, from: n.addr, life: -1, forged: true})
		}
	case 17: // a leader's reconcile sweep (on a gossip event or its ticker)
		w.sweep(w.cls[w.r.Intn(len(w.cls))])
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
			w.restart(n)
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
	for w.deliver() {
	}
	for _, c := range w.cls {
		l := c.leader
		switch {
		case l == nil || !l.up:
			if c.electAt == 0 {
				c.electAt = w.now + simElection
			} else if w.now >= c.electAt {
				if n := w.pickMember(c, nil); n != nil {
					w.elect(c, n)
				}
			}
		case !l.ready:
			if w.now-l.ledAt >= simBarrierIn {
				w.barrier(l)
			}
		case w.now-c.lastSweep >= simSweep:
			w.sweep(c)
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
				w.agent(n) // the agent follows every applied entry (fsm.changed)
			}
		}
		if w.now-n.lastBeat >= simHeartbeat {
			w.heartbeat(n)
			n.lastBeat = w.now
		}
		if w.now-n.lastTick >= agentTick {
			w.agent(n)
			n.lastTick = w.now
		}
	}
}

// The addresses a node at address a listens on.
func raftAddr(a int) string { return fmt.Sprintf("raft-%d", a) }
func grpcAddr(a int) string { return fmt.Sprintf("grpc-%d", a) }

// gossipView is what gossip shows every member: each node's current
// identity (alive while up, paused ones too; dead since it crashed; left
// once its leave ended in shutdown), and every identity a wipe ended (dead
// since the wipe), with the metadata each node gossips: its addresses, its
// cluster once its replica knows it, and whether it has Raft state.
func (w *simWorld) gossipView() map[string]gossipMember {
	out := map[string]gossipMember{}
	for _, g := range w.ghosts {
		out[g.ID] = g
	}
	for _, n := range w.nodes {
		m := gossipMember{ID: n.id, Parsed: true, State: MemberAlive, Meta: meta{Name: n.name(),
			GRPCAddr: grpcAddr(n.addr), RaftAddr: raftAddr(n.addr), ClusterID: n.ownCluster(),
			Member: n.applied > 0 || (n.cl != nil && n.cl.member(n.id)), Leaving: n.leaving != 0}}
		switch {
		case n.up:
		case n.left:
			m.State, m.Since = MemberLeft, w.base.Add(n.downAt)
		default:
			m.State, m.Since = MemberDead, w.base.Add(n.downAt)
		}
		out[n.id] = m
	}
	return out
}

// probe is the leader's Status call to addr over the authenticated
// transport: whoever listens there now answers, unless it is down or paused.
func (w *simWorld) probe(addr string) (Status, error) {
	for _, n := range w.nodes {
		if grpcAddr(n.addr) != addr {
			continue
		}
		if !n.awake() {
			return Status{}, errors.New("connection refused")
		}
		if n.stranger() && w.cfg.legacy {
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

// sweep is one reconcile sweep of c's leader (leader.go): the shipped
// sweepProbes and sweepActions decide from the leader's Raft configuration,
// gossip and replica, and the probes' answers; the world carries out each
// action as the shell does, a configuration change or a Remove only with a
// quorum (one without fails, as Raft's would).
func (w *simWorld) sweep(c *simCluster) {
	c.lastSweep = w.now
	l := c.leader
	if l == nil || !l.ready || !l.awake() || l.conflict {
		return
	}
	v := &memberView{Self: l.id, SelfRaftAddr: raftAddr(l.addr), Own: l.ownCluster(),
		Servers: append([]raft.Server(nil), c.servers...), Members: w.gossipView(), Addable: map[string]bool{},
		StateAddr: map[string]string{}, LeaderApplied: uint64(l.applied), Now: w.base.Add(w.now), ReapAfter: simReapAfter}
	if l.replica.state.Layout != nil {
		v.Layout = l.replica.state.Layout
	}
	for id, m := range v.Members {
		v.Addable[id] = addable(m, v.Own)
	}
	// A fresh node joins the cluster the world sent it to: another
	// cluster's leader, on the same gossip network, got to it first.
	for _, n := range w.nodes {
		if n.cl != nil && n.cl != c {
			v.Addable[n.id] = false
		}
	}
	st := l.replica.state
	v.Holders = st.holders()
	for _, id := range st.sortedNodeIDs() {
		v.StateAddr[id] = st.Nodes[id].GRPCAddr
		if !c.member(id) && id != l.id {
			v.StateOnly = append(v.StateOnly, id)
		}
	}
	probes, gone := l.ls.sweepProbes(v)
	keys := make([]probeKey, 0, len(probes))
	for k := range probes {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].id+" "+keys[i].addr < keys[j].id+" "+keys[j].addr })
	answers := map[probeKey]probeAnswer{}
	for _, k := range keys {
		st, err := w.probe(k.addr)
		answers[k] = probeAnswer{st, err}
	}
	w.pollClocks(c, l)
	for _, a := range l.ls.sweepActions(v, gone, answers) {
		if a.Kind == actRefuse || a.Kind == actNote || a.Kind == actWait {
			continue
		}
		if !w.quorum(c) {
			w.logf("%s cannot %v %s: no quorum", l.name(), a.Kind, a.ID)
			continue
		}
		w.memberActs[a.Kind]++
		switch a.Kind {
		case actReap:
			idx, res := w.appendEntry(c, command{Type: cmdRemove, NodeID: a.ID, ClusterID: c.id})
			c.removeMember(a.ID)
			l.catchUp(int(idx))
			l.ls.reaped(a.ID)
			w.logf("%s reaps %s at %d (%s): %v", l.name(), a.ID, idx, a.Why, res)
		case actAddNonvoter:
			c.servers = append(c.servers, raft.Server{Suffrage: raft.Nonvoter, ID: raft.ServerID(a.ID), Address: raft.ServerAddress(a.Addr)})
			l.ls.added(a.ID, v.Now)
			w.logf("%s adds %s as a non-voter", l.name(), a.ID)
		case actPromote, actMoveAddr:
			for i := range c.servers {
				if string(c.servers[i].ID) == a.ID {
					c.servers[i].Address = raft.ServerAddress(a.Addr)
					if a.Kind == actPromote {
						c.servers[i].Suffrage = raft.Voter
					}
				}
			}
			if a.Kind == actPromote {
				l.ls.promoted(a.ID)
			} else {
				l.ls.moved(a.ID)
			}
			w.logf("%s %v %s at %s", l.name(), a.Kind, a.ID, a.Addr)
		}
	}
}

func (c *simCluster) addServer(n *simNode, voter bool) {
	s := raft.Server{Suffrage: raft.Nonvoter, ID: raft.ServerID(n.id), Address: raft.ServerAddress(raftAddr(n.addr))}
	if voter {
		s.Suffrage = raft.Voter
	}
	c.servers = append(c.servers, s)
}

func (c *simCluster) member(id string) bool {
	for _, s := range c.servers {
		if string(s.ID) == id {
			return true
		}
	}
	return false
}

func (c *simCluster) voter(id string) bool {
	for _, s := range c.servers {
		if string(s.ID) == id {
			return s.Suffrage == raft.Voter
		}
	}
	return false
}

// pollClocks is the leader's clock poll (Node.pollClocks), run on each
// sweep: the voters it has not heard from within clockPollEvery are asked
// for their Status, and statusClock decides which answers count.
func (w *simWorld) pollClocks(c *simCluster, l *simNode) {
	real := w.base.Add(w.now)
	for _, id := range clockPollTargets(c.voters(), l.id, l.clocks.heardSince, real, clockPollEvery) {
		var addr string
		for _, n := range w.nodes {
			if n.id == id {
				addr = grpcAddr(n.addr)
			}
		}
		st, err := w.probe(addr)
		if err != nil {
			continue
		}
		if s, ok := statusClock(id, l.ownCluster(), st, l.clock().Now(), real); ok {
			l.clocks.observe(id, s)
		}
	}
}

func (c *simCluster) voters() []string {
	var out []string
	for _, s := range c.servers {
		if s.Suffrage == raft.Voter {
			out = append(out, string(s.ID))
		}
	}
	return out
}

func (c *simCluster) removeMember(id string) {
	for i, s := range c.servers {
		if string(s.ID) == id {
			c.servers = append(c.servers[:i], c.servers[i+1:]...)
			return
		}
	}
}

// checkLive is the liveness check of the quiet phase: simLiveBound after the
// faults stopped, every live node of a cluster that has not met an older one
// that holds a slot in its cluster's log runs a generator for that tenure
// with room to mint, and no such node is slotless while a slot is free.
func (w *simWorld) checkLive() {
	p := w.liveProblem()
	if p == "" {
		return
	}
	w.unliveAt = w.now
	if w.now >= w.quietAt+simLiveBound {
		w.fail("liveness: %v after the faults stopped, %s", w.now-w.quietAt, p)
	}
}

// settled is how long after the faults stopped the liveness check last found
// a problem (0: none).
func (w *simWorld) settled() time.Duration {
	if w.quietAt == 0 || w.unliveAt < w.quietAt {
		return 0
	}
	return w.unliveAt - w.quietAt
}

// liveProblem is the first problem liveness has now ("" for none); it
// looks at every node, to keep each one's noRoom current.
func (w *simWorld) liveProblem() string {
	var p string
	for _, n := range w.nodes {
		if q := w.nodeLiveProblem(n); p == "" {
			p = q
		}
	}
	for _, c := range w.cls {
		if p == "" {
			p = w.membershipProblem(c)
		}
	}
	return p
}

// judged: liveness judges c, a cluster that is to serve its clients: it
// has a node up, has not stopped on a meeting, and is not a younger one
// that has yet to win one (unless no node of its older cluster is up).
func (w *simWorld) judged(c *simCluster) bool {
	up := func(c *simCluster) bool {
		for _, n := range w.nodes {
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

// membershipProblem: reconcile has not brought c's membership in line with
// its live nodes yet: a server or a slot holder is an identity no live node
// of c has (gone for good, or down since the faults stopped: not reaped),
// or a live node of c is not a voter (not added or not promoted; at most
// maxVoters, and the world has fewer addresses).
func (w *simWorld) membershipProblem(c *simCluster) string {
	if !w.judged(c) {
		return ""
	}
	live := func(id string) bool {
		for _, n := range w.nodes {
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
	for i, sl := range c.truth.state.Slots {
		if sl.Owner != "" && !live(sl.Owner) {
			return fmt.Sprintf("slot %d of %s is held by %s, no live node's identity: not reaped", i, c.id, sl.Owner)
		}
	}
	for _, n := range w.nodes {
		if n.stranger() {
			if c.voter(n.id) && w.cfg.legacy {
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

func (w *simWorld) nodeLiveProblem(n *simNode) string {
	if !n.up || n.cl == nil || n.conflict || !w.judged(n.cl) || n.stranger() {
		n.noRoom = false
		return ""
	}
	s := n.cl.truth.state
	if s.Layout == nil {
		n.noRoom = false
		return fmt.Sprintf("%s's cluster %s has no Init in its log: every claim is refused", n.name(), n.cl.id)
	}
	i := s.slotOf(n.id)
	g := n.gen
	if i < 0 || g == nil || g.Cursor() < g.Granted() {
		n.noRoom = false
	}
	switch {
	case i < 0:
		if free := s.freeSlot(-1); free >= 0 {
			return fmt.Sprintf("%s holds no slot while slot %d is free", n.name(), free)
		}
	case g == nil || n.tenure != s.Slots[i].Tenure:
		return fmt.Sprintf("%s holds slot %d under tenure %d in its cluster's log but runs no generator for it (generator tenure %d, the agent's %d)",
			n.name(), i, s.Slots[i].Tenure, n.tenure, n.rule.Tenure())
	case g.Cursor() < g.Granted():
	case s.Slots[i].HighWater > simLayout.Units(w.base.Add(w.now+simMaxAhead)):
		// The log granted past real time + max-ahead while a quorum of
		// the voters' clocks was that far ahead (a lone founder's clock
		// minutes or hours off): the node waits for time to catch up, the
		// design's cost of a wrong quorum of clocks (DESIGN.md).
		n.noRoom = false
	case !n.noRoom:
		n.noRoom, n.noRoomSince = true, w.now
	case w.now-n.noRoomSince > simRoomGrace:
		return fmt.Sprintf("%s has had no room on slot %d for %v: cursor %d, granted %d (log: %d)",
			n.name(), i, w.now-n.noRoomSince, g.Cursor(), g.Granted(), s.Slots[i].HighWater)
	}
	return ""
}

// run plays the world to its end, or to the first violation: the fault
// phase, then the quiet phase for simLiveBound and simLiveTail.
func (w *simWorld) run() error {
	for w.err == nil && (w.quietAt == 0 || w.now < w.quietAt+simLiveBound+simLiveTail) {
		w.step()
	}
	for _, c := range w.cls {
		w.checkTenures(c)
	}
	return w.err
}

// simStamp is an ID's timestamp under the world's layout.
func simStamp(id int64) int64 {
	return id >> (simLayout.SequenceBits + simLayout.DatacenterBits + simLayout.MachineBits)
}
