package cluster

// A deterministic simulated world for the slot protocol (DESIGN.md, "The
// simulator"). Every virtual node runs the shipped decision code: the
// replicated state machine (fsm.Apply over encoded entries), the generator
// (generator.Generator on a virtual clock), the agent's decision (agentStep),
// the leader's check (leaderCheck) and cluster time (clockBook, clusterTime).
// Raft, the transport and gossip are modelled: one committed log per cluster,
// replicas that lag, elections, deposed leaders that still answer, forwards
// and answers that are delayed, lost, duplicated and reordered, and delivered
// to whoever listens at an address now. Every choice comes from one seeded
// math/rand source, so a seed replays its run exactly.

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
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

var simLayout = generator.Layout{Epoch: generator.DefaultEpoch, Unit: simUnit, TimestampBits: 32, DatacenterBits: 1, MachineBits: 2, SequenceBits: 4}

// simFaults are faults planted in the simulated world (never in product code),
// to prove that the checker reports what they break.
type simFaults struct {
	// adoptForwards: a leader answers forwards from any cluster as if they were
	// its own (no identity checks on either side), and its Raft configuration
	// takes in whoever claims; trustAnswers: the agent starts and extends its
	// generator from answers, not from its replica. Together they are the
	// wiped leader's duplicate of DESIGN.md, "A node mints only from its own log".
	adoptForwards bool
	trustAnswers  bool
}

// simConfig shapes a world; newSimConfig draws one from the seed.
type simConfig struct {
	nodes  int
	events int
	// per-event weights of the fault events
	crash, wipe, jump, elect, remove float64
	// wipeNewCluster: chance that a wiped node bootstraps a cluster of its own.
	wipeNewCluster float64
	loss, dup      float64
	faults         simFaults
}

func newSimConfig(r *rand.Rand) simConfig {
	return simConfig{
		nodes:  3 + r.Intn(3),
		events: 1500 + r.Intn(1500),
		crash:  0.3 + r.Float64(), wipe: 0.2 * r.Float64(), jump: 0.5 * r.Float64(),
		elect: 0.5 + r.Float64(), remove: 0.4 * r.Float64(),
		wipeNewCluster: r.Float64(),
		loss:           0.1 * r.Float64(), dup: 0.1 * r.Float64(),
	}
}

type simCluster struct {
	id      string
	log     [][]byte // log[i] is entry i+1, as Raft stores it
	truth   *fsm     // the committed log applied: what the checker trusts
	leader  *simNode // nil: no leader
	term    int
	members []string // the Raft configuration's servers (all voters)
	younger bool     // bootstrapped by a wiped node: see simNode.conflict
	meetAt  time.Duration
}

type simNode struct {
	w      *simWorld
	addr   int
	life   int
	id     string
	up     bool
	offset time.Duration // this node's clock minus real time

	cl      *simCluster
	replica *fsm
	applied int // entries of cl.log applied to replica

	// conflict: the node's cluster met an older one; it stops for good.
	// (Gossip is not modelled: a younger cluster's agents never run, see
	// DESIGN.md.)
	conflict bool

	// leader side
	ready        bool          // past its Barrier
	deposedUntil time.Duration // a deposed leader still answers until then
	clocks       clockBook

	// agent side
	believed    *simNode // the leader it forwards to (may be stale)
	gen         *generator.Generator
	tenure      uint64
	awaiting    uint64 // a claim's tenure, answered, not yet seen applied
	awaitUntil  time.Duration
	nextClaim   time.Duration
	lastReserve time.Duration
	pending     *simReq
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
}

type simEvent struct {
	at   time.Duration
	what string
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
	// ids maps every ID handed out to who minted it.
	ids    map[int64]string
	minted int
	events int
	trace  []simEvent // ring of the last simTraceLen events
	traceN int
	err    error
}

const simTraceLen = 50

type simClock struct{ n *simNode }

func (c simClock) Now() time.Time { return c.n.w.base.Add(c.n.w.now + c.n.offset) }

func (n *simNode) clock() generator.Clock { return simClock{n} }
func (n *simNode) name() string           { return fmt.Sprintf("%d.%d", n.addr, n.life) }

