package cluster

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/idgen/idgen/generator"
)

// Protocol versions (cluster/DESIGN.md, "Protocol versions"). What nodes say
// to each other (log entries, snapshots, forwarded commands and their
// answers, Status answers, gossip metadata) has a version. Every node speaks
// a range of them and says so (gossip metadata, Status); the cluster runs
// the highest version every server of its Raft configuration speaks, and a
// node writes a new entry type, field meaning or answer shape only once the
// cluster runs a version that has it. A message of a version this node does
// not speak is refused with both versions named, and changes nothing.
//
// The wire rule every version keeps: a reader ignores fields it does not
// know (JSON entries and answers, protobuf answers, gossip metadata). So a
// new optional field whose absence means what the older version did needs
// no gate; a new entry type, or a field that changes what an entry does,
// does (an older replica would stop, or apply it differently).
//
//	1  the release recorded in scripts/upgrade/PREVIOUS and those before it
//	   (no version on the wire: a message without one is version 1)
//	2  nodes advertise their range (gossip "p", Status protocol_min/max and
//	   cluster_protocol); Status carries the answering node's clock, which
//	   the leader counts in the cluster's time; forwards and answers carry
//	   the version they are written in ("pv"). No new entry type: a version 1
//	   replica applies every entry a version 2 leader writes.
const (
	// ProtocolMin and ProtocolMax are the versions this build speaks.
	ProtocolMin = 1
	ProtocolMax = 2
)

// ErrProtocol: a message, a node or an entry of a protocol version the
// receiver does not speak.
var ErrProtocol = errors.New("protocol version not spoken")

// ProtocolRange is the protocol versions a node speaks.
type ProtocolRange struct{ Min, Max int }

// ownProtocols is what this build speaks.
var ownProtocols = ProtocolRange{ProtocolMin, ProtocolMax}

// legacyProtocols is what a node that advertises no range speaks: the
// releases before version 2.
var legacyProtocols = ProtocolRange{1, 1}

func (r ProtocolRange) String() string {
	if r.Min == r.Max {
		return strconv.Itoa(r.Min)
	}
	return fmt.Sprintf("%d..%d", r.Min, r.Max)
}

// orLegacy is r, or legacyProtocols for a node that advertised none.
func (r ProtocolRange) orLegacy() ProtocolRange {
	if r.Min <= 0 || r.Max < r.Min {
		return legacyProtocols
	}
	return r
}

func (r ProtocolRange) speaks(v int) bool { return v >= r.Min && v <= r.Max }

// intersect is the versions both r and o speak; ok is false when none.
func (r ProtocolRange) intersect(o ProtocolRange) (ProtocolRange, bool) {
	out := ProtocolRange{max(r.Min, o.Min), min(r.Max, o.Max)}
	return out, out.Min <= out.Max
}

// versionOf is the version a message says it is written in (0, from a
// release that writes none: version 1; a negative one stays what it is, and
// no node speaks it).
func versionOf(v int) int {
	if v == 0 {
		return 1
	}
	return v
}

// checkMessageVersion is a receiver's check of a message of version v (a
// forward, an answer) that node from sent: refused unless this node speaks
// v, with both versions and the node to upgrade named.
func checkMessageVersion(what, from string, v int, own ProtocolRange) error {
	v = versionOf(v)
	switch {
	case v > own.Max:
		return fmt.Errorf("%w: %s from %s is written in protocol %d, this node speaks %s; upgrade this node to a release "+
			"that speaks %d (or roll %s back); nothing was applied", ErrProtocol, what, from, v, own, v, from)
	case v < own.Min:
		return fmt.Errorf("%w: %s from %s is written in protocol %d, this node speaks %s; if this node was rolled "+
			"forward past what its cluster speaks, roll it back; else upgrade %s to a release that speaks %d; nothing was applied",
			ErrProtocol, what, from, v, own, from, own.Min)
	}
	return nil
}

