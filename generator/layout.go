package generator

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Default layout (generator/README.md, "The ID layout and its true limits"): 28 bits of whole seconds since 2026-05-05T00:00:00Z,
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
		return fmt.Errorf("%w: %s: %d bits in all, and an ID must fit 63 (a non-negative int64): take %d bits off the timestamp or the sequence",
			ErrInvalidLayout, l, l.totalBits(), l.totalBits()-63)
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

// Bounds a layout must keep to found a cluster (CheckNew). A cluster has
// exactly ClusterSlots generators; its unit lies between MinUnit and MaxUnit;
// its timestamp field lasts at least MinLifetime from the founding.
const (
	ClusterSlots = 8
	MinUnit      = time.Millisecond
	MaxUnit      = time.Second
	MinLifetime  = 365 * 24 * time.Hour
)

// CheckNew reports whether a cluster founded at now may take the layout:
// Validate's checks, and datacenter plus machine bits that make exactly
// ClusterSlots slots, a unit from MinUnit to MaxUnit, an epoch not after now
// and a timestamp field that lasts at least MinLifetime past now. Each error
// says what to change.
func (l Layout) CheckNew(now time.Time) error {
	if l.DatacenterBits+l.MachineBits != 3 {
		return fmt.Errorf("%w: %s: %d datacenter and %d machine bits make %d slots; a cluster has exactly %d: "+
			"give datacenter plus machine bits of 3 (2/1, 1/2, 3/0 or 0/3)",
			ErrInvalidLayout, l, l.DatacenterBits, l.MachineBits, 1<<(l.DatacenterBits+l.MachineBits), ClusterSlots)
	}
	if l.Unit < MinUnit || l.Unit > MaxUnit {
		return fmt.Errorf("%w: %s: unit %s is not between %s and %s", ErrInvalidLayout, l, l.Unit, MinUnit, MaxUnit)
	}
	if err := l.Validate(); err != nil {
		return err
	}
	if l.EpochTime().After(now) {
		return fmt.Errorf("%w: %s: epoch %s is in the future, and nothing can be minted before it: take a date in the past (today's is %s)",
			ErrInvalidLayout, l, l.EpochTime().Format(time.RFC3339), now.UTC().Format("2006-01-02"))
	}
	if end := l.ExhaustedAt(); end.Before(now.Add(MinLifetime)) {
		return fmt.Errorf("%w: %s: the timestamp field ends %s, less than a year from now: "+
			"add timestamp bits (each one doubles the lifetime), take a longer unit or a later epoch",
			ErrInvalidLayout, l, end.Format(time.RFC3339))
	}
	return nil
}

// ParseBits reads the bit widths of a layout written "ts/dc/m/seq", such as
// "28/2/1/11". The widths are not checked against each other (NewLayout does).
func ParseBits(s string) (ts, dc, m, seq uint8, err error) {
	parts := strings.Split(strings.TrimSpace(s), "/")
	if len(parts) != 4 {
		return 0, 0, 0, 0, fmt.Errorf("%w: %q: want timestamp/datacenter/machine/sequence bits, such as 28/2/1/11", ErrInvalidLayout, s)
	}
	var v [4]uint8
	for i, p := range parts {
		n, perr := strconv.ParseUint(strings.TrimSpace(p), 10, 8)
		if perr != nil || n > 63 {
			return 0, 0, 0, 0, fmt.Errorf("%w: %q: %q is not a bit count 0..63; want timestamp/datacenter/machine/sequence bits, such as 28/2/1/11",
				ErrInvalidLayout, s, p)
		}
		v[i] = uint8(n)
	}
	return v[0], v[1], v[2], v[3], nil
}

// ParseEpoch reads an epoch as Unix seconds ("1777939200"), a date
// ("2026-05-05", midnight UTC) or an RFC 3339 time ("2026-05-05T00:00:00Z").
func ParseEpoch(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return n, nil
	}
	for _, f := range []string{"2006-01-02", time.RFC3339} {
		if t, err := time.Parse(f, s); err == nil {
			return t.Unix(), nil
		}
	}
	return 0, fmt.Errorf("%w: epoch %q: want Unix seconds, a date (2026-05-05) or an RFC 3339 time (2026-05-05T00:00:00Z)", ErrInvalidLayout, s)
}

// ParseSpec reads a layout as an operator writes it: "ts/dc/m/seq",
// optionally followed by "unit=D" (default 1s) and "epoch=E" (Unix seconds,
// a date or an RFC 3339 time; default DefaultEpoch), in any order, such as
// "35/2/1/11 unit=10ms". String's output reads back. The result is
// validated (Validate); CheckNew is the caller's.
func ParseSpec(spec string) (Layout, error) {
	fields := strings.Fields(spec)
	if len(fields) == 0 {
		return Layout{}, fmt.Errorf("%w: empty layout; want ts/dc/m/seq [unit=D] [epoch=E], such as 28/2/1/11 unit=1s", ErrInvalidLayout)
	}
	ts, dc, m, seq, err := ParseBits(fields[0])
	if err != nil {
		return Layout{}, err
	}
	unit, epoch := DefaultUnit, DefaultEpoch
	for _, f := range fields[1:] {
		k, v, ok := strings.Cut(f, "=")
		switch {
		case ok && k == "unit":
			if unit, err = time.ParseDuration(v); err != nil {
				return Layout{}, fmt.Errorf("%w: %q: unit %q: want a duration such as 10ms or 1s", ErrInvalidLayout, spec, v)
			}
		case ok && k == "epoch":
			if epoch, err = ParseEpoch(v); err != nil {
				return Layout{}, err
			}
		default:
			return Layout{}, fmt.Errorf("%w: %q: unexpected %q; want ts/dc/m/seq [unit=D] [epoch=E]", ErrInvalidLayout, spec, f)
		}
	}
	return NewLayout(epoch, unit, ts, dc, m, seq)
}

// IDsPerSecond is how many IDs one slot may stamp per second of clock time.
func (l Layout) IDsPerSecond() float64 {
	return float64(l.SequencePerUnit()) * float64(time.Second) / float64(l.Unit)
}

// CodeLenAt is the length of the code (plain base62 or a Codec's) of the
// largest ID stamped at t: every ID of the units before t's has at most as
// many characters. Times past the layout's end count as its last unit.
func (l Layout) CodeLenAt(t time.Time) int {
	ts := min(max(l.Units(t), 0), l.MaxTimestamp())
	return CodeLen(ts<<l.tsShift() | int64(l.Slots()-1)<<l.SequenceBits | (l.SequencePerUnit() - 1))
}

// CodeGrowth is when codes next get longer after t: the start of the first
// unit whose IDs need more than CodeLenAt(t) characters, and that length.
// ok is false when the layout ends first.
func (l Layout) CodeGrowth(t time.Time) (at time.Time, length int, ok bool) {
	n := l.CodeLenAt(t)
	if n >= l.Base62Len() || n >= 11 {
		return time.Time{}, 0, false
	}
	// The first ID with n+1 characters is 62^n, in unit 62^n >> shift.
	first := int64(1)
	for range n {
		first *= 62
	}
	return l.Time(first >> l.tsShift()), n + 1, true
}
