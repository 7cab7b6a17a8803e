package cluster

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/idgen/idgen/cluster/door"
)

// slogTrace is where hclog's Trace lands in slog: below Debug, so it shows
// only when a handler asks for more than debug.
const slogTrace = slog.LevelDebug - 4

// hclogAdapter is an hclog.Logger that writes slog records, so Raft's
// key/value pairs stay fields (in JSON logs too) and its level follows the
// slog handler's (--log-level) instead of a level fixed here.
type hclogAdapter struct {
	logger  *slog.Logger
	name    string
	implied []any
}

// newHCLogger routes a hashicorp library's hclog output into slog, tagged
// with component=name.
func newHCLogger(name string, logger *slog.Logger) hclog.Logger {
	return &hclogAdapter{logger: logger.With("component", name), name: name}
}

var _ hclog.Logger = (*hclogAdapter)(nil)

func toSlogLevel(l hclog.Level) slog.Level {
	switch l {
	case hclog.Trace:
		return slogTrace
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	default:
		return slog.LevelInfo
	}
}

// enabled: a logs at level l.
func enabled(a *hclogAdapter, l hclog.Level) bool {
	return a.logger.Enabled(context.Background(), toSlogLevel(l))
}

// Log writes one record; hclog.Off drops it.
func (a *hclogAdapter) Log(level hclog.Level, msg string, args ...any) {
	if level == hclog.Off || !enabled(a, level) {
		return
	}
	a.logger.Log(context.Background(), toSlogLevel(level), msg, hclogArgs(args)...)
}

// hclogArgs turns hclog's argument conventions into slog's: an odd
// trailing value gets hclog's own key, and hclog.Format values and
// Stringers are printed.
func hclogArgs(args []any) []any {
	if len(args)%2 == 1 {
		args = append(args[:len(args):len(args)], nil)
		args[len(args)-1], args[len(args)-2] = args[len(args)-2], hclog.MissingKey
	}
	for i := 1; i < len(args); i += 2 {
		switch v := args[i].(type) {
		case hclog.Format:
			if len(v) > 0 {
				if s, ok := v[0].(string); ok {
					args[i] = fmt.Sprintf(s, v[1:]...)
				}
			}
		case error:
		case fmt.Stringer:
			// Raft passes itself ("Node at 127.0.0.1:7001 [Follower]"),
			// which JSON would print as {}.
			args[i] = v.String()
		}
	}
	return args
}

// Trace logs at hclog's trace level (below slog's Debug).
func (a *hclogAdapter) Trace(msg string, args ...any) { a.Log(hclog.Trace, msg, args...) }

// Debug logs at Debug.
func (a *hclogAdapter) Debug(msg string, args ...any) { a.Log(hclog.Debug, msg, args...) }

// Info logs at Info.
func (a *hclogAdapter) Info(msg string, args ...any) { a.Log(hclog.Info, msg, args...) }

// Warn logs at Warn.
func (a *hclogAdapter) Warn(msg string, args ...any) { a.Log(hclog.Warn, msg, args...) }

// Error logs at Error.
func (a *hclogAdapter) Error(msg string, args ...any) { a.Log(hclog.Error, msg, args...) }

// IsTrace reports whether trace records are written.
func (a *hclogAdapter) IsTrace() bool { return enabled(a, hclog.Trace) }

// IsDebug reports whether debug records are written.
func (a *hclogAdapter) IsDebug() bool { return enabled(a, hclog.Debug) }

// IsInfo reports whether info records are written.
func (a *hclogAdapter) IsInfo() bool { return enabled(a, hclog.Info) }

// IsWarn reports whether warnings are written.
func (a *hclogAdapter) IsWarn() bool { return enabled(a, hclog.Warn) }

// IsError reports whether errors are written.
func (a *hclogAdapter) IsError() bool { return enabled(a, hclog.Error) }

// ImpliedArgs returns the pairs added by With.
func (a *hclogAdapter) ImpliedArgs() []any { return a.implied }

// With returns a logger that adds args to every record.
func (a *hclogAdapter) With(args ...any) hclog.Logger {
	args = hclogArgs(args)
	return &hclogAdapter{
		logger:  a.logger.With(args...),
		name:    a.name,
		implied: append(a.implied[:len(a.implied):len(a.implied)], args...),
	}
}

