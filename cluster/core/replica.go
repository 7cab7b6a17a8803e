package core

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// ApplyEntry applies the log entry data at index to s, as every replica
// does (the node's Raft FSM and the simulator's replicas alike): it returns
// the entry's Result or its refusal (an error), deterministic in the bytes.
// It stops the process (panics) on an entry this build cannot read the way
// its writer meant: an unknown type, or a protocol version it does not
// speak. Consul and Nomad stop there too: a replica that skipped or
// misread an entry would silently diverge from the others.
func (s *State) ApplyEntry(index uint64, data []byte) interface{} {
	if len(data) > 0 && !CommandType(data[0]).Known() {
		panic(fmt.Sprintf("idgen fsm: unknown command type %d at index %d: upgrade this node", data[0], index))
	}
	c, _, err := DecodeEntry(data, OwnProtocols)
	if errors.Is(err, ErrEntryVersion) {
		panic(fmt.Sprintf("idgen fsm: %v, at index %d: upgrade this node", err, index))
	}
	s.Index = index
	if err != nil {
		// Every replica holds the same bytes and refuses them the same way,
		// so an error result is as deterministic as applying the entry.
		return fmt.Errorf("%w: log entry %d: %v", ErrBadCommand, index, err)
	}
	return s.Apply(c, index)
}

// EncodeSnapshot writes s as a snapshot (JSON; the field names are the
// snapshot's schema, read by every release).
func EncodeSnapshot(w io.Writer, s *State) error {
	if err := json.NewEncoder(w).Encode(s); err != nil {
		return fmt.Errorf("persist snapshot: %w", err)
	}
	return nil
}

// DecodeSnapshot reads a snapshot and checks its invariants (State.Check):
// a snapshot that breaks one is refused, never restored.
func DecodeSnapshot(r io.Reader) (*State, error) {
	s := NewState()
	if err := json.NewDecoder(r).Decode(s); err != nil {
		return nil, fmt.Errorf("restore snapshot: %w", err)
	}
	if s.Nodes == nil {
		s.Nodes = map[string]NodeInfo{}
	}
	if err := s.Check(); err != nil {
		return nil, fmt.Errorf("restore snapshot: %w", err)
	}
	return s, nil
}
