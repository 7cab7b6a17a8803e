package idcheck

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/idgen/idgen/generator"
	"github.com/idgen/idgen/rpc/idclient"
)

// MergeTenures joins the tenure lists of several nodes. A tenure is known by
// (slot, node, claimed index); a follower's view may lag, and Granted only
// grows, so the largest Granted (and the release, if any view has it) wins.
// The floor is fixed at the claim and a release at one index: views that
// disagree on either come from diverged logs, and each such disagreement is
// described in the second result (the merge keeps the lower floor). The
// tenures are ordered by slot, then claimed index.
func MergeTenures(views ...[]generator.Tenure) ([]generator.Tenure, []string) {
	type key struct {
		slot  int
		node  string
		index uint64
	}
	merged := map[key]generator.Tenure{}
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
	out := make([]generator.Tenure, 0, len(merged))
	for _, t := range merged {
		out = append(out, t)
	}
	slices.SortFunc(out, func(a, b generator.Tenure) int {
		return cmp.Or(cmp.Compare(a.Slot, b.Slot), cmp.Compare(a.ClaimedIndex, b.ClaimedIndex), cmp.Compare(a.NodeID, b.NodeID))
	})
	return out, disagree
}

// CheckTenures reports every pair of consecutive tenures of one slot (in
// claim order) whose windows overlap: a later owner's floor must be at or
// above everything granted to the earlier one. tenures must be merged.
func CheckTenures(tenures []generator.Tenure) []string {
	var out []string
	ts := slices.Clone(tenures)
	slices.SortFunc(ts, func(a, b generator.Tenure) int {
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
func checkerKey(b idclient.Batch) string {
	if b.NodeID != "" {
		return nodeIDKey + b.NodeID
	}
	return b.Node
}

// maxEvidenceIDs bounds the IDs of a malformed batch kept as evidence.
const maxEvidenceIDs = 8

// AddBad records a malformed batch b, asked with count, refused with err.
// It is evidence against b.Node, not a set of acknowledged IDs.
func (c *Checker) AddBad(b idclient.Batch, count int, err error) {
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
	bySlot := map[int][]generator.Tenure{}
	byNodeID := map[string][]generator.Tenure{}
	for _, t := range h.Tenures {
		bySlot[t.Slot] = append(bySlot[t.Slot], t)
		byNodeID[t.NodeID] = append(byNodeID[t.NodeID], t)
	}
	for _, ts := range bySlot {
		slices.SortFunc(ts, func(a, b generator.Tenure) int { return cmp.Compare(a.Floor, b.Floor) })
	}
	example := func(format string, args ...any) {
		if len(res.Examples) < maxExamples {
			res.Examples = append(res.Examples, fmt.Sprintf(format, args...))
		}
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	for node, ids := range c.sortedLocked() {
		var own []generator.Tenure // every tenure of every node ID that went by this name
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
func inOwnWindow(ts []generator.Tenure, slot int, t int64) bool {
	for _, w := range ts {
		if w.Slot == slot && w.Floor < t && t <= w.Granted {
			return true
		}
	}
	return false
}

// inSomeWindow: t in (Floor, Granted] of a tenure; ts sorted by Floor.
func inSomeWindow(ts []generator.Tenure, t int64) bool {
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
