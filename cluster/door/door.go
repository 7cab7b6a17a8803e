// Package door bounds what a peer that has not proved who it is can hold on
// a listener: how many connections, for how long, and how many log lines it
// can cause. The rule, for every listener of idgend: every unauthenticated
// byte is bounded in time and in memory (cmd/idgend/README.md, "Securing a cluster").
package door

import (
	"cmp"
	"container/list"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Reasons a connection is refused, for the refused callbacks.
var (
	// ErrTooMany: the listener already holds its cap of open connections.
	ErrTooMany = errors.New("connection cap reached")
	// ErrEvicted: the cap of unfinished handshakes was reached and this
	// connection was closed to make room for a newer one (under OldestOut,
	// the oldest of them).
	ErrEvicted = errors.New("too many unfinished handshakes; one was closed for a newer one")
	// ErrEvictedPerPeer (errors.Is ErrEvicted): the same, past the bound
	// of one remote address, for a newer one from that address.
	ErrEvictedPerPeer = fmt.Errorf("%w (of its address, past the bound per address)", ErrEvicted)
	// ErrFull (FairShare): a new connection was closed at once, before
	// its handshake, because the cap of unfinished handshakes was reached
	// and none of them could be closed for it.
	ErrFull = errors.New("too many unfinished handshakes; the newcomer was refused")
	// ErrFullPerPeer (errors.Is ErrFull): the same, past the bound of its
	// remote address.
	ErrFullPerPeer = fmt.Errorf("%w (its address holds its bound)", ErrFull)
)

// Policy is what a Gate does with a new connection past its bounds of
// unfinished handshakes.
type Policy int

const (
	// OldestOut closes the oldest unfinished handshake (of the address
	// past its bound, else of all) for every newcomer. A flood of silent
	// connections never keeps out a peer that handshakes in milliseconds,
	// but a newcomer always gets in, so a storm of real handshakes that
	// take longer than the arrivals after them closes each one just
	// before it finishes (the Raft port: a few peers, 64 unfinished).
	OldestOut Policy = iota
	// FairShare closes an unfinished handshake for a newcomer only if the
	// node has done no work on it (its handshake waits to read and its
	// peer has sent nothing) or it has run for MinAge. Past the bound per
	// address, the victim is that address's oldest such one whose peer has
	// been silent for SilentAge; past the total, the oldest such one of
	// the address holding the most, if that is more than the newcomer's
	// address holds (and, if only one more, silent for SilentAge), or the
	// oldest of an address past its share of the places whatever it has
	// sent (fairVictim). With
	// no victim the newcomer is closed at once (ErrFullPerPeer, ErrFull):
	// that costs the node nothing, and the peer dials again later. So a
	// stranger's silent connections are the first to go, one address never
	// takes another's room, and a storm of real handshakes that take
	// longer than the arrivals after them finishes the ones the node has
	// started on.
	FairShare
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
	// MaxPending is how many handshakes may run at once in the shared
	// places, the ones every address may take. A connection that arrives
	// when that many are running closes one of them, or is closed itself,
	// by Policy, so a flood of silent connections cannot keep a real
	// peer, whose handshake takes milliseconds, from getting through.
	MaxPending int
	// MaxPendingPerPeer (0: no such bound) is how many of them one remote
	// address (Peer) may run: a new one past it closes one of that
	// address's instead (or is closed, by Policy), so one address never
	// takes the others' room.
	MaxPendingPerPeer int
	// Rooms are places kept for addresses a stranger does not have, tried
	// in order before the shared places: a newcomer from an address a room
	// has takes one of its places if it can (under Policy, among the
	// room's own handshakes; MaxPendingPerPeer does not apply), and else
	// competes in the shared places like anyone. However many addresses a
	// stranger floods the shared places from, it never takes a room's
	// place, so the cluster's own servers and the addresses that proved
	// themselves lately still get through.
	Rooms []Room
	// Remember (Room.Proven) is how many addresses whose handshake
	// succeeded the gate keeps in its book: each while a connection it
	// handed on is open (if the connection is Watched) and for
	// RememberFor after (an hour if 0); past Remember the least lately
	// proven one is forgotten. Only a handshake that succeeded writes in
	// it, so a stranger cannot churn it. Recall is what an earlier run's
	// book held (Gate.Book), its proofs kept as they were.
	Remember    int
	RememberFor time.Duration
	Recall      []Proof
	// Policy (OldestOut unless set) chooses what a newcomer past
	// MaxPending or MaxPendingPerPeer closes.
	Policy Policy
	// MinAge (FairShare) is how long a handshake runs before any
	// newcomer may close it.
	MinAge time.Duration
	// SilentAge (FairShare) is how long a handshake's peer may send
	// nothing, once the handshake waits to read, before a newcomer from
	// its own address, or from one holding one fewer, may close it (one
	// from an address holding two fewer or less may close it at once). It
	// covers the time a real peer takes to send its first bytes (its
	// ClientHello) after connecting.
	SilentAge time.Duration
	// Refused, if set, hears of every refused connection and why.
	Refused func(remote net.Addr, reason error)
	// AcceptError, if set, hears of accept errors other than a closed
	// listener (out of descriptors, say); the gate retries with a backoff.
	AcceptError func(error)
}

// Room is a Gate's places kept for some addresses (GateConfig.Rooms).
type Room struct {
	// Max is how many handshakes the room's addresses may run in it at once.
	Max int
	// Has names the room's addresses by host (Host, not Peer: a whole
	// address, never a prefix). It is called on every accept while the
	// shared places are full, so it should be cheap.
	Has func(host string) bool
	// Proven, instead of Has: the addresses in the gate's book, whose
	// handshake succeeded within RememberFor.
	Proven bool
}

// Gate is a listener whose Accept returns only connections that completed
// their handshake within the bounds of its GateConfig. Handshakes run in
// their own goroutines (at most MaxPending and the rooms' Max), so a
// silent peer never holds up the accept loop, and whoever calls Accept
// never sees, or allocates anything for, a connection that has not proved
// itself.
type Gate struct {
	l         net.Listener
	handshake Handshake
	cfg       GateConfig
	ready     chan net.Conn
	done      chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup

	mu     sync.Mutex
	rooms  []*room // cfg.Rooms, then the shared places
	shared *room
	book   *book // addresses whose handshake succeeded (Room.Proven)
}

// room is a set of places and the handshakes running in them.
type room struct {
	Room
	max     int
	perPeer int            // MaxPendingPerPeer, for the shared places
	pending *list.List     // of *pendingConn, oldest first
	byPeer  map[string]int // pending handshakes per remote address
}

type pendingConn struct {
	c       net.Conn
	peer    string
	host    string
	room    *room
	start   time.Time
	elem    *list.Element
	evicted error // ErrEvicted or ErrEvictedPerPeer once closed for a newcomer
	// FairShare: when the handshake first asked to read from the peer
	// (unix nanoseconds; 0: not yet), and whether it has read a byte.
	reading atomic.Int64
	heard   atomic.Bool
}

// heardConn marks its pendingConn reading on the first Read and heard on
// the first byte read.
type heardConn struct {
	net.Conn
	p *pendingConn
}

func (c *heardConn) Read(b []byte) (int, error) {
	if c.p.reading.Load() == 0 {
		c.p.reading.Store(time.Now().UnixNano())
	}
	n, err := c.Conn.Read(b)
	if n > 0 && !c.p.heard.Load() {
		c.p.heard.Store(true)
	}
	return n, err
}

// NewGate starts accepting from l. Close stops it and closes l.
func NewGate(l net.Listener, handshake Handshake, cfg GateConfig) *Gate {
	if cfg.MaxPending < 1 {
		cfg.MaxPending = 1
	}
	g := &Gate{
		l: l, handshake: handshake, cfg: cfg,
		ready: make(chan net.Conn),
		done:  make(chan struct{}),
	}
	for _, r := range cfg.Rooms {
		if r.Max <= 0 {
			continue
		}
		g.rooms = append(g.rooms, newRoom(r, r.Max, 0))
		if r.Proven && g.book == nil {
			g.book = newBook(cmp.Or(cfg.Remember, 1), cmp.Or(cfg.RememberFor, time.Hour))
			g.book.recall(cfg.Recall, time.Now())
		}
	}
	g.shared = newRoom(Room{}, cfg.MaxPending, cfg.MaxPendingPerPeer)
	g.rooms = append(g.rooms, g.shared)
	g.wg.Add(1)
	go g.acceptLoop()
	return g
}

func newRoom(r Room, max, perPeer int) *room {
	return &room{Room: r, max: max, perPeer: perPeer, pending: list.New(), byPeer: map[string]int{}}
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
		for _, r := range g.rooms {
			for e := r.pending.Front(); e != nil; e = e.Next() {
				e.Value.(*pendingConn).c.Close()
			}
		}
		g.mu.Unlock()
		g.wg.Wait()
	})
	return err
}

