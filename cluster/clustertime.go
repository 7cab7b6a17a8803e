package cluster

import (
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// Cluster time (DESIGN.md, "One wrong clock cannot lend an hour"): the leader
// bounds every grant by a time that a quorum of voters agrees with, never by
// its own clock alone. Every Claim and Reserve carries its sender's clock;
// the leader keeps each node's latest report, ages it by the real time that
// has passed since it arrived, and takes the quorum-th latest of its own clock
// and the voters' aged reports.

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

func (b *clockBook) reset() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.last = nil
}

// estimates returns the current clock of each of ids that reported within
// clockSampleTTL: its report aged by the real time since it arrived.
func (b *clockBook) estimates(ids []string, now time.Time) []time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []time.Time
	for _, id := range ids {
		s, ok := b.last[id]
		if !ok {
			continue
		}
		if age := now.Sub(s.at); age <= clockSampleTTL {
			out = append(out, s.reported.Add(age))
		}
	}
	return out
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
// now and the voters' latest reports.
func (n *Node) clusterNow(own time.Time) (time.Time, bool) {
	f := n.rs.raft.GetConfiguration()
	if f.Error() != nil {
		return own, false
	}
	var others []string
	voters := 0
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter {
			voters++
			if string(s.ID) != n.id {
				others = append(others, string(s.ID))
			}
		}
	}
	return clusterTime(own, n.clocks.estimates(others, time.Now()), voters/2+1)
}
