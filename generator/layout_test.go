package generator

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"pgregory.net/rapid"
)

func TestDefaultLayoutFacts(t *testing.T) {
	l := DefaultLayout()
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	if got, want := l.String(), "28/2/1/11 unit=1s epoch=1777939200"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if l.Slots() != 8 || l.SequencePerUnit() != 2048 || l.MaxTimestamp() != 1<<28-1 {
		t.Errorf("Slots/SequencePerUnit/MaxTimestamp = %d/%d/%d", l.Slots(), l.SequencePerUnit(), l.MaxTimestamp())
	}
	if got := l.EpochTime(); !got.Equal(time.Date(2026, 5, 5, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("EpochTime() = %s", got)
	}
	if got, want := l.ExhaustedAt(), time.Date(2034, 11, 5, 21, 24, 16, 0, time.UTC); !got.Equal(want) {
		t.Errorf("ExhaustedAt() = %s, want %s", got, want)
	}
	if got, want := l.LastTime(), time.Date(2034, 11, 5, 21, 24, 15, 0, time.UTC); !got.Equal(want) {
		t.Errorf("LastTime() = %s, want %s", got, want)
	}
	if l.Base62Len() != 8 {
		t.Errorf("Base62Len() = %d, want 8 (42 bits > 62^7)", l.Base62Len())
	}
}

// generator/README.md's layout section: codes stay at 7 characters until the timestamp passes 214,942,297
// (about 2033-02-24); 62^7 falls inside that second.
func TestSevenCharacterCodesEnd(t *testing.T) {
	l := DefaultLayout()
	const last7 = 214_942_297
	mustLen := func(ts int64, slot int, seq int64, want int) {
		t.Helper()
		id, err := l.Compose(ts, slot, seq)
		if err != nil {
			t.Fatal(err)
		}
		if got := len(Encode(id)); got != want {
			t.Errorf("ts=%d slot=%d seq=%d: %q has %d chars, want %d", ts, slot, seq, Encode(id), got, want)
		}
	}
	mustLen(last7-1, 7, 2047, 7) // largest ID of the second before: 7
	mustLen(last7, 0, 0, 7)      // the second itself starts at 7 ...
	mustLen(last7, 7, 2047, 8)   // ... and ends at 8
	mustLen(last7+1, 0, 0, 8)    // every later ID: 8
	if d := l.Time(last7); d.Format("2006-01-02") != "2033-02-24" {
		t.Errorf("Time(%d) = %s, want 2033-02-24", last7, d)
	}
}

func TestLayoutValidate(t *testing.T) {
	ok := func(ts, dc, m, seq uint8, unit time.Duration) {
		t.Helper()
		if _, err := NewLayout(0, unit, ts, dc, m, seq); err != nil {
			t.Errorf("%d/%d/%d/%d unit=%s: %v", ts, dc, m, seq, unit, err)
		}
	}
	bad := func(ts, dc, m, seq uint8, unit time.Duration) {
		t.Helper()
		_, err := NewLayout(0, unit, ts, dc, m, seq)
		if !errors.Is(err, ErrInvalidLayout) {
			t.Errorf("%d/%d/%d/%d unit=%s: err = %v, want ErrInvalidLayout", ts, dc, m, seq, unit, err)
		}
	}
	ok(28, 2, 1, 11, time.Second)
	ok(41, 5, 5, 12, time.Millisecond) // classic Snowflake: 41 bits of ms
	ok(1, 0, 0, 1, time.Nanosecond)
	bad(0, 2, 1, 11, time.Second)
	bad(28, 2, 1, 0, time.Second)
	bad(40, 10, 10, 4, time.Millisecond) // 64 bits
	bad(28, 2, 1, 11, 0)
	bad(28, 2, 1, 11, -time.Second)
	bad(40, 2, 1, 11, time.Second) // 2^40 s does not fit a Duration
}

func TestLayoutJSONRoundTrip(t *testing.T) {
	l := DefaultLayout()
	b, err := json.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	var back Layout
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back != l {
		t.Errorf("round trip of %s gave %s (json %s)", l, back, b)
	}
}

func TestUnitsFloorsBeforeEpoch(t *testing.T) {
	l := DefaultLayout()
	e := l.EpochTime()
	cases := []struct {
		t    time.Time
		want int64
	}{
		{e, 0},
		{e.Add(999 * time.Millisecond), 0},
		{e.Add(time.Second), 1},
		{e.Add(-time.Nanosecond), -1},
		{e.Add(-time.Second), -1},
		{e.Add(-1001 * time.Millisecond), -2},
	}
	for _, c := range cases {
		if got := l.Units(c.t); got != c.want {
			t.Errorf("Units(%s) = %d, want %d", c.t, got, c.want)
		}
	}
	if got := l.Units(l.Time(12345)); got != 12345 {
		t.Errorf("Units(Time(12345)) = %d", got)
	}
}

func TestComposeDecomposeRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		seqBits := rapid.Uint8Range(1, 20).Draw(t, "seq")
		dc := rapid.Uint8Range(0, 5).Draw(t, "dc")
		m := rapid.Uint8Range(0, 5).Draw(t, "m")
		ts := rapid.Uint8Range(1, 30).Draw(t, "ts")
		l, err := NewLayout(1777939200, time.Second, ts, dc, m, seqBits)
		if err != nil {
			t.Fatal(err)
		}
		stamp := rapid.Int64Range(0, l.MaxTimestamp()).Draw(t, "stamp")
		slot := rapid.IntRange(0, l.Slots()-1).Draw(t, "slot")
		seq := rapid.Int64Range(0, l.SequencePerUnit()-1).Draw(t, "seqv")
		id, err := l.Compose(stamp, slot, seq)
		if err != nil {
			t.Fatal(err)
		}
		p, err := l.Decompose(id)
		if err != nil {
			t.Fatal(err)
		}
		if p.ID != id || p.Timestamp != stamp || p.Slot != slot || p.Sequence != seq ||
			p.Datacenter != slot>>m || p.Machine != slot&(1<<m-1) || !p.Time.Equal(l.Time(stamp)) {
			t.Fatalf("Decompose(%d) = %+v, want ts=%d slot=%d seq=%d", id, p, stamp, slot, seq)
		}
	})
}

