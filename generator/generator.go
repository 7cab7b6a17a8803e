package generator

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// MaxBatch is the largest batch NextBatch and Fill accept. With the default
// layout it is just under 5 seconds of one slot's sequence space (10000/2048),
// well inside the default 10 s lead the cluster agent asks for, so a full-size
// batch always fits a window that is being kept topped up.
const MaxBatch = 10000

// Generator issues IDs for one slot. It stamps only timestamps t with
// floor < t <= granted, and its cursor (timestamp, sequence) never moves back.
// It is safe for concurrent use.
type Generator struct {
	layout Layout
	slot   int
	floor  int64
	clock  Clock

	// Derived from layout and slot once, for the hot path.
	epoch     time.Time
	unit      time.Duration
	seqBits   uint8
	tsShift   uint8
	seqPer    uint64
	slotPart  int64  // slot << seqBits
	maxTS     int64  // layout.MaxTimestamp()
	layoutEnd uint64 // first position past the layout: (maxTS+1) << seqBits

	waiting chan struct{}

	mu sync.Mutex
	// pos is the next position to stamp: timestamp<<seqBits | sequence.
	// Positions are counted in uint64 because (maxTS+1)<<seqBits may be 2^63.
	pos     uint64
	granted int64
	issued  uint64
	revoked error
	changed chan struct{} // closed and replaced on every Grant and on Revoke
}

// New returns a generator for slot whose window starts above floor: nothing is
// stamped until Grant raises the high-water mark above floor. A nil clock
// means SystemClock.
func New(layout Layout, slot int, floor int64, clock Clock) (*Generator, error) {
	if err := layout.Validate(); err != nil {
		return nil, err
	}
	if slot < 0 || slot >= layout.Slots() {
		return nil, fmt.Errorf("%w: %d not in 0..%d", ErrInvalidSlot, slot, layout.Slots()-1)
	}
	if floor < 0 || floor > layout.MaxTimestamp() {
		return nil, fmt.Errorf("%w: %d not in 0..%d", ErrInvalidFloor, floor, layout.MaxTimestamp())
	}
	if clock == nil {
		clock = SystemClock()
	}
	g := &Generator{
		layout:    layout,
		slot:      slot,
		floor:     floor,
		clock:     clock,
		epoch:     layout.EpochTime(),
		unit:      layout.Unit,
		seqBits:   layout.SequenceBits,
		tsShift:   layout.tsShift(),
		seqPer:    uint64(layout.SequencePerUnit()),
		slotPart:  int64(slot) << layout.SequenceBits,
		maxTS:     layout.MaxTimestamp(),
		layoutEnd: uint64(layout.MaxTimestamp()+1) << layout.SequenceBits,
		waiting:   make(chan struct{}, 1),
		pos:       uint64(floor+1) << layout.SequenceBits,
		granted:   floor,
		changed:   make(chan struct{}),
	}
	return g, nil
}

// Layout returns the generator's layout.
func (g *Generator) Layout() Layout { return g.layout }

// Slot returns the generator's slot.
func (g *Generator) Slot() int { return g.slot }

// Floor returns the timestamp the window starts above.
func (g *Generator) Floor() int64 { return g.floor }

// Grant raises the high-water mark: timestamps up to upTo may be stamped.
// Values not above the current mark are ignored. Waiting callers wake up.
func (g *Generator) Grant(upTo int64) {
	g.mu.Lock()
	if upTo > g.granted {
		g.granted = upTo
		close(g.changed)
		g.changed = make(chan struct{})
	}
	g.mu.Unlock()
}

// Revoke stops the generator for good: every later or waiting call returns an
// error wrapping ErrRevoked and cause. Only the first Revoke counts.
func (g *Generator) Revoke(cause error) {
	g.mu.Lock()
	if g.revoked == nil {
		if cause != nil {
			g.revoked = fmt.Errorf("%w: slot %d: %w", ErrRevoked, g.slot, cause)
		} else {
			g.revoked = fmt.Errorf("%w: slot %d", ErrRevoked, g.slot)
		}
		close(g.changed)
		g.changed = make(chan struct{})
	}
	g.mu.Unlock()
}

// Granted returns the high-water mark: the last timestamp that may be stamped.
func (g *Generator) Granted() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.granted
}

// Cursor returns the timestamp of the last ID stamped, or the floor if none.
func (g *Generator) Cursor() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.cursorLocked()
}

func (g *Generator) cursorLocked() int64 { return int64((g.pos - 1) >> g.seqBits) }

