package harness

import (
	"context"
	"time"
)

// Pace calls draw perSecond times a second, a millisecond's share at a
// time, until ctx ends: a draw that stalls delays the ones behind it, which
// then run at once (a client's backlog). Each draw gets its own deadline of
// limit. The chaos runs' probes and the rolling upgrade's load pace their
// draws with it.
func Pace(ctx context.Context, perSecond int, limit time.Duration, draw func(context.Context)) {
	start := time.Now()
	owed := 0.0
	for step := 1; ctx.Err() == nil; step++ {
		if w := time.Until(start.Add(time.Duration(step) * time.Millisecond)); w > 0 {
			t := time.NewTimer(w)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return
			}
		}
		for owed += float64(perSecond) / 1000; owed >= 1 && ctx.Err() == nil; owed-- {
			dctx, cancel := context.WithTimeout(ctx, limit)
			draw(dctx)
			cancel()
		}
	}
}
