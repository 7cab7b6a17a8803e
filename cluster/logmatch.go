package cluster

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/hashicorp/raft"
)

// Two logs with one cluster ID never exchange members. A copy of a lone
// seed's data dir leads a log of its own that forked from the cluster's at
// the copy, and Raft cannot tell the two apart once their terms coincide
// (each lone voter's restart is an election, so they often do): a member of
// one added to the other keeps or takes entries that differ at equal index
// and term. Whether the member follows another leader (followsNoOther) says
// nothing while the other side has none (mid-election, or a copy whose
// quorum is gone). So every member reports the last command entry its
// replica applied, as its index and a hash of index, term and bytes; a
// leader adds, promotes or moves it only if its own log holds the same
// entry there. A member that applied past this leader's last entry cannot
// be of this log either (a leader holds every committed entry). An entry
// this leader compacted into a snapshot is not compared: Raft sends the
// snapshot. A member that reports none (an older node, or nothing applied
// since its last restore) is not compared.

// errProbeForked: the member's log is not a prefix of this leader's.
var errProbeForked = errors.New("its log differs from this cluster's (another log with this cluster's ID: a copy of a data dir)")

// appliedEntry is one applied command entry, by index and hash.
type appliedEntry struct {
	index uint64
	hash  uint64
}

// entryHash is what a replica and a leader compare: SHA-256 of the entry's
// index, term and bytes, its first 8 bytes as a big-endian integer.
func entryHash(l *raft.Log) uint64 {
	h := sha256.New()
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], l.Index)
	binary.BigEndian.PutUint64(b[8:], l.Term)
	h.Write(b[:])
	h.Write(l.Data)
	return binary.BigEndian.Uint64(h.Sum(nil)[:8])
}

// logHolds is the check above against this leader's log.
func (n *Node) logHolds(index, hash uint64) error {
	if index == 0 {
		return nil
	}
	if last := n.rs.raft.LastIndex(); index > last {
		return fmt.Errorf("%w (it applied entry %d, past this log's last %d)", errProbeForked, index, last)
	}
	var l raft.Log
	if err := n.rs.boltStore.GetLog(index, &l); err != nil {
		return nil // compacted into a snapshot: not comparable
	}
	if l.Type != raft.LogCommand || entryHash(&l) != hash {
		return fmt.Errorf("%w (its entry %d is not this log's)", errProbeForked, index)
	}
	return nil
}

// lastCommand is the last command entry this replica applied. Right after
// a start or a snapshot restore none has been applied yet, so it is read
// back from the log store: the newest command entry at or below the applied
// index among the last lookBack entries (Raft keeps trailing entries past a
// snapshot). nil when there is none to read.
func (n *Node) lastCommand() *appliedEntry {
	if e := n.fsm.lastCommand.Load(); e != nil {
		return e
	}
	const lookBack = 64
	applied := n.rs.raft.AppliedIndex()
	first, err := n.rs.boltStore.FirstIndex()
	if err != nil || first == 0 {
		return nil
	}
	for i := applied; i >= first && i > 0 && applied-i < lookBack; i-- {
		var l raft.Log
		if n.rs.boltStore.GetLog(i, &l) != nil {
			return nil
		}
		if l.Type == raft.LogCommand {
			e := &appliedEntry{index: l.Index, hash: entryHash(&l)}
			n.fsm.lastCommand.CompareAndSwap(nil, e)
			return e
		}
	}
	return nil
}

// voters counts the voters of this node's Raft configuration.
func (n *Node) voters() int {
	c := 0
	for _, s := range n.rs.raft.GetConfiguration().Configuration().Servers {
		if s.Suffrage == raft.Voter {
			c++
		}
	}
	return c
}
