// Package door bounds what a peer that has not proved who it is can hold on
// a listener: how many connections, for how long, and how many log lines it
// can cause. The rule, for every listener of idgend: every unauthenticated
// byte is bounded in time and in memory (cmd/idgend/README.md, "Securing a cluster").
package door

import (
	"container/list"
	"errors"
	"net"
	"sync"
	"time"
)

// Reasons a connection is refused, for the refused callbacks.
var (
	// ErrTooMany: the listener already holds its cap of open connections.
	ErrTooMany = errors.New("connection cap reached")
	// ErrEvicted: the cap of unfinished handshakes was reached and this
	// connection was the oldest of them.
	ErrEvicted = errors.New("too many unfinished handshakes; the oldest was closed")
)

// Limit returns a listener that keeps at most max connections accepted
// from l open at once. A connection accepted beyond that is closed at once
// and reported to refused (if not nil), instead of being left in the
// kernel's accept queue, where no deadline reaches it. A connection's slot
// is free again when it is closed.
func Limit(l net.Listener, max int, refused func(remote net.Addr, reason error)) net.Listener {
	return &limitListener{Listener: l, slots: make(chan struct{}, max), refused: refused}
}

type limitListener struct {
	net.Listener
	slots   chan struct{}
	refused func(net.Addr, error)
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.slots <- struct{}{}:
			return &limitConn{Conn: c, free: func() { <-l.slots }}, nil
		default:
			remote := c.RemoteAddr()
			c.Close()
			if l.refused != nil {
				l.refused(remote, ErrTooMany)
			}
		}
	}
}

// limitConn frees its listener slot on the first Close.
type limitConn struct {
	net.Conn
	once sync.Once
	free func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.free)
	return err
}

// Handshake runs on each accepted connection before Gate.Accept hands it
// on, under the gate's deadline: it may wrap the connection (TLS) and read
// from it (a greeting). An error refuses the connection; the gate closes it.
type Handshake func(net.Conn) (net.Conn, error)

// GateConfig sets a Gate's bounds.
type GateConfig struct {
	// Timeout is the deadline for the whole handshake, from accept; it is
	// cleared before the connection is handed on.
	Timeout time.Duration
	// MaxPending is how many handshakes may run at once. A connection that
	// arrives when that many are running closes the oldest of them, so a
	// flood of silent connections cannot keep a real peer, whose handshake
	// takes milliseconds, from getting through.
	MaxPending int
	// MaxPendingPerPeer (0: no such bound) is how many of them one remote
	// address (Peer) may run: a new one past it closes that address's
	// oldest instead, so one address never takes the others' room.
	MaxPendingPerPeer int
	// Refused, if set, hears of every refused connection and why.
	Refused func(remote net.Addr, reason error)
	// AcceptError, if set, hears of accept errors other than a closed
	// listener (out of descriptors, say); the gate retries with a backoff.
	AcceptError func(error)
}

// Gate is a listener whose Accept returns only connections that completed
// their handshake within the bounds of its GateConfig. Handshakes run in
// their own goroutines (at most MaxPending), so a silent peer never holds
// up the accept loop, and whoever calls Accept never sees, or allocates
// anything for, a connection that has not proved itself.
type Gate struct {
	l         net.Listener
	handshake Handshake
	cfg       GateConfig
	ready     chan net.Conn
	done      chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup

	mu      sync.Mutex
	pending *list.List     // of *pendingConn, oldest first
	byPeer  map[string]int // pending handshakes per remote address
}

type pendingConn struct {
	c       net.Conn
	peer    string
	elem    *list.Element
	evicted bool
}

// NewGate starts accepting from l. Close stops it and closes l.
func NewGate(l net.Listener, handshake Handshake, cfg GateConfig) *Gate {
	if cfg.MaxPending < 1 {
		cfg.MaxPending = 1
	}
	g := &Gate{
		l: l, handshake: handshake, cfg: cfg,
		ready:   make(chan net.Conn),
		done:    make(chan struct{}),
		pending: list.New(),
		byPeer:  map[string]int{},
	}
	g.wg.Add(1)
	go g.acceptLoop()
	return g
}

