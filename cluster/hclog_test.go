package cluster

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/idgen/idgen/scripts/harness"
)

// syncBuffer is a bytes.Buffer safe for the goroutines Raft logs from.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// records decodes every JSON line written so far.
func (b *syncBuffer) records(t *testing.T) []map[string]any {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(b.buf.String()), "\n") {
		if line == "" {
			continue
		}
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("log line is not JSON: %q: %v", line, err)
		}
		out = append(out, r)
	}
	return out
}

func jsonLogger(w *syncBuffer, level slog.Level) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level}))
}

func TestHCLogKeepsFieldsAndFollowsLevel(t *testing.T) {
	var buf syncBuffer
	l := newHCLogger("raft", jsonLogger(&buf, slog.LevelInfo))
	l.Debug("hidden at info", "k", 1)
	l.Trace("hidden too")
	l.Named("snapshot").With("id", "2-10").Warn("slow", "took", hclog.Fmt("%dms", 12), "dangling")
	l.Info("entering leader state", "leader", "node-a", "term", 3)

	if l.IsDebug() || !l.IsInfo() || l.GetLevel() != hclog.Info {
		t.Errorf("info logger: IsDebug %v IsInfo %v GetLevel %v", l.IsDebug(), l.IsInfo(), l.GetLevel())
	}
	recs := buf.records(t)
	if len(recs) != 2 {
		t.Fatalf("got %d records, want 2 (debug and trace dropped at info): %v", len(recs), recs)
	}
	w := recs[0]
	if w["level"] != "WARN" || w["component"] != "raft.snapshot" || w["id"] != "2-10" || w["took"] != "12ms" || w[hclog.MissingKey] != "dangling" {
		t.Errorf("warn record lost fields: %v", w)
	}
	i := recs[1]
	if i["msg"] != "entering leader state" || i["leader"] != "node-a" || i["term"] != 3.0 || i["component"] != "raft" {
		t.Errorf("info record lost fields: %v", i)
	}

	var dbg syncBuffer
	d := newHCLogger("raft", jsonLogger(&dbg, slog.LevelDebug))
	d.Debug("shown at debug", "k", 1)
	if !d.IsDebug() || d.IsTrace() || len(dbg.records(t)) != 1 {
		t.Errorf("debug logger: IsDebug %v IsTrace %v records %d", d.IsDebug(), d.IsTrace(), len(dbg.records(t)))
	}
}

func TestStandardWriterKeepsLevel(t *testing.T) {
	var buf syncBuffer
	w := &slogWriter{logger: jsonLogger(&buf, slog.LevelInfo).With("component", "memberlist")}
	w.Write([]byte("2026/01/01 00:00:00 [DEBUG] memberlist: Stream connection from=127.0.0.1:1\n"))
	w.Write([]byte("2026/01/01 00:00:00 [WARN] memberlist: Refuting a suspect message (from: a)\n"))
	recs := buf.records(t)
	if len(recs) != 1 || recs[0]["level"] != "WARN" || recs[0]["msg"] != "Refuting a suspect message (from: a)" {
		t.Fatalf("records %v: want the warning alone, without its prefix", recs)
	}
}

// A real node's Raft lines arrive in JSON logs with their fields as fields.
func TestRaftLogsKeepFields(t *testing.T) {
	tc := newTestCluster(t)
	var buf syncBuffer
	s := tc.add("a", 1)
	s.cfg.Logger = jsonLogger(&buf, slog.LevelInfo)
	waitReady(t, tc.start("a"))
	harness.WaitFor(t, 10*time.Second, "raft's leader line", func() bool {
		for _, r := range buf.records(t) {
			if r["component"] == "raft" && r["msg"] == "entering leader state" && r["leader"] != nil {
				return true
			}
		}
		return false
	})
}
