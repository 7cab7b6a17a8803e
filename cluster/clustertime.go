package cluster

import (
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// Cluster time (DESIGN.md, "One wrong clock cannot lend an hour"): the leader
// bounds every grant by a time that a quorum of voters agrees with, never by
// its own clock alone. The leader hears each voter's clock on its own
// initiative (pollClocks: the authenticated Status it asks every few
// seconds, whether or not the voter sends it commands) and from every Claim
// and Reserve of a member; it keeps each node's latest report, ages it by
// the real time that has passed since it arrived, and takes the quorum-th
// latest of its own clock and the voters' aged reports. A voter that has
// reported nothing for clockTTL while this node led (dead, cut off, or a
// release that puts no clock in its Status and sends no commands) is absent:
// the quorum is taken over the voters present, so that a silent voter is
// never a reason to grant nothing.

// clockSampleTTL: a report older than this says nothing about a clock now.
// Every node reserves at least every half lead (5 s by default), so a live
// voter's report is seldom more than a few seconds old.
const clockSampleTTL = time.Minute

// clockSample is one node's clock as it reported it.
type clockSample struct {
	reported time.Time // the sender's clock when it sent the command
	leader   time.Time // this leader's clock when the command arrived
	at       time.Time // time.Now() when it arrived: a monotonic reference for ageing
}

// clockBook keeps every node's latest clock report, as the leader saw it.
type clockBook struct {
	mu   sync.Mutex
	last map[string]clockSample
}

func (b *clockBook) observe(id string, s clockSample) {
	if id == "" {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.last == nil {
		b.last = map[string]clockSample{}
	}
	b.last[id] = s
}

// retain forgets the reports of every node not in ids (the servers of the
// leader's Raft configuration): a removed member's clock says nothing of the
// cluster's, and the book stays bounded by the configuration.
func (b *clockBook) retain(ids []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	keep := make(map[string]bool, len(ids))
	for _, id := range ids {
		keep[id] = true
	}
	for id := range b.last {
		if !keep[id] {
			delete(b.last, id)
		}
	}
}

func (b *clockBook) reset() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.last = nil
}

// byID returns the current clock of each of ids that reported within ttl:
// its report aged by the real time since it arrived.
func (b *clockBook) byID(ids []string, now time.Time, ttl time.Duration) []time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []time.Time
	for _, id := range ids {
		s, ok := b.last[id]
		if !ok {
			continue
		}
		if age := now.Sub(s.at); age <= ttl {
			out = append(out, s.reported.Add(age))
		}
	}
	return out
}

// heardSince is when id's latest report arrived (zero if never).
func (b *clockBook) heardSince(id string) time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.last[id].at
}

// recent counts the nodes heard from within window whose clocks were off this
// leader's by more than max when they reported, and those within it.
func (b *clockBook) recent(self string, window, max time.Duration, now time.Time) (off, within int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for id, s := range b.last {
		if id == self || now.Sub(s.at) > window {
			continue
		}
		if skew := s.reported.Sub(s.leader); skew > max || skew < -max {
			off++
		} else {
			within++
		}
	}
	return off, within
}

// clusterTime is the quorum-th latest of own and others: at least quorum
// clocks read it or later, so clocks ahead by any amount move it past every
// correct clock only if they are a quorum themselves. (A median of just the
// clocks heard from is not enough: two of five voters an hour ahead are two
// of the first three to report.) known is false when fewer than quorum clocks
// count; t is then the earliest of them.
func clusterTime(own time.Time, others []time.Time, quorum int) (t time.Time, known bool) {
	all := append([]time.Time{own}, others...)
	sort.Slice(all, func(i, j int) bool { return all[i].After(all[j]) })
	if quorum < 1 || len(all) < quorum {
		return all[len(all)-1], false
	}
	return all[quorum-1], true
}

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
		if clockAwaited(len(cc.clocks.byID([]string{id}, now, n.cfg.clockTTL)) > 0, gone, founded) {
			awaited++
		}
	}
	est, quorum := clockQuorum(cc.clocks.byID(others, now, n.cfg.clockTTL), awaited, led, n.cfg.clockTTL)
	return clusterTime(own, est, quorum)
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
		if s.Suffrage == raft.Voter && id != n.id && len(cc.clocks.byID([]string{id}, time.Now(), n.cfg.clockTTL)) == 0 {
			out = append(out, id)
		}
	}
	return out
}

