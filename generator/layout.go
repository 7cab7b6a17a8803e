package generator

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// Default layout (README, "The ID layout and its true limits"): 28 bits of whole seconds since 2026-05-05T00:00:00Z,
// 2 datacenter bits, 1 machine bit, 11 sequence bits.
const (
	DefaultEpoch          int64         = 1777939200
	DefaultUnit           time.Duration = time.Second
	DefaultTimestampBits  uint8         = 28
	DefaultDatacenterBits uint8         = 2
	DefaultMachineBits    uint8         = 1
	DefaultSequenceBits   uint8         = 11
)

// Layout describes how an ID's bits are split. From the most significant bit:
// timestamp (units since Epoch), datacenter, machine, sequence. It is a plain
// value: comparable with == and stored as JSON in the Raft log, so it holds no
// derived fields.
type Layout struct {
	Epoch          int64         `json:"epoch"` // Unix seconds
	Unit           time.Duration `json:"unit"`
	TimestampBits  uint8         `json:"timestamp_bits"`
	DatacenterBits uint8         `json:"datacenter_bits"`
	MachineBits    uint8         `json:"machine_bits"`
	SequenceBits   uint8         `json:"sequence_bits"`
}

// Parts is an ID taken apart by Layout.Decompose.
type Parts struct {
	ID         int64
	Timestamp  int64 // units since the layout's epoch
	Datacenter int
	Machine    int
	Slot       int // Datacenter<<MachineBits | Machine
	Sequence   int64
	Time       time.Time // wall time the timestamp stands for (UTC)
}

// DefaultLayout returns the spec's layout: 28/2/1/11, 1 s unit, epoch 1777939200.
func DefaultLayout() Layout {
	return Layout{
		Epoch:          DefaultEpoch,
		Unit:           DefaultUnit,
		TimestampBits:  DefaultTimestampBits,
		DatacenterBits: DefaultDatacenterBits,
		MachineBits:    DefaultMachineBits,
		SequenceBits:   DefaultSequenceBits,
	}
}

// NewLayout builds and validates a layout.
func NewLayout(epoch int64, unit time.Duration, ts, dc, m, seq uint8) (Layout, error) {
	l := Layout{Epoch: epoch, Unit: unit, TimestampBits: ts, DatacenterBits: dc, MachineBits: m, SequenceBits: seq}
	if err := l.Validate(); err != nil {
		return Layout{}, err
	}
	return l, nil
}

// Validate reports whether the layout is usable: at least one timestamp and
// one sequence bit, at most 63 bits in all (IDs stay non-negative int64s), a
// positive unit, and a timestamp range whose length fits a time.Duration
// (about 292 years), so that every timestamp maps to a wall time exactly.
func (l Layout) Validate() error {
	switch {
	case l.TimestampBits == 0:
		return fmt.Errorf("%w: %s: timestamp needs at least 1 bit", ErrInvalidLayout, l)
	case l.SequenceBits == 0:
		return fmt.Errorf("%w: %s: sequence needs at least 1 bit", ErrInvalidLayout, l)
	case l.totalBits() > 63:
		return fmt.Errorf("%w: %s: %d bits in all, at most 63 fit a non-negative int64", ErrInvalidLayout, l, l.totalBits())
	case l.Unit <= 0:
		return fmt.Errorf("%w: %s: unit must be positive", ErrInvalidLayout, l)
	case l.TimestampBits >= 63 || int64(l.Unit) > math.MaxInt64>>l.TimestampBits:
		return fmt.Errorf("%w: %s: 2^%d units of %s do not fit a time.Duration", ErrInvalidLayout, l, l.TimestampBits, l.Unit)
	}
	return nil
}

func (l Layout) totalBits() int {
	return int(l.TimestampBits) + int(l.DatacenterBits) + int(l.MachineBits) + int(l.SequenceBits)
}

// String renders the layout as "ts/dc/m/seq unit=… epoch=…".
func (l Layout) String() string {
	return fmt.Sprintf("%d/%d/%d/%d unit=%s epoch=%d",
		l.TimestampBits, l.DatacenterBits, l.MachineBits, l.SequenceBits, l.Unit, l.Epoch)
}

