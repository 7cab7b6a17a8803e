package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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

// knownHostsBytesPerHost bounds what is read of the file: a proof is at
// most about 100 bytes of JSON (an IPv6 host and a time with nanoseconds),
// so the default book of 16,384 hosts is at most 2 MiB.
const knownHostsBytesPerHost = 128

// knownHostsEvery is how often the book is saved while the node runs (and
// once more at shutdown), so a node that crashes loses a minute of it.
const knownHostsEvery = time.Minute

// loadKnownHosts reads the book an earlier run saved, of at most maxHosts
// hosts (--grpc-known-addresses), and removes what a save cut short left
// behind. A missing file is an empty book; one that is not a regular file
// (a FIFO would block the start), too long or not a book is logged and
// taken as empty (the door checks every entry again: what is not an IP or
// expired is left out).
func loadKnownHosts(dir string, maxHosts int, log *slog.Logger) []door.Proof {
	left, _ := filepath.Glob(filepath.Join(dir, knownHostsFile+".*"))
	for _, p := range left {
		os.Remove(p)
	}
	path := filepath.Join(dir, knownHostsFile)
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err == nil && !fi.Mode().IsRegular() {
		err = fmt.Errorf("not a regular file (%s)", fi.Mode().Type())
	}
	var f *os.File
	if err == nil {
		f, err = os.Open(path)
	}
	if err != nil {
		log.Warn("known hosts not read; starting with none", "path", path, "err", err)
		return nil
	}
	defer f.Close()
	var proofs []door.Proof
	limit := int64(max(maxHosts, 1)) * knownHostsBytesPerHost
	if err := json.NewDecoder(io.LimitReader(f, limit)).Decode(&proofs); err != nil {
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