// joinProtocol is the leader's check of a node that would join a cluster
// whose servers speak the common range cluster: the node must share a
// version with them, or the cluster would have no version to run.
func joinProtocol(node, cluster ProtocolRange) error {
	node = node.orLegacy()
	if _, ok := node.intersect(cluster); ok {
		return nil
	}
	if node.Max < cluster.Min {
		return fmt.Errorf("%w: it speaks protocol %s, the cluster's servers speak %s; it is too old for this cluster: "+
			"run a release that speaks %d on it", ErrProtocol, node, cluster, cluster.Min)
	}
	return fmt.Errorf("%w: it speaks protocol %s, the cluster's servers speak %s; it is too new for this cluster: "+
		"upgrade the cluster's nodes one at a time to a release that speaks both first", ErrProtocol, node, cluster)
}

// entryProtocol is the protocol version that introduced each entry type: a
// leader writes an entry only while the cluster runs at least its version
// (writable). Every type so far is version 1.
var entryProtocol = map[commandType]int{
	cmdInit: 1, cmdClaim: 1, cmdReserve: 1, cmdRelease: 1, cmdRemove: 1, cmdFence: 1,
}

// writable is the leader's gate before it proposes an entry of type t in a
// cluster running version running.
func writable(t commandType, running int) error {
	v, ok := entryProtocol[t]
	if !ok {
		return fmt.Errorf("%w: entry type %s has no protocol version", ErrProtocol, t)
	}
	if v > running {
		return fmt.Errorf("%w: a %s entry needs protocol %d, and the cluster runs %d (a server of an older release is "+
			"still in it; see idctl members); nothing was written", ErrProtocol, t, v, running)
	}
	return nil
}

// protocolPollEvery is how often the leader asks every voter for its
// Status (pollClocks), whatever else it heard from it: the ranges the
// leader decides by are the ones the voters proved over the authenticated
// transport, not what gossip says of them.
const protocolPollEvery = 10 * time.Second

// provenBook keeps each server's protocol range as its own authenticated
// Status last said it (the leader's clock polls).
type provenBook struct {
	mu sync.Mutex
	by map[string]provenRange
}

type provenRange struct {
	r  ProtocolRange
	at time.Time
}

func (b *provenBook) prove(id string, r ProtocolRange) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.by == nil {
		b.by = map[string]provenRange{}
	}
	b.by[id] = provenRange{r, time.Now()}
}

// provenAt is when id last proved its range (zero: never).
func (b *provenBook) provenAt(id string) time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.by[id].at
}

// get is id's proven range, if it proved one within a minute.
func (b *provenBook) get(id string) (ProtocolRange, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p, ok := b.by[id]
	return p.r, ok && time.Since(p.at) < time.Minute
}

// clusterProtocol is the protocol this node's cluster runs as it sees it:
// common is what every server of its Raft configuration speaks (this node's
// own range, and each other's as gossip shows it; a server gossip has never
// shown counts as version 1), running the highest of it. ok is false when
// the servers share no version; messages then go in this node's highest.
// A leader takes each server's range from the server's own authenticated
// Status (pollClocks, at least every protocolPollEvery), so that what it
// writes and whom it adds never rest on gossip, which anyone with the gossip
// key can forge; a follower, which only labels its forwards with the
// version, takes gossip's. A receiver checks every message's own version.
func (vv *versionView) clusterProtocol() (common ProtocolRange, running int, ok bool) {
	n := vv.n
	own := n.cfg.protocols
	others, shared, any := vv.othersProtocol()
	if !any {
		return own, own.Max, true
	}
	if !shared {
		return own, own.Max, false
	}
	c, ok := own.intersect(others)
	if !ok {
		return own, own.Max, false
	}
	return c, c.Max, true
}

