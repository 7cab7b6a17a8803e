package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/idgen/idgen/cluster/core"
	"github.com/idgen/idgen/cluster/door"
	"github.com/idgen/idgen/generator"
)

// Node is one idgend cluster member: Raft, gossip, the leader loop and the
// slot agent.
type Node struct {
	cfg    Config
	id     string
	logger *slog.Logger
	clock  *offsetClock
	// barriers: the leader's History reads share Raft barriers (each one
	// appends an entry to every node's log).
	barriers sharedBarrier

	fsm    *fsm
	rs     *raftStore
	gossip *gossip
	// gossipOpen is gossip once open, for the doors (which run before);
	// hosts is ServerHost's set.
	gossipOpen atomic.Pointer[gossip]
	hosts      atomic.Pointer[hostSet]

	// started: when this process started, Unix ns.
	started int64
	reason  reasonText // why this node is not ready ("" when it is)

	shutdownOnce sync.Once
	shutdownCh   chan struct{}
	leaving      atomic.Bool
	// The roles (roles.go; the slot agent in agent.go).
	agent        agentShell
	lead         leader
	gate         leaderGate
	clusterClock clusterClock
	twins        copyWatch
	recon        reconciler
	members      membership
	ident        identityWatch
	versions     versionView
	log          logView
	proposer     proposer
	house        housekeeper
	// doors counts what the Raft and gossip ports' bounds refused, and
	// events the node's refusals, hand-offs, revocations and fences.
	doors  *door.Counts
	events events
	wg     sync.WaitGroup

	// peerLog logs refused peers' commands and answers, and notReady the
	// changes of this node's not-ready reason, each at a bounded rate.
	peerLog  *door.RateLog
	notReady *door.RateLog
}

