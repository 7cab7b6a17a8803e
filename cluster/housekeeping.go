package cluster

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/hashicorp/raft"

	"github.com/idgen/idgen/cluster/core"
	"github.com/idgen/idgen/generator"
)

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
		n.twins.checkCopies()
		n.recon.checkForks()
		n.log.saveApplied()
		odd := n.versions.protocolOdd() // off the serving path: Ready reads it
		hk.odd.Store(&odd)
		hk.logReadiness()
		member := n.members.inRaftConfig(n.id)
		skewMS := n.agent.skew.Load() / int64(time.Millisecond)
		n.gossip.updateMeta(func(m *core.Meta) {
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

// logReadiness logs every change of this node's readiness: at WARN with the
// reason when it is not ready (a change of kind only, so that a reason that
// carries a moving number is one line; at a bounded rate), at INFO when it
// is ready again. Only housekeeping calls it.
func (hk *housekeeper) logReadiness() {
	n := hk.n
	ok, reason := hk.ready()
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

// ready is Node.Ready's answer (see there).
func (hk *housekeeper) ready() (bool, string) {
	n := hk.n
	if n.leaving.Load() {
		return false, ReasonLeaving
	}
	if err := n.ident.conflictErr(); err != nil {
		return false, err.Error()
	}
	if r := hk.odd.Load(); r != nil && *r != "" {
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
	if ahead := hk.windowAhead(g); ahead > n.cfg.MaxAhead+g.Layout().Unit+aheadSlack && n.members.otherVoters() > 0 {
		return false, fmt.Sprintf("window runs %v ahead of the cluster's time (max-ahead %v): it was granted while a clock was wrong, "+
			"or the data dir was restored from an old copy; IDs from it would decode to future times, so the node waits for real time to catch up",
			ahead.Round(time.Second), n.cfg.MaxAhead)
	}
	return true, ""
}
