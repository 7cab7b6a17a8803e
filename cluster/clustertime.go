package cluster

import (
	"time"

	"github.com/hashicorp/raft"

	"github.com/idgen/idgen/cluster/core"
)

// Cluster time (DESIGN.md, "One wrong clock cannot lend an hour"): the leader
// bounds every grant by a time that a quorum of voters agrees with, never by
// its own clock alone. The leader hears each voter's clock on its own
// initiative (pollClocks: the authenticated Status it asks every few
// seconds, whether or not the voter sends it commands), and from nothing
// else (a forwarded command's clock is checked, not counted: a node
// certificate does not say which node sent it; only a voter of the release
// before protocol 2, whose Status has no clock, reports it in its Claims and
// Reserves, core.CountsCommandClock); it keeps each node's latest
// report, ages it by
// the real time that has passed since it arrived, and takes the quorum-th
// latest of its own clock and the voters' aged reports. A voter that has
// reported nothing for clockTTL while this node led (dead, cut off, or a
// release that puts no clock in its Status and sends no commands) is absent:
// the quorum is taken over the voters present, so that a silent voter is
// never a reason to grant nothing.

// clusterNow is the cluster's time as this leader sees it, from its own clock
// now and the voters' latest reports (clockQuorum says which count).
func (cc *clusterClock) clusterNow(own time.Time) (time.Time, bool) {
	n := cc.n
	f := n.rs.raft.GetConfiguration()
	if f.Error() != nil {
		return own, false
	}
	var others []string
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter && string(s.ID) != n.id {
			others = append(others, string(s.ID))
		}
	}
	led := time.Duration(0)
	if since := cc.ledSince.Load(); since != 0 {
		led = time.Since(time.Unix(0, since))
	}
	now := time.Now()
	members := n.gossip.snapshot()
	_, founded := n.log.stateLayout()
	if !founded {
		led = 0 // (Init's start: never from fewer than a quorum of all the founders)
	}
	awaited := 0
	for _, id := range others {
		m, seen := members[id]
		gone := seen && (m.State == MemberDead || m.State == MemberLeft)
		if core.ClockAwaited(len(cc.clocks.ByID([]string{id}, now, n.cfg.clockTTL)) > 0, gone, founded) {
			awaited++
		}
	}
	est, quorum := core.ClockQuorum(cc.clocks.ByID(others, now, n.cfg.clockTTL), awaited, led, n.cfg.clockTTL)
	return core.ClusterTime(own, est, quorum)
}

// unreportedVoters are the other voters whose clocks this leader has not
// heard within the TTL.
func (cc *clusterClock) unreportedVoters() []string {
	n := cc.n
	f := n.rs.raft.GetConfiguration()
	if f.Error() != nil {
		return nil
	}
	var out []string
	for _, s := range f.Configuration().Servers {
		id := string(s.ID)
		if s.Suffrage == raft.Voter && id != n.id && len(cc.clocks.ByID([]string{id}, time.Now(), n.cfg.clockTTL)) == 0 {
			out = append(out, id)
		}
	}
	return out
}

// pollClocks runs while this node leads: every clockPollEvery it asks each
// voter it has not heard from within that time for its Status over the
// authenticated transport and records the clock it answers with. It runs
// beside the leader loop, so that a slow or silent voter never holds up a
// sweep.
func (cc *clusterClock) pollClocks(stop <-chan struct{}) {
	n := cc.n
	tick := time.NewTicker(core.ClockPollEvery)
	defer tick.Stop()
	for first := true; ; first = false {
		if !first {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
		f := n.rs.raft.GetConfiguration()
		if f.Error() != nil {
			continue
		}
		var voters, servers []string
		for _, s := range f.Configuration().Servers {
			servers = append(servers, string(s.ID))
			if s.Suffrage == raft.Voter {
				voters = append(voters, string(s.ID))
			}
		}
		cc.clocks.Retain(servers)
		own := n.ident.ownCluster()
		keys := map[core.ProbeKey]bool{}
		heard := func(id string) time.Time {
			if t := cc.n.versions.protocols.ProvenAt(id); t.Before(time.Now().Add(-core.ProtocolPollEvery)) {
				return time.Time{} // its range is due: ask it whatever it reported since
			}
			return cc.clocks.HeardSince(id)
		}
		for _, id := range core.ClockPollTargets(voters, n.id, heard, time.Now(), core.ClockPollEvery) {
			if addr := n.members.grpcAddrOf(id); addr != "" {
				keys[core.ProbeKey{ID: id, Addr: addr}] = true
			}
		}
		for k, a := range n.members.probeAll(keys) {
			if a.Err != nil || a.Status.ID != k.ID || a.Status.ClusterID != own {
				continue
			}
			cc.n.versions.protocols.Prove(k.ID, a.Status.Protocols.OrLegacy())
			if s, ok := core.StatusClock(k.ID, own, a.Status, n.clock.Now(), time.Now()); ok {
				cc.clocks.Observe(k.ID, s)
			}
		}
	}
}
