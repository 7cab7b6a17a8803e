package core

import (
	"encoding/json"
	"fmt"

	"github.com/idgen/idgen/generator"
)

// CommandType is the first byte of every Raft log entry this package writes.
type CommandType byte

const (
	CmdInit    CommandType = 1
	CmdClaim   CommandType = 2
	CmdReserve CommandType = 3
	CmdRelease CommandType = 4
	CmdRemove  CommandType = 5
	// CmdFence raises a slot's highWater above a window another cluster
	// granted there, ending the slot's current tenure if it is held. Only the
	// leader writes it (fenceForeign); it is never forwarded.
	CmdFence CommandType = 6
)

func (t CommandType) String() string {
	switch t {
	case CmdInit:
		return "init"
	case CmdClaim:
		return "claim"
	case CmdReserve:
		return "reserve"
	case CmdRelease:
		return "release"
	case CmdRemove:
		return "remove"
	case CmdFence:
		return "fence"
	}
	return fmt.Sprintf("unknown(%d)", byte(t))
}

// Known reports whether this version of idgen can apply entries of type t.
// Keep it in step with String and state.apply (TestKnownCommandTypes checks
// it against String): Apply stops the node on an entry of any other type.
func (t CommandType) Known() bool {
	switch t {
	case CmdInit, CmdClaim, CmdReserve, CmdRelease, CmdRemove, CmdFence:
		return true
	}
	return false
}

// NodeInfo is what the replicated state knows about a node.
type NodeInfo struct {
	ID         string `json:"id"`
	Name       string `json:"name"`
	RaftAddr   string `json:"raft_addr"`
	GossipAddr string `json:"gossip_addr"`
	GRPCAddr   string `json:"grpc_addr"`
	HTTPAddr   string `json:"http_addr"`
	// Datacenter is the preferred datacenter, or -1 for any.
	Datacenter int `json:"datacenter"`
}

// Command is the body of a log entry. Only the fields of its type are set.
// Every value Apply needs is inside the entry, so Apply never reads a clock.
type Command struct {
	Type CommandType `json:"-"`

	Layout *generator.Layout `json:"layout,omitempty"` // Init, Claim
	Node   *NodeInfo         `json:"node,omitempty"`   // Claim
	NodeID string            `json:"node_id,omitempty"`
	Slot   int               `json:"slot,omitempty"`  // Reserve, Fence
	UpTo   int64             `json:"up_to,omitempty"` // Reserve, Fence
	// Foreign names the other cluster whose window a Fence closes off.
	Foreign string `json:"foreign,omitempty"`
	// Tenure names the claim a Reserve or Release speaks for (the claim's
	// log index). Only the slot's current tenure is accepted.
	Tenure uint64 `json:"tenure,omitempty"`

	// ClusterID is the cluster the command belongs to: on Init the new
	// cluster's identity, on every other command the sender's cluster. The
	// leader refuses a forward that names another cluster, and Apply an entry
	// that does (an empty one is an entry written before commands carried it).
	ClusterID string `json:"cluster_id,omitempty"`
	// Created (the founding voters' time, Unix ns) and Start (every slot's
	// first highWater, in layout units) are set by Init only.
	Created int64 `json:"created,omitempty"`
	Start   int64 `json:"start,omitempty"`

	// SentAt is the sender's clock (Unix nanoseconds) when it made the request.
	// The leader checks it against the cluster's time before proposing and
	// counts it in that time (a member's Claim or Reserve); Apply ignores it.
	SentAt int64 `json:"sent_at,omitempty"`
	// Protocol is the protocol version a forwarded command is written in
	// (protocol.go; 0, from a release before version 2, means 1). The
	// leader refuses one it does not speak; Apply ignores it.
	Protocol int `json:"pv,omitempty"`
}

// Result is what Apply returns for a command, and what a forwarded command
// returns to the follower that sent it.
type Result struct {
	Slot    int   `json:"slot"`
	Floor   int64 `json:"floor"`
	Granted int64 `json:"granted"`
	// Tenure is the claim's identity (Claim) or the tenure granted to (Reserve).
	Tenure uint64 `json:"tenure,omitempty"`
	// Index is the Raft log index of the entry (0 when nothing was proposed).
	Index uint64 `json:"index,omitempty"`
	// LeaderTime is the leader's clock (Unix nanoseconds) when it answered.
	LeaderTime int64 `json:"leader_time,omitempty"`
	// ClusterTime is the cluster's time as the leader reckoned it (Unix ns),
	// 0 while fewer than a quorum of voters' clocks were known.
	ClusterTime int64 `json:"cluster_time,omitempty"`
	// ClusterID names the answering leader's cluster; a follower ignores an
	// answer from another cluster. An answer is only a hint in any case: a
	// node mints from its own applied log (agent.go).
	ClusterID string `json:"cluster_id,omitempty"`
	// Protocol is the version the answer is written in (0 means 1); a
	// follower ignores an answer of a version it does not speak.
	Protocol int `json:"pv,omitempty"`
}

func EncodeCommand(c Command) ([]byte, error) {
	body, err := json.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("encode %s command: %w", c.Type, err)
	}
	return append([]byte{byte(c.Type)}, body...), nil
}

func DecodeCommand(data []byte) (Command, error) {
	if len(data) == 0 {
		return Command{}, fmt.Errorf("decode command: empty entry")
	}
	var c Command
	if err := json.Unmarshal(data[1:], &c); err != nil {
		return Command{}, fmt.Errorf("decode %s command: %w", CommandType(data[0]), err)
	}
	c.Type = CommandType(data[0])
	return c, nil
}

