package main

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idgen/idgen/cluster/door"
)

// TestKnownHostsFile: the book is saved whole and read back, and what a
// save cut short left is removed; a file that is not a book, is longer
// than a book of the bound's hosts or is not a regular file (a FIFO would
// block the start: outside attack round 12; knownhosts_unix_test.go) is
// logged and read as none.
func TestKnownHostsFile(t *testing.T) {
	dir := t.TempDir()
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	if got := loadKnownHosts(dir, 16, log); got != nil || logs.Len() != 0 {
		t.Fatalf("no file: %v, logged %q", got, logs.String())
	}
	at := time.Date(2026, 12, 4, 18, 0, 0, 0, time.UTC)
	want := []door.Proof{{Host: "10.0.0.1", At: at}, {Host: "fd00::1", At: at.Add(time.Second)}}
	if err := saveKnownHosts(dir, want); err != nil {
		t.Fatal(err)
	}
	got := loadKnownHosts(dir, 16, log)
	if len(got) != 2 || got[0].Host != "10.0.0.1" || !got[1].At.Equal(want[1].At) {
		t.Fatalf("read back %+v, want %+v", got, want)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, knownHostsFile+".*")); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
	stale := filepath.Join(dir, knownHostsFile+".123")
	if err := os.WriteFile(stale, []byte("[]"), 0o600); err != nil {
		t.Fatal(err)
	}
	loadKnownHosts(dir, 16, log)
	if _, err := os.Stat(stale); err == nil {
		t.Error("a temporary file a cut-short save left was not removed")
	}
	for name, body := range map[string][]byte{
		"junk":     []byte("{not json"),
		"too long": append([]byte(`[{"host":"10.0.0.1","at":"2026-12-04T18:00:00Z","pad":"`), bytes.Repeat([]byte("x"), 16*knownHostsBytesPerHost)...),
	} {
		logs.Reset()
		if err := os.WriteFile(filepath.Join(dir, knownHostsFile), body, 0o600); err != nil {
			t.Fatal(err)
		}
		if got := loadKnownHosts(dir, 16, log); got != nil {
			t.Errorf("%s: read %d proofs, want none", name, len(got))
		}
		if !strings.Contains(logs.String(), "known hosts not read") {
			t.Errorf("%s: not logged: %q", name, logs.String())
		}
	}
}