// clockAwaited: the leader counts toward the quorum a voter that reported
// within the TTL, and one that may yet: before the cluster is founded
// (founded false: no Init in the log) every founding voter, whatever it is,
// so that Init's start is never from fewer than a quorum of all of them (a
// release before protocol 2 reports no clock before Init: founders of it
// are waited for, and establish's error names them); after
// Init every voter but those gossip shows gone (dead or left), each until
// the leader has led for the TTL (clockQuorum).
func clockAwaited(reported, gone, founded bool) bool {
	return reported || !gone || !founded
}

// clockQuorum is which clocks count in the cluster's time and how many of
// them must agree: fresh holds the aged reports of the other voters heard
// from within ttl, of others in all (less the ones gossip shows dead or
// left that have not reported: absent at once); led is how long this node
// has led. A voter not heard from counts as present (its clock is awaited)
// until this node has led for ttl; after that it is absent, and the quorum
// is a majority of this node and the voters present.
func clockQuorum(fresh []time.Time, others int, led, ttl time.Duration) ([]time.Time, int) {
	present := 1 + others
	if led >= ttl {
		present = 1 + len(fresh)
	}
	return fresh, present/2 + 1
}

// clockPollEvery is how often the leader asks a voter it has not heard from
// for its Status (and with it its clock).
const clockPollEvery = 2 * time.Second

// clockPollTargets are the voters (other than self) whose latest report is
// older than every at now: the ones the leader asks for their Status. (The
// leader asks every voter at least every protocolPollEvery as well, for its
// protocol range: pollClocks.)
func clockPollTargets(voters []string, self string, heard func(string) time.Time, now time.Time, every time.Duration) []string {
	var out []string
	for _, id := range voters {
		if id != self && now.Sub(heard(id)) >= every {
			out = append(out, id)
		}
	}
	return out
}

// statusClock is the clock sample a voter's Status answer gives the leader
// of cluster own: only an answer from the voter itself (st.ID == id), of
// this cluster (before Init, when the leader knows none, of none: the
// founding voters' clocks decide Init's start), with a clock (a release
// before protocol 2 sends none). leaderNow is the leader's clock and at the
// real time when it arrived.
func statusClock(id, own string, st Status, leaderNow, at time.Time) (clockSample, bool) {
	if st.ID != id || st.ClusterID != own || st.Clock == 0 {
		return clockSample{}, false
	}
	return clockSample{reported: time.Unix(0, st.Clock), leader: leaderNow, at: at}, true
}

// pollClocks runs while this node leads: every clockPollEvery it asks each
// voter it has not heard from within that time for its Status over the
// authenticated transport and records the clock it answers with. It runs
// beside the leader loop, so that a slow or silent voter never holds up a
// sweep.
func (cc *clusterClock) pollClocks(stop <-chan struct{}) {
	n := cc.n
	tick := time.NewTicker(clockPollEvery)
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
		cc.clocks.retain(servers)
		own := n.ident.ownCluster()
		keys := map[probeKey]bool{}
		heard := func(id string) time.Time {
			if t := cc.n.versions.protocols.provenAt(id); t.Before(time.Now().Add(-protocolPollEvery)) {
				return time.Time{} // its range is due: ask it whatever it reported since
			}
			return cc.clocks.heardSince(id)
		}
		for _, id := range clockPollTargets(voters, n.id, heard, time.Now(), clockPollEvery) {
			if addr := n.members.grpcAddrOf(id); addr != "" {
				keys[probeKey{id, addr}] = true
			}
		}
		for k, a := range n.members.probeAll(keys) {
			if a.err != nil || a.st.ID != k.id || a.st.ClusterID != own {
				continue
			}
			cc.n.versions.protocols.prove(k.id, a.st.Protocols.orLegacy())
			if s, ok := statusClock(k.id, own, a.st, n.clock.Now(), time.Now()); ok {
				cc.clocks.observe(k.id, s)
			}
		}
	}
}