func EncodeResult(r Result) ([]byte, error) { return json.Marshal(r) }

func DecodeResult(data []byte) (Result, error) {
	var r Result
	if err := json.Unmarshal(data, &r); err != nil {
		return Result{}, fmt.Errorf("decode result: %w", err)
	}
	return r, nil
}

// SpeaksFor is the node a command speaks for: the field its type names (a
// Claim's Node, every other type's NodeID), whatever else a forged command
// carries (outside attack round 13 sent a Reserve of one node's tenure
// with another node's Node object).
func (c Command) SpeaksFor() string {
	if c.Type == CmdClaim {
		if c.Node == nil {
			return ""
		}
		return c.Node.ID
	}
	return c.NodeID
}

// Bounds on what a command may carry. A command is checked against them in
// the leader before it is proposed and again in Apply, so a forged or buggy
// entry is refused instead of growing the state or crashing every replica.
const (
	maxIDLen   = 64
	maxNameLen = 64
	maxAddrLen = 255
	// MaxSlots bounds the slots an Init may create (1<<(datacenter+machine
	// bits)): a valid layout may ask for 2^61, which no replica can allocate.
	MaxSlots = 1 << 16
)

// Validate checks the shape of a command: the fields its type needs, and
// their sizes. It does not look at the state; state.admit adds the checks
// against the cluster's layout.
func (c Command) Validate() error {
	switch c.Type {
	case CmdInit:
		if c.Layout == nil {
			return fmt.Errorf("%w: init without layout", ErrBadCommand)
		}
		if err := c.Layout.Validate(); err != nil {
			return fmt.Errorf("%w: init layout: %v", ErrBadCommand, err)
		}
		if c.ClusterID == "" || len(c.ClusterID) > maxIDLen {
			return fmt.Errorf("%w: init needs a cluster ID of 1..%d bytes (a log written by an idgen without cluster identity? start a new cluster with fresh data dirs)", ErrBadCommand, maxIDLen)
		}
		if n := c.Layout.Slots(); n > MaxSlots {
			return fmt.Errorf("%w: init layout %s has %d slots (at most %d)", ErrBadCommand, c.Layout, n, MaxSlots)
		}
		if c.Start < 0 || c.Start > c.Layout.MaxTimestamp() {
			return fmt.Errorf("%w: init start %d not in 0..%d (the layout's last timestamp)", ErrBadCommand, c.Start, c.Layout.MaxTimestamp())
		}
		return nil
	case CmdClaim:
		if c.Node == nil {
			return fmt.Errorf("%w: claim without node", ErrBadCommand)
		}
		return c.Node.validate()
	case CmdReserve, CmdRelease:
		if err := validID("node ID", c.NodeID); err != nil {
			return err
		}
		if c.Tenure == 0 {
			return fmt.Errorf("%w: %s for node %s names no tenure", ErrBadCommand, c.Type, c.NodeID)
		}
		if c.Type == CmdReserve && c.Slot < 0 {
			return fmt.Errorf("%w: reserve of slot %d", ErrBadCommand, c.Slot)
		}
		if c.Type == CmdReserve && c.UpTo < 0 {
			return fmt.Errorf("%w: reserve up to %d, a negative timestamp", ErrBadCommand, c.UpTo)
		}
		return nil
	case CmdRemove:
		return validID("node ID", c.NodeID)
	case CmdFence:
		if c.Slot < 0 || c.UpTo < 0 {
			return fmt.Errorf("%w: fence of slot %d up to %d", ErrBadCommand, c.Slot, c.UpTo)
		}
		return validID("foreign cluster ID", c.Foreign)
	}
	return fmt.Errorf("%w: unknown command type %d", ErrBadCommand, byte(c.Type))
}

// Addrs are the addresses the node advertises.
func (n NodeInfo) Addrs() []string { return []string{n.RaftAddr, n.GossipAddr, n.GRPCAddr, n.HTTPAddr} }

func (n NodeInfo) validate() error {
	if err := validID("node ID", n.ID); err != nil {
		return err
	}
	if len(n.Name) > maxNameLen {
		return fmt.Errorf("%w: node name of %d bytes (at most %d)", ErrBadCommand, len(n.Name), maxNameLen)
	}
	for _, a := range n.Addrs() {
		if len(a) > maxAddrLen {
			return fmt.Errorf("%w: node address of %d bytes (at most %d)", ErrBadCommand, len(a), maxAddrLen)
		}
	}
	if n.Datacenter < -1 {
		return fmt.Errorf("%w: node %s datacenter %d (-1 means any)", ErrBadCommand, n.ID, n.Datacenter)
	}
	return nil
}

// checkDatacenter checks a node's preferred datacenter against the layout.
func (n NodeInfo) checkDatacenter(l generator.Layout) error {
	if dcs := 1 << l.DatacenterBits; n.Datacenter < -1 || n.Datacenter >= dcs {
		return fmt.Errorf("%w: node %s datacenter %d not in -1..%d (layout %s)", ErrBadCommand, n.ID, n.Datacenter, dcs-1, l)
	}
	return nil
}

func validID(what, id string) error {
	if id == "" || len(id) > maxIDLen {
		return fmt.Errorf("%w: %s must be 1..%d bytes, got %d", ErrBadCommand, what, maxIDLen, len(id))
	}
	return nil
}
