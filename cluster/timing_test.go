package cluster

import (
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// A lone node leads within a fraction of raft's default 1-2 s first
// election, at its first start and again after a restart from its data; once
// a second voter joins, its timeouts are lengthened; nodes started to join
// keep the defaults.
func TestLoneVoterFastElectionAndGrowth(t *testing.T) {
	tc := newTestCluster(t)
	tc.add("a", 1)
	leads := func(n *Node) func() bool { return func() bool { return n.rs.raft.State() == raft.Leader } }
	for _, phase := range []string{"fresh", "restart"} {
		a := tc.start("a")
		start := time.Now()
		waitFor(t, 10*time.Second, "a leads", leads(a))
		// raft's defaults would take at least 1 s from Open's NewRaft.
		if d := time.Since(start); d > 850*time.Millisecond {
			t.Fatalf("%s: lone node led after %s", phase, d)
		}
		if phase == "fresh" {
			tc.stop("a")
		}
	}
	a := tc.node("a")
	if hb := a.rs.raft.ReloadableConfig().HeartbeatTimeout; hb != loneTimeout {
		t.Fatalf("lone node heartbeat timeout %s, want %s", hb, loneTimeout)
	}
	waitReady(t, a)

	tc.add("b", 1, "a")
	b := tc.start("b")
	if hb := b.rs.raft.ReloadableConfig().HeartbeatTimeout; hb != raft.DefaultConfig().HeartbeatTimeout {
		t.Fatalf("joining node heartbeat timeout %s, want raft's default", hb)
	}
	waitFor(t, 30*time.Second, "b a voter", func() bool { return a.rs.otherVoter(raft.ServerID(a.ID())) })
	waitFor(t, 5*time.Second, "a's timeouts lengthened", func() bool {
		rc := a.rs.raft.ReloadableConfig()
		return rc.HeartbeatTimeout == grownTimeout && rc.ElectionTimeout == grownTimeout
	})
}