// writeProtocol is the version a leader may write entries of: the highest
// that every server has proved over the authenticated transport that it
// speaks (a server that has not proved its range yet, in a new leader's
// first seconds, counts as version 1). Never gossip: a forged range must
// not let a leader write what a replica stops on.
func (vv *versionView) writeProtocol() int {
	n := vv.n
	f := n.rs.raft.GetConfiguration()
	if f.Error() != nil {
		return ProtocolMin
	}
	common := n.cfg.protocols
	for _, s := range f.Configuration().Servers {
		if string(s.ID) == n.id {
			continue
		}
		r, ok := n.lead.protocols.get(string(s.ID))
		if !ok {
			r = legacyProtocols
		}
		c, shared := common.intersect(r)
		if !shared {
			return 0 // no version every server reads: write nothing new
		}
		common = c
	}
	return common.Max
}

// othersProtocol is what every other server of this node's Raft
// configuration speaks (ranges as clusterProtocol takes them): shared is
// false when they share no version among themselves, any when there is no
// other server.
func (vv *versionView) othersProtocol() (common ProtocolRange, shared, any bool) {
	n := vv.n
	f := n.rs.raft.GetConfiguration()
	if f.Error() != nil {
		return ProtocolRange{}, false, false
	}
	members := n.gossip.snapshot()
	common = ProtocolRange{1, int(^uint(0) >> 1)}
	for _, s := range f.Configuration().Servers {
		id := string(s.ID)
		if id == n.id {
			continue
		}
		any = true
		r := legacyProtocols
		if pr, ok := n.lead.protocols.get(id); ok {
			r = pr // proven over the authenticated transport (a leader's polls)
		} else if m, seen := members[id]; seen && m.Parsed {
			r = m.Meta.protocols()
		}
		c, ok := common.intersect(r)
		if !ok {
			return common, false, true
		}
		common = c
	}
	return common, true, any
}

// protocolOdd says why this node shares no protocol version with the
// other servers of its cluster, which share one among themselves ("" when
// it does): it was rolled forward (or back) past what they speak. Such a
// node is not ready, and hands leadership off if it leads: its followers
// would refuse every forward it answers and grant nothing.
func (vv *versionView) protocolOdd() string {
	n := vv.n
	others, shared, any := vv.othersProtocol()
	if !any || !shared {
		return ""
	}
	if _, ok := n.cfg.protocols.intersect(others); ok {
		return ""
	}
	return fmt.Sprintf("protocol mismatch: this node speaks protocol %s and the other servers of its cluster speak %s; "+
		"roll this node back to the release it ran before (or roll the others forward one release at a time)", n.cfg.protocols, others)
}

// shortRevision is the first 12 characters of a VCS revision (and its
// "-dirty" mark), small enough for gossip metadata.
func shortRevision(rev string) string {
	dirty := ""
	if n := len(rev) - len("-dirty"); n > 0 && rev[n:] == "-dirty" {
		rev, dirty = rev[:n], "-dirty"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	return rev + dirty
}

// joinBlocked says why the leader of a cluster this node meets in gossip
// will not add it, as far as the members' metadata tells (a hint: the
// leader decides on its authenticated answer): a member of a cluster that
// shares no protocol version with this node. "" when nothing says so.
func (vv *versionView) joinBlocked() string {
	n := vv.n
	own := n.cfg.protocols
	for _, m := range n.gossip.snapshot() {
		if m.ID == n.id || !m.Parsed || m.State != MemberAlive || !m.Meta.Member || m.Meta.ClusterID == "" {
			continue
		}
		if err := joinProtocol(own, m.Meta.protocols()); err != nil {
			return fmt.Sprintf("the cluster %s that member %s belongs to will not add this node: %v", m.Meta.ClusterID, m.Meta.Name, err)
		}
		if l, err := generator.ParseLayout(m.Meta.Layout); err == nil {
			dc := n.cfg.Datacenter
			if err := canTakePart(Status{ConfiguredLayout: n.cfg.Layout, Datacenter: &dc}, &l); err != nil {
				return fmt.Sprintf("layout mismatch: the cluster %s that member %s belongs to will not add this node: %v", m.Meta.ClusterID, m.Meta.Name, err)
			}
		}
	}
	return ""
}
