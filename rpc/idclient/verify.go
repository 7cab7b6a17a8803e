package idclient

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/idgen/idgen/generator"
	idgenv1 "github.com/idgen/idgen/proto/idgen/v1"
)

// This file is the uniqueness checker behind `idctl verify` and the chaos
// runs: a load driver that keeps every acknowledged ID, and the two checks
// DESIGN.md section 8 ends every run with. The checker does not trust the
// nodes' word about uniqueness: it sorts the IDs it saw, and it compares them
// with the windows the Raft log granted (ClusterService.History).

// Tenure is one node's hold on one slot as the Raft log records it: the owner
// may stamp timestamps t with Floor < t <= Granted.
type Tenure struct {
	Slot          int    `json:"slot"`
	NodeID        string `json:"node_id"`
	Floor         int64  `json:"floor"`
	Granted       int64  `json:"granted"`
	ClaimedIndex  uint64 `json:"claimed_index"`
	ReleasedIndex uint64 `json:"released_index"`
}

// MergeTenures joins the tenure lists of several nodes. A tenure is known by
// (slot, node, claimed index); a follower's view may lag, and Granted only
// grows, so the largest Granted (and the release, if any view has it) wins.
// The result is ordered by slot, then claimed index.
func MergeTenures(views ...[]Tenure) []Tenure {
	type key struct {
		slot  int
		node  string
		index uint64
	}
	merged := map[key]Tenure{}
	for _, v := range views {
		for _, t := range v {
			k := key{t.Slot, t.NodeID, t.ClaimedIndex}
			if old, ok := merged[k]; ok {
				t.Granted = max(t.Granted, old.Granted)
				t.ReleasedIndex = max(t.ReleasedIndex, old.ReleasedIndex)
				t.Floor = old.Floor // fixed at the claim; equal in every view
			}
			merged[k] = t
		}
	}
	out := make([]Tenure, 0, len(merged))
	for _, t := range merged {
		out = append(out, t)
	}
	slices.SortFunc(out, func(a, b Tenure) int {
		return cmp.Or(cmp.Compare(a.Slot, b.Slot), cmp.Compare(a.ClaimedIndex, b.ClaimedIndex), cmp.Compare(a.NodeID, b.NodeID))
	})
	return out
}

// CheckTenures reports every pair of consecutive tenures of one slot (in
// claim order) whose windows overlap: a later owner's floor must be at or
// above everything granted to the earlier one. tenures must be merged.
func CheckTenures(tenures []Tenure) []string {
	var out []string
	ts := slices.Clone(tenures)
	slices.SortFunc(ts, func(a, b Tenure) int {
		return cmp.Or(cmp.Compare(a.Slot, b.Slot), cmp.Compare(a.ClaimedIndex, b.ClaimedIndex))
	})
	for i := 1; i < len(ts); i++ {
		prev, cur := ts[i-1], ts[i]
		if prev.Slot != cur.Slot || cur.Floor >= prev.Granted {
			continue
		}
		out = append(out, fmt.Sprintf(
			"slot %d: tenure of node %s claimed at index %d has floor %d below %d granted to node %s (claimed at index %d)",
			cur.Slot, cur.NodeID, cur.ClaimedIndex, cur.Floor, prev.Granted, prev.NodeID, prev.ClaimedIndex))
	}
	return out
}

// ParseLayout reads a layout as generator.Layout.String writes it:
// "28/2/1/11 unit=1s epoch=1777939200".
func ParseLayout(s string) (generator.Layout, error) {
	var ts, dc, m, seq uint8
	var unit string
	var epoch int64
	if _, err := fmt.Sscanf(strings.TrimSpace(s), "%d/%d/%d/%d unit=%s epoch=%d", &ts, &dc, &m, &seq, &unit, &epoch); err != nil {
		return generator.Layout{}, fmt.Errorf("layout %q: want \"ts/dc/m/seq unit=D epoch=N\": %w", s, err)
	}
	u, err := time.ParseDuration(unit)
	if err != nil {
		return generator.Layout{}, fmt.Errorf("layout %q: unit: %w", s, err)
	}
	return generator.NewLayout(epoch, u, ts, dc, m, seq)
}