// Pending is how many handshakes are running, in the rooms and the shared
// places.
func (g *Gate) Pending() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for _, r := range g.rooms {
		n += r.pending.Len()
	}
	return n
}

// PendingFrom is how many of them the remote address peer (as Peer names
// it) runs.
func (g *Gate) PendingFrom(peer string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for _, r := range g.rooms {
		n += r.byPeer[peer]
	}
	return n
}

// SharedPending is how many handshakes run in the shared places.
func (g *Gate) SharedPending() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.shared.pending.Len()
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
		p := &pendingConn{c: c, start: time.Now(), peer: Peer(c.RemoteAddr()), host: Host(c.RemoteAddr())}
		g.mu.Lock()
		select {
		case <-g.done:
			g.mu.Unlock()
			c.Close()
			return
		default:
		}
		victim, refused := g.place(p)
		if refused != nil {
			g.mu.Unlock()
			remote := c.RemoteAddr()
			c.Close()
			if g.cfg.Refused != nil {
				g.cfg.Refused(remote, refused)
			}
			continue
		}
		g.wg.Add(1)
		g.mu.Unlock()
		if victim != nil {
			victim.c.Close() // its goroutine sees the error and ends
		}
		go g.run(p)
	}
}

// place puts p in the first room of its address that can take it (the
// shared places last), or says why the newcomer is refused (the shared
// places' reason); a victim it returns is off its list, for the caller
// to close. The caller holds mu.
func (g *Gate) place(p *pendingConn) (victim *pendingConn, refused error) {
	for _, r := range g.rooms {
		if r != g.shared && !g.has(r, p.host, p.start) {
			continue
		}
		victim, refused = g.evictFor(r, p.peer, p.start)
		if refused == nil {
			p.room = r
			p.elem = r.pending.PushBack(p)
			r.byPeer[p.peer]++
			return victim, nil
		}
	}
	return nil, refused
}