// Name returns the logger's name (its component).
func (a *hclogAdapter) Name() string { return a.name }

// Named returns a sub-logger whose name is appended with a dot, as hclog does.
func (a *hclogAdapter) Named(name string) hclog.Logger {
	if a.name != "" {
		name = a.name + "." + name
	}
	return a.ResetNamed(name)
}

// ResetNamed returns a sub-logger with exactly this name.
func (a *hclogAdapter) ResetNamed(name string) hclog.Logger {
	return &hclogAdapter{logger: a.logger.With("component", name), name: name, implied: a.implied}
}

// SetLevel does nothing: the slog handler (--log-level) decides the level
// for the whole process.
func (a *hclogAdapter) SetLevel(hclog.Level) {}

// GetLevel reports the lowest level the slog handler writes.
func (a *hclogAdapter) GetLevel() hclog.Level {
	for _, l := range []hclog.Level{hclog.Trace, hclog.Debug, hclog.Info, hclog.Warn, hclog.Error} {
		if enabled(a, l) {
			return l
		}
	}
	return hclog.Off
}

// StandardLogger returns a *log.Logger whose lines become records of this logger.
func (a *hclogAdapter) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(a.StandardWriter(opts), "", 0)
}

// StandardWriter returns a writer whose lines become records; a "[LEVEL]"
// tag in a line sets its level.
func (a *hclogAdapter) StandardWriter(*hclog.StandardLoggerOptions) io.Writer {
	return &slogWriter{logger: a.logger}
}

// slogWriter turns std log lines ("[WARN] memberlist: msg") into slog
// records at the tagged level. memberlist takes only a *log.Logger, so its
// messages arrive as text; the level and component are all there is to keep.
// With limit set, warnings and errors go through it: memberlist logs one
// line per junk packet or stream (a refused label, a failed decrypt), so
// anyone who can send UDP to the port could otherwise flood the log.
type slogWriter struct {
	logger *slog.Logger
	limit  *door.RateLog
}

var logTags = []struct {
	tag   string
	level slog.Level
}{
	{"[ERROR]", slog.LevelError}, {"[ERR]", slog.LevelError}, {"[WARN]", slog.LevelWarn},
	{"[INFO]", slog.LevelInfo}, {"[DEBUG]", slog.LevelDebug}, {"[TRACE]", slogTrace},
}

func (w *slogWriter) Write(p []byte) (int, error) {
	line := strings.TrimSpace(string(p))
	level := slog.LevelInfo
	for _, t := range logTags {
		if i := strings.Index(line, t.tag); i >= 0 {
			level = t.level
			line = strings.TrimSpace(line[i+len(t.tag):])
			break
		}
	}
	if !w.logger.Enabled(context.Background(), level) {
		return len(p), nil
	}
	// "memberlist: Suspect x has failed" -> "Suspect x has failed"; the
	// component field already names the library.
	if i := strings.Index(line, ": "); i > 0 && !strings.ContainsAny(line[:i], " =") {
		line = line[i+2:]
	}
	if w.limit != nil && level >= slog.LevelWarn {
		kind, peer := noiseKey(line)
		w.limit.Log(level, kind, peer, line)
		return len(p), nil
	}
	w.logger.Log(context.Background(), level, line)
	return len(p), nil
}

// noiseKey sorts a memberlist line for rate limiting: its kind is the
// message up to the first detail (":", a quote, a number), so an attacker's
// label or bytes cannot make new kinds; its peer is the host of its
// "from=" field (memberlist's LogAddress and LogConn), if any.
func noiseKey(line string) (kind, peer string) {
	kind = line
	if i := strings.Index(line, " from="); i >= 0 {
		kind = line[:i]
		peer = line[i+len(" from="):]
		if j := strings.IndexByte(peer, ' '); j >= 0 {
			peer = peer[:j]
		}
		peer = door.PeerString(peer)
	}
	if i := strings.IndexAny(kind, ":\"'(0123456789"); i >= 0 {
		kind = kind[:i]
	}
	kind = strings.TrimSpace(kind)
	if len(kind) > 80 {
		kind = kind[:80]
	}
	return kind, peer
}

var _ io.Writer = (*slogWriter)(nil)
