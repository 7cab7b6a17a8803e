package cluster

import (
	"cmp"
	"context"
	"crypto/tls"
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

	"github.com/idgen/idgen/cluster/door"
	"github.com/idgen/idgen/generator"
)

// Config is everything a node needs. Zero durations take the defaults below.
type Config struct {
	// Name is a human label; the node's identity is the ID in its data dir.
	Name    string
	DataDir string

	RaftAddr        string // bind address for Raft TCP
	RaftAdvertise   string // address other nodes dial for Raft
	GossipAddr      string // bind address for memberlist (UDP and TCP)
	GossipAdvertise string // address other nodes gossip with
	GRPCAddr        string // advertised gRPC address (followers forward commands here)
	HTTPAddr        string // advertised HTTP admin address

	// Join lists gossip addresses of existing or future members, retried periodically.
	Join []string
	// BootstrapExpect: a node without Raft state forms a new cluster once this
	// many nodes without state see each other by gossip. 1 with no Join
	// means start alone.
	BootstrapExpect int
	// Datacenter is the preferred datacenter for the slot, or -1 for any.
	Datacenter int
	// Layout is the ID layout this node founds a cluster with (the Init
	// entry records it); zero means the default. A node mints only under
	// its cluster's layout, as its own log's first entry records it: a
	// node that joins or restarts takes that one, and one with a Layout
	// set that differs is refused (ErrLayoutMismatch: at Open when the
	// data dir already belongs to a cluster, else at its claim).
	Layout generator.Layout

	// Lead is how far ahead of its issuing point a node keeps its window.
	Lead time.Duration
	// MaxAhead bounds every grant: the leader clamps a reserve's UpTo to
	// the cluster's time (the quorum-th latest of the voters' clocks, not
	// its own clock) plus this, and Init starts every slot at the founding
	// voters' time plus this. 0: EffectiveMaxAhead's lead plus max-skew.
	MaxAhead time.Duration
	// MaxSkew is how far a node's clock may be from the cluster's time
	// before the leader refuses its claims and reserves (ErrClockSkew); a
	// leader whose own clock is further off grants nothing and hands off
	// leadership (ErrLeaderClockOff).
	MaxSkew time.Duration
	// ReapAfter is how long a member may be dead before its slot is freed.
	ReapAfter time.Duration
	// ReconcileInterval is the leader's full sweep period.
	ReconcileInterval time.Duration
	// JoinRetryInterval is how often the Join seeds are retried.
	JoinRetryInterval time.Duration
	// SnapshotThreshold and SnapshotInterval tune Raft snapshots (0 = Raft's defaults).
	SnapshotThreshold uint64
	SnapshotInterval  time.Duration
	// GossipLocal selects memberlist's fast loopback profile (tests, one host).
	GossipLocal bool
	// EnableFaultInjection allows SetClockOffset.
	EnableFaultInjection bool

	// RaftTLS, when set, runs Raft over TLS with it on both ends; it must
	// verify that the peer holds a server certificate (transport.go).
	RaftTLS *tls.Config
	// GossipKeys encrypt gossip (the first) and decrypt it (all); a member
	// without one of them is never heard. Empty means plaintext gossip.
	GossipKeys [][]byte
	// GossipLabel keeps deployments apart on a shared network: memberlist
	// drops packets with another label. It comes from --cluster-name.
	GossipLabel string

	Clock     generator.Clock
	Forwarder Forwarder
	Logger    *slog.Logger
	// Version and Revision name the build (gossip metadata, idctl members).
	Version  string
	Revision string

	// Prober asks members over the authenticated transport who they are;
	// the leader adds, promotes and removes members only on its answers
	// (probe.go). Without one no member is added, --bootstrap-expect above
	// 1 never finds its peers, and a server that cannot be asked counts as
	// unreachable.
	Prober Prober

	// applyFault, set only by this package's tests, fails a proposal before
	// it reaches Raft (a slow disk, a commit timeout).
	applyFault func(command) error
	// protocols, set only by this package's tests, replaces the protocol
	// versions this build speaks (a node of another release).
	protocols ProtocolRange
	// clockTTL, set only by this package's tests, replaces clockSampleTTL.
	clockTTL time.Duration
	// noClockInStatus, set only by this package's tests, leaves the clock
	// out of Status, as a release before protocol 2 does.
	noClockInStatus bool
	// previousStatus, set only by this package's tests, shapes Status as a
	// release before protocol 2 does: no clock, layout or datacenter.
	previousStatus bool
	// neverClaim, set only by this package's tests, keeps the agent from
	// claiming: a voter that holds no slot (a standby of a release before
	// protocol 2, or one refused every claim).
	neverClaim bool
	// contestMax: copyContestMax, for members of another cluster or log
	// (foreign.go); only this package's tests set another.
	contestMax time.Duration
}

