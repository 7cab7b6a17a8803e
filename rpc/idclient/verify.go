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
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/idgen/idgen/generator"
	idgenv1 "github.com/idgen/idgen/proto/idgen/v1"
)

// This file is the uniqueness checker behind `idctl verify` and the chaos
// runs: a load driver that keeps every acknowledged ID, and the two checks
// every chaos run ends with (no duplicate; every ID inside a window the Raft
// log granted to the node that served it). The checker does not trust the
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
// The floor is fixed at the claim and a release at one index: views that
// disagree on either come from diverged logs, and each such disagreement is
// described in the second result (the merge keeps the lower floor). The
// tenures are ordered by slot, then claimed index.
func MergeTenures(views ...[]Tenure) ([]Tenure, []string) {
	type key struct {
		slot  int
		node  string
		index uint64
	}
	merged := map[key]Tenure{}
	var disagree []string
	for _, v := range views {
		for _, t := range v {
			k := key{t.Slot, t.NodeID, t.ClaimedIndex}
			if old, ok := merged[k]; ok {
				if t.Floor != old.Floor || (t.ReleasedIndex != 0 && old.ReleasedIndex != 0 && t.ReleasedIndex != old.ReleasedIndex) {
					disagree = append(disagree, fmt.Sprintf(
						"slot %d: views of node %s's tenure claimed at index %d disagree: floor %d vs %d, released at index %d vs %d",
						t.Slot, t.NodeID, t.ClaimedIndex, old.Floor, t.Floor, old.ReleasedIndex, t.ReleasedIndex))
				}
				t.Granted = max(t.Granted, old.Granted)
				t.ReleasedIndex = max(t.ReleasedIndex, old.ReleasedIndex)
				t.Floor = min(t.Floor, old.Floor)
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
	return out, disagree
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

// Checker keeps every acknowledged ID, by the node that served it, and every
// malformed batch, for the end-of-run checks. Add and AddBad are safe for
// concurrent use; the checks run once loading is over. Memory is 8 bytes an
// ID (80 MB for 10 million).
type Checker struct {
	mu     sync.Mutex
	byNode map[string]*servedIDs
	bad    []string // descriptions of the first maxExamples malformed batches
	nbad   int
}

type servedIDs struct {
	ids    []int64
	sorted bool
}

// NewChecker returns an empty Checker.
func NewChecker() *Checker {
	return &Checker{byNode: map[string]*servedIDs{}}
}

// Add records IDs acknowledged by the node named node (copied).
func (c *Checker) Add(node string, ids []int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.byNode[node]
	if s == nil {
		s = &servedIDs{}
		c.byNode[node] = s
	}
	s.ids = append(s.ids, ids...)
	s.sorted = false
}

// nodeIDKey prefixes a Checker key that is a node ID rather than a name.
const nodeIDKey = "id:"

// checkerKey is the Checker key of a batch's server: its node ID when the
// node sent one (exact), else its name (mapped to IDs through History.Owners).
func checkerKey(b Batch) string {
	if b.NodeID != "" {
		return nodeIDKey + b.NodeID
	}
	return b.Node
}

// maxEvidenceIDs bounds the IDs of a malformed batch kept as evidence.
const maxEvidenceIDs = 8

// AddBad records a malformed batch b, asked with count, refused with err.
// It is evidence against b.Node, not a set of acknowledged IDs.
func (c *Checker) AddBad(b Batch, count int, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nbad++
	if len(c.bad) < maxExamples {
		ids := b.IDs[:min(len(b.IDs), maxEvidenceIDs)]
		c.bad = append(c.bad, fmt.Sprintf("node %q slot %d, asked %d, sent %d IDs starting %v: %v",
			b.Node, b.Slot, count, len(b.IDs), ids, err))
	}
}

// BadBatches is the number of malformed batches, with up to ten described.
func (c *Checker) BadBatches() (int, []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nbad, slices.Clone(c.bad)
}

// Len is the number of IDs recorded.
func (c *Checker) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, s := range c.byNode {
		n += len(s.ids)
	}
	return n
}

// sortedLocked sorts each node's IDs; c.mu is held.
func (c *Checker) sortedLocked() map[string][]int64 {
	out := make(map[string][]int64, len(c.byNode))
	for node, s := range c.byNode {
		if !s.sorted {
			slices.Sort(s.ids)
			s.sorted = true
		}
		out[node] = s.ids
	}
	return out
}

// maxExamples bounds the examples a check reports.
const maxExamples = 10

// Duplicates counts every ID seen more than once, whichever nodes served
// the copies (an ID seen three times counts two), with up to ten examples.
func (c *Checker) Duplicates() (count int, examples []int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var lists [][]int64
	for _, ids := range c.sortedLocked() {
		lists = append(lists, ids)
	}
	// Merge the sorted lists, smallest head first; a handful of nodes, so a
	// scan of the heads is enough.
	pos := make([]int, len(lists))
	var prev int64
	first := true
	for {
		k := -1
		for i, l := range lists {
			if pos[i] < len(l) && (k < 0 || l[pos[i]] < lists[k][pos[k]]) {
				k = i
			}
		}
		if k < 0 {
			return count, examples
		}
		id := lists[k][pos[k]]
		pos[k]++
		if !first && id == prev {
			count++
			if len(examples) < maxExamples && (len(examples) == 0 || examples[len(examples)-1] != id) {
				examples = append(examples, id)
			}
		}
		prev, first = id, false
	}
}

// Containment is the outcome of CheckContainment.
type Containment struct {
	// PerSlot counts the IDs that decode to each slot.
	PerSlot map[int]int
	// Outside counts IDs that do not decode, or whose timestamp lies in no
	// window granted to their slot.
	Outside int
	// NotOwner counts IDs inside a window of their slot but in none of the
	// windows granted to the node that served them.
	NotOwner int
	// Examples describes up to ten of the IDs counted in Outside or NotOwner.
	Examples []string
	// Overlaps describes tenures of one slot whose windows overlap.
	Overlaps []string
	// Disagreements describes tenures that nodes' views disagree on.
	Disagreements []string
}

// Violations is the number of failed containment checks: IDs outside every
// window of their slot or of their server, overlapping tenures, and
// disagreeing views of a tenure.
func (r Containment) Violations() int {
	return r.Outside + r.NotOwner + len(r.Overlaps) + len(r.Disagreements)
}

// CheckContainment checks every ID against the history: it decodes under
// h.Layout to a slot and a timestamp inside a tenure of that slot
// (Floor < ts <= Granted), and (per owner) inside a tenure of that slot held
// by the node that served it, whose name h.Owners maps to node IDs. A nil
// h.Owners checks per slot only. It also reports overlapping tenures of a
// slot and h.Disagreements. h.Tenures should be merged from every node's
// History (MergeTenures).
func (c *Checker) CheckContainment(h History) Containment {
	res := Containment{PerSlot: map[int]int{}, Overlaps: CheckTenures(h.Tenures), Disagreements: h.Disagreements}
	bySlot := map[int][]Tenure{}
	byNodeID := map[string][]Tenure{}
	for _, t := range h.Tenures {
		bySlot[t.Slot] = append(bySlot[t.Slot], t)
		byNodeID[t.NodeID] = append(byNodeID[t.NodeID], t)
	}
	for _, ts := range bySlot {
		slices.SortFunc(ts, func(a, b Tenure) int { return cmp.Compare(a.Floor, b.Floor) })
	}
	example := func(format string, args ...any) {
		if len(res.Examples) < maxExamples {
			res.Examples = append(res.Examples, fmt.Sprintf(format, args...))
		}
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	for node, ids := range c.sortedLocked() {
		var own []Tenure // every tenure of every node ID that went by this name
		for _, id := range h.Owners[node] {
			own = append(own, byNodeID[id]...)
		}
		if id, ok := strings.CutPrefix(node, nodeIDKey); ok {
			own = byNodeID[id] // the node named its own ID: exact
		}
		for _, id := range ids {
			p, err := h.Layout.Decompose(id)
			if err != nil {
				res.Outside++
				example("id %d from node %q does not decode: %v", id, node, err)
				continue
			}
			res.PerSlot[p.Slot]++
			switch {
			case !inSomeWindow(bySlot[p.Slot], p.Timestamp):
				res.Outside++
				example("id %d (%s) from node %q: slot %d timestamp %d is in no window granted to that slot",
					id, generator.Encode(id), node, p.Slot, p.Timestamp)
			case h.Owners != nil && !inOwnWindow(own, p.Slot, p.Timestamp):
				res.NotOwner++
				example("id %d (%s) from node %q (node IDs %v): slot %d timestamp %d is in no window granted to that node",
					id, generator.Encode(id), node, h.Owners[node], p.Slot, p.Timestamp)
			}
		}
	}
	return res
}

// inOwnWindow: t in (Floor, Granted] of one of ts's tenures of slot.
func inOwnWindow(ts []Tenure, slot int, t int64) bool {
	for _, w := range ts {
		if w.Slot == slot && w.Floor < t && t <= w.Granted {
			return true
		}
	}
	return false
}

// inSomeWindow: t in (Floor, Granted] of a tenure; ts sorted by Floor.
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
	// Counts are the counts asked per call, taken in turn (default [100]).
	// 0 asks for the node's default batch, which nodes serve from their
	// prefetch buffer: the path a Pool with BatchSize 0 draws from.
	Counts []int
	// Concurrency is the number of calls in flight at most (default 4).
	Concurrency int
	// CallTimeout bounds one call, retries included (default DefaultCallTimeout).
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
		out.CallTimeout = DefaultCallTimeout
	}
	switch {
	case out.Duration <= 0:
		return out, fmt.Errorf("idclient: load duration %s must be positive", out.Duration)
	case out.Rate <= 0:
		return out, fmt.Errorf("idclient: load rate %d IDs/s must be positive", out.Rate)
	case out.Concurrency < 1 || out.Concurrency > 1024:
		return out, fmt.Errorf("idclient: concurrency %d not in 1..1024", out.Concurrency)
	case out.CallTimeout < 0:
		return out, fmt.Errorf("idclient: call timeout %s is negative", out.CallTimeout)
	}
	for _, n := range out.Counts {
		if n < 0 || n > generator.MaxBatch {
			return out, fmt.Errorf("idclient: count %d not in 0..%d (0: the node's default batch)", n, generator.MaxBatch)
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
				case errors.Is(err, ErrBadBatch):
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

// TargetAddrs lists the node addresses of a target: each entry of
// "host:port,host:port", the seeds of "idgen:///seed:port,…", or every
// address DNS returns for "dns:///name:port".
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
	if seeds, ok := strings.CutPrefix(target, FollowPrefix); ok {
		return parseList(seeds) // every node holds the whole Raft log
	}
	if strings.Contains(target, "://") {
		return nil, fmt.Errorf("idclient: cannot list the addresses of target %q; use host:port,…, idgen:///seed:port,… or dns:///name:port", target)
	}
	return parseList(target)
}

// History is the merged grant history of a cluster.
type History struct {
	Tenures []Tenure
	// Disagreements describes tenures the nodes' views disagree on
	// (MergeTenures); each is a containment violation.
	Disagreements []string
	// Owners maps each node name the nodes reported (Members, Status) to
	// the node IDs that went by it: a node wiped and restarted under the
	// same name has two. The checker attributes IDs by the name a response
	// carries and the tenures by node ID.
	Owners map[string][]string
	// Layout is the cluster's layout as the nodes report it.
	Layout generator.Layout
	// Answered counts the nodes whose History was merged; Errors holds the
	// others' errors.
	Answered int
	Errors   []error
}

// addOwner records that node ID id went by name.
func addOwner(owners map[string][]string, name, id string) {
	if !slices.Contains(owners[name], id) {
		owners[name] = append(owners[name], id)
	}
}

// mergeOwners adds src's names and IDs to dst.
func mergeOwners(dst, src map[string][]string) {
	for name, ids := range src {
		for _, id := range ids {
			addOwner(dst, name, id)
		}
	}
}

// mergeHistory joins a later fetch of the history into an earlier one.
func mergeHistory(earlier, later History) History {
	tenures, disagree := MergeTenures(earlier.Tenures, later.Tenures)
	later.Tenures = tenures
	for _, d := range slices.Concat(earlier.Disagreements, disagree) {
		if !slices.Contains(later.Disagreements, d) {
			later.Disagreements = append(later.Disagreements, d)
		}
	}
	if later.Owners == nil {
		later.Owners = map[string][]string{}
	}
	mergeOwners(later.Owners, earlier.Owners)
	return later
}

// nodeView is what one node's ClusterService says.
type nodeView struct {
	tenures []Tenure
	layout  string
	owners  map[string][]string
	err     error
}

// askAll asks every address at once (a paused node costs one timeout, not
// one each) for its members and own name and, with history, its History.
func askAll(ctx context.Context, addrs []string, timeout time.Duration, creds grpc.DialOption, history bool) []nodeView {
	views := make([]nodeView, len(addrs))
	var wg sync.WaitGroup
	for i, addr := range addrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			views[i] = askNode(ctx, addr, timeout, creds, history)
		}()
	}
	wg.Wait()
	return views
}

func askNode(ctx context.Context, addr string, timeout time.Duration, creds grpc.DialOption, history bool) nodeView {
	v := nodeView{owners: map[string][]string{}}
	conn, err := grpc.NewClient(addr, creds)
	if err != nil {
		v.err = err
		return v
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cs := idgenv1.NewClusterServiceClient(conn)
	members, err := cs.Members(ctx, &idgenv1.MembersRequest{})
	if err != nil {
		v.err = fmt.Errorf("members: %w", err)
		return v
	}
	for _, m := range members.GetMembers() {
		addOwner(v.owners, m.GetName(), m.GetId())
	}
	self, err := cs.Status(ctx, &idgenv1.StatusRequest{})
	if err != nil {
		v.err = fmt.Errorf("status: %w", err)
		return v
	}
	addOwner(v.owners, self.GetName(), self.GetId())
	if !history {
		return v
	}
	resp, err := cs.History(ctx, &idgenv1.HistoryRequest{})
	if err != nil {
		v.err = err
		return v
	}
	for _, t := range resp.GetTenures() {
		v.tenures = append(v.tenures, Tenure{
			Slot: int(t.GetSlot()), NodeID: t.GetNodeId(), Floor: t.GetFloor(), Granted: t.GetGranted(),
			ClaimedIndex: t.GetClaimedIndex(), ReleasedIndex: t.GetReleasedIndex(),
		})
	}
	v.layout = resp.GetLayout()
	return v
}

// FetchHistory asks every address for ClusterService.History, Members and
// Status, all at once, and merges the answers (MergeTenures). It fails only
// when no node answers. Of opts, only the TLS options apply.
func FetchHistory(ctx context.Context, addrs []string, timeout time.Duration, opts ...Option) (History, error) {
	creds, err := TransportCredentials(opts...)
	if err != nil {
		return History{}, err
	}
	h := History{Owners: map[string][]string{}}
	var tenures [][]Tenure
	layouts := map[string]bool{}
	for i, v := range askAll(ctx, addrs, timeout, creds, true) {
		if v.err != nil {
			h.Errors = append(h.Errors, fmt.Errorf("history from %s: %w", addrs[i], v.err))
			continue
		}
		h.Answered++
		tenures = append(tenures, v.tenures)
		layouts[v.layout] = true
		mergeOwners(h.Owners, v.owners)
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
	h.Tenures, h.Disagreements = MergeTenures(tenures...)
	return h, nil
}

// memberPollInterval is how often Verify asks the nodes for their members
// during the load, so that a name is known with every node ID that served
// under it, even one wiped or removed before the end.
const memberPollInterval = 2 * time.Second

// pollOwners records the nodes' names and IDs now and every
// memberPollInterval until ctx ends.
func pollOwners(ctx context.Context, addrs []string, timeout time.Duration, creds grpc.DialOption, into map[string][]string) {
	t := time.NewTicker(memberPollInterval)
	defer t.Stop()
	for {
		for _, v := range askAll(ctx, addrs, timeout, creds, false) {
			mergeOwners(into, v.owners)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

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
	// DialOptions are passed to Dial.
	DialOptions []Option
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
	addrs, err := TargetAddrs(ctx, target)
	if err != nil {
		return Report{}, err
	}
	lo, err := opts.LoadOptions.withDefaults()
	if err != nil {
		return Report{}, err
	}
	creds, err := TransportCredentials(opts.DialOptions...)
	if err != nil {
		return Report{}, err
	}
	// No hedging: a checker sees every answer it asks for. A hedged-away
	// answer is minted and never seen, and a node waiting for room would be
	// ejected as too slow, so fewer owners would be sampled.
	client, err := Dial(target, append([]Option{WithCallTimeout(lo.CallTimeout), WithHedge(DefaultHedgeDelay, 1)}, opts.DialOptions...)...)
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
