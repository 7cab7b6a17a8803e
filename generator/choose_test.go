package generator

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// founding is the day the tests below found their clusters on.
var founding = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

func TestParseSpec(t *testing.T) {
	for spec, want := range map[string]Layout{
		"28/2/1/11":                            DefaultLayout(),
		DefaultLayout().String():               DefaultLayout(),
		"35/2/1/11 unit=10ms":                  {Epoch: DefaultEpoch, Unit: 10 * time.Millisecond, TimestampBits: 35, DatacenterBits: 2, MachineBits: 1, SequenceBits: 11},
		"epoch=2026-11-01 30/1/2/11":           {}, // bits come first
		"30/1/2/11 epoch=2026-11-01":           {Epoch: 1793491200, Unit: time.Second, TimestampBits: 30, DatacenterBits: 1, MachineBits: 2, SequenceBits: 11},
		" 41/2/1/12  unit=1ms epoch=1 ":        {Epoch: 1, Unit: time.Millisecond, TimestampBits: 41, DatacenterBits: 2, MachineBits: 1, SequenceBits: 12},
		"30/2/1/11 epoch=2026-05-05T00:00:00Z": {Epoch: DefaultEpoch, Unit: time.Second, TimestampBits: 30, DatacenterBits: 2, MachineBits: 1, SequenceBits: 11},
	} {
		got, err := ParseSpec(spec)
		if want == (Layout{}) {
			if err == nil {
				t.Errorf("ParseSpec(%q) = %s, want an error", spec, got)
			}
			continue
		}
		if err != nil || got != want {
			t.Errorf("ParseSpec(%q) = %s, %v; want %s", spec, got, err, want)
		}
	}
	for spec, msg := range map[string]string{
		"":                    "empty layout",
		"28/2/1":              "want timestamp/datacenter/machine/sequence bits",
		"28/2/x/11":           `"x" is not a bit count`,
		"28/2/1/300":          `"300" is not a bit count`,
		"28/2/1/11 unit=fast": `unit "fast"`,
		"28/2/1/11 epoch=may": `epoch "may"`,
		"28/2/1/11 size=3":    `unexpected "size=3"`,
		"0/2/1/11":            "timestamp needs at least 1 bit",
	} {
		_, err := ParseSpec(spec)
		if !errors.Is(err, ErrInvalidLayout) || !strings.Contains(err.Error(), msg) {
			t.Errorf("ParseSpec(%q) = %v; want ErrInvalidLayout saying %q", spec, err, msg)
		}
	}
}

// CheckNew holds a new cluster's layout to eight slots, 63 bits, a unit of
// 1 ms to 1 s, a past epoch and a year of life; each refusal says what to do.
func TestCheckNew(t *testing.T) {
	for _, spec := range []string{"28/2/1/11", "30/2/1/11", "35/2/1/11 unit=10ms", "41/2/1/12 unit=1ms", "30/0/3/11", "28/3/0/11 unit=1s"} {
		l, err := ParseSpec(spec)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.CheckNew(founding); err != nil {
			t.Errorf("%s: %v", spec, err)
		}
	}
	year := 365 * 24 * time.Hour
	for spec, msg := range map[string]string{
		"28/2/2/11":                  "make 16 slots; a cluster has exactly 8: give datacenter plus machine bits of 3",
		"28/1/1/11":                  "make 4 slots",
		"41/2/1/20 unit=1ms":         "64 bits in all, and an ID must fit 63 (a non-negative int64): take 1 bits off",
		"40/2/1/11 unit=100us":       "unit 100µs is not between 1ms and 1s",
		"28/2/1/11 unit=2s":          "unit 2s is not between 1ms and 1s",
		"28/2/1/11 epoch=2027-01-01": "epoch 2027-01-01T00:00:00Z is in the future",
		"25/2/1/11":                  "less than a year from now: add timestamp bits",
		"28/2/1/11 unit=10ms":        "less than a year from now",
		"40/2/1/11 unit=1s epoch=0":  "do not fit a time.Duration",
		"28/2/1/11 epoch=1500000000": "the timestamp field ends 2026-01-15T00:04:16Z, less than a year from now",
	} {
		l, err := ParseSpec(spec)
		if err == nil {
			err = l.CheckNew(founding)
		}
		if !errors.Is(err, ErrInvalidLayout) || !strings.Contains(err.Error(), msg) {
			t.Errorf("%s: %v; want ErrInvalidLayout saying %q", spec, err, msg)
		}
	}
	// A year and a day of life is enough; a day short of a year is not.
	l, _ := ParseSpec("28/2/1/11")
	if err := l.CheckNew(l.ExhaustedAt().Add(-year - 24*time.Hour)); err != nil {
		t.Errorf("a year and a day before the end: %v", err)
	}
	if err := l.CheckNew(l.ExhaustedAt().Add(-year + 24*time.Hour)); err == nil {
		t.Error("a day short of a year before the end: accepted")
	}
}