// Checker keeps every acknowledged ID for the end-of-run checks. Add is safe
// for concurrent use; the checks run once loading is over. Memory is 8 bytes
// an ID (80 MB for 10 million).
type Checker struct {
	mu     sync.Mutex
	ids    []int64
	sorted bool
}

// NewChecker returns a Checker with room for sizeHint IDs.
func NewChecker(sizeHint int) *Checker {
	return &Checker{ids: make([]int64, 0, max(sizeHint, 0))}
}

// Add records acknowledged IDs (copied).
func (c *Checker) Add(ids []int64) {
	c.mu.Lock()
	c.ids = append(c.ids, ids...)
	c.sorted = false
	c.mu.Unlock()
}

// Len is the number of IDs recorded.
func (c *Checker) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.ids)
}

func (c *Checker) sortedIDs() []int64 {
	if !c.sorted {
		slices.Sort(c.ids)
		c.sorted = true
	}
	return c.ids
}

// maxExamples bounds the examples a check reports.
const maxExamples = 10

// Duplicates sorts the IDs and counts every ID seen more than once (an ID
// seen three times counts two), with up to ten examples.
func (c *Checker) Duplicates() (count int, examples []int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ids := c.sortedIDs()
	for i := 1; i < len(ids); i++ {
		if ids[i] == ids[i-1] {
			count++
			if len(examples) < maxExamples && (len(examples) == 0 || examples[len(examples)-1] != ids[i]) {
				examples = append(examples, ids[i])
			}
		}
	}
	return count, examples
}

// Containment is the outcome of CheckContainment.
type Containment struct {
	// PerSlot counts the IDs that decode to each slot.
	PerSlot map[int]int
	// Outside counts IDs that do not decode, or whose timestamp lies in no
	// window granted to their slot.
	Outside int
	// Examples describes up to ten of them.
	Examples []string
	// Overlaps describes tenures of one slot whose windows overlap.
	Overlaps []string
}

// Violations is the number of failed containment checks: IDs outside every
// window plus overlapping tenures.
func (r Containment) Violations() int { return r.Outside + len(r.Overlaps) }

