package idcheck

import (
	"context"
	"fmt"
	"time"

	"github.com/idgen/idgen/rpc/idclient"
)

// Report is the outcome of Verify; its JSON form is what `idctl verify
// --json` prints. attempted, acknowledged and failed count IDs
// (attempted = acknowledged + failed; failed IDs were asked for in calls that
// failed: maybe issued, never seen). containment_violations counts every
// failed containment check; owner_violations is its part of IDs served by a
// node outside that node's own windows. bad_batches counts malformed
// answers the client refused (bad_batch_examples describes up to ten).
type Report struct {
	Attempted             int64          `json:"attempted"`
	Acknowledged          int64          `json:"acknowledged"`
	Failed                int64          `json:"failed"`
	Duplicates            int            `json:"duplicates"`
	ContainmentViolations int            `json:"containment_violations"`
	OwnerViolations       int            `json:"owner_violations"`
	BadBatches            int            `json:"bad_batches"`
	BadBatchExamples      []string       `json:"bad_batch_examples"`
	PerSlot               map[string]int `json:"per_slot"`
	LargestGapMS          int64          `json:"largest_gap_ms"`
	SuccessRate           float64        `json:"success_rate"`
	DurationMS            int64          `json:"duration_ms"`
	Errors                []string       `json:"errors"`

	// Details for people; not part of the JSON contract.
	Load              LoadStats   `json:"-"`
	DuplicateExamples []int64     `json:"-"`
	Containment       Containment `json:"-"`
	History           History     `json:"-"`
}

// OK reports whether the run found no duplicate, no containment violation
// and no malformed batch.
func (r Report) OK() bool {
	return r.Duplicates == 0 && r.ContainmentViolations == 0 && r.BadBatches == 0
}

// VerifyOptions configures Verify.
type VerifyOptions struct {
	LoadOptions
	// HistoryTimeout bounds each node's History, Members and Status calls
	// (default 5 s).
	HistoryTimeout time.Duration
	// DialOptions are passed to idclient.Dial, and their TLS settings to the
	// History, Members and Status calls.
	DialOptions []idclient.Option
}

// Verify loads target through the client library, then checks the
// acknowledged IDs for duplicates, and each one against the grant history of
// every node in target: inside a window of its slot, and of the node that
// served it. The error is for a run that could not be made or checked (bad
// options, no node answering History); duplicates, violations and malformed
// batches are in the Report.
func Verify(ctx context.Context, target string, opts VerifyOptions) (Report, error) {
	if opts.HistoryTimeout == 0 {
		opts.HistoryTimeout = 5 * time.Second
	}
	addrs, err := idclient.TargetAddrs(ctx, target)
	if err != nil {
		return Report{}, err
	}
	lo, err := opts.LoadOptions.withDefaults()
	if err != nil {
		return Report{}, err
	}
	creds, err := idclient.TransportCredentials(opts.DialOptions...)
	if err != nil {
		return Report{}, err
	}
	// No hedging: a checker sees every answer it asks for. A hedged-away
	// answer is minted and never seen, and a node waiting for room would be
	// ejected as too slow, so fewer owners would be sampled.
	client, err := idclient.Dial(target, append([]idclient.Option{idclient.WithCallTimeout(lo.CallTimeout), idclient.WithHedge(idclient.DefaultHedgeDelay, 1)}, opts.DialOptions...)...)
	if err != nil {
		return Report{}, err
	}
	defer client.Close()
	checker := NewChecker()
	owners := map[string][]string{}
	pollCtx, stopPoll := context.WithCancel(ctx)
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		pollOwners(pollCtx, addrs, opts.HistoryTimeout, creds, owners)
	}()
	st, err := RunLoad(ctx, client, checker, lo)
	stopPoll()
	<-polled
	if err != nil {
		return Report{}, err
	}
	// History after the load: Granted only grows, so the windows fetched now
	// cover every ID handed out before.
	hist, err := FetchHistory(ctx, addrs, opts.HistoryTimeout, opts.DialOptions...)
	if err != nil {
		return Report{}, err
	}
	hist = mergeHistory(History{Owners: owners}, hist)
	r := BuildReport(st, checker, hist)
	if r.Containment.Outside > 0 || r.Containment.NotOwner > 0 {
		// A follower's view may lag the grants the leader acknowledged (and
		// the leader may be the node that did not answer): ask once more
		// after the cluster had time to catch up. A real violation stays.
		t := time.NewTimer(historyRecheckDelay)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
			if again, err := FetchHistory(ctx, addrs, opts.HistoryTimeout, opts.DialOptions...); err == nil {
				r = BuildReport(st, checker, mergeHistory(hist, again))
			}
		}
	}
	return r, nil
}

// historyRecheckDelay is the wait before History is fetched a second time
// when some IDs were outside every window of their slot or their server.
const historyRecheckDelay = 2 * time.Second

// BuildReport runs the checks on checker's IDs and fills a Report.
func BuildReport(st LoadStats, checker *Checker, hist History) Report {
	dups, examples := checker.Duplicates()
	cont := checker.CheckContainment(hist)
	bad, badExamples := checker.BadBatches()
	r := Report{
		Attempted:             st.AttemptedIDs,
		Acknowledged:          st.AcknowledgedIDs,
		Failed:                st.FailedIDs,
		Duplicates:            dups,
		ContainmentViolations: cont.Violations(),
		OwnerViolations:       cont.NotOwner,
		BadBatches:            bad,
		BadBatchExamples:      badExamples,
		PerSlot:               map[string]int{},
		LargestGapMS:          st.LargestGap.Milliseconds(),
		SuccessRate:           st.SuccessRate(),
		DurationMS:            st.Elapsed.Milliseconds(),
		Errors:                st.Errors,
		Load:                  st,
		DuplicateExamples:     examples,
		Containment:           cont,
		History:               hist,
	}
	if r.Errors == nil {
		r.Errors = []string{}
	}
	if r.BadBatchExamples == nil {
		r.BadBatchExamples = []string{}
	}
	for slot, n := range cont.PerSlot {
		r.PerSlot[fmt.Sprint(slot)] = n
	}
	return r
}
