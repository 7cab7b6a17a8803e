package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idgen/idgen/generator"
	"github.com/idgen/idgen/rpc/idcheck"
	"github.com/idgen/idgen/rpc/idclient"
)

func bindVerify(fs *flag.FlagSet) runner {
	duration := fs.Duration("duration", 10*time.Second, "how long to draw IDs")
	rate := fs.Int("rate", 1000, "IDs per second to draw (calls of --batch IDs, paced)")
	batch := fs.String("batch", "100", "IDs per call; 0 asks for the node's default batch (its prefetch buffer); a comma list is taken in turn, e.g. 120,0")
	concurrency := fs.Int("concurrency", 4, "calls in flight at most")
	callTimeout := fs.Duration("call-timeout", idclient.DefaultCallTimeout, "bound for one call, retries included")
	return func(ctx context.Context, g globals, args []string, e env) error {
		if err := noArgs(args); err != nil {
			return err
		}
		switch {
		case *duration <= 0:
			return usagef("--duration %s must be positive", *duration)
		case *rate <= 0:
			return usagef("--rate %d must be positive", *rate)
		case *concurrency < 1 || *concurrency > 1024:
			return usagef("--concurrency %d out of range 1..1024", *concurrency)
		case *callTimeout <= 0:
			return usagef("--call-timeout %s must be positive", *callTimeout)
		}
		counts, err := parseCounts(*batch)
		if err != nil {
			return err
		}
		if _, err := idclient.TargetAddrs(ctx, g.target); err != nil {
			return usagef("%v", err)
		}
		r, err := idcheck.Verify(ctx, g.target, idcheck.VerifyOptions{
			LoadOptions: idcheck.LoadOptions{
				Duration: *duration, Rate: *rate, Counts: counts, Concurrency: *concurrency, CallTimeout: *callTimeout,
			},
			HistoryTimeout: g.timeout,
			DialOptions:    g.clientOptions(),
		})
		if err != nil {
			return err
		}
		for _, herr := range r.History.Errors {
			fmt.Fprintf(e.stderr, "idctl verify: warning: %s\n", describe(errors.Unwrap(herr)))
		}
		if g.json {
			if err := printJSON(e.stdout, r); err != nil {
				return err
			}
		} else {
			printReport(e, r)
		}
		if !r.OK() {
			return violationError{fmt.Sprintf("%d duplicates, %d containment violations (%d per owner), %d malformed batches",
				r.Duplicates, r.ContainmentViolations, r.OwnerViolations, r.BadBatches)}
		}
		if r.Acknowledged == 0 {
			// Fail closed: a run that saw no ID proves nothing.
			return fmt.Errorf("no ID was acknowledged in %s, so nothing was checked; is the target serving? (see the errors above)", *duration)
		}
		return nil
	}
}

// parseCounts reads --batch: counts in 0..MaxBatch, comma separated.
func parseCounts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 0 || n > generator.MaxBatch {
			return nil, usagef("--batch %q: want counts in 0..%d, comma separated (0: the node's default batch)", s, generator.MaxBatch)
		}
		out = append(out, n)
	}
	return out, nil
}

func printReport(e env, r idcheck.Report) {
	w := e.stdout
	fmt.Fprintf(w, "attempted     %d IDs in %d calls\n", r.Attempted, r.Load.Calls)
	fmt.Fprintf(w, "acknowledged  %d IDs\n", r.Acknowledged)
	fmt.Fprintf(w, "failed        %d IDs in %d calls (maybe issued, never seen)\n", r.Failed, r.Load.FailedCalls)
	fmt.Fprintf(w, "duplicates    %d\n", r.Duplicates)
	fmt.Fprintf(w, "containment   %d violations (%d IDs outside every window of their slot, %d outside every window of the node that served them, %d overlapping tenures, %d disagreeing views)\n",
		r.ContainmentViolations, r.Containment.Outside, r.OwnerViolations, len(r.Containment.Overlaps), len(r.Containment.Disagreements))
	fmt.Fprintf(w, "bad batches   %d (malformed answers the client refused)\n", r.BadBatches)
	slots := make([]string, 0, len(r.PerSlot))
	for s := range r.PerSlot {
		slots = append(slots, s)
	}
	slices.SortFunc(slots, func(a, b string) int { x, _ := strconv.Atoi(a); y, _ := strconv.Atoi(b); return x - y })
	var per []string
	for _, s := range slots {
		per = append(per, fmt.Sprintf("%s=%d", s, r.PerSlot[s]))
	}
	fmt.Fprintf(w, "per slot      %s\n", strings.Join(per, " "))
	fmt.Fprintf(w, "largest gap   %s\n", time.Duration(r.LargestGapMS)*time.Millisecond)
	fmt.Fprintf(w, "success rate  %.4f\n", r.SuccessRate)
	fmt.Fprintf(w, "duration      %s\n", time.Duration(r.DurationMS)*time.Millisecond)
	fmt.Fprintf(w, "history       %d tenures from %d nodes, layout %s\n", len(r.History.Tenures), r.History.Answered, r.History.Layout)
	for _, err := range r.Errors {
		fmt.Fprintf(w, "error         %s\n", err)
	}
	for _, id := range r.DuplicateExamples {
		fmt.Fprintf(w, "DUPLICATE     %d (%s)\n", id, generator.Encode(id))
	}
	for _, ex := range r.Containment.Examples {
		fmt.Fprintf(w, "OUTSIDE       %s\n", ex)
	}
	for _, o := range r.Containment.Overlaps {
		fmt.Fprintf(w, "OVERLAP       %s\n", o)
	}
	for _, d := range r.Containment.Disagreements {
		fmt.Fprintf(w, "DISAGREE      %s\n", d)
	}
	for _, b := range r.BadBatchExamples {
		fmt.Fprintf(w, "BAD BATCH     %s\n", b)
	}
	verdict := "OK: no duplicates, no malformed batch, every ID inside a window granted to the node that served it"
	if !r.OK() {
		verdict = "FAILED"
	}
	fmt.Fprintln(w, verdict)
}