func (w *simWorld) logf(format string, args ...any) {
	e := simEvent{at: w.now, what: fmt.Sprintf(format, args...)}
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
		fmt.Fprintf(&b, "  %9.3fs %s\n", e.at.Seconds(), e.what)
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
	cfg.faults = faults
	if tweak != nil {
		tweak(&cfg)
	}
	w := &simWorld{seed: seed, r: r, cfg: cfg, ids: map[int64]string{},
		base: time.Unix(generator.DefaultEpoch+1e6, 0)}
	for a := 0; a < cfg.nodes; a++ {
		n := &simNode{w: w, addr: a, up: true, replica: newFSM()}
		n.id = w.newNodeID(a, 0)
		n.offset = time.Duration(r.Int63n(int64(simMaxSkew))) - simMaxSkew/2
		w.nodes = append(w.nodes, n)
	}
	// The first node bootstraps; the others have joined (their replicas
	// catch up by replication).
	c := w.bootstrap(w.nodes[0])
	for _, n := range w.nodes[1:] {
		n.cl = c
		c.members = append(c.members, n.id)
	}
	return w
}

func (w *simWorld) newNodeID(addr, life int) string {
	return fmt.Sprintf("node%d-life%d-%08x", addr, life, w.r.Uint32())
}

// bootstrap makes n the leader of a new cluster whose first entry is its Init.
func (w *simWorld) bootstrap(n *simNode) *simCluster {
	c := &simCluster{id: fmt.Sprintf("cluster%d-%08x", len(w.cls), w.r.Uint32()), truth: newFSM(), members: []string{n.id}}
	w.cls = append(w.cls, c)
	l := simLayout
	now := n.clock().Now()
	w.appendEntry(c, command{Type: cmdInit, Layout: &l, ClusterID: c.id, Created: now.UnixNano(),
		Start: l.Units(now) + unitsCeil(simMaxAhead, l.Unit)})
	n.cl = c
	w.elect(c, n)
	w.barrier(n)
	w.logf("%s bootstraps %s", n.name(), c.id)
	return c
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
	}
}

func (w *simWorld) elect(c *simCluster, n *simNode) {
	if old := c.leader; old != nil && old != n && old.up {
		old.deposedUntil = w.now + time.Duration(w.r.Int63n(int64(1500*time.Millisecond)))
	}
	c.term++
	c.leader = n
	n.ready = false
	n.deposedUntil = 0
	n.clocks.reset()
	n.believed = n
	w.logf("%s leads %s (term %d)", n.name(), c.id, c.term)
}

func (w *simWorld) barrier(n *simNode) {
	n.catchUp(len(n.cl.log))
	n.ready = true
}

// believesLeader: n acts as a leader (the current one, or deposed and not
// knowing it yet).
func (n *simNode) believesLeader() bool {
	return n.up && n.cl != nil && (n.cl.leader == n || n.w.now < n.deposedUntil)
}

func (n *simNode) ownCluster() string { return n.replica.state.ClusterID }

func (n *simNode) member(id string) bool {
	for _, m := range n.cl.members {
		if m == id {
			return true
		}
	}
	return false
}

