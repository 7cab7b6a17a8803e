package cluster

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/idgen/idgen/cluster/door"
)

const (
	nodeIDFile  = "node-id"
	layoutFile  = "layout.json"
	raftDBFile  = "raft.db"
	snapshotDir = "snapshots"
)

// openDataDir makes sure dir is a writable data dir and returns the node ID
// stored in it, creating one on first start. The layout of the node's
// cluster is kept beside it once known (layoutrecord.go).
func openDataDir(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("data dir %s: %w", dir, err)
	}
	probe, err := os.CreateTemp(dir, ".write-probe-*")
	if err != nil {
		return "", fmt.Errorf("data dir %s is not writable: %w", dir, err)
	}
	probe.Close()
	os.Remove(probe.Name())

	id, err := readOrCreate(filepath.Join(dir, nodeIDFile), func() ([]byte, error) {
		var b [16]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, err
		}
		return []byte(hex.EncodeToString(b[:])), nil
	})
	if err != nil {
		return "", fmt.Errorf("node id: %w", err)
	}
	if !validNodeID(id) {
		return "", fmt.Errorf("node id file %s holds %q, not 32 hex characters: the data dir is damaged; restore the file, or wipe the whole data dir to start as a new node",
			filepath.Join(dir, nodeIDFile), truncate(string(id), 40))
	}
	return string(id), nil
}

// readOrCreate returns the trimmed content of path, writing make's output
// there first (atomically, fsynced) when it does not exist.
func readOrCreate(path string, make func() ([]byte, error)) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		return bytes.TrimSpace(b), nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	b, err = make()
	if err != nil {
		return nil, err
	}
	return b, writeFileSync(path, b)
}

// writeFileSync replaces path with b atomically (temp file, fsync, rename).
func writeFileSync(path string, b []byte) error {
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// validNodeID: node IDs are 16 random bytes in lower-case hex.
func validNodeID(id []byte) bool {
	if len(id) != 32 {
		return false
	}
	_, err := hex.DecodeString(string(id))
	return err == nil && strings.ToLower(string(id)) == string(id)
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// raftStore bundles Raft with the stores it was opened on.
type raftStore struct {
	raft      *raft.Raft
	transport *identityTransport
	boltStore *raftboltdb.BoltStore
	notifyCh  chan bool
	// hadState is true when the data dir already held Raft state at start.
	hadState bool
	// stopGrowth ends watchGrowth, which closes growthDone (nil unless the
	// node started as a lone voter).
	stopGrowth, growthDone chan struct{}
}

func openRaft(cfg *Config, nodeID string, f *fsm, greeter raftGreeter, counts *door.Counts, logger *slog.Logger) (*raftStore, error) {
	hl := newHCLogger("raft", logger)
	advertise, err := net.ResolveTCPAddr("tcp", cfg.RaftAdvertise)
	if err != nil {
		return nil, fmt.Errorf("raft advertise address %q: %w", cfg.RaftAdvertise, err)
	}
	network, err := raftTransport(cfg, advertise, greeter, counts, hl, logger)
	if err != nil {
		return nil, fmt.Errorf("raft transport on %s: %w", cfg.RaftAddr, err)
	}
	transport := newIdentityTransport(network, raft.ServerID(nodeID), counts, logger.With("component", "raft"))
	rdir := filepath.Join(cfg.DataDir, "raft")
	if err := os.MkdirAll(rdir, 0o755); err != nil {
		transport.Close()
		return nil, err
	}
	// fsync stays on (NoSync false): a grant acknowledged by a quorum must
	// survive power loss, or a restarted quorum could grant it again.
	bolt, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(rdir, raftDBFile)})
	if err != nil {
		transport.Close()
		return nil, fmt.Errorf("open raft log: %w", err)
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(rdir, 2, hl)
	if err != nil {
		bolt.Close()
		transport.Close()
		return nil, fmt.Errorf("open snapshot store: %w", err)
	}
	hadState, err := raft.HasExistingState(bolt, bolt, snaps)
	if err != nil {
		bolt.Close()
		transport.Close()
		return nil, err
	}

	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(nodeID)
	rc.Logger = hl
	if cfg.SnapshotThreshold > 0 {
		rc.SnapshotThreshold = cfg.SnapshotThreshold
		rc.TrailingLogs = cfg.SnapshotThreshold / 2
	}
	if cfg.SnapshotInterval > 0 {
		rc.SnapshotInterval = cfg.SnapshotInterval
	}
	lone := loneTimings(cfg, rc, hadState, bolt, bolt, snaps, transport.LocalAddr(), logger)
	if lone {
		loneTimeouts(rc)
	}
	notifyCh := make(chan bool, 8)
	rc.NotifyCh = notifyCh
	r, err := raft.NewRaft(rc, f, bolt, bolt, snaps, transport)
	if err != nil {
		bolt.Close()
		transport.Close()
		return nil, fmt.Errorf("start raft: %w", err)
	}
	transport.watch(r)
	s := &raftStore{raft: r, transport: transport, boltStore: bolt, notifyCh: notifyCh, hadState: hadState}
	if lone {
		s.stopGrowth, s.growthDone = make(chan struct{}), make(chan struct{})
		go s.watchGrowth(rc.LocalID, logger)
	}
	return s, nil
}

func (s *raftStore) close() error {
	if s.stopGrowth != nil {
		close(s.stopGrowth)
		<-s.growthDone
	}
	err := s.raft.Shutdown().Error()
	if cerr := s.boltStore.Close(); err == nil {
		err = cerr
	}
	if cerr := s.transport.Close(); err == nil {
		err = cerr
	}
	return err
}
