package core

import (
	"maps"
	"slices"
	"sort"
	"sync"
	"time"
)

// ClockSampleTTL: a report older than this says nothing about a clock now.
// Every node reserves at least every half lead (5 s by default), so a live
// voter's report is seldom more than a few seconds old.
const ClockSampleTTL = time.Minute

// ClockSample is one node's clock as it reported it.
type ClockSample struct {
	Reported time.Time // the sender's clock when it sent the command
	Leader   time.Time // this leader's clock when the command arrived
	At       time.Time // time.Now() when it arrived: a monotonic reference for ageing
}

// ClockBook keeps every node's latest clock report, as the leader saw it.
type ClockBook struct {
	mu   sync.Mutex
	last map[string]ClockSample
}

func (b *ClockBook) Observe(id string, s ClockSample) {
	if id == "" {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.last == nil {
		b.last = map[string]ClockSample{}
	}
	b.last[id] = s
}

// Retain forgets the reports of every node not in ids (the servers of the
// leader's Raft configuration): a removed member's clock says nothing of the
// cluster's, and the book stays bounded by the configuration.
func (b *ClockBook) Retain(ids []string) {
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

// IDs are the nodes the book has a report of.
func (b *ClockBook) IDs() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Sorted(maps.Keys(b.last))
}

func (b *ClockBook) Reset() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.last = nil
}

// ByID returns the current clock of each of ids that reported within ttl:
// its report aged by the real time since it arrived.
func (b *ClockBook) ByID(ids []string, now time.Time, ttl time.Duration) []time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []time.Time
	for _, id := range ids {
		s, ok := b.last[id]
		if !ok {
			continue
		}
		if age := now.Sub(s.At); age <= ttl {
			out = append(out, s.Reported.Add(age))
		}
	}
	return out
}

// HeardSince is when id's latest report arrived (zero if never).
func (b *ClockBook) HeardSince(id string) time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.last[id].At
}

// Recent counts the nodes heard from within window whose clocks were off this
// leader's by more than max when they reported, and those within it.
func (b *ClockBook) Recent(self string, window, max time.Duration, now time.Time) (off, within int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for id, s := range b.last {
		if id == self || now.Sub(s.At) > window {
			continue
		}
		if skew := s.Reported.Sub(s.Leader); skew > max || skew < -max {
			off++
		} else {
			within++
		}
	}
	return off, within
}

// ClusterTime is the quorum-th latest of own and others: at least quorum
// clocks read it or later, so clocks ahead by any amount move it past every
// correct clock only if they are a quorum themselves. (A median of just the
// clocks heard from is not enough: two of five voters an hour ahead are two
// of the first three to report.) known is false when fewer than quorum clocks
// count; t is then the earliest of them.
func ClusterTime(own time.Time, others []time.Time, quorum int) (t time.Time, known bool) {
	all := append([]time.Time{own}, others...)
	sort.Slice(all, func(i, j int) bool { return all[i].After(all[j]) })
	if quorum < 1 || len(all) < quorum {
		return all[len(all)-1], false
	}
	return all[quorum-1], true
}

// ClockAwaited: the leader counts toward the quorum a voter that reported
// within the TTL, and one that may yet: before the cluster is founded
// (founded false: no Init in the log) every founding voter, whatever it is,
// so that Init's start is never from fewer than a quorum of all of them (a
// release before protocol 2 reports no clock before Init: founders of it
// are waited for, and establish's error names them); after
// Init every voter but those gossip shows gone (dead or left), each until
// the leader has led for the TTL (clockQuorum).
func ClockAwaited(reported, gone, founded bool) bool {
	return reported || !gone || !founded
}

// ClockQuorum is which clocks count in the cluster's time and how many of
// them must agree: fresh holds the aged reports of the other voters heard
// from within ttl, of others in all (less the ones gossip shows dead or
// left that have not reported: absent at once); led is how long this node
// has led. A voter not heard from counts as present (its clock is awaited)
// until this node has led for ttl; after that it is absent, and the quorum
// is a majority of this node and the voters present.
func ClockQuorum(fresh []time.Time, others int, led, ttl time.Duration) ([]time.Time, int) {
	present := 1 + others
	if led >= ttl {
		present = 1 + len(fresh)
	}
	return fresh, present/2 + 1
}

// ClockPollEvery is how often the leader asks a voter it has not heard from
// for its Status (and with it its clock).
const ClockPollEvery = 2 * time.Second

// ClockPollTargets are the voters (other than self) whose latest report is
// older than every at now: the ones the leader asks for their Status. (The
// leader asks every voter at least every protocolPollEvery as well, for its
// protocol range: pollClocks.)
func ClockPollTargets(voters []string, self string, heard func(string) time.Time, now time.Time, every time.Duration) []string {
	var out []string
	for _, id := range voters {
		if id != self && now.Sub(heard(id)) >= every {
			out = append(out, id)
		}
	}
	return out
}
