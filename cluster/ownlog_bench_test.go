package cluster

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idgen/idgen/cluster/core"
)

// movedClock is the system clock plus an offset the test moves.
type movedClock struct{ offset atomic.Int64 }

func (c *movedClock) Now() time.Time { return time.Now().Add(time.Duration(c.offset.Load())) }

// BenchmarkGrantAnswerToLocalApply measures what minting only from its own
// log costs a follower: the time from a Reserve's answer (the leader has
// committed and applied it) until the follower's own replica has applied it,
// which is when the room may be used. It reports that lag as ns/op and, as
// the baseline from the same run, the Reserve's round trip (rtt-ns/op):
//
//	go test -run '^$' -bench GrantAnswerToLocalApply -benchtime 200x ./cluster
func BenchmarkGrantAnswerToLocalApply(b *testing.B) {
	tc := newTestCluster(b)
	// One clock for all three, moved on a unit before every Reserve, so that
	// each one grants a unit more (the leader clamps to its clock + max-ahead).
	clock := &movedClock{}
	tune := func(s *nodeSpec) { s.cfg.Clock = clock }
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
		clock.offset.Add(int64(time.Second))
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		start := time.Now()
		r, err := f.proposer.propose(ctx, core.Command{Type: core.CmdReserve, NodeID: f.id, Slot: slot, Tenure: tenure, UpTo: granted + 1})
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
