package harness

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"sync"
	"time"
)

// SlowdownEnv names the one factor every test timeout and deadline is
// multiplied by: a number above 0, 1 when unset. A loaded or slow machine
// raises it (IDGEN_TEST_SLOWDOWN=2 doubles every wait) instead of each
// test tuning its own constants.
const SlowdownEnv = "IDGEN_TEST_SLOWDOWN"

var slowdown = sync.OnceValue(func() float64 {
	s := os.Getenv(SlowdownEnv)
	if s == "" {
		return 1
	}
	f, err := parseSlowdown(s)
	if err != nil {
		// A typo must not pass as the default unnoticed.
		panic(err)
	}
	return f
})

func parseSlowdown(s string) (float64, error) {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || !(f > 0) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("%s=%q: want a number above 0 (1 when unset)", SlowdownEnv, s)
	}
	return f, nil
}

// Slowdown is the factor IDGEN_TEST_SLOWDOWN sets, 1 when unset; an
// invalid value panics.
func Slowdown() float64 { return slowdown() }

// Scale is d times the slowdown factor: every deadline a test waits on
// goes through it (WaitFor, Proc.Wait, Kill and Stop here do it already).
// It saturates instead of overflowing.
func Scale(d time.Duration) time.Duration {
	return scaleBy(d, Slowdown())
}

func scaleBy(d time.Duration, f float64) time.Duration {
	if f == 1 {
		return d
	}
	s := float64(d) * f
	if s >= math.MaxInt64 {
		return math.MaxInt64
	}
	if s <= math.MinInt64 {
		return math.MinInt64
	}
	return time.Duration(s)
}

// SlowdownNote is "" at the default factor, else " (IDGEN_TEST_SLOWDOWN=f)",
// for the message of a wait that ran out.
func SlowdownNote() string {
	if f := Slowdown(); f != 1 {
		return fmt.Sprintf(" (%s=%g)", SlowdownEnv, f)
	}
	return ""
}