// ParseLayout reads a layout as String writes it:
// "28/2/1/11 unit=1s epoch=1777939200". The result is validated (NewLayout).
func ParseLayout(s string) (Layout, error) {
	var ts, dc, m, seq uint8
	var unit string
	var epoch int64
	if _, err := fmt.Sscanf(strings.TrimSpace(s), "%d/%d/%d/%d unit=%s epoch=%d", &ts, &dc, &m, &seq, &unit, &epoch); err != nil {
		return Layout{}, fmt.Errorf("layout %q: want \"ts/dc/m/seq unit=D epoch=N\": %w", s, err)
	}
	u, err := time.ParseDuration(unit)
	if err != nil {
		return Layout{}, fmt.Errorf("layout %q: unit: %w", s, err)
	}
	return NewLayout(epoch, u, ts, dc, m, seq)
}

// Slots is the number of generators that can run at once: 1<<(dc+m bits).
func (l Layout) Slots() int { return 1 << (l.DatacenterBits + l.MachineBits) }

// SequencePerUnit is how many IDs one slot may stamp per time unit.
func (l Layout) SequencePerUnit() int64 { return 1 << l.SequenceBits }

// MaxTimestamp is the largest timestamp the layout can hold.
func (l Layout) MaxTimestamp() int64 { return 1<<l.TimestampBits - 1 }

// MaxID is the largest ID the layout can hold.
func (l Layout) MaxID() int64 { return int64(uint64(1)<<l.totalBits() - 1) }

// EpochTime is the wall time of timestamp 0.
func (l Layout) EpochTime() time.Time { return time.Unix(l.Epoch, 0).UTC() }

// Units returns floor((t - epoch) / unit): the timestamp t falls in. It is
// negative before the epoch and may exceed MaxTimestamp.
func (l Layout) Units(t time.Time) int64 {
	return floorDiv(t.Sub(l.EpochTime()), l.Unit)
}

func floorDiv(d, unit time.Duration) int64 {
	q := d / unit
	if d%unit < 0 {
		q--
	}
	return int64(q)
}

// Time returns the wall time (UTC) at which timestamp ts begins.
func (l Layout) Time(ts int64) time.Time {
	return l.EpochTime().Add(time.Duration(ts) * l.Unit)
}

// LastTime is the wall time of the last timestamp the layout can hold.
func (l Layout) LastTime() time.Time { return l.Time(l.MaxTimestamp()) }

// ExhaustedAt is the wall time from which the layout cannot stamp any ID.
func (l Layout) ExhaustedAt() time.Time { return l.Time(l.MaxTimestamp() + 1) }

// Base62Len is the number of base62 characters the layout's largest ID needs.
func (l Layout) Base62Len() int { return len(Encode(l.MaxID())) }

func (l Layout) tsShift() uint8 { return l.DatacenterBits + l.MachineBits + l.SequenceBits }

// Compose builds an ID from a timestamp, a slot and a sequence number.
func (l Layout) Compose(ts int64, slot int, seq int64) (int64, error) {
	if ts < 0 || ts > l.MaxTimestamp() {
		return 0, fmt.Errorf("%w: timestamp %d not in 0..%d", ErrOutOfLayout, ts, l.MaxTimestamp())
	}
	if slot < 0 || slot >= l.Slots() {
		return 0, fmt.Errorf("%w: %d not in 0..%d", ErrInvalidSlot, slot, l.Slots()-1)
	}
	if seq < 0 || seq >= l.SequencePerUnit() {
		return 0, fmt.Errorf("%w: sequence %d not in 0..%d", ErrOutOfLayout, seq, l.SequencePerUnit()-1)
	}
	return ts<<l.tsShift() | int64(slot)<<l.SequenceBits | seq, nil
}

// Decompose takes an ID apart. Negative IDs and IDs wider than the layout are errors.
func (l Layout) Decompose(id int64) (Parts, error) {
	if id < 0 || id > l.MaxID() {
		return Parts{}, fmt.Errorf("%w: id %d not in 0..%d for layout %s", ErrOutOfLayout, id, l.MaxID(), l)
	}
	ts := id >> l.tsShift()
	slot := int(id>>l.SequenceBits) & (l.Slots() - 1)
	return Parts{
		ID:         id,
		Timestamp:  ts,
		Datacenter: slot >> l.MachineBits,
		Machine:    slot & (1<<l.MachineBits - 1),
		Slot:       slot,
		Sequence:   id & (l.SequencePerUnit() - 1),
		Time:       l.Time(ts),
	}, nil
}