func TestComposeDecomposeErrors(t *testing.T) {
	l := DefaultLayout()
	if _, err := l.Compose(-1, 0, 0); !errors.Is(err, ErrOutOfLayout) {
		t.Errorf("negative ts: %v", err)
	}
	if _, err := l.Compose(l.MaxTimestamp()+1, 0, 0); !errors.Is(err, ErrOutOfLayout) {
		t.Errorf("ts past max: %v", err)
	}
	if _, err := l.Compose(1, 8, 0); !errors.Is(err, ErrInvalidSlot) {
		t.Errorf("slot 8: %v", err)
	}
	if _, err := l.Compose(1, 0, 2048); !errors.Is(err, ErrOutOfLayout) {
		t.Errorf("seq 2048: %v", err)
	}
	if _, err := l.Decompose(-1); !errors.Is(err, ErrOutOfLayout) {
		t.Errorf("negative id: %v", err)
	}
	if _, err := l.Decompose(1 << 42); !errors.Is(err, ErrOutOfLayout) {
		t.Errorf("43-bit id: %v", err)
	}
	// datacenter 2, machine 1 -> slot 5; the spec's shifts: dc at 12, m at 11, ts at 14.
	id, _ := l.Compose(3, 5, 7)
	if want := int64(3<<14 | 2<<12 | 1<<11 | 7); id != want {
		t.Errorf("Compose(3,5,7) = %d, want %d", id, want)
	}
	p, _ := l.Decompose(id)
	if p.Datacenter != 2 || p.Machine != 1 {
		t.Errorf("Decompose: dc=%d m=%d, want 2 1", p.Datacenter, p.Machine)
	}
}

func TestParseLayoutRoundTrip(t *testing.T) {
	l := DefaultLayout()
	got, err := ParseLayout(l.String())
	if err != nil || got != l {
		t.Fatalf("ParseLayout(%q) = %+v, %v", l.String(), got, err)
	}
	other, _ := NewLayout(1700000000, 10*time.Millisecond, 34, 2, 1, 8)
	if got, err := ParseLayout(other.String()); err != nil || got != other {
		t.Fatalf("ParseLayout(%q) = %+v, %v", other.String(), got, err)
	}
	if _, err := ParseLayout("28/2/1 unit=1s"); err == nil {
		t.Fatal("short layout accepted")
	}
}
