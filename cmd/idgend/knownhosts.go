package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/idgen/idgen/cluster/door"
)

// knownHostsFile, in the data dir, is the gRPC door's book of hosts whose
// handshake succeeded in the last hour (rpc.Bounds.KnownHandshakes), kept
// across restarts: a node restarted while a stranger holds its shared
// handshake places still knows the fleet's pods, which redial it at once.
const knownHostsFile = "known-hosts.json"

// knownHostsMaxBytes bounds what is read of the file: the default book of
// 16,384 hosts is about 1 MiB.
const knownHostsMaxBytes = 8 << 20

// knownHostsEvery is how often the book is saved while the node runs (and
// once more at shutdown), so a node that crashes loses a minute of it.
const knownHostsEvery = time.Minute

// loadKnownHosts reads the book an earlier run saved. A missing file is an
// empty book; an unreadable one is logged and taken as empty (the door
// checks every entry again: what is not an IP, expired or from the future
// is left out).
func loadKnownHosts(dir string, log *slog.Logger) []door.Proof {
	path := filepath.Join(dir, knownHostsFile)
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		log.Warn("known hosts not read; starting with none", "path", path, "err", err)
		return nil
	}
	defer f.Close()
	var proofs []door.Proof
	if err := json.NewDecoder(io.LimitReader(f, knownHostsMaxBytes)).Decode(&proofs); err != nil {
		log.Warn("known hosts not read; starting with none", "path", path, "err", err)
		return nil
	}
	return proofs
}

// saveKnownHosts writes the book to the data dir, whole or not at all.
func saveKnownHosts(dir string, proofs []door.Proof) error {
	b, err := json.Marshal(proofs)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, knownHostsFile+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // gone after the rename; left only on failure
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), filepath.Join(dir, knownHostsFile))
}

// keepKnownHosts saves book() every knownHostsEvery until ctx ends.
func keepKnownHosts(ctx context.Context, dir string, book func() []door.Proof, log *slog.Logger) {
	t := time.NewTicker(knownHostsEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := saveKnownHosts(dir, book()); err != nil {
				log.Warn("known hosts not saved", "dir", dir, "err", err)
			}
		}
	}
}
