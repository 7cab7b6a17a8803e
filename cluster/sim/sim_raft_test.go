package sim

// The simulator's Raft (sim_world_test.go): a cluster is one committed log
// with its configuration, committing, electing and changing its
// configuration only with a quorum; a node keeps a replica of it that lags,
// applies as replication brings entries, takes and restores snapshots, and
// crashes and restarts.

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/hashicorp/raft"

	"github.com/idgen/idgen/cluster/core"
	"github.com/idgen/idgen/generator"
)

type simCluster struct {
	w       *simWorld
	id      string
	log     [][]byte    // log[i] is entry i+1, as Raft stores it
	truth   *core.State // the committed log applied: what the checker trusts
	leader  *simNode    // nil: no leader
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

// appendEntry commits c in cl's log and applies it to the truth.
func (cl *simCluster) appendEntry(c core.Command) (uint64, interface{}) {
	data, err := core.EncodeEntry(c, core.ProtocolMax)
	if err != nil {
		cl.w.fail("encode %s: %v", c.Type, err)
		return 0, err
	}
	cl.log = append(cl.log, data)
	idx := uint64(len(cl.log))
	res := cl.truth.ApplyEntry(idx, data)
	if id := cl.truth.ClusterID; c.Type == core.CmdInit && id != "" {
		cl.id = id
	}
	cl.w.check.tenures(cl)
	return idx, res
}

// quorum: a majority of c's voters is up in c. Raft commits an entry,
// elects a leader and changes the configuration only with one.
func (c *simCluster) quorum() bool {
	live, voters := 0, c.voters()
	for _, id := range voters {
		for _, n := range c.w.nodes {
			if n.id == id && n.awake() && n.cl == c {
				live++
			}
		}
	}
	return live >= len(voters)/2+1
}

// keepsQuorum: once identity gone is lost for good (a wipe, which leaves it
// in the configuration) or removed from the configuration (remove), a
// majority of c's configuration would still be identities some node has in
// c. The world never goes past that: a cluster whose voters are mostly gone
// for good has no quorum to commit, elect or reap with, which no Raft can
// recover from without an operator, and liveness would have nothing to
// judge. A member whose leave is under way counts as removed already.
func (c *simCluster) keepsQuorum(gone string, remove bool) bool {
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
		for _, m := range c.w.nodes {
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

func (c *simCluster) elect(n *simNode) {
	if old := c.leader; old != nil && old != n && old.up {
		old.depose()
	}
	c.term++
	c.leader = n
	c.electAt = 0
	n.ledAt = c.w.now
	n.ls = core.NewLeaderState()
	n.ready = false
	n.initWait, n.initAt = 0, 0
	n.deposedUntil = 0
	n.clocks.Reset()
	n.believed = n
	c.w.logf("%s leads %s (term %d)", n.name(), c.id, c.term)
}

// pickMember picks a live member of c to lead it, if c has a quorum to elect
// one (nil otherwise).
func (c *simCluster) pickMember(not *simNode) *simNode {
	if !c.quorum() {
		return nil
	}
	var cands []*simNode
	for _, n := range c.w.nodes {
		if n != not && n.awake() && n.cl == c && !n.conflict && c.voter(n.id) {
			cands = append(cands, n)
		}
	}
	if len(cands) == 0 {
		return nil
	}
	return cands[c.w.r.Intn(len(cands))]
}

// simStrangerDC is a stranger's --datacenter: outside simLayout's.
const simStrangerDC = 1 << 3

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
	replica *core.State
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
	ls           core.LeaderState // reconcile's bookkeeping, new with each leadership
	ready        bool             // past its Barrier
	deposedUntil time.Duration    // a deposed leader still answers until then
	clocks       core.ClockBook
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
	minted    core.MintedTenure
	withdrawn core.Withdrawals

	// agent side
	believed *simNode // the leader it forwards to (may be stale)
	gen      *generator.Generator
	tenure   uint64
	rule     core.SlotAgent // the agent's rule, as the node runs it
	pending  *simReq

	// the quiet phase's timers: when n last ran its agent, heard a
	// heartbeat, had its replica caught up; when it became leader; since
	// when its window has been used up (if noRoom)
	lastTick, lastBeat, lastRepl, ledAt, noRoomSince time.Duration
	noRoom                                           bool
}

// stranger: n is started with a datacenter outside the layout (simConfig).
func (n *simNode) stranger() bool { return n.addr >= 1 && n.addr <= n.w.cfg.strangers }

type simClock struct{ n *simNode }

func (c simClock) Now() time.Time { return c.n.w.base.Add(c.n.w.now + c.n.offset) }

func (n *simNode) clock() generator.Clock { return simClock{n} }

func (n *simNode) name() string { return n.nm }

// awake: n is up and not paused, so it acts, answers and is heard.
func (n *simNode) awake() bool { return n.up && n.w.now >= n.pausedUntil }

// believesLeader: n acts as a leader (the current one, or deposed and not
// knowing it yet).
func (n *simNode) believesLeader() bool {
	return n.awake() && n.cl != nil && (n.cl.leader == n || n.w.now < n.deposedUntil)
}

func (n *simNode) ownCluster() string { return n.replica.ClusterID }

// catchUp applies n's cluster's log to n's replica up to entry upTo.
func (n *simNode) catchUp(upTo int) {
	if n.cl == nil {
		return
	}
	for n.applied < upTo && n.applied < len(n.cl.log) {
		n.applied++
		n.replica.ApplyEntry(uint64(n.applied), n.cl.log[n.applied-1])
		n.stopIfEnded()
	}
}

// stopIfEnded is the node's fsm.afterApply (Node.stopIfEnded): a generator
// whose tenure the replica just ended stops there and then, by the agent's
// rule, whatever the agent is doing.
func (n *simNode) stopIfEnded() {
	if upTo, ended := core.EndedUpTo(n.replica, n.id, n.minted); ended && !n.w.cfg.faults.keepEnded {
		n.withdrawn.Add(n.minted.Slot, upTo)
	}
	if !n.w.cfg.faults.lateStop {
		n.w.agents.agentStep(n, core.AgentEvent{Kind: core.AgentApplied})
	}
}

// snapshot is the real snapshot of n's replica (core.EncodeSnapshot, what
// the node's fsm.Persist writes): the bytes a Raft snapshot store keeps,
// and the log index they cover.
func (n *simNode) snapshot() ([]byte, int) {
	var buf bytes.Buffer
	if err := core.EncodeSnapshot(&buf, n.replica.Clone()); err != nil {
		n.w.fail("%s's snapshot: %v", n.name(), err)
		return nil, 0
	}
	return buf.Bytes(), n.applied
}

// restore replaces n's replica with the real restore of a snapshot
// (core.DecodeSnapshot, what the node's fsm.Restore reads) covering the log
// up to at.
func (n *simNode) restore(data []byte, at int) {
	s, err := core.DecodeSnapshot(bytes.NewReader(data))
	if err != nil {
		n.w.fail("%s cannot restore its snapshot at %d: %v", n.name(), at, err)
		return
	}
	n.replica, n.applied = s, at
	n.stopIfEnded()
}

// installSnapshot is Raft's InstallSnapshot: a follower far behind gets the
// leader's snapshot instead of the entries, and keeps it as its own. The
// restored state must be the leader's, field for field.
func (n *simNode) installSnapshot(l *simNode) {
	data, at := l.snapshot()
	if data == nil {
		return
	}
	n.restore(data, at)
	n.snap, n.snapAt = data, at
	if !reflect.DeepEqual(n.replica, l.replica) {
		n.w.fail("%s's state restored from %s's snapshot at %d differs from it:\n got %+v\nwant %+v",
			n.name(), l.name(), at, n.replica, l.replica)
	}
	n.w.logf("%s installs %s's snapshot at %d", n.name(), l.name(), at)
}

// stepDown: a leader that lost its quorum steps down (its lease runs out);
// like any deposed leader it may answer a while longer from its state.
func (l *simNode) stepDown() {
	if l.cl.leader != l {
		return
	}
	l.cl.leader = nil
	l.depose()
	l.w.logf("%s steps down: no quorum in %s", l.name(), l.cl.id)
}

// depose: l no longer leads, and learns it up to 1.5 s after it next runs
// (a paused leader wakes up believing it still leads); until then it answers
// from its state.
func (l *simNode) depose() {
	l.deposedUntil = max(l.w.now, l.pausedUntil) + time.Duration(l.w.r.Int63n(int64(1500*time.Millisecond)))
}

func (n *simNode) crash() {
	n.up = false
	if n.gen != nil {
		n.gen.Revoke(errors.New("crashed"))
	}
	n.gen, n.tenure, n.rule, n.pending, n.ready, n.deposedUntil = nil, 0, core.SlotAgent{}, nil, false, 0
	n.buf, n.leaving, n.initAt, n.pausedUntil = nil, 0, 0, 0
	n.minted, n.withdrawn = core.MintedTenure{}, core.Withdrawals{}
	n.downAt = n.w.now
	n.clocks.Reset()
	if n.cl != nil && n.cl.leader == n {
		n.cl.leader = nil
	}
	n.w.logf("%s crashes", n.name())
}

// restart brings n back from its data dir: Raft restores its latest
// snapshot (none: an empty state) and applies the rest of the log as the
// leader's commit index reaches it (replication).
func (n *simNode) restart() {
	n.up, n.left = true, false
	n.believed = nil
	if n.snap != nil {
		n.restore(n.snap, n.snapAt)
	} else {
		n.replica, n.applied = core.NewState(), 0
	}
	n.w.logf("%s restarts from its snapshot at %d", n.name(), n.applied)
}

// The addresses a node at address a listens on.
func raftAddr(a int) string { return fmt.Sprintf("raft-%d", a) }

func grpcAddr(a int) string { return fmt.Sprintf("grpc-%d", a) }

// coreServers is the modelled Raft configuration as a sweep reads it (the
// node converts Raft's the same way, cluster's sweepServers).
func coreServers(servers []raft.Server) []core.Server {
	out := make([]core.Server, 0, len(servers))
	for _, s := range servers {
		out = append(out, core.Server{ID: string(s.ID), Address: string(s.Address), Voter: s.Suffrage == raft.Voter})
	}
	return out
}
