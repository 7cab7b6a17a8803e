package cluster

import (
	"fmt"
	"testing"

	"github.com/hashicorp/raft"
	"pgregory.net/rapid"

	"github.com/idgen/idgen/cluster/core"
)

// TestFSMWindowsNeverOverlap drives the state machine with random claims,
// reserves and releases that name any tenure the node ever held (or a
// made-up one, as a delayed or forged command would), and removes. It checks
// the replicated half of the uniqueness argument: for every slot, each
// tenure's window (floor, granted] starts at or above everything granted to
// any earlier tenure, highWater never decreases, and every grant a generator
// was told about lies inside the tenure it holds.
func TestFSMWindowsNeverOverlap(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		f := newFSM()
		apply := func(c core.Command) interface{} {
			data, err := core.EncodeCommand(c)
			if err != nil {
				rt.Fatal(err)
			}
			return f.Apply(&raft.Log{Index: f.state.Index + 1, Type: raft.LogCommand, Data: data})
		}
		apply(initCmd())
		nodes := []string{"n0", "n1", "n2", "n3", "n4", "n5", "n6", "n7", "n8", "n9"}
		// held[tenure] is the window a generator of that claim was told it
		// may stamp: each claim starts a new generator at the returned floor,
		// and each accepted reserve extends the generator of the tenure it named.
		type window struct {
			node           string
			slot           int
			floor, granted int64
		}
		held := map[uint64]*window{}
		tenuresOf := map[string][]uint64{}
		pickTenure := func(node string) uint64 {
			ts := tenuresOf[node]
			if len(ts) == 0 || rapid.IntRange(0, 9).Draw(rt, "madeUp") == 0 {
				return rapid.Uint64Range(0, f.state.Index+1).Draw(rt, "anyTenure")
			}
			return rapid.SampledFrom(ts).Draw(rt, "tenure")
		}
		prevHW := make([]int64, 8)
		steps := rapid.IntRange(1, 200).Draw(rt, "steps")
		for i := 0; i < steps; i++ {
			node := rapid.SampledFrom(nodes).Draw(rt, "node")
			var c core.Command
			switch op := rapid.IntRange(0, 3).Draw(rt, "op"); op {
			case 0:
				c = claimCmd(node, rapid.IntRange(-1, 3).Draw(rt, "dc"))
			case 1:
				c = reserveCmd(node, rapid.IntRange(0, 7).Draw(rt, "slot"), rapid.Int64Range(0, 1000).Draw(rt, "upTo"))
				c.Tenure = pickTenure(node)
			case 2:
				c = core.Command{Type: core.CmdRelease, NodeID: node, Tenure: pickTenure(node)}
			default:
				c = core.Command{Type: core.CmdRemove, NodeID: node}
			}
			res := apply(c)
			if r, ok := res.(core.Result); ok {
				switch c.Type {
				case core.CmdClaim:
					held[r.Tenure] = &window{node, r.Slot, r.Floor, r.Floor}
					tenuresOf[node] = append(tenuresOf[node], r.Tenure)
				case core.CmdReserve:
					w := held[c.Tenure]
					if w == nil || w.node != node || w.slot != c.Slot {
						rt.Fatalf("reserve by %s on slot %d accepted for tenure %d that no claim of its own returned", node, c.Slot, c.Tenure)
					}
					if r.Granted > w.granted {
						w.granted = r.Granted
					}
				}
			}
			for s, sl := range f.state.Slots {
				if sl.HighWater < prevHW[s] {
					rt.Fatalf("slot %d highWater went down %d -> %d", s, prevHW[s], sl.HighWater)
				}
				prevHW[s] = sl.HighWater
			}
		}
		// Per slot, tenures in claim order never overlap.
		last := map[int]int64{}
		for _, tn := range f.state.Tenures {
			if tn.Floor < last[tn.Slot] {
				rt.Fatalf("slot %d: tenure of %s starts at %d, below earlier grant %d", tn.Slot, tn.NodeID, tn.Floor, last[tn.Slot])
			}
			if tn.Granted < tn.Floor {
				rt.Fatalf("tenure %+v granted below floor", tn)
			}
			last[tn.Slot] = tn.Granted
		}
		// Every window a generator was told it may use lies inside its own tenure.
		for id, w := range held {
			inside := false
			for _, tn := range f.state.Tenures {
				if tn.ClaimedIndex == id && tn.Slot == w.slot && tn.NodeID == w.node && w.floor >= tn.Floor && w.granted <= tn.Granted {
					inside = true
				}
			}
			if !inside {
				rt.Fatalf("%s's generator of tenure %d may stamp slot %d in (%d, %d], outside that tenure: %s", w.node, id, w.slot, w.floor, w.granted, fmt.Sprint(f.state.Tenures))
			}
		}
	})
}