// CheckContainment checks that every ID decodes under layout to a slot and a
// timestamp inside some tenure of that slot (Floor < ts <= Granted), and that
// the tenures of each slot never overlap. tenures should be merged from every
// node's History (MergeTenures).
func (c *Checker) CheckContainment(layout generator.Layout, tenures []Tenure) Containment {
	res := Containment{PerSlot: map[int]int{}, Overlaps: CheckTenures(tenures)}
	bySlot := map[int][]Tenure{}
	for _, t := range tenures {
		bySlot[t.Slot] = append(bySlot[t.Slot], t)
	}
	for _, ts := range bySlot {
		slices.SortFunc(ts, func(a, b Tenure) int { return cmp.Compare(a.Floor, b.Floor) })
	}
	outside := func(format string, args ...any) {
		res.Outside++
		if len(res.Examples) < maxExamples {
			res.Examples = append(res.Examples, fmt.Sprintf(format, args...))
		}
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range c.sortedIDs() {
		p, err := layout.Decompose(id)
		if err != nil {
			outside("id %d does not decode: %v", id, err)
			continue
		}
		res.PerSlot[p.Slot]++
		if !inSomeWindow(bySlot[p.Slot], p.Timestamp) {
			outside("id %d (%s): slot %d timestamp %d is in no window granted to that slot",
				id, generator.Encode(id), p.Slot, p.Timestamp)
		}
	}
	return res
}

// inSomeWindow: ts in (Floor, Granted] of a tenure; ts sorted by Floor.
func inSomeWindow(ts []Tenure, t int64) bool {
	// The last tenure starting below t is the only candidate when windows
	// do not overlap; scan all of them when that one fails (overlaps are
	// reported separately, and must not hide an ID).
	i := sort.Search(len(ts), func(i int) bool { return ts[i].Floor >= t }) - 1
	if i >= 0 && t <= ts[i].Granted {
		return true
	}
	for _, w := range ts {
		if w.Floor < t && t <= w.Granted {
			return true
		}
	}
	return false
}

// LoadOptions configures RunLoad. Zero values take the defaults.
type LoadOptions struct {
	// Duration of the load; required.
	Duration time.Duration
	// Rate in IDs per second; required.
	Rate int
	// Batch is the count asked per call (default 100).
	Batch int
	// Concurrency is the number of calls in flight at most (default 4).
	Concurrency int
	// CallTimeout bounds one call, retries included (default DefaultCallTimeout).
	CallTimeout time.Duration
}

// LoadStats counts what RunLoad did. IDs asked for in a failed call are
// "maybe issued, never seen": they count as failed, not as an error of the check.
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
	if out.Batch == 0 {
		out.Batch = 100
	}
	if out.Concurrency == 0 {
		out.Concurrency = 4
	}
	if out.CallTimeout == 0 {
		out.CallTimeout = DefaultCallTimeout
	}
	switch {
	case out.Duration <= 0:
		return out, fmt.Errorf("idclient: load duration %s must be positive", out.Duration)
	case out.Rate <= 0:
		return out, fmt.Errorf("idclient: load rate %d IDs/s must be positive", out.Rate)
	case out.Batch < 1 || out.Batch > generator.MaxBatch:
		return out, fmt.Errorf("idclient: batch %d not in 1..%d", out.Batch, generator.MaxBatch)
	case out.Concurrency < 1 || out.Concurrency > 1024:
		return out, fmt.Errorf("idclient: concurrency %d not in 1..1024", out.Concurrency)
	case out.CallTimeout < 0:
		return out, fmt.Errorf("idclient: call timeout %s is negative", out.CallTimeout)
	}
	return out, nil
}

