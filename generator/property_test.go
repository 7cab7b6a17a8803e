package generator

import (
	"context"
	"errors"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// TestGeneratorProperties drives generators through random clock moves
// (forward, back, jumps), grants, batch sizes and restarts (a new generator
// whose floor is the old one's granted, as a re-claim gives) and checks: every
// ID is unique, its timestamp lies in (floor, granted-at-the-time], IDs from
// one generator strictly increase, a refused batch really did not fit, and a
// batch of at most one unit starts no earlier than min(clock, granted).
func TestGeneratorProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		seqBits := rapid.Uint8Range(1, 11).Draw(t, "seqBits")
		layout, err := NewLayout(DefaultEpoch, time.Second, 28, 2, 1, seqBits)
		if err != nil {
			t.Fatal(err)
		}
		seqPer := layout.SequencePerUnit()
		slot := rapid.IntRange(0, layout.Slots()-1).Draw(t, "slot")
		floor := rapid.Int64Range(0, 1000).Draw(t, "floor")
		clock := NewManualClock(layout.Time(rapid.Int64Range(-50, 1100).Draw(t, "clockStart")))
		g, err := New(layout, slot, floor, clock)
		if err != nil {
			t.Fatal(err)
		}
		seen := make(map[int64]bool)
		last := int64(-1) // last ID of the current generator
		maxN := int(min(int64(MaxBatch), 4*seqPer))

		steps := rapid.IntRange(1, 150).Draw(t, "steps")
		for range steps {
			switch rapid.IntRange(0, 6).Draw(t, "action") {
			case 0: // clock forward a little
				clock.Add(time.Duration(rapid.IntRange(0, 3).Draw(t, "fwd")) * time.Second)
			case 1: // clock steps back
				clock.Add(-time.Duration(rapid.IntRange(1, 30).Draw(t, "back")) * time.Second)
			case 2: // clock jumps anywhere, sub-unit offsets included
				clock.Add(time.Duration(rapid.Int64Range(-500_000, 500_000).Draw(t, "jumpMs")) * time.Millisecond)
			case 3: // grant relative to where issuing stands (may be lower: ignored)
				if rapid.Bool().Draw(t, "nearCursor") { // a grant trailing the clock
					g.Grant(g.Cursor() + rapid.Int64Range(-1, 4).Draw(t, "grant"))
				} else {
					g.Grant(g.Head() + rapid.Int64Range(-3, 20).Draw(t, "grant"))
				}
			case 4: // restart: re-claim with floor = old granted
				floor = g.Granted()
				if g, err = New(layout, slot, floor, clock); err != nil {
					t.Fatal(err)
				}
				last = -1
			default: // a batch, NextBatch or Fill
				now := layout.Units(clock.Now())
				granted, cursor := g.Granted(), g.Cursor()
				next := cursor*seqPer + seqPer // next position: a unit boundary if nothing issued yet
				if last >= 0 {
					p, _ := layout.Decompose(last)
					next = p.Timestamp*seqPer + p.Sequence + 1
				}
				room := (granted+1)*seqPer - next
				n := rapid.IntRange(1, maxN).Draw(t, "n")
				if rapid.Bool().Draw(t, "edge") { // sizes right at the room left are where bugs hide
					n = int(min(max(room+rapid.Int64Range(-2, 2).Draw(t, "delta"), 1), int64(maxN)))
				}
				ids := make([]int64, n)
				if rapid.Bool().Draw(t, "fill") {
					err = g.Fill(canceled(), ids)
				} else {
					ids, err = g.NextBatch(canceled(), n)
				}
				if err != nil {
					if !errors.Is(err, ErrWindowExhausted) {
						t.Fatalf("batch of %d: unexpected error %v", n, err)
					}
					// Refused only if it did not fit from the cursor.
					if int64(n) <= room {
						t.Fatalf("batch of %d refused with room %d (granted %d, cursor %d): %v", n, room, granted, cursor, err)
					}
					continue
				}
				if len(ids) != n {
					t.Fatalf("asked for %d IDs, got %d", n, len(ids))
				}
				for i, id := range ids {
					p, err := layout.Decompose(id)
					if err != nil {
						t.Fatal(err)
					}
					if seen[id] {
						t.Fatalf("duplicate ID %d (%+v)", id, p)
					}
					seen[id] = true
					if id <= last {
						t.Fatalf("ID %d not above the previous %d", id, last)
					}
					last = id
					if p.Timestamp <= floor || p.Timestamp > granted {
						t.Fatalf("ID %d has timestamp %d outside (floor %d, granted %d]", id, p.Timestamp, floor, granted)
					}
					if p.Slot != slot {
						t.Fatalf("ID %d has slot %d, want %d", id, p.Slot, slot)
					}
					if i == 0 && int64(n) <= seqPer && p.Timestamp < min(now, granted) {
						t.Fatalf("batch starts at %d, behind min(clock %d, granted %d)", p.Timestamp, now, granted)
					}
				}
				if g.Cursor() < cursor {
					t.Fatalf("cursor moved back from %d to %d", cursor, g.Cursor())
				}
			}
		}
	})
}

// Many goroutines on one generator with random grants racing them: still no
// duplicate and every batch increasing.
func TestGeneratorPropertiesConcurrent(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		g, err := New(DefaultLayout(), 5, rapid.Int64Range(0, 100).Draw(t, "floor"), NewManualClock(DefaultLayout().Time(50)))
		if err != nil {
			t.Fatal(err)
		}
		g.Grant(g.Floor() + rapid.Int64Range(1, 50).Draw(t, "grant"))
		sizes := rapid.SliceOfN(rapid.IntRange(1, 5000), 2, 40).Draw(t, "sizes")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		defer cancel()
		out := make(chan []int64, len(sizes))
		for _, n := range sizes {
			go func() {
				ids, _ := g.NextBatch(ctx, n)
				out <- ids
			}()
		}
		seen := make(map[int64]bool)
		for range sizes {
			ids := <-out
			for i, id := range ids {
				if seen[id] || (i > 0 && id <= ids[i-1]) {
					t.Fatalf("duplicate or unordered ID %d", id)
				}
				seen[id] = true
			}
		}
		if uint64(len(seen)) != g.Issued() {
			t.Fatalf("saw %d IDs, Issued() = %d", len(seen), g.Issued())
		}
	})
}