func (g *Gate) has(r *room, host string, now time.Time) bool {
	if r.Proven {
		return g.book.has(host, now)
	}
	return r.Has != nil && r.Has(host)
}

// evictFor makes room in r for a new handshake from peer, by the gate's
// Policy: it takes a pending handshake off the list for the caller to
// close, or (FairShare) says why the newcomer is refused instead. The
// caller holds mu.
func (g *Gate) evictFor(r *room, peer string, now time.Time) (victim *pendingConn, refused error) {
	perPeer := r.perPeer > 0 && r.byPeer[peer] >= r.perPeer
	if !perPeer && r.pending.Len() < r.max {
		return nil, nil
	}
	var e *list.Element
	switch {
	case g.cfg.Policy != FairShare && perPeer:
		e = r.oldest(func(p *pendingConn) bool { return p.peer == peer })
	case g.cfg.Policy != FairShare:
		e = r.pending.Front()
	case perPeer:
		e = r.oldest(func(p *pendingConn) bool { return p.peer == peer && g.evictable(p, 1, now) })
		if e == nil {
			return nil, ErrFullPerPeer
		}
	default:
		e = g.fairVictim(r, peer, now)
		if e == nil {
			return nil, ErrFull
		}
	}
	if e == nil {
		return nil, nil
	}
	p := e.Value.(*pendingConn)
	r.forget(p)
	p.evicted = ErrEvicted
	if perPeer {
		p.evicted = ErrEvictedPerPeer
	}
	return p, nil
}

