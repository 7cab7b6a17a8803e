package core

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/idgen/idgen/generator"
)

// ErrNotInitialized: a Claim (or a leader's Fence) came before the log's
// Init entry, so the cluster has no slots yet. Its founding leader writes
// Init once a quorum of the founding voters' clocks is known, retrying until
// it does (establish), so the claim is retried: it crosses gRPC as
// Unavailable.
var ErrNotInitialized = errors.New("cluster state not initialized yet")

// SlotState is one slot of the replicated state.
type SlotState struct {
	Owner     string `json:"owner,omitempty"`
	HighWater int64  `json:"high_water"`
	// Tenure is the current claim's identity (its log index), 0 when free.
	Tenure uint64 `json:"tenure_id,omitempty"`
}

// State is the replicated State machine's data (cluster/DESIGN.md explains it).
type State struct {
	// Index is the Raft index of the last entry applied.
	Index uint64 `json:"index"`
	// ClusterID and Created (Unix ns) come from Init: the cluster's identity.
	ClusterID string              `json:"cluster_id,omitempty"`
	Created   int64               `json:"created,omitempty"`
	Layout    *generator.Layout   `json:"layout,omitempty"`
	Nodes     map[string]NodeInfo `json:"nodes"`
	Slots     []SlotState         `json:"slots"`
	Tenures   []Tenure            `json:"tenures"`
}

func NewState() *State { return &State{Nodes: map[string]NodeInfo{}} }

func (s *State) SlotOf(nodeID string) int {
	for i, sl := range s.Slots {
		if sl.Owner == nodeID {
			return i
		}
	}
	return -1
}

func (s *State) Clone() *State {
	c := &State{
		Index:     s.Index,
		ClusterID: s.ClusterID,
		Created:   s.Created,
		Nodes:     make(map[string]NodeInfo, len(s.Nodes)),
		Slots:     append([]SlotState(nil), s.Slots...),
		Tenures:   append([]Tenure(nil), s.Tenures...),
	}
	if s.Layout != nil {
		l := *s.Layout
		c.Layout = &l
	}
	for k, v := range s.Nodes {
		c.Nodes[k] = v
	}
	return c
}

// Admit checks a command against the state's layout: validate's shape checks
// plus every field Apply would use as an index or a bound (datacenter, slot,
// timestamps). The leader calls it before proposing and apply calls it again,
// so the two cannot differ; a refused command changes nothing. Ownership and
// tenures are not Admit's business: apply answers those with ErrNotOwner.
func (s *State) Admit(c Command) error {
	if err := c.Validate(); err != nil {
		return err
	}
	if c.Type == CmdInit {
		return nil // its layout is its own, checked by validate
	}
	if c.ClusterID != "" && s.ClusterID != "" && c.ClusterID != s.ClusterID {
		// Entries written before commands named their cluster carry none.
		return fmt.Errorf("%w: %s of cluster %q in the log of cluster %q", ErrWrongCluster, c.Type, c.ClusterID, s.ClusterID)
	}
	if s.Layout == nil {
		switch c.Type {
		case CmdClaim, CmdFence:
			return ErrNotInitialized // there are no slots yet
		}
		return nil // nothing is held yet: apply refuses it as not owner or unknown
	}
	switch c.Type {
	case CmdClaim:
		return c.Node.checkDatacenter(*s.Layout)
	case CmdReserve, CmdFence:
		if err := checkSlot(s, c); err != nil {
			return err
		}
		return checkTimestamp(s, c.Type, "up to", c.UpTo)
	}
	return nil
}

// checkSlot: c names a slot of s.
func checkSlot(s *State, c Command) error {
	if c.Slot < 0 || c.Slot >= len(s.Slots) {
		return fmt.Errorf("%w: %s of slot %d, not in 0..%d", ErrBadCommand, c.Type, c.Slot, len(s.Slots)-1)
	}
	return nil
}

// checkTimestamp: ts is a timestamp of s's layout.
func checkTimestamp(s *State, t CommandType, what string, ts int64) error {
	if max := s.Layout.MaxTimestamp(); ts < 0 || ts > max {
		return fmt.Errorf("%w: %s %s %d, not in 0..%d (layout %s)", ErrBadCommand, t, what, ts, max, s.Layout)
	}
	return nil
}

