package idclient

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Hedging: grpc-go implements the service config's retryPolicy but not its
// hedgingPolicy, and a retry starts only after a failure. A node that is
// paused or cut off keeps its connection open and never answers, so a call
// to it would wait for its whole deadline. A hedged call starts another
// attempt (the round robin picker sends it to the next node) when the first
// has not answered within the hedge delay; the first good answer wins. A
// second answer only leaves a gap: every batch is minted fresh.
const (
	// DefaultHedgeDelay is how long an attempt may go unanswered before the
	// next one starts; a node answers GetIDBatch in well under a millisecond
	// on a LAN.
	DefaultHedgeDelay = 50 * time.Millisecond
	// DefaultHedgeAttempts bounds the attempts of one call.
	DefaultHedgeAttempts = 3
	// maxHedgeAttempts keeps a misconfigured client from fanning out.
	maxHedgeAttempts = 8
)

// attemptResult is what the balancer should count for an attempt that ended
// with err: a hedged attempt abandoned for slowness is a deadline failure.
func attemptResult(ctx context.Context, err error) error {
	if ctx != nil && errors.Is(context.Cause(ctx), errAttemptTooSlow) {
		return status.Error(codes.DeadlineExceeded, errAttemptTooSlow.Error())
	}
	return err
}

type hedgeResult[T any] struct {
	i   int
	v   T
	err error
}

// hedge runs attempt up to n times: attempt i+1 starts when no attempt has
// succeeded within delay of attempt i's start, or at once when an attempt
// fails with an error retry accepts. The first success wins and the others
// are cancelled. When every attempt fails it returns the last result.
func hedge[T any](ctx context.Context, n int, delay time.Duration, retry func(error) bool,
	attempt func(ctx context.Context) (T, error)) (T, error) {
	results := make(chan hedgeResult[T], n)
	cancels := make([]context.CancelCauseFunc, 0, n)
	starts := make([]time.Time, 0, n)
	defer func() {
		for _, c := range cancels {
			c(errAttemptNotNeeded)
		}
	}()
	launch := func() {
		actx, cancel := context.WithCancelCause(ctx)
		i := len(cancels)
		cancels, starts = append(cancels, cancel), append(starts, time.Now())
		go func() {
			v, err := attempt(actx)
			results <- hedgeResult[T]{i: i, v: v, err: err}
		}()
	}
	launch()
	timer := time.NewTimer(delay)
	defer timer.Stop()
	more := func() bool { return len(cancels) < n && ctx.Err() == nil }
	var last hedgeResult[T]
	for pending := 1; pending > 0; {
		select {
		case r := <-results:
			pending--
			if r.err == nil {
				// Attempts still unanswered after the delay were slow.
				now := time.Now()
				for j, c := range cancels {
					if j != r.i && now.Sub(starts[j]) >= delay {
						c(errAttemptTooSlow)
					}
				}
				return r.v, nil
			}
			last = r
			if !retry(r.err) {
				return r.v, r.err
			}
			if more() {
				launch()
				pending++
				timer.Reset(delay)
			}
		case <-timer.C:
			if more() {
				launch()
				pending++
				timer.Reset(delay)
			}
		}
	}
	return last.v, last.err
}