// oldest is the oldest pending handshake of r that ok accepts, or nil.
func (r *room) oldest(ok func(*pendingConn) bool) *list.Element {
	for e := r.pending.Front(); e != nil; e = e.Next() {
		if ok(e.Value.(*pendingConn)) {
			return e
		}
	}
	return nil
}

// evictable reports whether FairShare may close p for a newcomer whose
// address holds `more` fewer unfinished handshakes than p's: p has run for
// MinAge, or its handshake waits to read and its peer has sent nothing
// (the node has done no work on it) and either p's address holds at least
// two more or the peer has been silent for SilentAge. One whose
// handshake has not begun to read (its goroutine has not run yet: a busy
// node) is never silent.
func (g *Gate) evictable(p *pendingConn, more int, now time.Time) bool {
	if now.Sub(p.start) >= g.cfg.MinAge {
		return true
	}
	since := p.reading.Load()
	if since == 0 || p.heard.Load() {
		return false
	}
	return more >= 2 || now.Sub(time.Unix(0, since)) >= g.cfg.SilentAge
}

// fairVictim is the pending handshake of r FairShare closes for a
// newcomer from peer past r's places, or nil: of the evictable ones whose
// address holds more than peer does, one of the address holding the
// most, the oldest of them; failing that, the oldest of the address
// holding the most if it is past its share (more than the places over the
// addresses holding any, the newcomer's counted, and at least two more
// than the newcomer's), whatever its handshakes have sent. The share is
// what keeps a stranger from a few addresses out of the places:
// connections that sent a byte, or a whole tiny record, and started over
// before MinAge held them all (outside attack rounds 9 and 10). A
// stranger with as many addresses as there are places is not told apart
// from a fleet in the shared places; the rooms are what it cannot take.
func (g *Gate) fairVictim(r *room, peer string, now time.Time) *list.Element {
	mine := r.byPeer[peer]
	top := func(ok func(p *pendingConn, n int) bool) *list.Element {
		var victim *list.Element
		most := mine
		for e := r.pending.Front(); e != nil; e = e.Next() {
			p := e.Value.(*pendingConn)
			if n := r.byPeer[p.peer]; n > most && ok(p, n) {
				victim, most = e, n
			}
		}
		return victim
	}
	if v := top(func(p *pendingConn, n int) bool { return g.evictable(p, n-mine, now) }); v != nil {
		return v
	}
	addrs := len(r.byPeer)
	if mine == 0 {
		addrs++
	}
	share := max(1, r.max/addrs)
	return top(func(_ *pendingConn, n int) bool { return n > share && n-mine >= 2 })
}

// forget takes p off r's pending list; the caller holds mu.
func (r *room) forget(p *pendingConn) {
	r.pending.Remove(p.elem)
	if r.byPeer[p.peer]--; r.byPeer[p.peer] <= 0 {
		delete(r.byPeer, p.peer)
	}
}

