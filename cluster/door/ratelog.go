package door

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults for RateLog.
const (
	// DefaultLogEvery is how often one peer's refusals of one kind are
	// logged: the first at once, the rest as a count when the minute ends.
	DefaultLogEvery = time.Minute
	// DefaultLogPeers is how many (kind, peer) pairs are tracked at once;
	// beyond it, new ones share one line ("others"), so spoofed source
	// addresses cannot grow the table or the log.
	DefaultLogPeers = 64
)

// RateLog logs refused peers without letting them flood the log: the first
// refusal of a kind from a peer is logged at once; the ones that follow
// within Every are counted, and the count is logged in one line (with
// "suppressed") when the interval ends. A peer that keeps at it gets one
// line per interval. The zero value is not usable; use NewRateLog.
type RateLog struct {
	logger *slog.Logger
	every  time.Duration
	peers  int

	seen atomic.Int64

	mu   sync.Mutex
	open map[rateKey]*rateWindow
}

type rateKey struct{ kind, peer string }

type rateWindow struct {
	level      slog.Level
	msg        string
	args       []any
	suppressed int
	timer      *time.Timer
}

// NewRateLog logs to logger, one line per (kind, peer) per every
// (DefaultLogEvery if 0), tracking at most DefaultLogPeers pairs.
func NewRateLog(logger *slog.Logger, every time.Duration) *RateLog {
	if every <= 0 {
		every = DefaultLogEvery
	}
	return &RateLog{logger: logger, every: every, peers: DefaultLogPeers, open: map[rateKey]*rateWindow{}}
}

// Peer is the part of an address that names a peer for the per-address
// bounds: its host, without the port, which changes with every
// connection; for an IPv6 host (not loopback, not an IPv4 one), its /64,
// which one machine commonly holds whole, so that a stranger does not
// get a share per address of its prefix.
func Peer(a net.Addr) string {
	if a == nil {
		return ""
	}
	return PeerString(a.String())
}

// PeerString is Peer for an address written as host:port.
func PeerString(s string) string {
	host := HostString(s)
	if ip, err := netip.ParseAddr(host); err == nil && ip.Is6() && !ip.Is4In6() && !ip.IsLoopback() {
		if p, err := ip.WithZone("").Prefix(64); err == nil {
			return p.String()
		}
	}
	return host
}

// Host is an address's host, without the port: the whole address, for
// what names one machine (Room.Has, the gate's book).
func Host(a net.Addr) string {
	if a == nil {
		return ""
	}
	return HostString(a.String())
}

// HostString is Host for an address written as host:port.
func HostString(s string) string {
	if host, _, err := net.SplitHostPort(s); err == nil {
		return host
	}
	return s
}

// Log records one refusal of kind from peer. msg and args are what is
// logged (with "peer" added) if this is the first of its window.
func (r *RateLog) Log(level slog.Level, kind, peer, msg string, args ...any) {
	r.seen.Add(1)
	k := rateKey{kind, peer}
	r.mu.Lock()
	w, ok := r.open[k]
	if !ok && len(r.open) >= r.peers {
		k = rateKey{"*", "others"}
		w, ok = r.open[k]
	}
	if ok {
		w.suppressed++
		r.mu.Unlock()
		return
	}
	w = &rateWindow{level: level, msg: msg, args: append(args[:len(args):len(args)], "peer", peer)}
	if k.peer == "others" { // this line stands for every pair past the table's size
		w.args = append(args[:len(args):len(args)], "peer", "others", "first_peer", peer, "first_kind", kind)
	}
	r.open[k] = w
	w.timer = time.AfterFunc(r.every, func() { r.tick(k, w) })
	r.mu.Unlock()
	if r.logger.Enabled(context.Background(), level) {
		r.logger.Log(context.Background(), level, msg, w.args...)
	}
}

// tick ends a window: with refusals in it, their count is logged and the
// window runs on; without, it closes, so the next refusal logs at once.
func (r *RateLog) tick(k rateKey, w *rateWindow) {
	r.mu.Lock()
	if r.open[k] != w { // flushed, and perhaps opened again since
		r.mu.Unlock()
		return
	}
	n := w.suppressed
	if n == 0 {
		delete(r.open, k)
		r.mu.Unlock()
		return
	}
	w.suppressed = 0
	w.timer.Reset(r.every)
	r.mu.Unlock()
	r.summary(w, n)
}

func (r *RateLog) summary(w *rateWindow, n int) {
	if r.logger.Enabled(context.Background(), w.level) {
		r.logger.Log(context.Background(), w.level, w.msg, append(w.args[:len(w.args):len(w.args)], "suppressed", n, "interval", r.every.String())...)
	}
}

// Flush logs the counts of every open window now and closes them all.
func (r *RateLog) Flush() {
	r.mu.Lock()
	var flush []*rateWindow
	var counts []int
	for k, w := range r.open {
		w.timer.Stop()
		if w.suppressed > 0 {
			flush, counts = append(flush, w), append(counts, w.suppressed)
		}
		delete(r.open, k)
	}
	r.mu.Unlock()
	for i, w := range flush {
		r.summary(w, counts[i])
	}
}

// Seen is how many refusals were recorded, logged or not.
func (r *RateLog) Seen() int64 { return r.seen.Load() }

// Counts counts refusals by the name of the bound that refused them, for a
// metric. A nil *Counts counts nothing.
type Counts struct {
	mu sync.Mutex
	m  map[string]uint64
}

// NewCounts returns an empty count whose every bound in bounds reads 0.
func NewCounts(bounds ...string) *Counts {
	c := &Counts{m: map[string]uint64{}}
	for _, b := range bounds {
		c.m[b] = 0
	}
	return c
}

// Add counts one refusal of bound.
func (c *Counts) Add(bound string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	c.m[bound]++
	c.mu.Unlock()
}

// Snapshot is every bound's count now.
func (c *Counts) Snapshot() map[string]uint64 {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]uint64, len(c.m))
	for k, v := range c.m {
		out[k] = v
	}
	return out
}

// Refused logs, at WARN and at a bounded rate per peer, that this node
// refused a peer's command or answer (msg is its kind too).
func (r *RateLog) Refused(peer, msg string, args ...any) {
	r.Log(slog.LevelWarn, msg, peer, msg, args...)
}