// Accept returns the next connection whose handshake succeeded.
func (g *Gate) Accept() (net.Conn, error) {
	select {
	case c := <-g.ready:
		return c, nil
	case <-g.done:
		return nil, net.ErrClosed
	}
}

// Addr is the listener's address.
func (g *Gate) Addr() net.Addr { return g.l.Addr() }

// Close stops accepting, closes the listener and every connection still in
// its handshake, and waits for the gate's goroutines.
func (g *Gate) Close() error {
	var err error
	g.closeOnce.Do(func() {
		close(g.done)
		err = g.l.Close()
		g.mu.Lock()
		for e := g.pending.Front(); e != nil; e = e.Next() {
			e.Value.(*pendingConn).c.Close()
		}
		g.mu.Unlock()
		g.wg.Wait()
	})
	return err
}

// Pending is how many handshakes are running.
func (g *Gate) Pending() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.pending.Len()
}

func (g *Gate) acceptLoop() {
	defer g.wg.Done()
	var delay time.Duration
	for {
		c, err := g.l.Accept()
		if err != nil {
			select {
			case <-g.done:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if g.cfg.AcceptError != nil {
				g.cfg.AcceptError(err)
			}
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			select {
			case <-g.done:
				return
			case <-time.After(delay):
			}
			continue
		}
		delay = 0
		p := &pendingConn{c: c}
		g.mu.Lock()
		select {
		case <-g.done:
			g.mu.Unlock()
			c.Close()
			return
		default:
		}
		p.peer = Peer(c.RemoteAddr())
		oldest := g.evictFor(p.peer)
		p.elem = g.pending.PushBack(p)
		g.byPeer[p.peer]++
		g.wg.Add(1)
		g.mu.Unlock()
		if oldest != nil {
			oldest.c.Close() // its goroutine sees the error and ends
		}
		go g.run(p)
	}
}

// evictFor makes room for a new handshake from peer: past the per-peer
// bound it takes that peer's oldest, past the total the oldest of all. The
// caller holds mu and closes what it returns.
func (g *Gate) evictFor(peer string) *pendingConn {
	var victim *list.Element
	switch {
	case g.cfg.MaxPendingPerPeer > 0 && g.byPeer[peer] >= g.cfg.MaxPendingPerPeer:
		for e := g.pending.Front(); e != nil; e = e.Next() {
			if e.Value.(*pendingConn).peer == peer {
				victim = e
				break
			}
		}
	case g.pending.Len() >= g.cfg.MaxPending:
		victim = g.pending.Front()
	}
	if victim == nil {
		return nil
	}
	p := victim.Value.(*pendingConn)
	g.forget(p)
	p.evicted = true
	return p
}

// forget takes p off the pending list; the caller holds mu.
func (g *Gate) forget(p *pendingConn) {
	g.pending.Remove(p.elem)
	if g.byPeer[p.peer]--; g.byPeer[p.peer] <= 0 {
		delete(g.byPeer, p.peer)
	}
}

func (g *Gate) run(p *pendingConn) {
	defer g.wg.Done()
	remote := p.c.RemoteAddr()
	_ = p.c.SetDeadline(time.Now().Add(g.cfg.Timeout))
	c, err := g.handshake(p.c)
	if err == nil {
		err = c.SetDeadline(time.Time{})
	}
	g.mu.Lock()
	evicted := p.evicted
	if !evicted {
		g.forget(p)
	}
	g.mu.Unlock()
	if evicted {
		err = ErrEvicted
	}
	if err != nil {
		p.c.Close()
		if c != nil {
			c.Close()
		}
		if g.cfg.Refused != nil {
			g.cfg.Refused(remote, err)
		}
		return
	}
	select {
	case g.ready <- c:
	case <-g.done:
		c.Close()
	}
}