// Apply is deterministic: it reads only the command, the index and the state.
func (s *State) Apply(c Command, index uint64) interface{} {
	if !c.Type.Known() {
		panic(fmt.Sprintf("idgen fsm: unknown command type %d at index %d: upgrade this node", byte(c.Type), index))
	}
	if err := s.Admit(c); err != nil {
		return err
	}
	switch c.Type {
	case CmdInit:
		return s.applyInit(c)
	case CmdClaim:
		return s.applyClaim(c, index)
	case CmdReserve:
		return s.applyReserve(c)
	case CmdRelease:
		return s.applyRelease(c, index)
	case CmdRemove:
		return s.applyRemove(c.NodeID, index)
	case CmdFence:
		return s.applyFence(c, index)
	default:
		// known() names a type this switch does not apply: a bug, and as
		// fatal as an unknown type.
		panic(fmt.Sprintf("idgen fsm: command type %s at index %d has no apply", c.Type, index))
	}
}

// applyFence closes off a window another cluster granted on a slot: the
// slot's highWater rises to UpTo, so every later tenure starts above it, and
// a tenure holding the slot now ends (its owner claims again, above UpTo),
// since raising its highWater would extend that owner's window into the
// other cluster's. A fence at or below highWater changes nothing.
func (s *State) applyFence(c Command, index uint64) interface{} {
	sl := &s.Slots[c.Slot]
	if c.UpTo <= sl.HighWater {
		return Result{Slot: c.Slot, Granted: sl.HighWater}
	}
	if sl.Owner != "" {
		if err := s.free(c.Slot, index); err != nil {
			return err
		}
	}
	sl.HighWater = c.UpTo
	return Result{Slot: c.Slot, Granted: sl.HighWater}
}

// applyInit starts a new cluster. Every slot's highWater starts at Start, the
// founding voters' time (the quorum-th latest of their clocks) plus
// max-ahead, so the new cluster never stamps a second that an earlier life
// of any of its nodes could have borrowed.
func (s *State) applyInit(c Command) interface{} {
	if s.Layout != nil {
		if *s.Layout != *c.Layout {
			return fmt.Errorf("%w: cluster uses %s, init asked for %s", ErrLayoutMismatch, s.Layout, c.Layout)
		}
		return fmt.Errorf("%w: cluster %s is initialized already", ErrBadCommand, s.ClusterID)
	}
	l := *c.Layout
	s.Layout = &l
	s.ClusterID, s.Created = c.ClusterID, c.Created
	s.Slots = make([]SlotState, l.Slots())
	for i := range s.Slots {
		s.Slots[i].HighWater = c.Start
	}
	return Result{}
}

// applyClaim grants the node its slot (a new tenure on the slot it holds, or
// a free slot) and opens a new tenure: the entry's index. Nothing is stored
// when no slot is free.
func (s *State) applyClaim(c Command, index uint64) interface{} {
	if s.Layout == nil {
		return ErrNotInitialized
	}
	if c.Layout != nil && *c.Layout != *s.Layout {
		return LayoutMismatch(*s.Layout, *c.Layout, "node "+c.Node.Name+" claims a slot in a cluster")
	}
	var old *Tenure
	i := s.SlotOf(c.Node.ID)
	if i >= 0 {
		if old = s.FindTenure(i, s.Slots[i].Tenure); old == nil {
			return s.noTenure(i)
		}
	} else if i = s.FreeSlot(c.Node.Datacenter); i < 0 {
		return fmt.Errorf("%w (%d slots); the node waits as a standby", ErrClusterFull, len(s.Slots))
	}
	if old != nil {
		// A new claim of the held slot ends the old tenure: whatever generator
		// belonged to it is fenced from here on. (Before the append below,
		// which may move the records.)
		old.ReleasedIndex = index
	}
	s.Nodes[c.Node.ID] = *c.Node
	sl := &s.Slots[i]
	sl.Owner, sl.Tenure = c.Node.ID, index
	s.Tenures = append(s.Tenures, Tenure{
		Slot: i, NodeID: c.Node.ID, Floor: sl.HighWater, Granted: sl.HighWater, ClaimedIndex: index,
	})
	return Result{Slot: i, Floor: sl.HighWater, Granted: sl.HighWater, Tenure: index}
}

// tenure finds the record of a slot's tenure, searching from the newest, or
// returns nil. The state's invariants (checked by Restore) say it exists for
// every owned slot; callers still refuse the command rather than panic.
// GrantedWindows is, per slot, the largest Granted of the slot's tenures:
// everything the cluster could have stamped there.
func (s *State) GrantedWindows() map[int]int64 {
	out := map[int]int64{}
	for _, t := range s.Tenures {
		if g, ok := out[t.Slot]; !ok || t.Granted > g {
			out[t.Slot] = t.Granted
		}
	}
	return out
}

