package main

import (
	"container/list"
	"context"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/idgen/idgen/cluster/door"
	"github.com/idgen/idgen/rpc"
)

// The HTTP admin port's bounds (cmd/idgend/README.md, "Securing a cluster"). The port
// serves probes and scrapers with plaintext, short requests and no body, so
// every bound can be tight: nothing a client sends is held for longer than
// it takes a probe to be answered.
const (
	// adminReadHeaderTimeout bounds a request's headers, from the first byte.
	adminReadHeaderTimeout = 5 * time.Second
	// adminReadTimeout bounds a whole request, body included.
	adminReadTimeout = 10 * time.Second
	// adminWriteTimeout bounds an answer, /metrics included (Prometheus's
	// own default scrape timeout is 10 s).
	adminWriteTimeout = 10 * time.Second
	// adminIdleTimeout closes a keep-alive connection left idle.
	adminIdleTimeout = 10 * time.Second
	// adminMaxHeaderBytes bounds a request's headers (the default is 1 MiB).
	adminMaxHeaderBytes = 16 << 10
	// adminMaxConns caps the port's open connections; a new one past it
	// closes the oldest connection that is not being answered.
	adminMaxConns = 64
	// adminMaxConnsPerAddress caps one remote address's share of them; a
	// new one past it closes that address's oldest not being answered.
	adminMaxConnsPerAddress = 16
)

// newAdminServer is the HTTP admin server with the port's bounds; it
// serves what adminDoor admits, and tells the door which connections are
// being answered.
func newAdminServer(h http.Handler, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if c, ok := r.Context().Value(adminConnKey{}).(*adminConn); ok {
				c.serving(true)
				defer c.serving(false)
			}
			h.ServeHTTP(w, r)
		}),
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, adminConnKey{}, c)
		},
		ReadHeaderTimeout: adminReadHeaderTimeout,
		ReadTimeout:       adminReadTimeout,
		WriteTimeout:      adminWriteTimeout,
		IdleTimeout:       adminIdleTimeout,
		MaxHeaderBytes:    adminMaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

type adminConnKey struct{}

// busyBound names the refusal of a new connection when every connection of
// the full room is being answered.
var busyBound = map[string]string{rpc.BoundHTTPConns: rpc.BoundHTTPConnsBusy, rpc.BoundHTTPConnsPerAddress: rpc.BoundHTTPConnsPerAddressBusy}

// adminDoor holds the admin port's connections, at most max in all and
// perAddress from one remote address. A new connection past either bound
// closes the oldest connection of that room that is not being answered (one
// still sending its request, or idle between requests, or answered for
// longer than adminBusyGrace), so strangers that hold connections open,
// however slowly they send or read, never keep a probe out: a probe's
// request takes a millisecond. Only when every connection of the room is
// being answered, each for less than adminBusyGrace, is the new one refused.
type adminDoor struct {
	net.Listener
	max, perAddress int
	grace           time.Duration // adminBusyGrace
	refused         func(kind, remote string, cap int)

	mu    sync.Mutex
	conns *list.List // of *adminConn, oldest first
	byIP  map[string]int
}

// adminConn is one connection the door admitted.
type adminConn struct {
	net.Conn
	door *adminDoor
	peer string
	elem *list.Element // nil once it left the door
	busy int           // requests being answered, under door.mu
	// since: when busy last went from 0 to 1.
	since time.Time
}

// adminBusyGrace: a connection answered for longer than this is closed for
// a newcomer like an idle one. Probes and scrapes take milliseconds; one
// that does not read its answers (its write blocks until the write bound)
// or keeps a scrape pipelined all the time would otherwise hold its place
// as "being answered".
const adminBusyGrace = time.Second

func (c *adminConn) serving(on bool) {
	c.door.mu.Lock()
	defer c.door.mu.Unlock()
	if on {
		if c.busy == 0 {
			c.since = time.Now()
		}
		c.busy++
	} else {
		c.busy--
	}
}

func (c *adminConn) Close() error {
	c.door.leave(c)
	return c.Conn.Close()
}

func (d *adminDoor) leave(c *adminConn) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if c.elem == nil {
		return
	}
	d.conns.Remove(c.elem)
	c.elem = nil
	if d.byIP[c.peer]--; d.byIP[c.peer] <= 0 {
		delete(d.byIP, c.peer)
	}
}

func (d *adminDoor) Accept() (net.Conn, error) {
	for {
		raw, err := d.Listener.Accept()
		if err != nil {
			return nil, err
		}
		c := &adminConn{Conn: raw, door: d, peer: door.Peer(raw.RemoteAddr())}
		victim, kind, full := d.admit(c)
		if victim != nil {
			victim.Conn.Close() // the server's read fails; it closes its side
			d.refused(kind, victim.RemoteAddr().String(), full)
		}
		if c.elem == nil {
			raw.Close()
			d.refused(busyBound[kind], raw.RemoteAddr().String(), full)
			continue
		}
		return c, nil
	}
}

// admit takes c in, making room by taking out the oldest idle connection
// of the room that is full (c's address's, else all); it returns the
// connection taken out, the bound and its cap. c stays out (its elem nil)
// when the full room has nothing idle.
func (d *adminDoor) admit(c *adminConn) (*adminConn, string, int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var victim *adminConn
	kind, full := "", 0
	now := time.Now()
	pick := func(sameAddress bool) bool {
		for e := d.conns.Front(); e != nil; e = e.Next() {
			o := e.Value.(*adminConn)
			if (o.busy == 0 || now.Sub(o.since) > d.grace) && (!sameAddress || o.peer == c.peer) {
				victim = o
				return true
			}
		}
		return false
	}
	switch {
	case d.byIP[c.peer] >= d.perAddress:
		kind, full = rpc.BoundHTTPConnsPerAddress, d.perAddress
		if !pick(true) {
			return nil, kind, full
		}
	case d.conns.Len() >= d.max:
		kind, full = rpc.BoundHTTPConns, d.max
		if !pick(false) {
			return nil, kind, full
		}
	}
	if victim != nil {
		d.conns.Remove(victim.elem)
		victim.elem = nil
		if d.byIP[victim.peer]--; d.byIP[victim.peer] <= 0 {
			delete(d.byIP, victim.peer)
		}
	}
	c.elem = d.conns.PushBack(c)
	d.byIP[c.peer]++
	return victim, kind, full
}

// limitAdmin puts the admin listener behind its door; what the door closes
// or refuses is counted by bound (count, may be nil) and logged once a
// minute per peer and bound, with a count.
func limitAdmin(l net.Listener, log *slog.Logger, count func(bound string)) net.Listener {
	refusals := door.NewRateLog(log.With("component", "http"), 0)
	return &adminDoor{Listener: l, max: adminMaxConns, perAddress: adminMaxConnsPerAddress, grace: adminBusyGrace, conns: list.New(), byIP: map[string]int{},
		refused: func(kind, remote string, cap int) {
			if count != nil {
				count(kind)
			}
			msg := "closed an HTTP admin connection that was not being answered, to make room for a new one"
			if kind == rpc.BoundHTTPConnsBusy || kind == rpc.BoundHTTPConnsPerAddressBusy {
				msg = "refused an HTTP admin connection: every connection of its room is being answered"
			}
			refusals.Log(slog.LevelWarn, kind, door.PeerString(remote), msg, "remote", remote, "cap", cap, "bound", kind)
		}}
}
