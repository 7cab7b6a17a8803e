package cluster

import (
	"fmt"

	"github.com/idgen/idgen/cluster/core"
	"github.com/idgen/idgen/generator"
)

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
	c, ok := own.Intersect(others)
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
		r, ok := n.versions.protocols.Get(string(s.ID))
		if !ok {
			r = core.LegacyProtocols
		}
		c, shared := common.Intersect(r)
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
	common = ProtocolRange{Min: 1, Max: int(^uint(0) >> 1)}
	for _, s := range f.Configuration().Servers {
		id := string(s.ID)
		if id == n.id {
			continue
		}
		any = true
		r := core.LegacyProtocols
		if pr, ok := n.versions.protocols.Get(id); ok {
			r = pr // proven over the authenticated transport (a leader's polls)
		} else if m, seen := members[id]; seen && m.Parsed {
			r = m.Meta.Protocols()
		}
		c, ok := common.Intersect(r)
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
	if _, ok := n.cfg.protocols.Intersect(others); ok {
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
		if err := core.JoinProtocol(own, m.Meta.Protocols()); err != nil {
			return fmt.Sprintf("the cluster %s that member %s belongs to will not add this node: %v", m.Meta.ClusterID, m.Meta.Name, err)
		}
		if l, err := generator.ParseLayout(m.Meta.Layout); err == nil {
			dc := n.cfg.Datacenter
			if err := core.CanTakePart(Status{ConfiguredLayout: n.cfg.Layout, Datacenter: &dc}, &l); err != nil {
				return fmt.Sprintf("layout mismatch: the cluster %s that member %s belongs to will not add this node: %v", m.Meta.ClusterID, m.Meta.Name, err)
			}
		}
	}
	return ""
}
