package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"

	"github.com/hashicorp/raft"

	"github.com/idgen/idgen/generator"
)

// errNotInitialized: a Claim arrived before the Init entry.
var errNotInitialized = errors.New("cluster state not initialized yet")

// slotState is one slot of the replicated state.
type slotState struct {
	Owner     string `json:"owner,omitempty"`
	HighWater int64  `json:"high_water"`
	// Tenure indexes the owner's entry in state.Tenures, -1 when free.
	Tenure int `json:"tenure"`
}

// state is the replicated state machine's data (DESIGN.md section 3).
type state struct {
	// Index is the Raft index of the last entry applied.
	Index   uint64              `json:"index"`
	Layout  *generator.Layout   `json:"layout,omitempty"`
	Nodes   map[string]NodeInfo `json:"nodes"`
	Slots   []slotState         `json:"slots"`
	Tenures []Tenure            `json:"tenures"`
}

func newState() *state { return &state{Nodes: map[string]NodeInfo{}} }

func (s *state) slotOf(nodeID string) int {
	for i, sl := range s.Slots {
		if sl.Owner == nodeID {
			return i
		}
	}
	return -1
}

func (s *state) clone() *state {
	c := &state{
		Index:   s.Index,
		Nodes:   make(map[string]NodeInfo, len(s.Nodes)),
		Slots:   append([]slotState(nil), s.Slots...),
		Tenures: append([]Tenure(nil), s.Tenures...),
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

// fsm applies the log to the state. It is the only writer of the state; reads
// go through view, which hands out the current state under a read lock.
type fsm struct {
	mu    sync.RWMutex
	state *state
	// changed receives a signal (never blocking) after every applied entry, so
	// the slot agent notices at once when its slot is taken away.
	changed chan struct{}
}

func newFSM() *fsm {
	return &fsm{state: newState(), changed: make(chan struct{}, 1)}
}

// view runs f with the current state; f must not keep or modify it.
func (f *fsm) view(fn func(s *state)) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	fn(f.state)
}

func (f *fsm) notify() {
	select {
	case f.changed <- struct{}{}:
	default:
	}
}

// Apply implements raft.FSM. It returns a result or an error.
func (f *fsm) Apply(l *raft.Log) interface{} {
	if l.Type != raft.LogCommand {
		return nil
	}
	c, err := decodeCommand(l.Data)
	if err != nil {
		// A corrupt entry is as fatal as an unknown one: skipping it would let
		// replicas diverge.
		panic(fmt.Sprintf("idgen fsm: cannot apply log entry %d: %v", l.Index, err))
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	defer f.notify()
	f.state.Index = l.Index
	return f.state.apply(c, l.Index)
}

// apply is deterministic: it reads only the command, the index and the state.
func (s *state) apply(c command, index uint64) interface{} {
	switch c.Type {
	case cmdInit:
		return s.applyInit(c)
	case cmdClaim:
		return s.applyClaim(c, index)
	case cmdReserve:
		return s.applyReserve(c)
	case cmdRelease:
		return s.applyRelease(c.NodeID, index, false)
	case cmdRemove:
		return s.applyRelease(c.NodeID, index, true)
	default:
		// Consul and Nomad stop here too: a replica that skipped an entry it
		// does not understand would silently diverge from the others.
		panic(fmt.Sprintf("idgen fsm: unknown command type %d at index %d: upgrade this node", byte(c.Type), index))
	}
}

func (s *state) applyInit(c command) interface{} {
	if c.Layout == nil {
		return fmt.Errorf("init without layout")
	}
	if s.Layout != nil {
		if *s.Layout != *c.Layout {
			return fmt.Errorf("%w: cluster uses %s, init asked for %s", ErrLayoutMismatch, s.Layout, c.Layout)
		}
		return result{}
	}
	l := *c.Layout
	s.Layout = &l
	s.Slots = make([]slotState, l.Slots())
	for i := range s.Slots {
		s.Slots[i].Tenure = -1
	}
	return result{}
}

func (s *state) applyClaim(c command, index uint64) interface{} {
	if s.Layout == nil {
		return errNotInitialized
	}
	if c.Node == nil || c.Node.ID == "" {
		return fmt.Errorf("claim without node")
	}
	if c.Layout != nil && *c.Layout != *s.Layout {
		return fmt.Errorf("%w: cluster uses %s, node %s is configured with %s", ErrLayoutMismatch, s.Layout, c.Node.Name, c.Layout)
	}
	s.Nodes[c.Node.ID] = *c.Node
	if i := s.slotOf(c.Node.ID); i >= 0 {
		return result{Slot: i, Floor: s.Slots[i].HighWater, Granted: s.Slots[i].HighWater}
	}
	i := s.freeSlot(c.Node.Datacenter)
	if i < 0 {
		return fmt.Errorf("%w (%d slots); the node waits as a standby", ErrClusterFull, len(s.Slots))
	}
	sl := &s.Slots[i]
	sl.Owner = c.Node.ID
	sl.Tenure = len(s.Tenures)
	s.Tenures = append(s.Tenures, Tenure{
		Slot: i, NodeID: c.Node.ID, Floor: sl.HighWater, Granted: sl.HighWater, ClaimedIndex: index,
	})
	return result{Slot: i, Floor: sl.HighWater, Granted: sl.HighWater}
}

// freeSlot picks the lowest free slot in the preferred datacenter, else the
// lowest free slot anywhere.
func (s *state) freeSlot(datacenter int) int {
	machines := 1 << s.Layout.MachineBits
	if datacenter >= 0 {
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

func (s *state) applyReserve(c command) interface{} {
	if s.Layout == nil {
		return errNotInitialized
	}
	if c.Slot < 0 || c.Slot >= len(s.Slots) || s.Slots[c.Slot].Owner != c.NodeID {
		return fmt.Errorf("%w: node %s does not own slot %d", ErrNotOwner, c.NodeID, c.Slot)
	}
	sl := &s.Slots[c.Slot]
	if c.UpTo > sl.HighWater {
		sl.HighWater = c.UpTo
		s.Tenures[sl.Tenure].Granted = sl.HighWater
	}
	return result{Slot: c.Slot, Granted: sl.HighWater}
}

// applyRelease frees the node's slot, keeping its highWater. remove also
// forgets the node.
func (s *state) applyRelease(nodeID string, index uint64, remove bool) interface{} {
	_, known := s.Nodes[nodeID]
	i := s.slotOf(nodeID)
	if !known && i < 0 {
		return fmt.Errorf("%w: %s", ErrUnknownNode, nodeID)
	}
	if i >= 0 {
		s.Tenures[s.Slots[i].Tenure].ReleasedIndex = index
		s.Slots[i].Owner = ""
		s.Slots[i].Tenure = -1
	}
	if remove {
		delete(s.Nodes, nodeID)
	}
	return result{Slot: i}
}

// Snapshot implements raft.FSM.
func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return &fsmSnapshot{state: f.state.clone()}, nil
}

// Restore implements raft.FSM: it replaces the whole state.
func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	s := newState()
	if err := json.NewDecoder(rc).Decode(s); err != nil {
		return fmt.Errorf("restore snapshot: %w", err)
	}
	if s.Nodes == nil {
		s.Nodes = map[string]NodeInfo{}
	}
	f.mu.Lock()
	f.state = s
	f.mu.Unlock()
	f.notify()
	return nil
}

type fsmSnapshot struct{ state *state }

func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	if err := json.NewEncoder(sink).Encode(s.state); err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("persist snapshot: %w", err)
	}
	return sink.Close()
}

func (s *fsmSnapshot) Release() {}

// sortedNodeIDs returns the state's node IDs in order, for stable output.
func (s *state) sortedNodeIDs() []string {
	ids := make([]string, 0, len(s.Nodes))
	for id := range s.Nodes {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}