// handle is the leader's side of a command (apply.go's handle and
// leaderApply, with Raft modelled): leaderCheck decides.
func (w *simWorld) handle(l *simNode, c command) (result, error) {
	if err := c.validate(); err != nil {
		return result{}, err
	}
	if !l.ready {
		return result{}, ErrLeaderNotReady
	}
	current := l.cl.leader == l
	if current {
		l.catchUp(len(l.cl.log)) // a leader applies what it commits
	}
	if err := l.replica.state.admit(c); err != nil {
		return result{}, err
	}
	if c.Type != cmdClaim && c.Type != cmdReserve && c.Type != cmdRelease {
		return result{}, fmt.Errorf("command %s cannot be forwarded", c.Type)
	}
	now := l.clock().Now()
	in := leaderIn{Now: now, Member: c.Type != cmdClaim || l.member(c.Node.ID), MaxAhead: simMaxAhead, MaxSkew: simMaxSkew}
	if c.Type == cmdClaim && !in.Member && w.cfg.faults.adoptForwards {
		l.cl.members = append(l.cl.members, c.Node.ID)
		in.Member = true
	}
	real := w.base.Add(w.now)
	if in.Member && (c.Type == cmdClaim || c.Type == cmdReserve) {
		l.clocks.observe(c.nodeID(), clockSample{reported: time.Unix(0, c.SentAt), leader: now, at: real})
	}
	var others []string
	for _, m := range l.cl.members {
		if m != l.id {
			others = append(others, m)
		}
	}
	in.ClusterNow, in.Known = clusterTime(now, l.clocks.estimates(others, real), len(l.cl.members)/2+1)
	d := leaderCheck(l.replica.state, c, in)
	if d.Handoff && current {
		w.handoff(l)
	}
	if d.Err != nil {
		return result{}, d.Err
	}
	if !d.Propose {
		return d.Answer, nil
	}
	if !current {
		// A deposed leader's entry may still be committed by its successor,
		// but its caller hears only that leadership was lost.
		if w.r.Intn(2) == 0 {
			idx, _ := w.appendEntry(l.cl, d.Cmd)
			w.logf("%s (deposed) proposed %s of %s: committed at %d", l.name(), d.Cmd.Type, d.Cmd.nodeID(), idx)
		}
		return result{}, fmt.Errorf("raft apply %s: %w", c.Type, raft.ErrLeadershipLost)
	}
	idx, res := w.appendEntry(l.cl, d.Cmd)
	l.catchUp(int(idx))
	w.logf("%s commits %s of %s at %d: %v", l.name(), d.Cmd.Type, d.Cmd.nodeID(), idx, res)
	switch res := res.(type) {
	case error:
		return result{}, res
	case result:
		res.Index = idx
		res.LeaderTime, res.ClusterTime, res.ClusterID = d.Answer.LeaderTime, d.Answer.ClusterTime, d.Answer.ClusterID
		return res, nil
	}
	return result{}, fmt.Errorf("unexpected response %T", res)
}

// handoff hands leadership to another live member (the shell's handoff;
// which one is not modelled).
func (w *simWorld) handoff(l *simNode) {
	if to := w.pickMember(l.cl, l); to != nil {
		w.logf("%s hands off", l.name())
		w.elect(l.cl, to)
	}
}

func (w *simWorld) pickMember(c *simCluster, not *simNode) *simNode {
	var cands []*simNode
	for _, n := range w.nodes {
		if n != not && n.up && n.cl == c && !n.conflict && n.member(n.id) {
			cands = append(cands, n)
		}
	}
	if len(cands) == 0 {
		return nil
	}
	return cands[w.r.Intn(len(cands))]
}

// applyForwarded is ApplyForwarded's checks in front of handle.
func (w *simWorld) applyForwarded(l *simNode, c command) (result, error) {
	if !l.believesLeader() {
		return result{}, ErrNotLeader
	}
	if l.conflict {
		return result{}, ErrClusterConflict
	}
	if err := c.validate(); err != nil {
		return result{}, err
	}
	if own := l.ownCluster(); c.ClusterID != own {
		if !w.cfg.faults.adoptForwards {
			return result{}, fmt.Errorf("%w: forward of cluster %q at a leader of %q", ErrWrongCluster, c.ClusterID, own)
		}
		c.ClusterID = own
	}
	return w.handle(l, c)
}

// propose sends c from n (apply.go's propose): handled here when n acts as
// leader, else forwarded to the leader n believes in. It reports whether an
// answer will come later (the request is then pending).
func (w *simWorld) propose(n *simNode, c command) (later bool, r result, err error) {
	c.SentAt = n.clock().Now().UnixNano()
	c.ClusterID = n.ownCluster()
	if n.believesLeader() {
		r, err = w.handle(n, c)
		return false, r, err
	}
	if c.ClusterID == "" {
		return false, result{}, ErrNoLeader
	}
	if n.believed == nil {
		return false, result{}, ErrNoLeader
	}
	w.nextID++
	n.pending = &simReq{id: w.nextID, c: c, deadline: w.now + simTimeout}
	w.send(&simMsg{to: n.believed.addr, forward: true, c: c, req: w.nextID, from: n.addr, life: n.life})
	return true, result{}, nil
}

