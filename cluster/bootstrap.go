package cluster

import (
	"errors"
	"sort"
	"time"

	"github.com/hashicorp/raft"
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
func (n *Node) bootstrap() {
	if n.cfg.BootstrapExpect == 1 && len(n.cfg.Join) == 0 {
		n.bootstrapWith([]raft.Server{{ID: raft.ServerID(n.id), Address: raft.ServerAddress(n.cfg.RaftAdvertise)}})
		return
	}
	tick := time.NewTicker(bootstrapTick)
	defer tick.Stop()
	for {
		select {
		case <-n.shutdownCh:
			return
		case <-tick.C:
		}
		if n.partOfCluster() {
			return
		}
		var fresh []raft.Server
		existing := false
		for id, m := range n.gossip.snapshot() {
			if m.State != "alive" || !m.Parsed {
				continue
			}
			if m.Meta.Member && id != n.id {
				existing = true
				break
			}
			if m.Meta.Expect == n.cfg.BootstrapExpect {
				fresh = append(fresh, raft.Server{ID: raft.ServerID(id), Address: raft.ServerAddress(m.Meta.RaftAddr)})
			}
		}
		if existing {
			n.logger.Info("found an existing cluster; waiting for its leader to add this node")
			return
		}
		if n.cfg.BootstrapExpect > 1 && len(fresh) >= n.cfg.BootstrapExpect {
			sort.Slice(fresh, func(i, j int) bool { return fresh[i].ID < fresh[j].ID })
			n.bootstrapWith(fresh)
			return
		}
	}
}

// partOfCluster reports whether this node has a leader or a configuration.
func (n *Node) partOfCluster() bool {
	if _, id := n.rs.raft.LeaderWithID(); id != "" {
		return true
	}
	f := n.rs.raft.GetConfiguration()
	return f.Error() == nil && len(f.Configuration().Servers) > 0
}

func (n *Node) bootstrapWith(servers []raft.Server) {
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
	n.gossip.updateMeta(func(m *meta) { m.Member = true })
}