// Head returns max(wall clock's timestamp, Cursor()): where issuing stands now.
// The cluster agent's reserves ask for the window up to it plus the lead.
func (g *Generator) Head() int64 {
	now := g.units(g.clock.Now())
	return max(now, g.Cursor())
}

// Issued returns how many IDs the generator has handed out.
func (g *Generator) Issued() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.issued
}

// Waiting receives a value (sent without blocking, buffered 1) whenever a
// caller has to wait for a grant, so the cluster agent can send a reserve at once.
func (g *Generator) Waiting() <-chan struct{} { return g.waiting }

func (g *Generator) units(t time.Time) int64 { return floorDiv(t.Sub(g.epoch), g.unit) }

// NextBatch returns n IDs, strictly increasing. See Fill.
func (g *Generator) NextBatch(ctx context.Context, n int) ([]int64, error) {
	if err := checkBatch(n); err != nil {
		return nil, err
	}
	start, err := g.takePositions(ctx, uint64(n))
	if err != nil {
		return nil, err
	}
	ids := make([]int64, n)
	g.stamp(start, ids)
	return ids, nil
}

// Fill fills all of dst with IDs, strictly increasing, without allocating.
// The batch is all or nothing: if it does not fit below the granted mark, Fill
// waits for a Grant until ctx ends and then returns an error wrapping
// ErrWindowExhausted. A batch that would pass the layout's last timestamp
// fails at once with ErrLayoutExhausted.
func (g *Generator) Fill(ctx context.Context, dst []int64) error {
	if err := checkBatch(len(dst)); err != nil {
		return err
	}
	start, err := g.takePositions(ctx, uint64(len(dst)))
	if err != nil {
		return err
	}
	g.stamp(start, dst)
	return nil
}

func checkBatch(n int) error {
	if n <= 0 || n > MaxBatch {
		return fmt.Errorf("%w: %d, want 1..%d", ErrBatchSize, n, MaxBatch)
	}
	return nil
}

// takePositions claims n consecutive positions and returns the first. Stamping the
// IDs happens outside the lock: the range is ours once pos has moved past it.
func (g *Generator) takePositions(ctx context.Context, n uint64) (uint64, error) {
	now := g.units(g.clock.Now())
	g.mu.Lock()
	for {
		if g.revoked != nil {
			err := g.revoked
			g.mu.Unlock()
			return 0, err
		}
		if g.pos+n > g.layoutEnd {
			cursor := g.cursorLocked()
			g.mu.Unlock()
			return 0, fmt.Errorf("%w: layout %s ends at timestamp %d (last ID time %s); a batch of %d after cursor %d does not fit",
				ErrLayoutExhausted, g.layout, g.maxTS, g.layout.LastTime().Format(time.RFC3339), n, cursor)
		}
		// lim is the first position past the window.
		lim := uint64(min(g.granted, g.maxTS)+1) << g.seqBits
		start := g.pos
		cursor := g.cursorLocked()
		// Keep IDs close to real time: when the wall clock is ahead of the
		// cursor, jump to it (at most to granted), but never so far that a
		// batch which fits from the cursor no longer fits.
		if t := min(now, g.granted, g.maxTS); t > cursor {
			j := uint64(t) << g.seqBits
			if j+n > lim && lim >= n {
				j = lim - n
			}
			start = max(start, j)
		}
		if start+n <= lim {
			g.pos = start + n
			g.issued += n
			g.mu.Unlock()
			return start, nil
		}
		granted, changed := g.granted, g.changed
		g.mu.Unlock()

		select {
		case g.waiting <- struct{}{}:
		default:
		}
		select {
		case <-changed:
		case <-ctx.Done():
			need := int64((start + n - 1) >> g.seqBits)
			return 0, fmt.Errorf("%w: slot %d granted up to timestamp %d, cursor at %d, a batch of %d needs up to %d: %w",
				ErrWindowExhausted, g.slot, granted, cursor, n, need, context.Cause(ctx))
		}
		now = g.units(g.clock.Now())
		g.mu.Lock()
	}
}

// stamp writes the IDs for positions start.. into dst: one base per unit,
// then base+i, so the loop body is a single add and store.
func (g *Generator) stamp(start uint64, dst []int64) {
	ts := int64(start >> g.seqBits)
	seq := start & (g.seqPer - 1)
	for len(dst) > 0 {
		k := min(uint64(len(dst)), g.seqPer-seq)
		base := ts<<g.tsShift | g.slotPart | int64(seq)
		chunk := dst[:k]
		for i := range chunk {
			chunk[i] = base + int64(i)
		}
		dst = dst[k:]
		ts++
		seq = 0
	}
}
