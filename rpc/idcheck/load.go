package idcheck

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idgen/idgen/generator"
	"github.com/idgen/idgen/rpc/idclient"
)

// LoadOptions configures RunLoad. Zero values take the defaults.
type LoadOptions struct {
	// Duration of the load; required.
	Duration time.Duration
	// Rate in IDs per second; required.
	Rate int
	// Counts are the counts asked per call, taken in turn (default [100]).
	// 0 asks for the node's default batch, which nodes serve from their
	// prefetch buffer: the path an idclient.Pool with BatchSize 0 draws from.
	Counts []int
	// Concurrency is the number of calls in flight at most (default 4).
	Concurrency int
	// CallTimeout bounds one call, retries included (default idclient.DefaultCallTimeout).
	CallTimeout time.Duration
}

// LoadStats counts what RunLoad did. IDs asked for in a failed call are
// "maybe issued, never seen": they count as failed, not as an error of the
// check (a count-0 call that failed counts the node's default batch as last
// seen). Malformed batches count as failed calls here; the Checker keeps them.
type LoadStats struct {
	Calls, FailedCalls int64
	// AttemptedIDs = AcknowledgedIDs + FailedIDs.
	AttemptedIDs, AcknowledgedIDs, FailedIDs int64
	// LargestGap is the longest time without a successful call, counting
	// from the start and to the end of the run.
	LargestGap time.Duration
	Elapsed    time.Duration
	// Errors holds up to ten distinct error strings of failed calls.
	Errors []string
}

// SuccessRate is AcknowledgedIDs / AttemptedIDs (1 when nothing was attempted).
func (s LoadStats) SuccessRate() float64 {
	if s.AttemptedIDs == 0 {
		return 1
	}
	return float64(s.AcknowledgedIDs) / float64(s.AttemptedIDs)
}

func (o *LoadOptions) withDefaults() (LoadOptions, error) {
	out := *o
	if len(out.Counts) == 0 {
		out.Counts = []int{100}
	}
	if out.Concurrency == 0 {
		out.Concurrency = 4
	}
	if out.CallTimeout == 0 {
		out.CallTimeout = idclient.DefaultCallTimeout
	}
	switch {
	case out.Duration <= 0:
		return out, fmt.Errorf("idcheck: load duration %s must be positive", out.Duration)
	case out.Rate <= 0:
		return out, fmt.Errorf("idcheck: load rate %d IDs/s must be positive", out.Rate)
	case out.Concurrency < 1 || out.Concurrency > 1024:
		return out, fmt.Errorf("idcheck: concurrency %d not in 1..1024", out.Concurrency)
	case out.CallTimeout < 0:
		return out, fmt.Errorf("idcheck: call timeout %s is negative", out.CallTimeout)
	}
	for _, n := range out.Counts {
		if n < 0 || n > generator.MaxBatch {
			return out, fmt.Errorf("idcheck: count %d not in 0..%d (0: the node's default batch)", n, generator.MaxBatch)
		}
	}
	return out, nil
}

// assumedDefaultBatch paces count-0 calls until a node's answer shows its
// default batch size (idgend's --batch-size default).
const assumedDefaultBatch = 1000

// RunLoad calls the nodes for opts.Duration at about opts.Rate IDs a second
// and records every acknowledged ID in checker, by the node that served it,
// and every malformed batch as evidence. Calls are paced, never more than
// opts.Concurrency at once; when the nodes are slower than the rate, due
// calls are skipped rather than queued, so a stall is not followed by a
// burst. It stops by itself after the duration, or earlier when ctx ends.
func RunLoad(ctx context.Context, client *idclient.Client, checker *Checker, opts LoadOptions) (LoadStats, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return LoadStats{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, o.Duration)
	defer cancel()

	var (
		mu          sync.Mutex
		st          LoadStats
		start       = time.Now()
		lastSuccess = start
		seenErr     = map[string]bool{}
		defaultSize atomic.Int64
	)
	defaultSize.Store(assumedDefaultBatch)
	expect := func(count int) int64 { // IDs a call of count should bring
		if count == 0 {
			return defaultSize.Load()
		}
		return int64(count)
	}
	// issued is the IDs the calls issued (or skipped) so far should bring; a
	// count-0 answer corrects it by what its batch really held.
	var issued atomic.Int64
	type call struct {
		count  int
		expect int64
	}
	tokens := make(chan call, o.Concurrency)
	go func() {
		defer close(tokens)
		var sum int64
		for _, n := range o.Counts {
			sum += expect(n)
		}
		interval := time.Duration(float64(time.Second) * float64(sum) / float64(len(o.Counts)) / float64(o.Rate))
		tick := time.NewTicker(min(max(interval, time.Millisecond), 100*time.Millisecond))
		defer tick.Stop()
		for i := 0; ; {
			select {
			case <-ctx.Done():
				return
			case now := <-tick.C:
				for float64(issued.Load()) <= float64(o.Rate)*now.Sub(start).Seconds() {
					c := call{count: o.Counts[i%len(o.Counts)]}
					c.expect = expect(c.count)
					i++
					select {
					case tokens <- c:
					default: // every worker busy: skip, do not queue
					}
					issued.Add(c.expect)
				}
			}
		}
	}()

	var wg sync.WaitGroup
	for range o.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := range tokens {
				cctx, ccancel := context.WithTimeout(context.Background(), o.CallTimeout)
				b, err := client.FetchBatch(cctx, c.count)
				ccancel()
				switch {
				case err == nil:
					checker.Add(checkerKey(b), b.IDs)
					if c.count == 0 {
						defaultSize.Store(int64(len(b.IDs)))
						issued.Add(int64(len(b.IDs)) - c.expect)
					}
				case errors.Is(err, idclient.ErrBadBatch):
					checker.AddBad(b, c.count, err)
				}
				mu.Lock()
				st.Calls++
				if err != nil {
					st.FailedCalls++
					st.FailedIDs += c.expect
					st.AttemptedIDs += c.expect
					msg := err.Error()
					if !seenErr[msg] && len(st.Errors) < maxExamples {
						seenErr[msg] = true
						st.Errors = append(st.Errors, msg)
					}
				} else {
					now := time.Now()
					st.LargestGap = max(st.LargestGap, now.Sub(lastSuccess))
					lastSuccess = now
					st.AcknowledgedIDs += int64(len(b.IDs))
					st.AttemptedIDs += int64(len(b.IDs))
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	end := time.Now()
	st.LargestGap = max(st.LargestGap, end.Sub(lastSuccess))
	st.Elapsed = end.Sub(start)
	return st, nil
}