func (s *State) FindTenure(slot int, id uint64) *Tenure {
	for i := len(s.Tenures) - 1; i >= 0; i-- {
		if t := &s.Tenures[i]; t.Slot == slot && t.ClaimedIndex == id {
			return t
		}
	}
	return nil
}

// ErrStateCorrupt: the state breaks its own invariants (a record Apply keeps
// is missing). A command that meets it is refused and changes nothing.
var ErrStateCorrupt = errors.New("replicated state is inconsistent")

func (s *State) noTenure(slot int) error {
	return fmt.Errorf("%w: slot %d has no record of its tenure %d", ErrStateCorrupt, slot, s.Slots[slot].Tenure)
}

// Holds reports whether node Holds slot under exactly this tenure.
func (s *State) Holds(node string, slot int, tenure uint64) bool {
	return s.Layout != nil && slot >= 0 && slot < len(s.Slots) && tenure != 0 &&
		s.Slots[slot].Owner == node && s.Slots[slot].Tenure == tenure
}

// FreeSlot picks the lowest free slot in the preferred datacenter, else the
// lowest free slot anywhere.
func (s *State) FreeSlot(datacenter int) int {
	machines := 1 << s.Layout.MachineBits
	if datacenter >= 0 && datacenter < 1<<s.Layout.DatacenterBits {
		for i := datacenter * machines; i < (datacenter+1)*machines && i < len(s.Slots); i++ {
			if s.Slots[i].Owner == "" {
				return i
			}
		}
	}
	for i := range s.Slots {
		if s.Slots[i].Owner == "" {
			return i
		}
	}
	return -1
}

// applyReserve extends the slot's window, but only for its current tenure:
// a grant can never reach a generator of an earlier or unknown claim.
func (s *State) applyReserve(c Command) interface{} {
	if !s.Holds(c.NodeID, c.Slot, c.Tenure) {
		return fmt.Errorf("%w: node %s does not hold slot %d under tenure %d", ErrNotOwner, c.NodeID, c.Slot, c.Tenure)
	}
	sl := &s.Slots[c.Slot]
	if c.UpTo > sl.HighWater {
		t := s.FindTenure(c.Slot, sl.Tenure)
		if t == nil {
			return s.noTenure(c.Slot)
		}
		sl.HighWater = c.UpTo
		t.Granted = sl.HighWater
	}
	return Result{Slot: c.Slot, Granted: sl.HighWater, Tenure: sl.Tenure}
}

// applyRelease frees the slot of the named tenure (a graceful leave), keeping
// its highWater.
func (s *State) applyRelease(c Command, index uint64) interface{} {
	i := s.SlotOf(c.NodeID)
	if !s.Holds(c.NodeID, i, c.Tenure) {
		return fmt.Errorf("%w: node %s does not hold a slot under tenure %d", ErrNotOwner, c.NodeID, c.Tenure)
	}
	if err := s.free(i, index); err != nil {
		return err
	}
	return Result{Slot: i}
}

// applyRemove frees the node's slot, whatever its tenure, and forgets the node.
func (s *State) applyRemove(nodeID string, index uint64) interface{} {
	_, known := s.Nodes[nodeID]
	i := s.SlotOf(nodeID)
	if !known && i < 0 {
		return fmt.Errorf("%w: %s", ErrUnknownNode, nodeID)
	}
	if i >= 0 {
		if err := s.free(i, index); err != nil {
			return err
		}
	}
	delete(s.Nodes, nodeID)
	return Result{Slot: i}
}

// free ends the slot's current tenure; it changes nothing when it fails.
func (s *State) free(slot int, index uint64) error {
	t := s.FindTenure(slot, s.Slots[slot].Tenure)
	if t == nil {
		return s.noTenure(slot)
	}
	t.ReleasedIndex = index
	s.Slots[slot].Owner = ""
	s.Slots[slot].Tenure = 0
	return nil
}