// The facts `idctl layout` prints, for the default layout and the 10 ms one
// the process tests run.
func TestLayoutRatesAndCodeLengths(t *testing.T) {
	def := DefaultLayout()
	if got := def.IDsPerSecond(); got != 2048 {
		t.Errorf("default: %v IDs/s per slot, want 2048", got)
	}
	if n := def.CodeLenAt(founding); n != 7 {
		t.Errorf("default: codes of %d characters in 2026, want 7", n)
	}
	at, n, ok := def.CodeGrowth(founding)
	if !ok || n != 8 || at.Format("2006-01-02") != "2033-02-24" {
		t.Errorf("default: codes grow to %d on %s (%v), want 8 on 2033-02-24", n, at, ok)
	}
	if _, _, ok := def.CodeGrowth(at); ok {
		t.Error("default: codes grow past 8 characters, the layout's largest")
	}

	fast, _ := ParseSpec("35/2/1/11 unit=10ms")
	if got := fast.IDsPerSecond(); got != 204800 {
		t.Errorf("10 ms: %v IDs/s per slot, want 204800", got)
	}
	if got := fast.ExhaustedAt().Sub(fast.EpochTime()).Hours() / 24 / 365.25; got < 10.8 || got > 11 {
		t.Errorf("10 ms: %.2f years, want about 10.9", got)
	}
	if fast.Base62Len() != 9 || fast.CodeLenAt(founding) != 8 {
		t.Errorf("10 ms: longest code %d, now %d; want 9 and 8", fast.Base62Len(), fast.CodeLenAt(founding))
	}
	at, n, ok = fast.CodeGrowth(founding)
	if !ok || n != 9 || at.Year() != 2030 {
		t.Errorf("10 ms: codes grow to %d on %s (%v), want 9 in 2030", n, at, ok)
	}
	// CodeLenAt is the length of the largest ID of the unit, as encoded.
	for _, l := range []Layout{def, fast} {
		at, n, _ := l.CodeGrowth(founding)
		for _, tm := range []time.Time{founding, at.Add(-l.Unit), at, at.Add(l.Unit), l.LastTime()} {
			ts := l.Units(tm)
			id, err := l.Compose(ts, l.Slots()-1, l.SequencePerUnit()-1)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := l.CodeLenAt(tm), CodeLen(id); got != want {
				t.Errorf("%s at %s: CodeLenAt %d, largest ID's code %d", l, tm, got, want)
			}
		}
		// Before the growth unit every ID is short; from the next every one is long.
		if l.CodeLenAt(at.Add(-l.Unit)) != n-1 || CodeLen(mustCompose(t, l, l.Units(at)+1, 0, 0)) != n {
			t.Errorf("%s: the growth unit %s does not divide %d- from %d-character codes", l, at, n-1, n)
		}
	}
}

func mustCompose(t *testing.T, l Layout, ts int64, slot int, seq int64) int64 {
	t.Helper()
	id, err := l.Compose(ts, slot, seq)
	if err != nil {
		t.Fatal(err)
	}
	return id
}
