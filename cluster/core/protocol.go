package core

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"
)

// Protocol versions (cluster/DESIGN.md, "Protocol versions"). What nodes say
// to each other (log entries, snapshots, forwarded commands and their
// answers, Status answers, gossip metadata) has a version. Every node speaks
// a range of them and says so (gossip metadata, Status); the cluster runs
// the highest version every server of its Raft configuration speaks, and a
// node writes a new entry type, field meaning or answer shape only once the
// cluster runs a version that has it. A message of a version this node does
// not speak is refused with both versions named, and changes nothing.
//
// The wire rule every version keeps: a reader ignores fields it does not
// know (JSON entries and answers, protobuf answers, gossip metadata). So a
// new optional field whose absence means what the older version did needs
// no gate; a new entry type, or a field that changes what an entry does,
// does (an older replica would stop, or apply it differently).
//
//	1  the release recorded in scripts/upgrade/PREVIOUS and those before it
//	   (no version on the wire: a message without one is version 1)
//	2  nodes advertise their range (gossip "p", Status protocol_min/max and
//	   cluster_protocol); Status carries the answering node's clock, which
//	   the leader counts in the cluster's time; forwards and answers carry
//	   the version they are written in ("pv"). No new entry type: a version 1
//	   replica applies every entry a version 2 leader writes.
const (
	// ProtocolMin and ProtocolMax are the versions this build speaks.
	ProtocolMin = 1
	ProtocolMax = 2
)

// ErrProtocol: a message, a node or an entry of a protocol version the
// receiver does not speak.
var ErrProtocol = errors.New("protocol version not spoken")

// ProtocolRange is the protocol versions a node speaks.
type ProtocolRange struct{ Min, Max int }

// OwnProtocols is what this build speaks.
var OwnProtocols = ProtocolRange{Min: ProtocolMin, Max: ProtocolMax}

// LegacyProtocols is what a node that advertises no range speaks: the
// releases before version 2.
var LegacyProtocols = ProtocolRange{Min: 1, Max: 1}

func (r ProtocolRange) String() string {
	if r.Min == r.Max {
		return strconv.Itoa(r.Min)
	}
	return fmt.Sprintf("%d..%d", r.Min, r.Max)
}

// OrLegacy is r, or legacyProtocols for a node that advertised none.
func (r ProtocolRange) OrLegacy() ProtocolRange {
	if r.Min <= 0 || r.Max < r.Min {
		return LegacyProtocols
	}
	return r
}

func (r ProtocolRange) speaks(v int) bool { return v >= r.Min && v <= r.Max }

// Intersect is the versions both r and o speak; ok is false when none.
func (r ProtocolRange) Intersect(o ProtocolRange) (ProtocolRange, bool) {
	out := ProtocolRange{max(r.Min, o.Min), min(r.Max, o.Max)}
	return out, out.Min <= out.Max
}

// VersionOf is the version a message says it is written in (0, from a
// release that writes none: version 1; a negative one stays what it is, and
// no node speaks it).
func VersionOf(v int) int {
	if v == 0 {
		return 1
	}
	return v
}

// checkMessageVersion is a receiver's check of a message of version v (a
// forward, an answer) that node from sent: refused unless this node speaks
// v, with both versions and the node to upgrade named.
func checkMessageVersion(what, from string, v int, own ProtocolRange) error {
	v = VersionOf(v)
	switch {
	case v > own.Max:
		return fmt.Errorf("%w: %s from %s is written in protocol %d, this node speaks %s; upgrade this node to a release "+
			"that speaks %d (or roll %s back); nothing was applied", ErrProtocol, what, from, v, own, v, from)
	case v < own.Min:
		return fmt.Errorf("%w: %s from %s is written in protocol %d, this node speaks %s; if this node was rolled "+
			"forward past what its cluster speaks, roll it back; else upgrade %s to a release that speaks %d; nothing was applied",
			ErrProtocol, what, from, v, own, from, own.Min)
	}
	return nil
}

// JoinProtocol is the leader's check of a node that would join a cluster
// whose servers speak the common range cluster: the node must share a
// version with them, or the cluster would have no version to run.
func JoinProtocol(node, cluster ProtocolRange) error {
	node = node.OrLegacy()
	if _, ok := node.Intersect(cluster); ok {
		return nil
	}
	if node.Max < cluster.Min {
		return fmt.Errorf("%w: it speaks protocol %s, the cluster's servers speak %s; it is too old for this cluster: "+
			"run a release that speaks %d on it", ErrProtocol, node, cluster, cluster.Min)
	}
	return fmt.Errorf("%w: it speaks protocol %s, the cluster's servers speak %s; it is too new for this cluster: "+
		"upgrade the cluster's nodes one at a time to a release that speaks both first", ErrProtocol, node, cluster)
}

// EntryProtocol is the protocol version that introduced each entry type: a
// leader writes an entry only while the cluster runs at least its version
// (writable). Every type so far is version 1.
var EntryProtocol = map[CommandType]int{
	CmdInit: 1, CmdClaim: 1, CmdReserve: 1, CmdRelease: 1, CmdRemove: 1, CmdFence: 1,
}

// Writable is the leader's gate before it proposes an entry of type t in a
// cluster running version running.
func Writable(t CommandType, running int) error {
	v, ok := EntryProtocol[t]
	if !ok {
		return fmt.Errorf("%w: entry type %s has no protocol version", ErrProtocol, t)
	}
	if v > running {
		return fmt.Errorf("%w: a %s entry needs protocol %d, and the cluster runs %d (a server of an older release is "+
			"still in it; see idctl members); nothing was written", ErrProtocol, t, v, running)
	}
	return nil
}

// ProtocolPollEvery is how often the leader asks every voter for its
// Status (pollClocks), whatever else it heard from it: the ranges the
// leader decides by are the ones the voters proved over the authenticated
// transport, not what gossip says of them.
const ProtocolPollEvery = 10 * time.Second

// ProvenBook keeps each server's protocol range as its own authenticated
// Status last said it (the leader's clock polls).
type ProvenBook struct {
	mu sync.Mutex
	by map[string]provenRange
}

type provenRange struct {
	r  ProtocolRange
	at time.Time
}

func (b *ProvenBook) Prove(id string, r ProtocolRange) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.by == nil {
		b.by = map[string]provenRange{}
	}
	b.by[id] = provenRange{r, time.Now()}
}

// ProvenAt is when id last proved its range (zero: never).
func (b *ProvenBook) ProvenAt(id string) time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.by[id].at
}

// Get is id's proven range, if it proved one within a minute.
func (b *ProvenBook) Get(id string) (ProtocolRange, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p, ok := b.by[id]
	return p.r, ok && time.Since(p.at) < time.Minute
}
