package core

import (
	"math"
	"sync"
)

// A batch minted in a tenure that has ended is never handed out. The
// prefetch buffer (rpc) holds batches minted ahead, and a tenure can end
// while they wait there: a fence of another cluster's window ends the
// holder's tenure (the window's IDs may be among them), and so can a Remove
// or a Release. IDs are not taken back once handed out, but a node can still
// withdraw those it holds: each ended tenure of this process leaves, per
// slot, the slot's highWater when the replica applied its end, and every ID
// of that slot stamped at or below it is withdrawn. Every ID of that tenure
// lies at or below it, and every ID of a later tenure above it (a tenure
// starts above its slot's highWater), so the rule drops exactly the old
// tenures' IDs. Withdrawn IDs are lost, never issued: after a fence they are
// possible duplicates, after any other end they are only a few batches.

// MintedTenure is the tenure a node's generator mints under, and its slot.
type MintedTenure struct {
	Slot   int
	Tenure uint64
}

// EndedUpTo is the decision over one replica state: whether m has ended
// there, and the highWater at or below which its IDs lie (MaxInt64 when the
// state has no such slot, so that everything is withdrawn).
func EndedUpTo(s *State, id string, m MintedTenure) (int64, bool) {
	if m.Tenure == 0 {
		return 0, false
	}
	if m.Slot < 0 || m.Slot >= len(s.Slots) {
		return math.MaxInt64, true
	}
	sl := s.Slots[m.Slot]
	if sl.Owner == id && sl.Tenure == m.Tenure {
		return 0, false
	}
	return sl.HighWater, true
}

// Withdrawals keeps, per slot, the stamp at or below which this process's
// IDs were minted in a tenure that has ended.
type Withdrawals struct {
	mu   sync.Mutex
	upTo map[int]int64
}

func (w *Withdrawals) Add(slot int, upTo int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.upTo == nil {
		w.upTo = map[int]int64{}
	}
	if cur, ok := w.upTo[slot]; !ok || upTo > cur {
		w.upTo[slot] = upTo
	}
}

func (w *Withdrawals) Covers(slot int, ts int64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	upTo, ok := w.upTo[slot]
	return ok && ts <= upTo
}
