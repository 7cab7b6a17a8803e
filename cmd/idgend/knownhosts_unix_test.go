//go:build unix

package main

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idgen/idgen/cluster/door"
	"github.com/idgen/idgen/scripts/harness"
)

// TestKnownHostsFIFOIsNotRead: a FIFO in place of the book (someone who
// can write the data dir) is logged and read as no book, instead of
// blocking the start until something writes to it (outside attack round
// 12: the node claimed its slot and never served).
func TestKnownHostsFIFOIsNotRead(t *testing.T) {
	dir := t.TempDir()
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	path := filepath.Join(dir, knownHostsFile)
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Skipf("no FIFO here: %v", err)
	}
	defer os.Remove(path)
	done := make(chan []door.Proof, 1)
	go func() { done <- loadKnownHosts(dir, 16, log) }()
	select {
	case got := <-done:
		if got != nil || !strings.Contains(logs.String(), "not a regular file") {
			t.Errorf("a FIFO: read %v, logged %q", got, logs.String())
		}
	case <-time.After(harness.Scale(5 * time.Second)):
		t.Fatal("reading a FIFO in place of the book blocked")
	}
}
