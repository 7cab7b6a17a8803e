package cluster

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/idgen/idgen/cluster/core"
)

// clusterFile holds the identity of the cluster this data dir belongs to,
// written once the node has applied its cluster's Init entry. It is read at
// start, before the log has been replayed, so gossip carries the identity
// from the first moment.
const clusterFile = "cluster.json"

func readIdentity(dir string) (*core.Identity, error) {
	b, err := os.ReadFile(filepath.Join(dir, clusterFile))
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var id core.Identity
	if err := json.Unmarshal(b, &id); err != nil || id.ID == "" {
		return nil, fmt.Errorf("cluster identity file %s is corrupt (%v); restore it, or wipe the whole data dir to start as a new node",
			filepath.Join(dir, clusterFile), err)
	}
	return &id, nil
}

func writeIdentity(dir string, id core.Identity) error {
	b, err := json.Marshal(id)
	if err != nil {
		return err
	}
	return writeFileSync(filepath.Join(dir, clusterFile), b)
}

// trackIdentity records the cluster identity once the replicated state has
// it: persisted in the data dir and carried in gossip metadata. Only the
// agent calls it (on every state change), so writes never race.
func (iw *identityWatch) trackIdentity() {
	n := iw.n
	n.log.trackLayout()
	var fromState core.Identity
	n.fsm.view(func(s *core.State) { fromState = core.Identity{ID: s.ClusterID, Created: s.Created} })
	if fromState.ID == "" {
		return
	}
	if cur := iw.identity.Load(); cur != nil && *cur == fromState {
		return
	} else if cur != nil {
		n.logger.Error("the replicated state names another cluster than the data dir; following the state",
			"data_dir_cluster", cur.String(), "state_cluster", fromState.String())
	}
	if err := writeIdentity(n.cfg.DataDir, fromState); err != nil {
		n.logger.Error("persist cluster identity", "err", err)
		return
	}
	iw.identity.Store(&fromState)
	n.gossip.updateMeta(func(m *core.Meta) { m.ClusterID, m.Created = fromState.ID, fromState.Created })
	n.logger.Info("cluster identity", "cluster", fromState.String())
}

// history is this node's applied log index, coarse.
func (iw *identityWatch) history() uint64 {
	n := iw.n
	var i uint64
	n.fsm.view(func(s *core.State) { i = s.Index })
	return core.CoarseIndex(i)
}

// checkConflict looks for gossip members of another cluster. Two clusters
// would hand out the same slots, so when this node's cluster is outranked
// (clusterAge.outranks) it stops issuing for good (until restarted), and says
// what to do; the other side logs the conflict, fences what this side may
// have issued (fenceForeign) and keeps serving. Either side exports it.
func (iw *identityWatch) checkConflict() {
	n := iw.n
	own := iw.identity.Load()
	if own == nil {
		return
	}
	mine := core.ClusterAge{Identity: *own, History: iw.history(), Serving: n.members.leaderKnown()}
	others := map[string]core.ClusterAge{}
	via := map[string]core.ForeignProof{}
	now := time.Now()
	// Only what a member proved over the authenticated transport counts
	// (foreign.go): a gossip key alone can make up a cluster with any history.
	for _, p := range n.members.proveForeign(own.ID) {
		// A member of another log with this cluster's ID is not another
		// cluster to rank: which of the two groups stops is the copies'
		// decision (twins.go).
		if now.Sub(p.At) > core.ForeignConflictTTL || p.Fork {
			continue
		}
		o := others[p.Cluster]
		o.Identity = core.Identity{ID: p.Cluster, Created: p.Created}
		o.Serving = o.Serving || p.Serving
		if p.History >= o.History {
			o.History = p.History
			via[p.Cluster] = p
		}
		others[p.Cluster] = o
	}
	for id, other := range others {
		p := via[id]
		var m core.GossipMember
		if gm, ok := n.gossip.snapshot()[p.ID]; ok {
			m = gm
		}
		wins := mine.Outranks(other)
		if _, seen := iw.conflicts.LoadOrStore(id, other.Identity); !seen {
			n.logger.Error("met a member of another cluster", "own_cluster", mine.String(), "other_cluster", other.String(),
				"member", m.Meta.Name, "gossip_addr", m.Addr, "own_keeps_serving", wins)
		}
		if wins || iw.conflict.Load() != nil {
			continue
		}
		// The agent sees the reason, revokes the generator and claims no more.
		reason := core.ConflictAdvice(mine, other, m.Meta.Name, m.Addr)
		iw.conflict.Store(&reason)
		n.logger.Error("stopping issuing: " + iw.conflictErr().Error())
	}
}

// ownCluster is the cluster ID this node belongs to, "" while it is unknown.
// The replicated state is read too, so a new leader knows its cluster from
// the moment its Init entry is applied.
func (iw *identityWatch) ownCluster() string {
	n := iw.n
	if id := iw.identity.Load(); id != nil {
		return id.ID
	}
	var own string
	n.fsm.view(func(s *core.State) { own = s.ClusterID })
	return own
}

// conflictErr is Node.Conflict's answer (see there).
func (iw *identityWatch) conflictErr() error {
	if c := iw.conflict.Load(); c != nil {
		return fmt.Errorf("%w: %s", ErrClusterConflict, *c)
	}
	return nil
}
