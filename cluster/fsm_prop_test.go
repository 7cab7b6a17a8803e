package cluster

import (
	"fmt"
	"testing"

	"github.com/hashicorp/raft"
	"pgregory.net/rapid"
)

// TestFSMWindowsNeverOverlap drives the state machine with random claims,
// reserves (by owners and by fenced nodes), releases and removes, and checks
// the replicated half of the uniqueness argument: for every slot, each
// owner's window (floor, granted] starts at or above everything granted to
// any earlier owner, and highWater never decreases.
func TestFSMWindowsNeverOverlap(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		f := newFSM()
		apply := func(c command) interface{} {
			data, err := encodeCommand(c)
			if err != nil {
				rt.Fatal(err)
			}
			return f.Apply(&raft.Log{Index: f.state.Index + 1, Type: raft.LogCommand, Data: data})
		}
		apply(initCmd())
		nodes := []string{"n0", "n1", "n2", "n3", "n4", "n5", "n6", "n7", "n8", "n9"}
		// held[node][slot] lists the windows a node was told it may stamp:
		// each claim starts a new generator at the returned floor, and each
		// accepted reserve extends the newest one, exactly as the agent does.
		type window struct{ floor, granted int64 }
		held := map[string]map[int][]window{}
		prevHW := make([]int64, 8)
		steps := rapid.IntRange(1, 200).Draw(rt, "steps")
		for i := 0; i < steps; i++ {
			node := rapid.SampledFrom(nodes).Draw(rt, "node")
			var c command
			switch op := rapid.IntRange(0, 3).Draw(rt, "op"); op {
			case 0:
				c = claimCmd(node, rapid.IntRange(-1, 3).Draw(rt, "dc"))
			case 1:
				c = reserveCmd(node, rapid.IntRange(0, 7).Draw(rt, "slot"), rapid.Int64Range(0, 1000).Draw(rt, "upTo"))
			case 2:
				c = command{Type: cmdRelease, NodeID: node}
			default:
				c = command{Type: cmdRemove, NodeID: node}
			}
			res := apply(c)
			r, ok := res.(result)
			if ok {
				if held[node] == nil {
					held[node] = map[int][]window{}
				}
				switch c.Type {
				case cmdClaim:
					held[node][r.Slot] = append(held[node][r.Slot], window{r.Floor, r.Floor})
				case cmdReserve:
					ws := held[node][c.Slot]
					if len(ws) == 0 {
						rt.Fatalf("reserve by %s on slot %d accepted without a claim", node, c.Slot)
					}
					if w := &ws[len(ws)-1]; r.Granted > w.granted {
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
		// Every window a node was told it may use lies inside one of its
		// tenures of that slot.
		for node, slots := range held {
			for slot, ws := range slots {
				for _, w := range ws {
					if w.granted == w.floor {
						continue // nothing usable was granted
					}
					inside := false
					for _, tn := range f.state.Tenures {
						if tn.Slot == slot && tn.NodeID == node && w.floor >= tn.Floor && w.granted <= tn.Granted {
							inside = true
						}
					}
					if !inside {
						rt.Fatalf("%s believes it may stamp slot %d in (%d, %d], outside its tenures %s", node, slot, w.floor, w.granted, fmt.Sprint(f.state.Tenures))
					}
				}
			}
		}
	})
}