func (w *simWorld) send(m *simMsg) {
	if w.r.Float64() < w.cfg.loss {
		return
	}
	copies := 1
	if w.r.Float64() < w.cfg.dup {
		copies = 2
	}
	for i := 0; i < copies; i++ {
		mm := *m
		d := time.Duration(1+w.r.Intn(30)) * time.Millisecond
		if w.r.Intn(20) == 0 {
			d = time.Duration(w.r.Int63n(int64(3 * time.Second)))
		}
		mm.at = w.now + d
		w.net = append(w.net, &mm)
	}
}

// deliver hands a due message to whoever listens at its address now.
func (w *simWorld) deliver() {
	var due []int
	for i, m := range w.net {
		if m.at <= w.now {
			due = append(due, i)
		}
	}
	if len(due) == 0 {
		return
	}
	i := due[w.r.Intn(len(due))]
	m := w.net[i]
	w.net = append(w.net[:i], w.net[i+1:]...)
	n := w.nodes[m.to]
	if !n.up {
		return
	}
	if m.forward {
		r, err := w.applyForwarded(n, m.c)
		w.logf("%s answers %s of %s: %+v %v", n.name(), m.c.Type, m.c.nodeID(), r, err)
		w.send(&simMsg{to: m.from, req: m.req, life: m.life, r: r, err: err})
		return
	}
	if n.life != m.life || n.pending == nil || n.pending.id != m.req {
		return // an answer for an earlier life or request
	}
	c := n.pending.c
	n.pending = nil
	r, err := m.r, m.err
	if err == nil && r.ClusterID != n.ownCluster() && !w.cfg.faults.trustAnswers {
		err = fmt.Errorf("%w: answer of cluster %q", ErrWrongCluster, r.ClusterID)
	}
	w.answered(n, c, r, err)
}

// answered carries out what the agent does with an answer to its claim or
// reserve (agent.go's claim and reserve).
func (w *simWorld) answered(n *simNode, c command, r result, err error) {
	switch c.Type {
	case cmdClaim:
		if err != nil {
			n.nextClaim = w.now + claimRetryAfter(err)
			return
		}
		if w.cfg.faults.trustAnswers && n.gen == nil {
			w.start(n, r.Tenure, r.Slot, r.Floor, r.Granted)
			return
		}
		n.awaiting, n.awaitUntil = r.Tenure, w.now+applyTimeout
		w.agent(n)
	case cmdReserve:
		if n.gen == nil || c.Tenure != n.tenure {
			return
		}
		if err == nil && w.cfg.faults.trustAnswers {
			n.gen.Grant(r.Granted)
		}
		w.follow(n, err)
	}
}

func (w *simWorld) start(n *simNode, tenure uint64, slot int, floor, granted int64) {
	g, err := generator.New(simLayout, slot, floor, n.clock())
	if err != nil {
		w.logf("%s cannot start generator: %v", n.name(), err)
		return
	}
	g.Grant(granted)
	n.gen, n.tenure, n.awaiting = g, tenure, 0
	w.logf("%s starts slot %d tenure %d floor %d granted %d", n.name(), slot, tenure, floor, granted)
	n.lastReserve = w.now
	w.reserve(n, reserveUpTo(g.Head(), unitsCeil(simLead, simUnit)))
}

func (w *simWorld) reserve(n *simNode, upTo int64) {
	c := command{Type: cmdReserve, NodeID: n.id, Slot: n.gen.Slot(), Tenure: n.tenure, UpTo: upTo}
	later, r, err := w.propose(n, c)
	if !later {
		w.answered(n, c, r, err)
	}
}

// follow runs agentStep for the running generator and carries it out
// (agent.go's follow).
func (w *simWorld) follow(n *simNode, answerErr error) agentOut {
	g := n.gen
	s := n.replica.state
	t, applied, ok := ownTenure(s, n.id, n.tenure)
	in := agentIn{Tenure: n.tenure, Running: true, Slot: g.Slot(), Granted: g.Granted(), Head: g.Head(),
		Own: t, Applied: applied, Held: ok, AnswerErr: answerErr, Lead: unitsCeil(simLead, simUnit)}
	if g.Slot() < len(s.Slots) {
		in.SlotOwner, in.SlotTenure = s.Slots[g.Slot()].Owner, s.Slots[g.Slot()].Tenure
	}
	d := agentStep(in)
	if d.Revoke != nil {
		g.Revoke(d.Revoke)
		n.gen, n.tenure = nil, 0
		w.logf("%s revokes slot %d: %v", n.name(), g.Slot(), d.Revoke)
		return d
	}
	if d.Grant > g.Granted() {
		g.Grant(d.Grant)
	}
	return d
}