// Defaults for the tuning settings (cluster/DESIGN.md says why).
const (
	DefaultLead              = 10 * time.Second
	DefaultMaxSkew           = 5 * time.Second
	DefaultReapAfter         = 2 * time.Minute
	DefaultReconcileInterval = 5 * time.Second
	DefaultJoinRetryInterval = 5 * time.Second
	// maxVoters: members beyond this many stay non-voters.
	maxVoters = 5
)

// EffectiveMaxAhead is the max-ahead a node opened with c runs with:
// MaxAhead, or when that is 0 the lead plus max-skew (each at its default
// when 0). Open applies it; idgend reports it as idgen_max_ahead_seconds.
func (c Config) EffectiveMaxAhead() time.Duration {
	if c.MaxAhead != 0 {
		return c.MaxAhead
	}
	return cmp.Or(c.Lead, DefaultLead) + cmp.Or(c.MaxSkew, DefaultMaxSkew)
}

func (c *Config) applyDefaults() {
	if c.Lead == 0 {
		c.Lead = DefaultLead
	}
	if c.MaxSkew == 0 {
		c.MaxSkew = DefaultMaxSkew
	}
	c.MaxAhead = c.EffectiveMaxAhead()
	if c.ReapAfter == 0 {
		c.ReapAfter = DefaultReapAfter
	}
	if c.ReconcileInterval == 0 {
		c.ReconcileInterval = DefaultReconcileInterval
	}
	if c.contestMax == 0 {
		c.contestMax = copyContestMax
	}
	if c.JoinRetryInterval == 0 {
		c.JoinRetryInterval = DefaultJoinRetryInterval
	}
	if c.BootstrapExpect == 0 {
		c.BootstrapExpect = 1
	}
	if c.Clock == nil {
		c.Clock = generator.SystemClock()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.RaftAdvertise == "" {
		c.RaftAdvertise = c.RaftAddr
	}
	if c.GossipAdvertise == "" {
		c.GossipAdvertise = c.GossipAddr
	}
	if c.protocols == (ProtocolRange{}) {
		c.protocols = ownProtocols
	}
	if c.clockTTL == 0 {
		c.clockTTL = clockSampleTTL
	}
}

// Validate reports the first setting that is out of range.
func (c *Config) Validate() error {
	if c.DataDir == "" {
		return errors.New("data dir is required")
	}
	l := c.bootstrapLayout()
	if err := l.Validate(); err != nil {
		return fmt.Errorf("layout: %w", err)
	}
	if c.BootstrapExpect < 1 || c.BootstrapExpect > l.Slots() {
		return fmt.Errorf("bootstrap-expect %d out of range 1..%d", c.BootstrapExpect, l.Slots())
	}
	// Without a layout the cluster's decides how many datacenters there
	// are; the claim checks the preference against it.
	dcs := maxSlots
	if c.Layout != (generator.Layout{}) {
		dcs = 1 << l.DatacenterBits
	}
	if c.Datacenter < -1 || c.Datacenter >= dcs {
		return fmt.Errorf("datacenter %d out of range -1..%d", c.Datacenter, dcs-1)
	}
	if c.Lead < l.Unit {
		return fmt.Errorf("lead %v must be at least one layout unit (%v)", c.Lead, l.Unit)
	}
	if c.MaxAhead < c.Lead {
		return fmt.Errorf("max-ahead %v must be at least the lead %v", c.MaxAhead, c.Lead)
	}
	if c.MaxSkew <= 0 {
		return fmt.Errorf("max-skew %v must be positive", c.MaxSkew)
	}
	if c.ReapAfter < time.Second {
		return fmt.Errorf("reap-after %v must be at least 1s", c.ReapAfter)
	}
	if c.RaftAddr == "" || c.GossipAddr == "" {
		return errors.New("raft and gossip addresses are required")
	}
	return nil
}

// bootstrapLayout is the layout an Init of this node records: Layout, or
// the default.
func (c *Config) bootstrapLayout() generator.Layout {
	if c.Layout == (generator.Layout{}) {
		return generator.DefaultLayout()
	}
	return c.Layout
}

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
	agent    agentShell
	lead     leader
	recon    reconciler
	members  membership
	ident    identityWatch
	versions versionView
	log      logView
	proposer proposer
	house    housekeeper
	// doors counts what the Raft and gossip ports' bounds refused.
	doors *door.Counts
	wg    sync.WaitGroup

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
	n.lead.handoff = make(chan struct{}, 1)
	n.fsm.afterApply = n.agent.stopIfEnded
	n.recon.foreign.init()
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
	local := meta{
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
		go n.ident.leaveRaftAsCopy()
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

// housekeeping retries the join seeds and keeps the gossip metadata current.
func (hk *housekeeper) housekeeping() {
	n := hk.n
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var lastJoin time.Time
	for {
		if len(n.cfg.Join) > 0 && time.Since(lastJoin) >= n.cfg.JoinRetryInterval {
			lastJoin = time.Now()
			if c, err := n.gossip.join(n.cfg.Join, n.cfg.GossipAdvertise); err != nil {
				n.logger.Debug("gossip join", "seeds", n.cfg.Join, "contacted", c, "err", err)
			}
		}
		n.members.leaderKnown() // keeps leaderSeen fresh between readiness checks
		n.ident.checkConflict()
		n.ident.checkCopies()
		n.recon.checkForks()
		n.log.saveApplied()
		odd := n.versions.protocolOdd() // off the serving path: Ready reads it
		hk.odd.Store(&odd)
		hk.logReadiness()
		member := n.members.inRaftConfig(n.id)
		skewMS := n.agent.skew.Load() / int64(time.Millisecond)
		n.gossip.updateMeta(func(m *meta) {
			m.Member = m.Member || member
			m.SkewMS = skewMS / 100 * 100 // gossip only changes of 100 ms or more
		})
		select {
		case <-n.shutdownCh:
			return
		case <-tick.C:
		}
	}
}

// peerLogEvery is how often one kind of refusal or not-ready reason is
// logged per peer: the first at once, the rest as a count.
const peerLogEvery = 10 * time.Second

// logReadiness logs every change of this node's readiness: at WARN with the
// reason when it is not ready (a change of kind only, so that a reason that
// carries a moving number is one line; at a bounded rate), at INFO when it
// is ready again. Only housekeeping calls it.
func (hk *housekeeper) logReadiness() {
	n := hk.n
	ok, reason := n.Ready()
	kind := reasonKind(reason)
	if ok {
		kind = ""
	}
	if kind == hk.lastReason {
		return
	}
	hk.lastReason = kind
	if ok {
		n.logger.Info("ready to issue")
		return
	}
	_, running, _ := n.versions.clusterProtocol()
	n.notReady.Log(slog.LevelWarn, kind, "self", "not ready", "reason", reason, "cluster_protocol", running,
		"own_protocols", n.cfg.protocols.String())
}

// reasonKind is a not-ready reason without its details: up to its first
// colon.
func reasonKind(r string) string {
	for i, c := range r {
		if c == ':' {
			return r[:i]
		}
	}
	return r
}

// inRaftConfig reports whether id is a server in the latest Raft configuration.
func (ms *membership) inRaftConfig(id string) bool {
	n := ms.n
	f := n.rs.raft.GetConfiguration()
	if f.Error() != nil {
		return false
	}
	for _, s := range f.Configuration().Servers {
		if string(s.ID) == id {
			return true
		}
	}
	return false
}

// Ready reports whether the node can issue IDs now, and why not.
func (n *Node) Ready() (bool, string) {
	if n.leaving.Load() {
		return false, ReasonLeaving
	}
	if err := n.Conflict(); err != nil {
		return false, err.Error()
	}
	if r := n.house.odd.Load(); r != nil && *r != "" {
		return false, *r
	}
	g := n.agent.gen.Load()
	if g == nil {
		return false, n.reason.get()
	}
	if r := n.reason.get(); r != "" {
		return false, r
	}
	if !n.members.leaderKnown() {
		return false, "no raft leader known"
	}
	// A window used up while the leader keeps extending it is a node at the
	// layout's rate (a burst, or a new cluster's first seconds): room comes
	// within a unit and callers wait for it. A node whose window has not grown
	// for grantGrace (no leader, or a cluster's time too far behind the window
	// for the leader's clamp to grant more) is taken out of its clients'
	// balancers.
	if g.Granted() <= g.Head() && time.Since(time.Unix(0, n.agent.lastGrant.Load())) > grantGrace {
		waiting := "waiting for the leader to grant more"
		if n.rs.raft.State() == raft.Leader {
			waiting = "this node leads and grants only up to the cluster's time plus max-ahead, which needs the clocks of a " +
				"majority of the voters present (idctl members shows each one's skew)"
		}
		return false, fmt.Sprintf("no room to issue: granted window ends at %d, issuing at %d; %s", g.Granted(), g.Head(), waiting)
	}
	// A lone voter's clock is the cluster's time: a step back of it is not a
	// window granted ahead of the cluster, and the node keeps issuing from
	// its cursor as it always has.
	if ahead := n.house.windowAhead(g); ahead > n.cfg.MaxAhead+g.Layout().Unit+aheadSlack && n.members.otherVoters() > 0 {
		return false, fmt.Sprintf("window runs %v ahead of the cluster's time (max-ahead %v): it was granted while a clock was wrong, "+
			"or the data dir was restored from an old copy; IDs from it would decode to future times, so the node waits for real time to catch up",
			ahead.Round(time.Second), n.cfg.MaxAhead)
	}
	return true, ""
}

// aheadSlack is how far past max-ahead (and a unit of rounding) a window may
// end before the node calls itself ahead: its estimate of the cluster's time
// is only as good as its last answer.
const aheadSlack = time.Second

// windowAhead is how far the end of g's window lies past the cluster's time,
// as this node reckons it: its clock less its skew at the last answer.
func (hk *housekeeper) windowAhead(g *generator.Generator) time.Duration {
	n := hk.n
	l := g.Layout()
	clusterNow := n.clock.Now().Add(-time.Duration(n.agent.skew.Load()))
	return l.Time(g.Granted() + 1).Sub(clusterNow)
}

// grantGrace is how long after its window last grew a node with a used-up
// window still counts as ready: at the layout's rate the leader extends it
// once a unit, so a little more than a unit.
const grantGrace = 2 * time.Second

// leaderGrace is how long a node still counts a leader as known after losing
// sight of it: an election takes about a second, and the granted window, not
// the leader, bounds what the node may issue meanwhile.
const leaderGrace = 3 * time.Second

// leaderKnown reports whether a Raft leader is known now or was within leaderGrace.
func (ms *membership) leaderKnown() bool {
	n := ms.n
	now := time.Now().UnixNano()
	if _, id := n.rs.raft.LeaderWithID(); id != "" {
		ms.leaderSeen.Store(now)
		return true
	}
	return now-ms.leaderSeen.Load() < int64(leaderGrace)
}

// leaderWithin reports whether this node knew a Raft leader within d.
func (ms *membership) leaderWithin(d time.Duration) bool {
	ms.leaderKnown()
	return time.Now().UnixNano()-ms.leaderSeen.Load() < int64(d)
}

// Conflict is non-nil once this node met an older cluster: it then issues
// nothing more, not even IDs it minted before (they may collide with the
// older cluster's).
func (n *Node) Conflict() error {
	if c := n.ident.conflict.Load(); c != nil {
		return fmt.Errorf("%w: %s", ErrClusterConflict, *c)
	}
	return nil
}

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
		n.fsm.view(func(s *state) { nodes = slices.Collect(maps.Values(s.Nodes)) })
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
		for _, a := range n.addrs() {
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
	n.fsm.view(func(s *state) { st.GrantedWindows = s.grantedWindows() })
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
func (n *Node) Members() ([]MemberInfo, string) {
	byID := map[string]*MemberInfo{}
	get := func(id string) *MemberInfo {
		m, ok := byID[id]
		if !ok {
			m = &MemberInfo{ID: id, Slot: -1, RaftRole: "none", GossipState: MemberUnknown.String()}
			byID[id] = m
		}
		return m
	}
	now := n.clock.Now()
	n.fsm.view(func(s *state) {
		for _, id := range s.sortedNodeIDs() {
			info := s.Nodes[id]
			m := get(id)
			m.Name, m.RaftAddr, m.GossipAddr, m.GRPCAddr, m.HTTPAddr = info.Name, info.RaftAddr, info.GossipAddr, info.GRPCAddr, info.HTTPAddr
		}
		for i, sl := range s.Slots {
			if sl.Owner != "" {
				m := get(sl.Owner)
				m.Slot = i
				m.GrantedLead = s.Layout.Time(sl.HighWater).Add(s.Layout.Unit).Sub(now)
			}
		}
	})
	for id, gm := range n.gossip.snapshot() {
		m := get(id)
		m.GossipState = gm.State.String()
		m.GossipAddr = gm.Addr
		if gm.Parsed {
			m.Name, m.GRPCAddr, m.RaftAddr, m.HTTPAddr = gm.Meta.Name, gm.Meta.GRPCAddr, gm.Meta.RaftAddr, gm.Meta.HTTPAddr
			m.ClockSkew = time.Duration(gm.Meta.SkewMS) * time.Millisecond
			m.Version, m.Revision, m.Protocols = gm.Meta.Version, gm.Meta.Revision, gm.Meta.protocols()
		}
	}
	_, leader := n.rs.raft.LeaderWithID()
	if f := n.rs.raft.GetConfiguration(); f.Error() == nil {
		for _, s := range f.Configuration().Servers {
			m := get(string(s.ID))
			if m.RaftAddr == "" {
				m.RaftAddr = string(s.Address)
			}
			switch {
			case s.ID == leader:
				m.RaftRole = "leader"
			case s.Suffrage == raft.Voter:
				m.RaftRole = "voter"
			default:
				m.RaftRole = "nonvoter"
			}
		}
	}
	out := make([]MemberInfo, 0, len(byID))
	for _, m := range byID {
		out = append(out, *m)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Name != out[j].Name {
			return out[i].Name < out[j].Name
		}
		return out[i].ID < out[j].ID
	})
	return out, string(leader)
}

// History returns every slot tenure recorded by the replicated state. On the
// leader it first waits for everything committed to be applied; a follower's
// answer may lag (a tenure's Granted only grows, so merging answers by the
// largest Granted is sound).
func (n *Node) History(ctx context.Context) ([]Tenure, error) {
	if n.rs.raft.State() == raft.Leader {
		if err := n.barriers.wait(ctx, func() error { return n.rs.raft.Barrier(applyTimeout).Error() }); err != nil {
			return nil, fmt.Errorf("history: %w", err)
		}
	}
	var out []Tenure
	n.fsm.view(func(s *state) { out = append(out, s.Tenures...) })
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

// offsetClock adds a settable offset to a base clock (fault injection).
type offsetClock struct {
	base   generator.Clock
	offset atomic.Int64
}

func (c *offsetClock) Now() time.Time {
	return c.base.Now().Add(time.Duration(c.offset.Load()))
}

// reasonText is why a node is not ready, "" when it is.
type reasonText struct{ p atomic.Pointer[string] }

func (r *reasonText) set(s string) { r.p.Store(&s) }

func (r *reasonText) get() string {
	if s := r.p.Load(); s != nil {
		return *s
	}
	return ""
}