func (g *Gate) run(p *pendingConn) {
	defer g.wg.Done()
	remote := p.c.RemoteAddr()
	_ = p.c.SetDeadline(p.start.Add(g.cfg.Timeout))
	var hc net.Conn = p.c
	if g.cfg.Policy == FairShare {
		hc = &heardConn{Conn: p.c, p: p}
	}
	c, err := g.handshake(hc)
	if err == nil {
		err = c.SetDeadline(time.Time{})
	}
	g.mu.Lock()
	evicted := p.evicted
	if evicted == nil {
		p.room.forget(p)
		if err == nil && g.book != nil {
			g.book.add(p.host, time.Now())
			if w, ok := c.(Watched); ok {
				g.book.open(p.host)
				w.OnClose(func() {
					g.mu.Lock()
					defer g.mu.Unlock()
					g.book.closed(p.host, time.Now())
				})
			}
		}
	}
	g.mu.Unlock()
	if evicted != nil {
		err = evicted
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

// Watched is what a Handshake's connection may be, so that the gate's book
// holds its host while it is open, however long: OnClose has f run once,
// when the connection closes. (A pod's connection carries a health watch
// and is never idle; without it, one connected for longer than
// RememberFor would come back a stranger.)
type Watched interface {
	OnClose(f func())
}

// Proof is one host of the gate's book and when it last proved itself
// (its last handshake that succeeded, or the close of its last
// connection).
type Proof struct {
	Host string    `json:"host"`
	At   time.Time `json:"at"`
}

// Book is the gate's book of proven hosts, least lately proven first,
// to be recalled by the next run (GateConfig.Recall); a host with a
// connection open is proven as of now. Nil without a Proven room.
func (g *Gate) Book() []Proof {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.book == nil {
		return nil
	}
	now := time.Now()
	out := make([]Proof, 0, g.book.order.Len())
	for e := g.book.order.Front(); e != nil; e = e.Next() {
		p := e.Value.(*proof)
		at := p.at
		if p.live > 0 {
			at = now
		}
		out = append(out, Proof{Host: p.host, At: at})
	}
	return out
}

// book is a bounded record of the hosts whose handshake succeeded, and
// when last (or that a connection of theirs is open): the least lately
// proven is forgotten first.
type book struct {
	max   int
	ttl   time.Duration
	order *list.List // of *proof, least lately proven first
	by    map[string]*list.Element
}

type proof struct {
	host string
	at   time.Time
	live int // connections of the host open (Watched)
}

func newBook(max int, ttl time.Duration) *book {
	return &book{max: max, ttl: ttl, order: list.New(), by: map[string]*list.Element{}}
}

// recall adds an earlier run's proofs, oldest first, skipping what is not
// an IP or expired; one later than now (the clock came up behind the last
// run's: the hosts connected at its shutdown are stamped then) counts as
// of now.
func (b *book) recall(proofs []Proof, now time.Time) {
	proofs = slices.Clone(proofs)
	slices.SortStableFunc(proofs, func(x, y Proof) int { return x.At.Compare(y.At) })
	for _, p := range proofs {
		ip, err := netip.ParseAddr(p.Host)
		if err != nil || now.Sub(p.At) >= b.ttl {
			continue
		}
		at := p.At
		if at.After(now) {
			at = now
		}
		b.add(ip.Unmap().String(), at)
	}
}

func (b *book) add(host string, at time.Time) {
	if e, ok := b.by[host]; ok {
		if pr := e.Value.(*proof); at.After(pr.at) {
			pr.at = at
		}
		b.order.MoveToBack(e)
		return
	}
	b.by[host] = b.order.PushBack(&proof{host: host, at: at})
	for b.order.Len() > b.max {
		old := b.order.Remove(b.order.Front()).(*proof)
		delete(b.by, old.host)
	}
}

// open counts a connection of host open; closed uncounts it and proves
// host as of now (a host forgotten meanwhile, past max, is written again).
func (b *book) open(host string) {
	if e, ok := b.by[host]; ok {
		e.Value.(*proof).live++
	}
}

func (b *book) closed(host string, now time.Time) {
	if e, ok := b.by[host]; ok {
		if pr := e.Value.(*proof); pr.live > 0 {
			pr.live--
		}
	}
	b.add(host, now)
}

func (b *book) has(host string, now time.Time) bool {
	e, ok := b.by[host]
	if !ok {
		return false
	}
	pr := e.Value.(*proof)
	return pr.live > 0 || now.Sub(pr.at) < b.ttl
}