// Check validates a state loaded from a snapshot: the invariants Apply keeps,
// and every bound Apply and the state's readers index by, so that no snapshot
// can make a later Apply or read panic.
func (s *State) Check() error {
	if s.Layout == nil {
		if len(s.Slots) != 0 || len(s.Tenures) != 0 || len(s.Nodes) != 0 || s.ClusterID != "" {
			return errors.New("slots, tenures, nodes or a cluster ID without a layout")
		}
		return nil
	}
	l := *s.Layout
	if err := l.Validate(); err != nil {
		return fmt.Errorf("layout: %w", err)
	}
	if l.Slots() > MaxSlots {
		return fmt.Errorf("layout %s has %d slots (at most %d)", l, l.Slots(), MaxSlots)
	}
	if s.ClusterID == "" {
		return errors.New("no cluster ID (a snapshot of an idgen without cluster identity? start a new cluster with fresh data dirs)")
	}
	if len(s.ClusterID) > maxIDLen {
		return fmt.Errorf("cluster ID of %d bytes (at most %d)", len(s.ClusterID), maxIDLen)
	}
	if len(s.Slots) != l.Slots() {
		return fmt.Errorf("%d slots, layout has %d", len(s.Slots), l.Slots())
	}
	for id, info := range s.Nodes {
		if info.ID != id {
			return fmt.Errorf("node %q is recorded as %q", id, info.ID)
		}
		if err := info.validate(); err != nil {
			return fmt.Errorf("node %q: %v", id, err)
		}
		if err := info.checkDatacenter(l); err != nil {
			return fmt.Errorf("node %q: %v", id, err)
		}
	}
	maxTS := l.MaxTimestamp()
	// byIndex finds a tenure by its claim's index, which names it uniquely.
	byIndex := make(map[uint64]int, len(s.Tenures))
	for k, t := range s.Tenures {
		_, dup := byIndex[t.ClaimedIndex]
		switch {
		case t.Slot < 0 || t.Slot >= len(s.Slots):
			return fmt.Errorf("tenure %+v: slot not in 0..%d", t, len(s.Slots)-1)
		case validID("node ID", t.NodeID) != nil:
			return fmt.Errorf("tenure %+v: %v", t, validID("node ID", t.NodeID))
		case t.ClaimedIndex == 0 || dup:
			return fmt.Errorf("tenure %+v: claim index zero or not unique", t)
		case t.ReleasedIndex != 0 && t.ReleasedIndex <= t.ClaimedIndex:
			return fmt.Errorf("tenure %+v: released before it was claimed", t)
		case t.ClaimedIndex > s.Index || t.ReleasedIndex > s.Index:
			// A later claim would reuse its index as a tenure ID.
			return fmt.Errorf("tenure %+v: after the state's last applied index %d", t, s.Index)
		case t.Floor < 0 || t.Granted < t.Floor || t.Granted > maxTS:
			return fmt.Errorf("tenure %+v: window not in 0..%d", t, maxTS)
		}
		byIndex[t.ClaimedIndex] = k
	}
	owners := map[string]int{}
	for i, sl := range s.Slots {
		if sl.HighWater < 0 || sl.HighWater > maxTS {
			return fmt.Errorf("slot %d: highWater %d not in 0..%d", i, sl.HighWater, maxTS)
		}
		if (sl.Owner == "") != (sl.Tenure == 0) {
			return fmt.Errorf("slot %d: owner %q with tenure %d", i, sl.Owner, sl.Tenure)
		}
		if sl.Owner == "" {
			continue
		}
		if j, ok := owners[sl.Owner]; ok {
			return fmt.Errorf("slots %d and %d are both held by %q", j, i, sl.Owner)
		}
		owners[sl.Owner] = i
		if _, ok := s.Nodes[sl.Owner]; !ok {
			return fmt.Errorf("slot %d: owner %q is not a known node", i, sl.Owner)
		}
		k, ok := byIndex[sl.Tenure]
		if !ok || s.Tenures[k].Slot != i || s.Tenures[k].NodeID != sl.Owner || s.Tenures[k].ReleasedIndex != 0 || s.Tenures[k].Granted != sl.HighWater {
			return fmt.Errorf("slot %d: no open tenure %d of %s at highWater %d", i, sl.Tenure, sl.Owner, sl.HighWater)
		}
	}
	return nil
}

// Holders are the nodes that hold a slot.
func (s *State) Holders() map[string]bool {
	out := map[string]bool{}
	for _, sl := range s.Slots {
		if sl.Owner != "" {
			out[sl.Owner] = true
		}
	}
	return out
}

// SortedNodeIDs returns the state's node IDs in order, for stable output.
func (s *State) SortedNodeIDs() []string { return slices.Sorted(maps.Keys(s.Nodes)) }

// LayoutMismatch is the refusal of a node configured with a layout other
// than its cluster's; who names the cluster.
func LayoutMismatch(cluster, configured generator.Layout, who string) error {
	return fmt.Errorf("%w: %s of layout %s (its log's first entry), and this node is configured with layout %s: "+
		"start the node with the cluster's layout or with none (a node that joins or restarts takes its cluster's); "+
		"a cluster's layout never changes, so another layout needs a new cluster, on empty data dirs",
		ErrLayoutMismatch, who, cluster, configured)
}

// Tenure is one holding of a slot by one node (generator.Tenure: the
// record the log keeps of it).
type Tenure = generator.Tenure
