package cluster

import (
	"encoding/hex"
	"fmt"
	"testing"

	"github.com/idgen/idgen/cluster/core"
)

// TestForgedForeignClusterStopsNobodyAndBurnsNoSlot: members with the gossip
// key but no certificate claim to belong to an older cluster (created at the
// epoch, the deciding tie-break) and advertise gRPC addresses where nothing
// of theirs answers: one made up, one a real node's. Trusted on gossip alone,
// such a member stopped every node of the cluster for good; and with windows
// read from gossip it could have had every slot fenced near the end of the
// layout. A member of another cluster counts only once it answers as itself
// over the authenticated transport.
func TestForgedForeignClusterStopsNobodyAndBurnsNoSlot(t *testing.T) {
	tc := startThree(t, keyedGossip(randomBytes(t, 32)))
	like := tc.specs["a"].cfg
	for i, grpcAddr := range []string{"grpc-forged:1", tc.specs["b"].cfg.GRPCAddr} {
		startIntruder(t, like, hex.EncodeToString(randomBytes(t, 16)), "", core.Meta{
			Name: fmt.Sprintf("forged-%d", i), GRPCAddr: grpcAddr, RaftAddr: "127.0.0.1:1",
			Member: true, ClusterID: "0000000000000000000000000000forged", Created: 1,
		}).Join([]string{like.GossipAddr})
	}
	highWater := func() []int64 {
		var hw []int64
		tc.node("a").fsm.view(func(s *core.State) {
			for _, sl := range s.Slots {
				hw = append(hw, sl.HighWater)
			}
		})
		return hw
	}
	before := highWater()
	// Several leader sweeps and housekeeping ticks, each of which would have
	// acted on the forged members.
	duringSweeps(t, tc, 4, func() error {
		for _, name := range []string{"a", "b", "c"} {
			n := tc.node(name)
			if err := n.Conflict(); err != nil {
				return fmt.Errorf("%s stopped: %v", name, err)
			}
			if cs := n.Status().ConflictingClusters; len(cs) > 0 {
				return fmt.Errorf("%s reports conflicting clusters %v", name, cs)
			}
		}
		return nil
	})
	after := highWater()
	layout := tc.node("a").Layout()
	for i := range before {
		if after[i] > layout.Units(tc.node("a").clock.Now())+core.UnitsCeil(tc.node("a").cfg.MaxAhead, layout.Unit)+1 {
			t.Fatalf("slot %d's high-water moved from %d to %d: fenced on a forged window", i, before[i], after[i])
		}
	}
	for _, name := range []string{"a", "b", "c"} {
		waitReady(t, tc.node(name))
		tc.issue(tc.node(name), 100)
	}
}
