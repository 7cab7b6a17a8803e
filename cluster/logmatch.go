package cluster

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

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
// snapshot. A member that reports none (an older node, or a data dir that
// never applied one) is not compared.

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
func (lv *logView) logHolds(index, hash uint64) error {
	n := lv.n
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

// lastCommand is the last command entry this replica applied: the newest
// since this process started or last restored a snapshot, else the one it
// recorded in its data dir (appliedFile) before. A member restarted on a new
// Raft address before its cluster speaks to it has applied nothing since
// its start (Raft applies nothing until it learns the commit index) and
// knows no leader; without the record a copy's leader could take it into
// its log (the third outside attack did). The log itself is not read back:
// after a snapshot install Raft keeps trailing entries that may never have
// been committed, so only what this replica applied counts.
func (lv *logView) lastCommand() *appliedEntry {
	n := lv.n
	if e := n.fsm.lastCommand.Load(); e != nil {
		return e
	}
	return lv.appliedSaved.Load()
}

// appliedFile records the last command entry this replica applied, as
// "index hash" (decimal, then 16 hex digits), rewritten at most once a
// housekeeping tick and on Close. It may lag by a tick after a crash; any
// entry this replica applied was committed in its log, which is all the
// comparison needs.
const appliedFile = "APPLIED"

// readApplied reads the record (nil when there is none).
func readApplied(dataDir string) (*appliedEntry, error) {
	path := filepath.Join(dataDir, appliedFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var e appliedEntry
	if _, err := fmt.Sscanf(string(b), "%d %x", &e.index, &e.hash); err != nil || e.index == 0 {
		return nil, fmt.Errorf("%s: not an applied entry record (%q): remove it to start without one", path, strings.TrimSpace(string(b)))
	}
	return &e, nil
}

// saveApplied records the replica's last applied command entry if it
// changed since the last record.
func (lv *logView) saveApplied() {
	n := lv.n
	e := n.fsm.lastCommand.Load()
	if e == nil || e == lv.appliedSaved.Load() {
		return
	}
	path := filepath.Join(n.cfg.DataDir, appliedFile)
	if err := writeFileSync(path, fmt.Appendf(nil, "%d %016x\n", e.index, e.hash)); err != nil {
		n.logger.Warn("record the last applied entry in the data dir", "path", path, "err", err)
		return
	}
	lv.appliedSaved.Store(e)
}
