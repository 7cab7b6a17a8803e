package harness

import (
	"math"
	"testing"
	"time"
)

func TestSlowdownParseAndScale(t *testing.T) {
	for in, want := range map[string]float64{"1": 1, "2": 2, "1.5": 1.5, "0.5": 0.5} {
		if f, err := parseSlowdown(in); err != nil || f != want {
			t.Errorf("parseSlowdown(%q) = %v, %v; want %v", in, f, err, want)
		}
	}
	for _, in := range []string{"", "x", "0", "-1", "NaN", "Inf", "2s"} {
		if _, err := parseSlowdown(in); err == nil {
			t.Errorf("parseSlowdown(%q) accepted", in)
		}
	}
	for _, c := range []struct {
		d    time.Duration
		f    float64
		want time.Duration
	}{
		{10 * time.Second, 1, 10 * time.Second},
		{10 * time.Second, 2.5, 25 * time.Second},
		{10 * time.Second, 0.5, 5 * time.Second},
		{math.MaxInt64 / 2, 3, math.MaxInt64},
	} {
		if got := scaleBy(c.d, c.f); got != c.want {
			t.Errorf("scaleBy(%v, %v) = %v, want %v", c.d, c.f, got, c.want)
		}
	}
	if Scale(time.Second) != scaleBy(time.Second, Slowdown()) {
		t.Errorf("Scale does not use Slowdown()")
	}
}
