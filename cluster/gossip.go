package cluster

import (
	"encoding/json"
	"fmt"
	"log"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/idgen/idgen/cluster/core"
	"github.com/idgen/idgen/cluster/door"
)

// gossip wraps memberlist: metadata, a full view of members with the time of
// their last state change, and a channel of change signals.
type gossip struct {
	list   *memberlist.Memberlist
	logger *slog.Logger
	noise  *door.RateLog // memberlist's warnings and errors
	// name is this node's gossip name; sighted hears its own name, or a
	// member's of its cluster, at another address (NotifyConflict).
	name    string
	sighted func(grpcAddr string)
	// updating serializes UpdateNode calls (updateMeta).
	updating sync.Mutex

	mu      sync.Mutex
	local   core.Meta
	members map[string]*core.GossipMember
	events  chan struct{}
	now     func() time.Time
}

// Config helpers live in node.go; openGossip starts memberlist.
//
// sighted (may be nil) hears the gRPC address of every process gossip shows
// under this node's own name, or a member's, at a second address (twins.go).
func openGossip(cfg *Config, nodeID string, local core.Meta, counts *door.Counts, logger *slog.Logger, sighted func(grpcAddr string), servers func(host string) bool) (*gossip, error) {
	g := &gossip{
		name:    nodeID,
		sighted: sighted,
		logger:  logger.With("component", "gossip"),
		local:   local,
		members: map[string]*core.GossipMember{},
		events:  make(chan struct{}, 1),
		now:     time.Now,
	}
	var mc *memberlist.Config
	if cfg.GossipLocal {
		mc = memberlist.DefaultLocalConfig()
	} else {
		mc = memberlist.DefaultLANConfig()
	}
	mc.Name = nodeID
	host, port, err := splitHostPort(cfg.GossipAddr)
	if err != nil {
		return nil, fmt.Errorf("gossip address: %w", err)
	}
	// memberlist cannot parse a host name and then binds every interface,
	// TCP and UDP: the caller resolves names to the IP it means.
	if net.ParseIP(host) == nil {
		return nil, fmt.Errorf("gossip address %s: %q is not an IP; resolve the name first (memberlist would bind every interface)", cfg.GossipAddr, host)
	}
	mc.BindAddr, mc.BindPort = host, port
	ahost, aport, err := splitHostPort(cfg.GossipAdvertise)
	if err != nil {
		return nil, fmt.Errorf("gossip advertise address: %w", err)
	}
	mc.AdvertiseAddr, mc.AdvertisePort = ahost, aport
	mc.Delegate = g
	mc.Events = g
	mc.Conflict = g
	// A node that restarts on a new address keeps its name (its node ID);
	// without this memberlist refuses it as a name conflict.
	mc.DeadNodeReclaimTime = 5 * time.Second
	if err := secureGossip(mc, cfg); err != nil {
		return nil, err
	}
	// Its warnings and errors, one per junk packet, are rate limited:
	// one line per peer and kind a minute, with a count (door.RateLog).
	mlog := logger.With("component", "memberlist")
	g.noise = door.NewRateLog(mlog, 0)
	mc.Logger = log.New(&slogWriter{logger: mlog, limit: g.noise}, "", 0)
	// memberlist's own transport on mc's bind address, with a cap on
	// inbound TCP streams (gossipdoor.go).
	streams, err := capGossipStreams(mc, gossipMaxStreams, servers, g.noise, counts)
	if err != nil {
		return nil, fmt.Errorf("start gossip on %s: %w", cfg.GossipAddr, err)
	}
	list, err := memberlist.Create(mc)
	if err != nil {
		streams.Shutdown()
		return nil, fmt.Errorf("start gossip on %s: %w", cfg.GossipAddr, err)
	}
	g.list = list
	return g, nil
}

func splitHostPort(addr string) (string, int, error) {
	host, ps, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(ps)
	if err != nil {
		return "", 0, fmt.Errorf("port %q: %w", ps, err)
	}
	if host == "" {
		host = "0.0.0.0"
	}
	return host, port, nil
}

// NodeMeta implements memberlist.Delegate.
func (g *gossip) NodeMeta(limit int) []byte {
	g.mu.Lock()
	defer g.mu.Unlock()
	b, _ := json.Marshal(g.local)
	if len(b) > limit {
		g.logger.Error("gossip metadata too large", "bytes", len(b), "limit", limit)
		return nil
	}
	return b
}

