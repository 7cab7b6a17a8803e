package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/idgen/idgen/cluster/core"
	"github.com/idgen/idgen/generator"
	"github.com/idgen/idgen/scripts/harness"
)

// eventRecorder is a Config.Events that remembers what it was told, by
// node: the daemon's counter stands there.
type eventRecorder struct {
	mu     sync.Mutex
	counts map[string]uint64 // "node event reason" -> count
}

func (r *eventRecorder) forNode(name string) EventCounter { return nodeEvents{r, name} }

func (r *eventRecorder) get(name, event, reason string) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.counts[name+" "+event+" "+reason]
}

type nodeEvents struct {
	r    *eventRecorder
	name string
}

func (e nodeEvents) Count(event, reason string) {
	e.r.mu.Lock()
	defer e.r.mu.Unlock()
	if e.r.counts == nil {
		e.r.counts = map[string]uint64{}
	}
	e.r.counts[e.name+" "+event+" "+reason]++
}

// startThreeCounted is startThree with each node's Config.Events telling rec.
func startThreeCounted(t *testing.T, rec *eventRecorder) *testCluster {
	return startThree(t, func(c *Config) { c.Events = rec.forNode(c.Name) })
}

// refusals is how many refusals of reason the nodes counted, by their own
// count and by what their Config.Events heard.
func refusals(tc *testCluster, rec *eventRecorder, reason string) (own, told uint64) {
	for _, name := range []string{"a", "b", "c"} {
		own += tc.node(name).events.get(eventRefusal, reason)
		told += rec.get(name, eventRefusal, reason)
	}
	return own, told
}

// TestLeaderCountsRefusedReserves: a Reserve of a node that holds no slot,
// forwarded to the leader, is refused and counted as a refusal by its
// reason (NOT_OWNER, or CLOCK_SKEW if the clock check comes first), in the
// node's count and in its Config.Events.
func TestLeaderCountsRefusedReserves(t *testing.T) {
	rec := &eventRecorder{}
	tc := startThreeCounted(t, rec)
	for i, clock := range []generator.Clock{generator.SystemClock(), skewedClock{d: time.Hour}} {
		p := &pseudoNode{id: fmt.Sprintf("%032x", i+1), tc: tc, clock: clock}
		// Until the leader knows a quorum of the voters' clocks, no clock
		// is judged: a reserve of the skewed clock is refused as not owner.
		_, err := p.deliver(p.command(core.Command{Type: core.CmdReserve, NodeID: p.id, Slot: 0, Tenure: 1 << 40, UpTo: 1}))
		if !errors.Is(err, ErrNotOwner) && !errors.Is(err, ErrClockSkew) {
			t.Fatalf("a reserve of made-up node %s: %v, want it refused", p.id, err)
		}
		reason := reasonName(err)
		// The leader counts before it answers; its Config.Events is told
		// in the same call.
		own, told := refusals(tc, rec, reason)
		if own < 1 || told != own {
			t.Fatalf("after a reserve refused as %s (%v): %d refusals of %s counted, %d told to Config.Events; want at least 1, the same",
				reason, err, own, reason, told)
		}
	}
	if own, _ := refusals(tc, rec, "NOT_OWNER"); own < 1 {
		t.Errorf("no NOT_OWNER refusal counted for the reserve of a node whose clock is right")
	}
}

// TestRemovedNodeCountsItsRevocation: a live node that is removed stops
// its generator when its replica applies the removal, and counts a
// revocation of reason NOT_OWNER (its tenure ended).
func TestRemovedNodeCountsItsRevocation(t *testing.T) {
	rec := &eventRecorder{}
	tc := startThreeCounted(t, rec)
	var leader string
	harness.WaitFor(t, 10*time.Second, "a leader", func() bool { leader = leaderOf(tc, "a", "b", "c"); return leader != "" })
	victim := "a"
	for _, name := range []string{"a", "b", "c"} {
		if name != leader {
			victim = name
			break
		}
	}
	v := tc.node(victim)
	if v.agent.gen.Load() == nil {
		t.Fatalf("%s runs no generator", victim)
	}
	if got := v.events.get(eventRevocation, "NOT_OWNER"); got != 0 {
		t.Fatalf("%s counted %d revocations before its removal", victim, got)
	}
	harness.WaitFor(t, 20*time.Second, "the removal of "+victim, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _, err := tc.node(leader).Remove(ctx, v.ID())
		return err == nil || errors.Is(err, ErrUnknownNode)
	})
	harness.WaitFor(t, 10*time.Second, victim+" to count its revocation", func() bool {
		return v.events.get(eventRevocation, "NOT_OWNER") == 1 && rec.get(victim, eventRevocation, "NOT_OWNER") == 1
	})
	if v.agent.gen.Load() != nil {
		t.Errorf("%s still runs a generator after its removal", victim)
	}
}

// TestEventSeriesNameKnownReasons: the series shown at 0 from the start
// are each event's, once each, and the refusals' and revocations' reasons
// are reason strings of the table (or a cause of the node's own).
func TestEventSeriesNameKnownReasons(t *testing.T) {
	names := []string{ReasonOther, revokedCopy, revokedLeaving}
	for _, r := range Reasons() {
		names = append(names, r.Name)
	}
	seen := map[[2]string]bool{}
	for _, s := range EventSeries() {
		if seen[s] {
			t.Errorf("EventSeries lists %v twice", s)
		}
		seen[s] = true
		switch s[0] {
		case eventRefusal, eventRevocation:
			if !slices.Contains(names, s[1]) {
				t.Errorf("EventSeries lists %v, whose reason is no reason string", s)
			}
		case eventHandoff, eventFence:
		default:
			t.Errorf("EventSeries lists %v, of no event", s)
		}
	}
	for _, r := range Reasons() {
		if !seen[[2]string{eventRefusal, r.Name}] {
			t.Errorf("EventSeries lacks the refusals of %s", r.Name)
		}
	}
}
