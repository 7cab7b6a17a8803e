package cluster

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"
)

// BenchmarkJoinToReady: how long a fresh node that joins a running
// three-node cluster takes from Open to ready (the leader adds it as a
// non-voter, after asking it over the Prober who it is; it claims a slot and
// its replica applies the claim). Each iteration joins one node, then lets
// it leave, which frees its slot for the next.
//
//	go test -run '^$' -bench JoinToReady -benchtime 10x ./cluster
func BenchmarkJoinToReady(b *testing.B) {
	tc := newTestCluster(b)
	tc.add("a", 3)
	tc.add("b", 3, "a")
	tc.add("c", 3, "a")
	for _, name := range []string{"a", "b", "c"} {
		tc.start(name)
	}
	for _, name := range []string{"a", "b", "c"} {
		waitReady(b, tc.node(name))
	}
	var took []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		name := fmt.Sprintf("j%d", i)
		tc.add(name, 1, "a")
		start := time.Now()
		n := tc.start(name)
		waitReady(b, n)
		took = append(took, time.Since(start))
		b.StopTimer()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		if err := n.Leave(ctx); err != nil {
			b.Fatalf("%s: leave: %v", name, err)
		}
		cancel()
		b.StartTimer()
	}
	b.StopTimer()
	sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
	b.ReportMetric(float64(took[len(took)/2].Milliseconds()), "median-ms/join")
	b.ReportMetric(float64(took[len(took)-1].Milliseconds()), "max-ms/join")
}