// agent is one pass of the slot agent (runAgent).
func (w *simWorld) agent(n *simNode) {
	if !n.up || n.cl == nil || n.conflict || n.cl.younger || n.pending != nil {
		return
	}
	switch {
	case n.awaiting != 0:
		t, applied, ok := ownTenure(n.replica.state, n.id, n.awaiting)
		d := agentStep(agentIn{Tenure: n.awaiting, Own: t, Applied: applied, Held: ok})
		switch {
		case d.Start:
			w.start(n, n.awaiting, d.Slot, d.Floor, d.Granted)
		case d.Claim || w.now > n.awaitUntil:
			w.logf("%s gives up tenure %d: %v", n.name(), n.awaiting, d.Err)
			n.awaiting, n.nextClaim = 0, w.now+claimRetry
		}
	case n.gen == nil:
		if w.now < n.nextClaim {
			return
		}
		l := simLayout
		c := command{Type: cmdClaim, Node: &NodeInfo{ID: n.id, Name: n.name(), Datacenter: -1}, Layout: &l}
		n.nextClaim = w.now + agentTick
		later, r, err := w.propose(n, c)
		if !later {
			w.answered(n, c, r, err)
		}
	default:
		d := w.follow(n, nil)
		if n.gen != nil && d.Reserve && w.now-n.lastReserve >= minReserveGap {
			n.lastReserve = w.now
			w.reserve(n, d.UpTo)
		}
	}
}

var simCanceled = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

// draw is a client asking n for a batch; every ID is checked as it is handed out.
func (w *simWorld) draw(n *simNode) {
	if !n.up || n.gen == nil {
		return
	}
	k := 1 + w.r.Intn(12)
	ids, err := n.gen.NextBatch(simCanceled, k)
	if err != nil {
		return
	}
	tenure := n.tenure
	tr := n.cl.truth.state.tenure(n.gen.Slot(), tenure)
	for _, id := range ids {
		ts := id >> (simLayout.SequenceBits + simLayout.DatacenterBits + simLayout.MachineBits)
		slot := int(id>>simLayout.SequenceBits) & (simLayout.Slots() - 1)
		who := fmt.Sprintf("%s of %s tenure %d slot %d ts %d", n.name(), n.cl.id, tenure, slot, ts)
		if prev, dup := w.ids[id]; dup {
			w.fail("ID %d handed out twice: by %s and earlier by %s", id, who, prev)
			return
		}
		w.ids[id] = who
		switch {
		case tr == nil || tr.NodeID != n.id || tr.Slot != slot:
			w.fail("ID %d (%s) in no tenure of this node in its cluster's log (record %+v)", id, who, tr)
			return
		case ts <= tr.Floor || ts > tr.Granted:
			w.fail("ID %d (%s) outside its tenure's window (%d, %d] in its cluster's log", id, who, tr.Floor, tr.Granted)
			return
		}
	}
	w.minted += len(ids)
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
	n.gen, n.tenure, n.awaiting, n.pending, n.ready, n.deposedUntil = nil, 0, 0, nil, false, 0
	n.clocks.reset()
	if n.cl != nil && n.cl.leader == n {
		n.cl.leader = nil
	}
	w.logf("%s crashes", n.name())
}

func (w *simWorld) restart(n *simNode) {
	n.up = true
	n.believed, n.nextClaim = nil, 0
	w.logf("%s restarts at applied %d", n.name(), n.applied)
}

