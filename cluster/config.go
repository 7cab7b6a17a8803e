package cluster

import (
	"cmp"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/idgen/idgen/cluster/core"
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
	// Events, when set, is told of each event the node counts: a refusal
	// by the leader, a hand-off of leadership, a revocation of the running
	// generator, a fence the leader wrote (events.go). nil: the node only
	// keeps its own count.
	Events EventCounter

	// applyFault, set only by this package's tests, fails a proposal before
	// it reaches Raft (a slow disk, a commit timeout).
	applyFault func(core.Command) error
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
		c.protocols = core.OwnProtocols
	}
	if c.clockTTL == 0 {
		c.clockTTL = core.ClockSampleTTL
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
	dcs := core.MaxSlots
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
