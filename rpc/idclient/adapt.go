package idclient

import (
	"math"
	"time"
)

// The pool's lookahead follows the draw rate: it keeps fetched at least the
// draws of one whole fetch that fails (the call timeout) and a second more,
// so that a fetch slowed or failed by one node's fault (a hedge delay, a
// retry's backoff, an election, every attempt waiting) never empties it. A
// fixed lookahead that suits a slow caller runs dry within milliseconds for
// a fast one.
const (
	// lookaheadMargin is added to the call timeout.
	lookaheadMargin = time.Second
	// maxLookahead bounds what a burst can make the pool hold.
	maxLookahead = 64
	// rateWindow is the shortest span a rate is measured over.
	rateWindow = 100 * time.Millisecond
	// rateDecay is how much of the old rate a new window keeps when draws
	// slow down; a faster window replaces it at once.
	rateDecay = 0.8
)

// drawRate estimates IDs drawn per second: up at once, down slowly.
type drawRate struct {
	since time.Time
	drawn int
	rate  float64
}

// perSecond closes the current window if it is long enough and returns the
// estimate.
func (d *drawRate) perSecond(now time.Time) float64 {
	if d.since.IsZero() {
		d.since = now
		return d.rate
	}
	el := now.Sub(d.since)
	if el < rateWindow {
		return d.rate
	}
	inst := float64(d.drawn) / el.Seconds()
	d.rate = max(inst, rateDecay*d.rate+(1-rateDecay)*inst)
	d.since, d.drawn = now, 0
	return d.rate
}

// lookahead is how many batches of batchLen IDs to keep ready besides the
// one being consumed: at least least, enough for horizon of draws.
func (d *drawRate) lookahead(now time.Time, least, batchLen int, horizon time.Duration) int {
	if batchLen <= 0 {
		return least
	}
	need := int(math.Ceil(d.perSecond(now) * horizon.Seconds() / float64(batchLen)))
	return max(least, min(need, maxLookahead))
}