// RunLoad calls GetIDBatch for opts.Duration at about opts.Rate IDs a second
// and records every acknowledged ID in checker. Calls are paced, never more
// than opts.Concurrency at once; when the nodes are slower than the rate, due
// calls are skipped rather than queued, so a stall is not followed by a burst.
// It stops by itself after the duration, or earlier when ctx ends.
func RunLoad(ctx context.Context, client *Client, checker *Checker, opts LoadOptions) (LoadStats, error) {
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
	)
	interval := max(time.Duration(float64(time.Second)*float64(o.Batch)/float64(o.Rate)), time.Microsecond)
	tokens := make(chan struct{}, o.Concurrency)
	go func() {
		defer close(tokens)
		tick := time.NewTicker(max(interval, time.Millisecond))
		defer tick.Stop()
		var issued int64
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-tick.C:
				due := int64(now.Sub(start)/interval) + 1 - issued
				for ; due > 0; due-- {
					select {
					case tokens <- struct{}{}:
					default: // every worker busy: skip, do not queue
					}
					issued++
				}
			}
		}
	}()

	var wg sync.WaitGroup
	for range o.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range tokens {
				cctx, ccancel := context.WithTimeout(context.Background(), o.CallTimeout)
				ids, err := client.GetIDBatch(cctx, o.Batch)
				ccancel()
				if err == nil && len(ids) != o.Batch {
					err = fmt.Errorf("asked for %d IDs, got %d", o.Batch, len(ids))
				}
				if err == nil {
					checker.Add(ids)
				}
				mu.Lock()
				st.Calls++
				st.AttemptedIDs += int64(o.Batch)
				if err != nil {
					st.FailedCalls++
					st.FailedIDs += int64(o.Batch) - int64(len(ids))
					st.AcknowledgedIDs += int64(len(ids))
					msg := err.Error()
					if !seenErr[msg] && len(st.Errors) < maxExamples {
						seenErr[msg] = true
						st.Errors = append(st.Errors, msg)
					}
				} else {
					now := time.Now()
					st.LargestGap = max(st.LargestGap, now.Sub(lastSuccess))
					lastSuccess = now
					st.AcknowledgedIDs += int64(len(ids))
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

// TargetAddrs lists the node addresses of a target: each entry of
// "host:port,host:port", or every address DNS returns for "dns:///name:port".
func TargetAddrs(ctx context.Context, target string) ([]string, error) {
	target = strings.TrimSpace(target)
	if rest, ok := strings.CutPrefix(target, "dns:///"); ok {
		host, port, err := net.SplitHostPort(rest)
		if err != nil {
			return nil, fmt.Errorf("idclient: target %q: %w", target, err)
		}
		hosts, err := net.DefaultResolver.LookupHost(ctx, host)
		if err != nil {
			return nil, fmt.Errorf("idclient: target %q: %w", target, err)
		}
		out := make([]string, 0, len(hosts))
		for _, h := range hosts {
			out = append(out, net.JoinHostPort(h, port))
		}
		return out, nil
	}
	if strings.Contains(target, "://") {
		return nil, fmt.Errorf("idclient: cannot list the addresses of target %q; use host:port,… or dns:///name:port", target)
	}
	return parseList(target)
}

// History is the merged grant history of a cluster.
type History struct {
	Tenures []Tenure
	// Layout is the cluster's layout as the nodes report it.
	Layout generator.Layout
	// Answered counts the nodes whose History was merged; Errors holds the
	// others' errors.
	Answered int
	Errors   []error
}

// FetchHistory asks every address for ClusterService.History, all at once
// (a paused node costs one timeout, not one each), and merges the answers
// (MergeTenures). It fails only when no node answers. Of opts, only the TLS
// options apply.
func FetchHistory(ctx context.Context, addrs []string, timeout time.Duration, opts ...Option) (History, error) {
	creds, err := TransportCredentials(opts...)
	if err != nil {
		return History{}, err
	}
	type answer struct {
		tenures []Tenure
		layout  string
		err     error
	}
	answers := make([]answer, len(addrs))
	var wg sync.WaitGroup
	for i, addr := range addrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := &answers[i]
			a.tenures, a.layout, a.err = fetchOne(ctx, addr, timeout, creds)
		}()
	}
	wg.Wait()

	var h History
	var views [][]Tenure
	layouts := map[string]bool{}
	for i, a := range answers {
		if a.err != nil {
			h.Errors = append(h.Errors, fmt.Errorf("history from %s: %w", addrs[i], a.err))
			continue
		}
		h.Answered++
		views = append(views, a.tenures)
		layouts[a.layout] = true
	}
	if h.Answered == 0 {
		return h, fmt.Errorf("idclient: no node answered History: %w", errors.Join(h.Errors...))
	}
	if len(layouts) != 1 {
		return h, fmt.Errorf("idclient: nodes report different layouts %v", keys(layouts))
	}
	l, err := ParseLayout(keys(layouts)[0])
	if err != nil {
		return h, err
	}
	h.Layout = l
	h.Tenures = MergeTenures(views...)
	return h, nil
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func fetchOne(ctx context.Context, addr string, timeout time.Duration, creds grpc.DialOption) ([]Tenure, string, error) {
	conn, err := grpc.NewClient(addr, creds)
	if err != nil {
		return nil, "", err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := idgenv1.NewClusterServiceClient(conn).History(ctx, &idgenv1.HistoryRequest{})
	if err != nil {
		return nil, "", err
	}
	out := make([]Tenure, 0, len(resp.GetTenures()))
	for _, t := range resp.GetTenures() {
		out = append(out, Tenure{
			Slot: int(t.GetSlot()), NodeID: t.GetNodeId(), Floor: t.GetFloor(), Granted: t.GetGranted(),
			ClaimedIndex: t.GetClaimedIndex(), ReleasedIndex: t.GetReleasedIndex(),
		})
	}
	return out, resp.GetLayout(), nil
}

// Report is the outcome of Verify; its JSON form is what `idctl verify
// --json` prints. attempted, acknowledged and failed count IDs
// (attempted = acknowledged + failed; failed IDs were asked for in calls that
// failed: maybe issued, never seen).
type Report struct {
	Attempted             int64          `json:"attempted"`
	Acknowledged          int64          `json:"acknowledged"`
	Failed                int64          `json:"failed"`
	Duplicates            int            `json:"duplicates"`
	ContainmentViolations int            `json:"containment_violations"`
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

// OK reports whether the run found no duplicate and no containment violation.
func (r Report) OK() bool { return r.Duplicates == 0 && r.ContainmentViolations == 0 }

// VerifyOptions configures Verify.
type VerifyOptions struct {
	LoadOptions
	// HistoryTimeout bounds each node's History call (default 5 s).
	HistoryTimeout time.Duration
	// DialOptions are passed to Dial.
	DialOptions []Option
}

// Verify loads target through the client library, then checks the acknowledged
// IDs for duplicates and against the grant history of every node in target.
// The error is for a run that could not be made or checked (bad options, no
// node answering History); duplicates and violations are in the Report.
func Verify(ctx context.Context, target string, opts VerifyOptions) (Report, error) {
	if opts.HistoryTimeout == 0 {
		opts.HistoryTimeout = 5 * time.Second
	}
	addrs, err := TargetAddrs(ctx, target)
	if err != nil {
		return Report{}, err
	}
	lo, err := opts.LoadOptions.withDefaults()
	if err != nil {
		return Report{}, err
	}
	client, err := Dial(target, append([]Option{WithCallTimeout(lo.CallTimeout)}, opts.DialOptions...)...)
	if err != nil {
		return Report{}, err
	}
	defer client.Close()
	hint := min(int64(lo.Rate)*int64(lo.Duration/time.Second+1), 64<<20)
	checker := NewChecker(int(hint))
	st, err := RunLoad(ctx, client, checker, lo)
	if err != nil {
		return Report{}, err
	}
	// History after the load: Granted only grows, so the windows fetched now
	// cover every ID handed out before.
	hist, err := FetchHistory(ctx, addrs, opts.HistoryTimeout, opts.DialOptions...)
	if err != nil {
		return Report{}, err
	}
	r := BuildReport(st, checker, hist)
	if r.Containment.Outside > 0 {
		// A follower's view may lag the grants the leader acknowledged (and
		// the leader may be the node that did not answer): ask once more
		// after the cluster had time to catch up. A real violation stays.
		t := time.NewTimer(historyRecheckDelay)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
			if again, err := FetchHistory(ctx, addrs, opts.HistoryTimeout, opts.DialOptions...); err == nil {
				again.Tenures = MergeTenures(hist.Tenures, again.Tenures)
				r = BuildReport(st, checker, again)
			}
		}
	}
	return r, nil
}

// historyRecheckDelay is the wait before History is fetched a second time
// when some IDs were outside every window.
const historyRecheckDelay = 2 * time.Second

// BuildReport runs both checks on checker's IDs and fills a Report.
func BuildReport(st LoadStats, checker *Checker, hist History) Report {
	dups, examples := checker.Duplicates()
	cont := checker.CheckContainment(hist.Layout, hist.Tenures)
	r := Report{
		Attempted:             st.AttemptedIDs,
		Acknowledged:          st.AcknowledgedIDs,
		Failed:                st.FailedIDs,
		Duplicates:            dups,
		ContainmentViolations: cont.Violations(),
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
	for slot, n := range cont.PerSlot {
		r.PerSlot[fmt.Sprint(slot)] = n
	}
	return r
}