// wipe crashes n, and brings it back with an empty data dir: a new node at
// the same address that joins its old cluster, or bootstraps its own.
func (w *simWorld) wipe(n *simNode) {
	old := n.cl
	if n.up {
		w.crash(n)
	}
	n.life++
	n.id = w.newNodeID(n.addr, n.life)
	n.replica, n.applied, n.cl, n.conflict = newFSM(), 0, nil, false
	n.up = true
	n.believed, n.nextClaim = nil, 0
	w.logf("%s is wiped", n.name())
	if old != nil && w.r.Float64() < w.cfg.wipeNewCluster {
		c := w.bootstrap(n)
		c.younger = true
		c.meetAt = w.now + time.Duration(w.r.Int63n(int64(simMaxAhead)))
		return
	}
	if old == nil {
		old = w.cls[0]
	}
	n.cl = old
	old.members = append(old.members, n.id)
}

// step runs one event chosen by the seed.
func (w *simWorld) step() {
	w.events++
	w.now += time.Duration(w.r.Intn(20)+1) * time.Millisecond
	for _, c := range w.cls {
		if c.younger && c.meetAt != 0 && w.now >= c.meetAt {
			for _, n := range w.nodes {
				if n.cl == c {
					n.conflict = true
				}
			}
			c.meetAt = 0
			w.logf("%s meets the older cluster and stops", c.id)
		}
	}
	for _, n := range w.nodes {
		if n.pending != nil && w.now > n.pending.deadline {
			c := n.pending.c
			n.pending = nil
			w.answered(n, c, result{}, context.DeadlineExceeded)
		}
	}
	faults := w.events < w.cfg.events*4/5 // the last fifth runs without faults
	weights := []float64{30, 30, 25, 20, 6, 4, 0, 0, 0, 0, 0, 0, 0}
	if faults {
		weights[6], weights[7], weights[8], weights[9], weights[10], weights[11] = w.cfg.elect, w.cfg.crash, w.cfg.wipe, w.cfg.jump, w.cfg.remove, 2
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
	up := func(n *simNode) bool { return n.up }
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
	case 3: // replication: a follower's replica catches up some of the way
		if n := w.pickNode(up); n != nil && n.cl != nil && n.applied < len(n.cl.log) {
			n.catchUp(n.applied + 1 + w.r.Intn(len(n.cl.log)-n.applied))
		}
	case 4: // a heartbeat: n learns its cluster's leader; gossip re-adds a removed live member
		if n := w.pickNode(up); n != nil && n.cl != nil {
			if n.cl.leader != nil {
				n.believed = n.cl.leader
			}
			if !n.member(n.id) && !n.conflict {
				n.cl.members = append(n.cl.members, n.id)
			}
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
		if n := w.pickNode(up); n != nil {
			w.crash(n)
		}
	case 8:
		if n := w.pickNode(func(n *simNode) bool { return true }); n != nil {
			w.wipe(n)
		}
	case 9:
		if n := w.pickNode(up); n != nil {
			n.offset += time.Duration(w.r.Int63n(int64(2*time.Second))) - time.Second
			if w.r.Intn(2) == 0 {
				n.offset = time.Duration(w.r.Int63n(int64(simMaxSkew))) - simMaxSkew/2
			}
			w.logf("%s clock offset now %v", n.name(), n.offset)
		}
	case 10: // the leader removes a member (reaping): its slot is freed
		c := w.cls[0]
		if l := c.leader; l != nil && l.ready && len(c.members) > 1 {
			id := c.members[w.r.Intn(len(c.members))]
			if id != l.id {
				idx, res := w.appendEntry(c, command{Type: cmdRemove, NodeID: id, ClusterID: c.id})
				for i, m := range c.members {
					if m == id {
						c.members = append(c.members[:i], c.members[i+1:]...)
						break
					}
				}
				l.catchUp(int(idx))
				w.logf("%s removes %s at %d: %v", l.name(), id, idx, res)
			}
		}
	case 11: // restart a crashed node, or elect where there is no leader
		if n := w.pickNode(func(n *simNode) bool { return !n.up }); n != nil && w.r.Intn(2) == 0 {
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
	}
}

// run plays the world to its end, or to the first violation.
func (w *simWorld) run() error {
	for w.events < w.cfg.events && w.err == nil {
		w.step()
	}
	for _, c := range w.cls {
		w.checkTenures(c)
	}
	return w.err
}
