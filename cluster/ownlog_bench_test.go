package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/idgen/idgen/cluster/core"
	"github.com/idgen/idgen/generator"
	"github.com/idgen/idgen/scripts/harness"
)

// BenchmarkGrantAnswerToLocalApply measures what minting only from its own
// log costs a follower: the time from a Reserve's answer (the leader has
// committed and applied it) until the follower's own replica has applied it,
// which is when the room may be used. It reports that lag as ns/op and, as
// the baseline from the same run, the Reserve's round trip (rtt-ns/op):
//
//	go test -run '^$' -bench GrantAnswerToLocalApply -benchtime 200x ./cluster
func BenchmarkGrantAnswerToLocalApply(b *testing.B) {
	tc := newTestCluster(b)
	// Units of a millisecond, and each Reserve asks a second past the grant
	// its replica shows: the leader clamps it to the cluster's time plus
	// max-ahead, which real time moves a unit a millisecond, so nearly every
	// Reserve grants something new. (It moved one clock for all three
	// before, a second a Reserve, but the cluster's time follows the leader's
	// polls of the voters' clocks, every 2 s, not a Reserve's own clock.)
	layout, err := generator.NewLayout(generator.DefaultEpoch, time.Millisecond, 41, 2, 1, 11)
	if err != nil {
		b.Fatal(err)
	}
	tune := func(s *nodeSpec) { s.cfg.Layout = layout }
	tune(tc.add("a", 1))
	tune(tc.add("b", 1, "a"))
	tune(tc.add("c", 1, "a"))
	waitReady(b, tc.start("a"))
	for _, name := range []string{"b", "c"} {
		waitReady(b, tc.start(name))
	}
	waitVoters(b, tc.node("a"), 3)
	f := tc.node("b")
	if f.Status().RaftState == "Leader" {
		b.Skip("b leads; the lag is a follower's")
	}
	// The leader grants only once it knows a quorum of the voters' clocks,
	// from its polls (every 2 s): b and c were just made voters.
	harness.WaitFor(b, 10*time.Second, "the leader knows the cluster's time", func() bool {
		for _, name := range []string{"a", "b", "c"} {
			if n := tc.node(name); n.Status().RaftState == "Leader" {
				_, known := n.clusterClock.clusterNow(time.Now())
				return known
			}
		}
		return false
	})
	measured := 0
	var rtt, lag time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tenure := f.agent.tenure.Load()
		var granted int64
		slot := -1
		f.fsm.view(func(s *core.State) {
			if t, _, ok := core.OwnTenure(s, f.id, tenure); ok {
				slot, granted = t.Slot, t.Granted
			}
		})
		if slot < 0 {
			b.Fatal("b holds no slot")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		start := time.Now()
		r, err := f.proposer.propose(ctx, core.Command{Type: core.CmdReserve, NodeID: f.id, Slot: slot, Tenure: tenure, UpTo: granted + 1000})
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		answered := time.Now()
		if r.Index == 0 {
			continue // the node's own agent reserved first: nothing to wait for
		}
		measured++
		rtt += answered.Sub(start)
		for {
			var applied int64
			f.fsm.view(func(s *core.State) { t, _, _ := core.OwnTenure(s, f.id, tenure); applied = t.Granted })
			if applied >= r.Granted {
				break
			}
			time.Sleep(100 * time.Microsecond)
		}
		lag += time.Since(answered)
	}
	b.StopTimer()
	if measured == 0 {
		b.Fatal("no reserve granted anything new")
	}
	b.ReportMetric(float64(lag.Nanoseconds())/float64(measured), "ns/op")
	b.ReportMetric(float64(rtt.Nanoseconds())/float64(measured), "rtt-ns/op")
	b.ReportMetric(float64(lag)/float64(rtt), "lag/rtt")
	b.ReportMetric(float64(measured)/float64(b.N), "measured/op")
}
