package cluster

import (
	"errors"
	"sort"
	"time"

	"github.com/hashicorp/raft"

	"github.com/idgen/idgen/cluster/core"
)

// bootstrapTick is how often a node without state looks for its peers in
// gossip; a fresh cluster forms within a tick of its last node appearing.
const bootstrapTick = 50 * time.Millisecond

// bootstrap runs on a node that started without Raft state. It forms a new
// cluster once BootstrapExpect nodes without state see each other, and
// otherwise waits to be added by the leader of an existing cluster.
//
// A node with Join seeds never forms a cluster of one: a second cluster would
// hand out the same slots again, so when in doubt it waits.
func (ms *membership) bootstrap() {
	n := ms.n
	if n.cfg.BootstrapExpect == 1 && len(n.cfg.Join) == 0 {
		ms.bootstrapWith([]raft.Server{{ID: raft.ServerID(n.id), Address: raft.ServerAddress(n.cfg.RaftAdvertise)}})
		return
	}
	tick := time.NewTicker(bootstrapTick)
	defer tick.Stop()
	proved := map[string]string{}  // fresh peers that answered as themselves: ID -> Raft address
	refused := map[string]string{} // the last reason logged for a peer that did not
	for {
		select {
		case <-n.shutdownCh:
			return
		case <-tick.C:
		}
		if ms.partOfCluster() {
			return
		}
		var fresh []raft.Server
		grpcOf := map[string]string{}
		existing := false
		for id, m := range n.gossip.snapshot() {
			if m.State != MemberAlive || !m.Parsed {
				continue
			}
			if m.Meta.Member && id != n.id {
				existing = true
				break
			}
			if m.Meta.Expect == n.cfg.BootstrapExpect {
				fresh = append(fresh, raft.Server{ID: raft.ServerID(id), Address: raft.ServerAddress(m.Meta.RaftAddr)})
				grpcOf[id] = m.Meta.GRPCAddr
			}
		}
		if existing {
			n.logger.Info("found an existing cluster; waiting for its leader to add this node")
			return
		}
		if n.cfg.BootstrapExpect > 1 && len(fresh) >= n.cfg.BootstrapExpect {
			// Gossip alone puts no voter in the first configuration: only
			// peers that answer over the authenticated transport count.
			fresh = ms.provenPeers(fresh, grpcOf, proved, refused)
			if len(fresh) >= n.cfg.BootstrapExpect {
				sort.Slice(fresh, func(i, j int) bool { return fresh[i].ID < fresh[j].ID })
				ms.bootstrapWith(fresh)
				return
			}
		}
	}
}

// provenPeers keeps, of the fresh nodes gossip shows, this node and those
// that answer over the authenticated transport (probe.go) as themselves, at
// the Raft address gossip shows, not leaving and in no cluster yet. proved
// remembers who did, so each peer is asked until it answers once.
func (ms *membership) provenPeers(fresh []raft.Server, grpcOf, proved, refused map[string]string) []raft.Server {
	n := ms.n
	probes := map[core.ProbeKey]bool{}
	for _, s := range fresh {
		if id := string(s.ID); id != n.id && proved[id] != string(s.Address) {
			probes[core.ProbeKey{ID: id, Addr: grpcOf[id]}] = true
		}
	}
	answers := ms.probeAll(probes)
	var out []raft.Server
	for _, s := range fresh {
		id := string(s.ID)
		if id != n.id && proved[id] != string(s.Address) {
			st, _, err := core.AnswerOf(id, []string{grpcOf[id]}, answers)
			if err == nil {
				err = core.JoinProof(st, string(s.Address), "")
			}
			if err != nil {
				if refused[id] != err.Error() {
					refused[id] = err.Error()
					// Peers that start a little later do not answer at first.
					log := n.logger.Warn
					if errors.Is(err, core.ErrProbeUnanswered) {
						log = n.logger.Info
					}
					log("bootstrap: not counting a gossip member as a peer until it answers as a node", "id", id, "reason", err)
				}
				continue
			}
			proved[id] = string(s.Address)
		}
		out = append(out, s)
	}
	return out
}

// partOfCluster reports whether this node has a leader or a configuration.
func (ms *membership) partOfCluster() bool {
	n := ms.n
	if _, id := n.rs.raft.LeaderWithID(); id != "" {
		return true
	}
	f := n.rs.raft.GetConfiguration()
	return f.Error() == nil && len(f.Configuration().Servers) > 0
}

func (ms *membership) bootstrapWith(servers []raft.Server) {
	n := ms.n
	err := n.rs.raft.BootstrapCluster(raft.Configuration{Servers: servers}).Error()
	switch {
	case err == nil:
		n.logger.Info("bootstrapped a new cluster", "servers", len(servers))
	case errors.Is(err, raft.ErrCantBootstrap):
		n.logger.Info("cluster already bootstrapped")
	default:
		n.logger.Error("bootstrap", "err", err)
		return
	}
	n.gossip.updateMeta(func(m *core.Meta) { m.Member = true })
}
