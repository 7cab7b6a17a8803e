package cluster

import (
	"fmt"
	"sort"
	"time"

	"github.com/hashicorp/raft"

	"github.com/idgen/idgen/cluster/core"
)

// grpcAddrOf is where this node dials node id. For a slot holder, the gRPC
// address the replicated state records for it: its own Claim of that slot
// put it there, over the authenticated transport, and every restart claims
// again. For the others (a standby, a node that never claimed), the one
// gossip shows, else the last one recorded. Gossip comes second because
// anyone with the gossip key can make a member show any address: followers
// dialling a leader's forged one stalled for about 50 s.
func (ms *membership) grpcAddrOf(id string) string {
	n := ms.n
	var recorded string
	var holds bool
	n.fsm.view(func(s *core.State) { recorded, holds = s.Nodes[id].GRPCAddr, s.SlotOf(id) >= 0 })
	if holds && recorded != "" {
		return recorded
	}
	if m, ok := n.gossip.snapshot()[id]; ok && m.Parsed && m.Meta.GRPCAddr != "" {
		return m.Meta.GRPCAddr
	}
	return recorded
}

// resolveNode finds a node's ID by ID or name among the state, Raft and gossip.
func (ms *membership) resolveNode(node string) (string, error) {
	members, _ := ms.list()
	var byName []string
	for _, m := range members {
		if m.ID == node {
			return m.ID, nil
		}
		if m.Name == node {
			byName = append(byName, m.ID)
		}
	}
	switch len(byName) {
	case 1:
		return byName[0], nil
	case 0:
		return "", fmt.Errorf("%w: no node has ID or name %q; see idctl members", ErrUnknownNode, node)
	default:
		return "", fmt.Errorf("%w: name %q is ambiguous (%v); use the node ID", ErrUnknownNode, node, byName)
	}
}

func (ms *membership) otherVoters() int {
	return ms.otherServersWhere(func(s raft.Server) bool { return s.Suffrage == raft.Voter })
}

func (ms *membership) otherServers() int {
	return ms.otherServersWhere(func(raft.Server) bool { return true })
}

// otherServersWhere counts the servers of this node's Raft configuration,
// other than itself, for which keep holds.
func (ms *membership) otherServersWhere(keep func(raft.Server) bool) int {
	n := ms.n
	cf := n.rs.raft.GetConfiguration()
	if cf.Error() != nil {
		return 0
	}
	c := 0
	for _, s := range cf.Configuration().Servers {
		if string(s.ID) != n.id && keep(s) {
			c++
		}
	}
	return c
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

// leaderKnown reports whether a Raft leader is known now or was within leaderGrace.
func (ms *membership) leaderKnown() bool {
	n := ms.n
	now := time.Now().UnixNano()
	if _, id := n.rs.raft.LeaderWithID(); id != "" {
		ms.leaderSeen.Store(now)
		return true
	}
	return now-ms.leaderSeen.Load() < int64(core.LeaderGrace)
}

// leaderWithin reports whether this node knew a Raft leader within d.
func (ms *membership) leaderWithin(d time.Duration) bool {
	ms.leaderKnown()
	return time.Now().UnixNano()-ms.leaderSeen.Load() < int64(d)
}

// configServers is this node's Raft configuration, ID to Raft address.
func (ms *membership) configServers() map[string]string {
	n := ms.n
	out := map[string]string{}
	for _, srv := range n.rs.raft.GetConfiguration().Configuration().Servers {
		out[string(srv.ID)] = string(srv.Address)
	}
	return out
}

// voters counts the voters of this node's Raft configuration.
func (ms *membership) voters() int {
	n := ms.n
	c := 0
	for _, s := range n.rs.raft.GetConfiguration().Configuration().Servers {
		if s.Suffrage == raft.Voter {
			c++
		}
	}
	return c
}

// list is Node.Members's answer (see there).
func (ms *membership) list() ([]MemberInfo, string) {
	n := ms.n
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
	n.fsm.view(func(s *core.State) {
		for _, id := range s.SortedNodeIDs() {
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
			m.Version, m.Revision, m.Protocols = gm.Meta.Version, gm.Meta.Revision, gm.Meta.Protocols()
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