// Open starts a node: it opens the data dir, Raft and gossip, and starts the
// background loops. Existing Raft state decides whether it bootstraps.
func Open(cfg Config) (*Node, error) {
	cfg.applyDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	id, err := openDataDir(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	recorded, err := readLayoutRecord(cfg.DataDir, cfg.Layout)
	if err != nil {
		return nil, err
	}
	known, err := readIdentity(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	if cfg.Name == "" {
		cfg.Name = id[:8]
	}
	logger := cfg.Logger.With("node", cfg.Name)
	n := &Node{
		cfg:        cfg,
		id:         id,
		logger:     logger,
		clock:      &offsetClock{base: cfg.Clock},
		fsm:        newFSM(),
		started:    time.Now().UnixNano(),
		shutdownCh: make(chan struct{}),
		peerLog:    door.NewRateLog(logger, peerLogEvery),
		notReady:   door.NewRateLog(logger, peerLogEvery),
	}
	n.agent.n, n.lead.n, n.recon.n, n.members.n, n.ident.n = n, n, n, n, n
	n.versions.n, n.log.n, n.proposer.n, n.house.n = n, n, n, n
	n.gate.n, n.clusterClock.n, n.twins.n = n, n, n
	n.gate.handoff = make(chan struct{}, 1)
	n.events.out = cfg.Events
	n.fsm.afterApply = n.agent.stopIfEnded
	n.members.foreign.init()
	if reason, err := stoppedBefore(cfg.DataDir); err != nil {
		return nil, err
	} else if reason != "" {
		n.ident.conflict.Store(&reason)
	}
	applied, err := readApplied(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	n.reason.set("starting")
	n.log.recorded.Store(recorded)
	local := core.Meta{
		Name: cfg.Name, GRPCAddr: cfg.GRPCAddr, RaftAddr: cfg.RaftAdvertise, HTTPAddr: cfg.HTTPAddr,
		Version: cfg.Version, Revision: shortRevision(cfg.Revision), Expect: cfg.BootstrapExpect,
		PMin: cfg.protocols.Min, PMax: cfg.protocols.Max,
	}
	if known != nil {
		n.ident.identity.Store(known)
		local.ClusterID, local.Created = known.ID, known.Created
	}
	if recorded != nil {
		local.Layout = recorded.String()
	}
	// A lone seed founds its own cluster: no other cluster's leader may
	// append to it while it has none (raftGreeter.admits).
	alone := cfg.BootstrapExpect == 1 && len(cfg.Join) == 0
	n.doors = door.NewCounts(boundRaftConns, boundRaftHandshakes, boundRaftTimeout, boundRaftTLS, boundRaftGreeting, boundRaftOtherCluster, boundRaftIdentity,
		boundGossipStreams, boundGossipStreamsPerAddr, boundGossipBudget, boundGossipStreamsShare)
	n.rs, err = openRaft(&n.cfg, id, n.fsm, raftGreeter{own: n.ident.ownCluster, alone: func() bool { return alone }, servers: n.ServerHost}, n.doors, logger)
	if err != nil {
		return nil, err
	}
	local.Member = n.rs.hadState
	// The record speaks for the Raft state beside it: with none (raft.db
	// wiped, or a reused volume) it would name an entry no log holds, and
	// every leader would refuse this node as another log's member.
	if applied != nil && !n.rs.hadState {
		logger.Warn("ignoring the applied-entry record: the data dir holds no raft state", "file", filepath.Join(cfg.DataDir, appliedFile))
		applied = nil
	}
	n.log.appliedSaved.Store(applied)
	n.gossip, err = openGossip(&n.cfg, id, local, n.doors, logger, func(grpcAddr string) { n.ident.copies.sighted(grpcAddr, time.Now()) }, n.ServerHost)
	if err != nil {
		n.rs.close()
		return nil, err
	}
	n.gossipOpen.Store(n.gossip)
	logger.Info("node started", "id", id, "raft", cfg.RaftAdvertise, "gossip", cfg.GossipAdvertise,
		"existing_state", n.rs.hadState, "bootstrap_expect", cfg.BootstrapExpect, "layout", n.Layout().String())

	if n.ident.conflict.Load() != nil {
		logger.Error("stopped: " + n.Conflict().Error())
		go n.twins.leaveRaftAsCopy()
	}
	n.wg.Go(n.lead.monitorLeadership)
	n.wg.Go(n.agent.run)
	n.wg.Go(n.house.housekeeping)
	if !n.rs.hadState {
		n.wg.Go(n.members.bootstrap)
	}
	return n, nil
}

// ID is the node's persistent identity (its Raft server ID and gossip name).
func (n *Node) ID() string { return n.id }

// Name is the node's human label.
func (n *Node) Name() string { return n.cfg.Name }

// Layout is the node's ID layout: its cluster's, once its log's first entry
// has been seen (here or in an earlier run), else the one it would found a
// cluster with.
func (n *Node) Layout() generator.Layout {
	if l, ok := n.log.clusterLayout(); ok {
		return l
	}
	return n.cfg.bootstrapLayout()
}

// Done is closed when the node has shut down (after Close or Leave).
func (n *Node) Done() <-chan struct{} { return n.shutdownCh }

// Close stops the node without leaving the cluster: its slot stays its own,
// so a restart from the same data dir carries on.
func (n *Node) Close() error {
	var err error
	n.shutdownOnce.Do(func() {
		close(n.shutdownCh)
		if g := n.agent.gen.Load(); g != nil {
			g.Revoke(ErrShutdown)
			n.events.count(eventRevocation, reasonName(ErrShutdown))
		}
		n.wg.Wait()
		n.log.saveApplied()
		if gerr := n.gossip.shutdown(); gerr != nil {
			err = gerr
		}
		if rerr := n.rs.close(); rerr != nil && err == nil {
			err = rerr
		}
		n.logger.Info("node stopped")
	})
	return err
}

// peerLogEvery is how often one kind of refusal or not-ready reason is
// logged per peer: the first at once, the rest as a count.
const peerLogEvery = 10 * time.Second

// Ready reports whether the node can issue IDs now, and why not.
func (n *Node) Ready() (bool, string) { return n.house.ready() }

// Conflict is non-nil once this node met an older cluster: it then issues
// nothing more, not even IDs it minted before (they may collide with the
// older cluster's).
func (n *Node) Conflict() error { return n.ident.conflictErr() }

// NextBatch mints n IDs from the node's slot.
func (n *Node) NextBatch(ctx context.Context, count int) ([]int64, int, error) {
	if err := n.Conflict(); err != nil {
		return nil, -1, err
	}
	g := n.agent.gen.Load()
	if g == nil {
		return nil, -1, fmt.Errorf("%w: %s", ErrNotReady, n.reason.get())
	}
	ids, err := g.NextBatch(ctx, count)
	return ids, g.Slot(), err
}

// Status is the node's view of itself.
// DoorRefusals is what the Raft and gossip ports' bounds refused, by bound
// (rpc exports it in idgen_door_refused_total beside its own ports').
func (n *Node) DoorRefusals() map[string]uint64 { return n.doors.Snapshot() }

// ServerHost reports whether host (an IP, as a connection's remote
// address names it) is where a server of the cluster runs: a host the log
// records for a member, a gossip member's (gossip hears only holders of
// the key) or a --join seed's. The doors keep places for them that a
// stranger, from however many addresses, cannot take (cmd/idgend/README.md,
// "Under attack"); a joining node, whose log names nobody yet, still
// keeps them for its seeds and the leader that probes it. The set is
// rebuilt at most once a second.
func (n *Node) ServerHost(host string) bool {
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return false
	}
	set := n.hosts.Load()
	if set == nil || time.Since(set.at) >= time.Second {
		var nodes []NodeInfo
		n.fsm.view(func(s *core.State) { nodes = slices.Collect(maps.Values(s.Nodes)) })
		var heard []string
		if g := n.gossipOpen.Load(); g != nil {
			for _, m := range g.snapshot() {
				heard = append(heard, m.Addr)
			}
		}
		set = &hostSet{at: time.Now(), hosts: serverHosts(nodes, heard, n.cfg.Join)}
		n.hosts.Store(set)
	}
	return set.hosts[ip.Unmap().WithZone("")]
}

// hostSet is ServerHost's set and when it was built.
type hostSet struct {
	at    time.Time
	hosts map[netip.Addr]bool
}

// serverHosts is the set of hosts, canonical, of the nodes' addresses and
// the other addresses given (host:port or a bare host); names that are not
// IPs are left out (idgend advertises IPs: it resolves a name once, at
// start).
func serverHosts(nodes []NodeInfo, addrs ...[]string) map[netip.Addr]bool {
	set := map[netip.Addr]bool{}
	add := func(a string) {
		if ip, err := netip.ParseAddr(door.HostString(a)); err == nil {
			set[ip.Unmap().WithZone("")] = true
		}
	}
	for _, n := range nodes {
		for _, a := range n.Addrs() {
			add(a)
		}
	}
	for _, list := range addrs {
		for _, a := range list {
			add(a)
		}
	}
	return set
}

func (n *Node) Status() Status {
	ok, reason := n.Ready()
	st := Status{
		ID: n.id, Name: n.cfg.Name, Slot: -1, Ready: ok, Reason: reason, RaftState: n.rs.raft.State().String(),
		AppliedIndex: n.rs.raft.AppliedIndex(), LastIndex: n.rs.raft.LastIndex(),
		LastWindowSlot: -1,
	}
	if w := n.agent.window.Load(); w != nil {
		st.LastWindowSlot, st.LastWindowGranted = w.slot, w.granted
	}
	st.Layout, _ = n.log.clusterLayout()
	addr, id := n.rs.raft.LeaderWithID()
	st.LeaderID, st.LeaderAddr = string(id), string(addr)
	st.ClusterID = n.ident.ownCluster()
	st.Started = n.started
	stopped := n.ident.conflict.Load() != nil
	st.Stopped = &stopped
	if e := n.log.lastCommand(); e != nil {
		st.AppliedCommand, st.AppliedCommandHash = e.index, e.hash
	}
	st.Voters = n.members.voters()
	st.RaftAddr, st.Leaving = n.cfg.RaftAdvertise, n.leaving.Load()
	st.Protocols = n.cfg.protocols
	_, st.ClusterProtocol, _ = n.versions.clusterProtocol()
	if !n.cfg.noClockInStatus && !n.cfg.previousStatus {
		st.Clock = n.clock.Now().UnixNano()
	}
	if !n.cfg.previousStatus {
		dc := n.cfg.Datacenter
		st.ConfiguredLayout, st.Datacenter = n.cfg.Layout, &dc
	}
	n.fsm.view(func(s *core.State) { st.GrantedWindows = s.GrantedWindows() })
	n.ident.conflicts.Range(func(k, _ any) bool {
		st.ConflictingClusters = append(st.ConflictingClusters, k.(string))
		return true
	})
	sort.Strings(st.ConflictingClusters)
	if g := n.agent.gen.Load(); g != nil {
		st.Slot, st.Granted, st.Cursor, st.Floor, st.IDsIssued = g.Slot(), g.Granted(), g.Cursor(), g.Floor(), g.Issued()
	}
	return st
}

// Members lists every node known to gossip, Raft or the replicated state.
func (n *Node) Members() ([]MemberInfo, string) { return n.members.list() }

// History returns every slot tenure recorded by the replicated state. On the
// leader it first waits for everything committed to be applied; a follower's
// answer may lag (a tenure's Granted only grows, so merging answers by the
// largest Granted is sound).
func (n *Node) History(ctx context.Context) ([]Tenure, error) {
	if n.rs.raft.State() == raft.Leader {
		if err := n.barriers.wait(ctx, func() error { return n.rs.raft.Barrier(core.ApplyTimeout).Error() }); err != nil {
			return nil, fmt.Errorf("history: %w", err)
		}
	}
	var out []Tenure
	n.fsm.view(func(s *core.State) { out = append(out, s.Tenures...) })
	return out, nil
}

// sharedBarrier lets concurrent callers share Raft barriers: a caller
// waits for a barrier that starts after it came (one already running may
// have been issued before entries the caller must see), so at most one
// runs and one waits to start, however many call. (One client certificate
// calling History 8,800 times a second made every node's log grow by
// 1.7 MB a second, a barrier entry per call: outside attack round 9.)
type sharedBarrier struct {
	mu      sync.Mutex
	running bool
	next    *barrierRun // starts when the running one ends
}

type barrierRun struct {
	done chan struct{}
	err  error
}

// wait returns the outcome of a barrier begun after the call, or ctx's
// error.
func (b *sharedBarrier) wait(ctx context.Context, barrier func() error) error {
	b.mu.Lock()
	r := b.next
	if r == nil {
		r = &barrierRun{done: make(chan struct{})}
		if b.running {
			b.next = r
		} else {
			b.running = true
			go b.run(r, barrier)
		}
	}
	b.mu.Unlock()
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run carries out r, then each run that queued meanwhile.
func (b *sharedBarrier) run(r *barrierRun, barrier func() error) {
	for r != nil {
		r.err = barrier()
		close(r.done)
		b.mu.Lock()
		r, b.next = b.next, nil
		b.running = r != nil
		b.mu.Unlock()
	}
}

// Join gossip-joins the given addresses.
func (n *Node) Join(addrs []string) (int, error) {
	if len(addrs) == 0 {
		return 0, errors.New("join needs at least one gossip address")
	}
	c, err := n.gossip.list.Join(addrs)
	if err != nil {
		return c, fmt.Errorf("gossip join %v: contacted %d: %w", addrs, c, err)
	}
	return c, nil
}

// SetClockOffset moves the node's clock (fault injection for chaos tests).
func (n *Node) SetClockOffset(d time.Duration) error {
	if !n.cfg.EnableFaultInjection {
		return ErrFaultInjectionDisabled
	}
	n.clock.offset.Store(int64(d))
	n.logger.Warn("fault injection: clock offset set", "offset", d)
	return nil
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
	r, err := n.proposer.propose(ctx, core.Command{Type: core.CmdRemove, NodeID: id})
	return id, r.Slot, err
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
		n.events.count(eventRevocation, revokedLeaving)
		// A tenure that is no longer current needs no release: the slot
		// moved on without it.
		c := core.Command{Type: core.CmdRelease, NodeID: n.id, Tenure: n.agent.tenure.Load()}
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
			n.events.count(eventHandoff, handoffLeaving)
		}
		// The new leader removes this node; a removed node cannot learn of its
		// own removal from the log, so it waits for the leader's answer.
		err := retry(ctx, 200*time.Millisecond, func() error {
			_, err := n.proposer.propose(ctx, core.Command{Type: core.CmdRemove, NodeID: n.id})
			return err
		})
		if err != nil && !errors.Is(err, ErrUnknownNode) {
			n.leaving.Store(false)
			return fmt.Errorf("leave raft: %w", err)
		}
	}
	n.gossip.updateMeta(func(m *core.Meta) { m.Leaving = true })
	if err := n.gossip.leave(5 * time.Second); err != nil {
		n.logger.Warn("leave: gossip", "err", err)
	}
	n.logger.Info("left the cluster")
	return n.Close()
}

// Withdrawn reports whether id was minted by this node in a tenure that has
// ended since: the server drops such an ID from its prefetch buffer instead
// of handing it out. An ID that does not decode under the node's layout is
// withdrawn too.
func (n *Node) Withdrawn(id int64) bool {
	p, err := n.Layout().Decompose(id)
	if err != nil {
		return true
	}
	return n.agent.withdrawn.Covers(p.Slot, p.Timestamp)
}

// SightedCopy takes a peer's hint that a process of this node's identity,
// or of a member's, runs at grpcAddr (ClusterService.Status from a node of
// the cluster). It is asked at the next housekeeping tick; nothing is
// believed before it answers.
func (n *Node) SightedCopy(grpcAddr string) { n.ident.copies.sighted(grpcAddr, time.Now()) }
