package core

import (
	"encoding/json"
	"fmt"

	"github.com/idgen/idgen/generator"
)

// The log's schema (cluster/DESIGN.md, "Log entries have a schema"). An
// entry is its type's byte (commandType) and a JSON body of that type's own
// Go type, in an envelope that says under which protocol version the leader
// wrote it. The field names are the ones every release has read entries by
// (wire_test.go holds them to the release before), so a node of any
// version this one speaks applies what this one writes, and this one reads
// every entry an earlier release wrote (which has no envelope version, and
// carried the forwarded message's sent_at and pv, ignored here as there).
// In memory an entry is a command, the form the leader's checks and Apply
// read (command.go).

// envelope is what every entry carries besides its type's fields.
type envelope struct {
	// Version is the protocol version the leader wrote the entry under (its
	// writeProtocol: one every server had proved it speaks); 0 for an entry
	// of a release before the envelope. A replica stops on an entry of a
	// version it does not speak, as on an unknown type: a later version may
	// give a field a meaning this one would not apply.
	Version int `json:"ev,omitempty"`
}

// initEntry founds the cluster: its identity, layout, creation time and
// every slot's first high-water.
type initEntry struct {
	envelope
	Layout    *generator.Layout `json:"layout,omitempty"`
	ClusterID string            `json:"cluster_id,omitempty"`
	Created   int64             `json:"created,omitempty"`
	Start     int64             `json:"start,omitempty"`
}

// claimEntry opens a tenure of a slot for a node.
type claimEntry struct {
	envelope
	Node      *NodeInfo         `json:"node,omitempty"`
	Layout    *generator.Layout `json:"layout,omitempty"`
	ClusterID string            `json:"cluster_id,omitempty"`
}

// reserveEntry grants a slot's tenure its window up to UpTo.
type reserveEntry struct {
	envelope
	NodeID    string `json:"node_id,omitempty"`
	Slot      int    `json:"slot,omitempty"`
	Tenure    uint64 `json:"tenure,omitempty"`
	UpTo      int64  `json:"up_to,omitempty"`
	ClusterID string `json:"cluster_id,omitempty"`
}

// releaseEntry ends a node's tenure (a graceful leave).
type releaseEntry struct {
	envelope
	NodeID    string `json:"node_id,omitempty"`
	Tenure    uint64 `json:"tenure,omitempty"`
	ClusterID string `json:"cluster_id,omitempty"`
}

// removeEntry forgets a node and ends its tenure.
type removeEntry struct {
	envelope
	NodeID    string `json:"node_id,omitempty"`
	ClusterID string `json:"cluster_id,omitempty"`
}

// fenceEntry closes off a window another cluster (Foreign) granted on a slot.
type fenceEntry struct {
	envelope
	Slot      int    `json:"slot,omitempty"`
	UpTo      int64  `json:"up_to,omitempty"`
	Foreign   string `json:"foreign,omitempty"`
	ClusterID string `json:"cluster_id,omitempty"`
}

// entryOf is c's entry written under protocol version v.
func entryOf(c Command, v int) (any, error) {
	e := envelope{Version: v}
	switch c.Type {
	case CmdInit:
		return initEntry{e, c.Layout, c.ClusterID, c.Created, c.Start}, nil
	case CmdClaim:
		return claimEntry{e, c.Node, c.Layout, c.ClusterID}, nil
	case CmdReserve:
		return reserveEntry{e, c.NodeID, c.Slot, c.Tenure, c.UpTo, c.ClusterID}, nil
	case CmdRelease:
		return releaseEntry{e, c.NodeID, c.Tenure, c.ClusterID}, nil
	case CmdRemove:
		return removeEntry{e, c.NodeID, c.ClusterID}, nil
	case CmdFence:
		return fenceEntry{e, c.Slot, c.UpTo, c.Foreign, c.ClusterID}, nil
	}
	return nil, fmt.Errorf("%w: no entry of type %s", ErrBadCommand, c.Type)
}

// EncodeEntry is c as a log entry written under protocol version v.
func EncodeEntry(c Command, v int) ([]byte, error) {
	e, err := entryOf(c, v)
	if err != nil {
		return nil, err
	}
	body, err := json.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("encode %s entry: %w", c.Type, err)
	}
	return append([]byte{byte(c.Type)}, body...), nil
}

// ErrEntryVersion: an entry written under a protocol version this build does
// not speak.
var ErrEntryVersion = fmt.Errorf("%w: a log entry of a protocol version this node does not speak", ErrProtocol)

// entry is what every entry type does: say its version, and give its
// command.
type entry interface {
	version() int
	command() Command
}

func (e envelope) version() int { return e.Version }

func (x initEntry) command() Command {
	return Command{Type: CmdInit, Layout: x.Layout, ClusterID: x.ClusterID, Created: x.Created, Start: x.Start}
}

func (x claimEntry) command() Command {
	return Command{Type: CmdClaim, Node: x.Node, Layout: x.Layout, ClusterID: x.ClusterID}
}

func (x reserveEntry) command() Command {
	return Command{Type: CmdReserve, NodeID: x.NodeID, Slot: x.Slot, Tenure: x.Tenure, UpTo: x.UpTo, ClusterID: x.ClusterID}
}

func (x releaseEntry) command() Command {
	return Command{Type: CmdRelease, NodeID: x.NodeID, Tenure: x.Tenure, ClusterID: x.ClusterID}
}

func (x removeEntry) command() Command {
	return Command{Type: CmdRemove, NodeID: x.NodeID, ClusterID: x.ClusterID}
}

func (x fenceEntry) command() Command {
	return Command{Type: CmdFence, Slot: x.Slot, UpTo: x.UpTo, Foreign: x.Foreign, ClusterID: x.ClusterID}
}

// decodeBody reads an entry's body as entry type T.
func decodeBody[T entry](body []byte) (Command, int, error) {
	var x T
	if err := json.Unmarshal(body, &x); err != nil {
		return Command{}, 0, err
	}
	return x.command(), x.version(), nil
}

// DecodeEntry reads a log entry: its command (only its type's fields set)
// and the protocol version it was written under (0: before the envelope).
// An entry of a version above speaks.Max is refused (errEntryVersion);
// Apply stops the node on it.
func DecodeEntry(data []byte, speaks ProtocolRange) (Command, int, error) {
	if len(data) == 0 {
		return Command{}, 0, fmt.Errorf("decode entry: empty entry")
	}
	var (
		t    = CommandType(data[0])
		c    Command
		v    int
		err  error
		body = data[1:]
	)
	switch t {
	case CmdInit:
		c, v, err = decodeBody[initEntry](body)
	case CmdClaim:
		c, v, err = decodeBody[claimEntry](body)
	case CmdReserve:
		c, v, err = decodeBody[reserveEntry](body)
	case CmdRelease:
		c, v, err = decodeBody[releaseEntry](body)
	case CmdRemove:
		c, v, err = decodeBody[removeEntry](body)
	case CmdFence:
		c, v, err = decodeBody[fenceEntry](body)
	default:
		return Command{Type: t}, 0, fmt.Errorf("decode entry: unknown type %s", t)
	}
	if err != nil {
		return Command{}, 0, fmt.Errorf("decode %s entry: %w", t, err)
	}
	if v > speaks.Max {
		return c, v, fmt.Errorf("%w: a %s entry of protocol %d, this node speaks %s", ErrEntryVersion, t, v, speaks)
	}
	return c, v, nil
}