func (g *gossip) NotifyMsg([]byte)                           {}
func (g *gossip) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (g *gossip) LocalState(join bool) []byte                { return nil }
func (g *gossip) MergeRemoteState(buf []byte, join bool)     {}

// NotifyJoin, NotifyLeave and NotifyUpdate implement memberlist.EventDelegate.
// memberlist hands NotifyLeave a Node whose State field is not updated (its
// nodeState shadows it), so a leave is told from a death by the Leaving flag
// the node gossips before it leaves.
func (g *gossip) NotifyJoin(n *memberlist.Node)   { g.record(n, false) }
func (g *gossip) NotifyLeave(n *memberlist.Node)  { g.record(n, true) }
func (g *gossip) NotifyUpdate(n *memberlist.Node) { g.record(n, false) }

// NotifyConflict implements memberlist.ConflictDelegate: a member's name
// alive at a second address. memberlist calls it under its own lock, so it
// only records a sighting of the other address; the node asks later. A
// sighting of another member's name counts only when both sides say they
// are of one cluster: the node that sees it tells the member, its copy and
// its leader (twins.go), which may never see the conflict themselves.
func (g *gossip) NotifyConflict(existing, other *memberlist.Node) {
	if existing.Name != other.Name || g.sighted == nil {
		return
	}
	var was, m core.Meta
	if err := json.Unmarshal(other.Meta, &m); err != nil || m.GRPCAddr == "" {
		return
	}
	if existing.Name != g.name && (json.Unmarshal(existing.Meta, &was) != nil || was.ClusterID == "" || was.ClusterID != m.ClusterID) {
		return
	}
	g.sighted(m.GRPCAddr)
}

func (g *gossip) record(n *memberlist.Node, gone bool) {
	m := &core.GossipMember{ID: n.Name, Addr: n.Address(), State: MemberAlive, Since: g.now()}
	if err := json.Unmarshal(n.Meta, &m.Meta); err == nil {
		m.Parsed = true
	}
	if gone {
		m.State = MemberDead
		if m.Meta.Leaving {
			m.State = MemberLeft
		}
	}
	g.mu.Lock()
	if old, ok := g.members[n.Name]; ok && old.State == m.State {
		m.Since = old.Since
	}
	g.members[n.Name] = m
	g.mu.Unlock()
	select {
	case g.events <- struct{}{}:
	default:
	}
}

// snapshot returns a copy of every member seen, including dead and left ones.
func (g *gossip) snapshot() map[string]core.GossipMember {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make(map[string]core.GossipMember, len(g.members))
	for id, m := range g.members {
		out[id] = *m
	}
	return out
}

// forget drops a member from the view once it is removed from the cluster.
func (g *gossip) forget(id string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if m, ok := g.members[id]; ok && m.State != MemberAlive {
		delete(g.members, id)
	}
}

// updateMeta changes the local metadata and gossips it.
func (g *gossip) updateMeta(fn func(m *core.Meta)) {
	g.mu.Lock()
	before := g.local
	fn(&g.local)
	changed := before != g.local
	g.mu.Unlock()
	if changed {
		// memberlist's UpdateNode reads its own node's state unlocked while
		// another call's alive message writes it: one call at a time (the
		// race detector caught the agent's and housekeeping's together).
		g.updating.Lock()
		defer g.updating.Unlock()
		if err := g.list.UpdateNode(time.Second); err != nil {
			g.logger.Warn("gossip metadata update", "err", err)
		}
	}
}

// join contacts the seeds that are not already alive members; it returns how
// many were contacted.
func (g *gossip) join(seeds []string, self string) (int, error) {
	known := map[string]bool{self: true}
	for _, m := range g.snapshot() {
		if m.State == MemberAlive {
			known[m.Addr] = true
		}
	}
	var todo []string
	for _, s := range seeds {
		if !known[s] {
			todo = append(todo, s)
		}
	}
	if len(todo) == 0 {
		return 0, nil
	}
	return g.list.Join(todo)
}

func (g *gossip) leave(timeout time.Duration) error { return g.list.Leave(timeout) }

func (g *gossip) shutdown() error { return g.list.Shutdown() }
