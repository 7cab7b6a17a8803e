package door

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idgen/idgen/scripts/harness"
)

func listen(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// closedBy reports whether the other end closed c before limit passed.
func closedBy(c net.Conn, limit time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(limit))
	buf := make([]byte, 64)
	for {
		if _, err := c.Read(buf); err != nil {
			var ne net.Error
			return !(errors.As(err, &ne) && ne.Timeout())
		}
	}
}

// TestLimitClosesConnectionsBeyondTheCap: with max connections open, the
// next one is closed at once and reported; closing one frees its slot.
func TestLimitClosesConnectionsBeyondTheCap(t *testing.T) {
	var mu sync.Mutex
	var refused []error
	l := Limit(listen(t), 3, func(_ net.Addr, err error) { mu.Lock(); refused = append(refused, err); mu.Unlock() })
	accepted := make(chan net.Conn, 10)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	var held []net.Conn
	for range 3 {
		dial(t, l.Addr().String())
		held = append(held, <-accepted)
	}
	extra := dial(t, l.Addr().String())
	if !closedBy(extra, harness.Scale(5*time.Second)) {
		t.Fatalf("the fourth connection over a cap of 3 was not closed")
	}
	// The client sees its connection closed before Limit has reported the
	// refusal: wait for the report, then require exactly one.
	reported := func() []error { mu.Lock(); defer mu.Unlock(); return append([]error(nil), refused...) }
	harness.WaitFor(t, 5*time.Second, "the refusal reported", func() bool { return len(reported()) >= 1 })
	if got := reported(); len(got) != 1 || !errors.Is(got[0], ErrTooMany) {
		t.Errorf("refused = %v, want one ErrTooMany", got)
	}
	held[0].Close()
	held[0].Close() // a second Close frees nothing more
	dial(t, l.Addr().String())
	select {
	case <-accepted:
	case <-time.After(harness.Scale(5 * time.Second)):
		t.Fatalf("a slot freed by Close was not given to the next connection")
	}
	extra = dial(t, l.Addr().String())
	if !closedBy(extra, harness.Scale(5*time.Second)) {
		t.Fatalf("a double Close freed two slots")
	}
}

// lineHandshake wants "hello\n" and nothing else.
func lineHandshake(c net.Conn) (net.Conn, error) {
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return nil, err
	}
	if line != "hello\n" {
		return nil, errors.New("bad greeting")
	}
	return c, nil
}

// TestGateHandsOnOnlyFinishedHandshakes: a silent connection is closed at
// the deadline, a wrong greeting at once, a right one is accepted with its
// deadline cleared; past MaxPending the oldest silent one is closed so the
// newcomer still gets in.
func TestGateHandsOnOnlyFinishedHandshakes(t *testing.T) {
	var mu sync.Mutex
	reasons := map[string]int{}
	g := NewGate(listen(t), lineHandshake, GateConfig{
		Timeout:    300 * time.Millisecond,
		MaxPending: 2,
		Refused: func(_ net.Addr, err error) {
			mu.Lock()
			defer mu.Unlock()
			var ne net.Error
			switch {
			case errors.Is(err, ErrEvicted):
				reasons["evicted"]++
			case errors.As(err, &ne) && ne.Timeout():
				reasons["timeout"]++
			default:
				reasons["other"]++
			}
		},
	})
	defer g.Close()
	addr := g.Addr().String()
	accepted := acceptAll(g)

	silent1 := dial(t, addr)
	waitPending(t, g, 1)
	silent2 := dial(t, addr)
	waitPending(t, g, 2)
	good := dial(t, addr) // evicts silent1
	if !closedBy(silent1, harness.Scale(5*time.Second)) {
		t.Fatalf("the oldest pending handshake was not closed for a newcomer")
	}
	if _, err := good.Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	var c net.Conn
	select {
	case c = <-accepted:
	case <-time.After(harness.Scale(5 * time.Second)):
		t.Fatalf("a good greeting was not accepted")
	}
	if !closedBy(silent2, harness.Scale(5*time.Second)) {
		t.Fatalf("a silent connection outlived the handshake deadline")
	}
	// The deadline was cleared: the accepted connection still reads after it.
	time.Sleep(400 * time.Millisecond) // past the 300 ms handshake deadline
	go good.Write([]byte("x"))
	_ = c.SetReadDeadline(time.Now().Add(harness.Scale(5 * time.Second)))
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		t.Fatalf("the accepted connection kept its handshake deadline: %v", err)
	}
	bad := dial(t, addr)
	bad.Write([]byte("HELLO\n"))
	if !closedBy(bad, harness.Scale(5*time.Second)) {
		t.Fatalf("a wrong greeting was not closed")
	}
	// The client can see its connection closed before the gate has reported
	// the refusal: wait for the report, then require exactly one of each.
	counted := func() (map[string]int, bool) {
		mu.Lock()
		defer mu.Unlock()
		got := map[string]int{}
		for k, v := range reasons {
			got[k] = v
		}
		return got, got["evicted"] >= 1 && got["timeout"] >= 1 && got["other"] >= 1
	}
	harness.WaitFor(t, 5*time.Second, "the three refusals reported", func() bool { _, ok := counted(); return ok })
	if got, _ := counted(); got["evicted"] != 1 || got["timeout"] != 1 || got["other"] != 1 {
		t.Errorf("refusals %v, want one each of evicted, timeout, other", got)
	}

	g.Close()
	if _, err := g.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after Close: %v", err)
	}
}

// TestGateBoundsHandshakesPerPeer: one address past its bound of pending
// handshakes closes its own oldest, never another address's; past the
// total, the oldest of all goes.
func TestGateBoundsHandshakesPerPeer(t *testing.T) {
	g := NewGate(listen(t), lineHandshake, GateConfig{Timeout: time.Minute, MaxPending: 4, MaxPendingPerPeer: 2})
	defer g.Close()
	addr := g.Addr().String()
	from := func(ip string) net.Conn { return harness.DialFrom(t, ip, addr) }
	a1 := from("127.0.0.2")
	waitPending(t, g, 1)
	b1 := from("127.0.0.3")
	waitPending(t, g, 2)
	a2 := from("127.0.0.2")
	waitPending(t, g, 3)
	a3 := from("127.0.0.2") // past 127.0.0.2's bound: closes a1, not b1, the oldest of all
	if !closedBy(a1, harness.Scale(5*time.Second)) {
		t.Fatal("an address past its bound of pending handshakes did not close its own oldest")
	}
	waitPending(t, g, 3)
	b2 := from("127.0.0.3")
	waitPending(t, g, 4)
	c1 := from("127.0.0.4") // past the total: closes b1, now the oldest of all
	if !closedBy(b1, harness.Scale(5*time.Second)) {
		t.Fatal("past the total, the oldest pending handshake was not closed")
	}
	waitPending(t, g, 4)
	for name, c := range map[string]net.Conn{"a2": a2, "a3": a3, "b2": b2, "c1": c1} {
		if closedBy(c, 100*time.Millisecond) {
			t.Errorf("%s was closed, but it was neither its address's oldest nor the oldest of all", name)
		}
	}
}

// acceptAll hands on what g accepts until it is closed.
func acceptAll(g *Gate) <-chan net.Conn {
	accepted := make(chan net.Conn, 4)
	go func() {
		defer close(accepted)
		for {
			c, err := g.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	return accepted
}

func waitPending(t *testing.T, g *Gate, n int) {
	t.Helper()
	harness.WaitFor(t, 5*time.Second, "pending handshakes", func() bool { return g.Pending() == n })
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

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
			t.Fatalf("not JSON: %q", line)
		}
		out = append(out, r)
	}
	return out
}

// TestRateLogOneLinePerPeerPerInterval: 1,000 refusals from one peer are
// one line plus one count; a second kind and a second peer get their own
// line; more peers than are tracked share one.
func TestRateLogOneLinePerPeerPerInterval(t *testing.T) {
	var buf syncBuffer
	r := NewRateLog(slog.New(slog.NewJSONHandler(&buf, nil)), time.Hour)
	for range 1000 {
		r.Log(slog.LevelWarn, "tls", "10.0.0.9", "refused", "reason", "bad certificate")
	}
	r.Log(slog.LevelWarn, "greeting", "10.0.0.9", "refused", "reason", "no greeting")
	r.Log(slog.LevelWarn, "tls", "10.0.0.8", "refused", "reason", "bad certificate")
	for i := range 500 {
		r.Log(slog.LevelError, "junk", "spoofed-"+string(rune('a'+i%26))+string(rune('a'+i/26)), "junk")
	}
	// Three pairs, then 61 of the junk peers fill the table to 64; the
	// other 439 share one line.
	if got := len(buf.records(t)); got != DefaultLogPeers+1 {
		t.Fatalf("%d lines before the interval ends, want %d (one per tracked pair, one for the rest)", got, DefaultLogPeers+1)
	}
	r.Flush()
	recs := buf.records(t)
	counts := map[string]float64{}
	for _, rec := range recs[DefaultLogPeers+1:] {
		counts[rec["peer"].(string)] = rec["suppressed"].(float64)
	}
	if len(counts) != 2 || counts["10.0.0.9"] != 999 || counts["others"] != 438 || r.Seen() != 1502 {
		t.Fatalf("count lines %v (seen %d), want 999 for 10.0.0.9 and 438 for the others", counts, r.Seen())
	}
	// After a flush the next refusal logs at once again.
	r.Log(slog.LevelWarn, "tls", "10.0.0.9", "refused")
	if got := len(buf.records(t)); got != len(recs)+1 {
		t.Fatalf("a refusal after the flush was not logged")
	}
}

// TestRateLogCountsWhenTheIntervalEnds: the count comes by itself when the
// interval ends, and a peer that goes quiet closes its window.
func TestRateLogCountsWhenTheIntervalEnds(t *testing.T) {
	var buf syncBuffer
	r := NewRateLog(slog.New(slog.NewJSONHandler(&buf, nil)), 50*time.Millisecond)
	for range 10 {
		r.Log(slog.LevelWarn, "tls", "10.0.0.9", "refused")
	}
	harness.WaitFor(t, 5*time.Second, "the count line", func() bool {
		recs := buf.records(t)
		return len(recs) == 2 && recs[1]["suppressed"] == 9.0
	})
	harness.WaitFor(t, 5*time.Second, "the window to close", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.open) == 0
	})
	r.Log(slog.LevelWarn, "tls", "10.0.0.9", "refused")
	if got := len(buf.records(t)); got != 3 {
		t.Fatalf("%d lines, want the new refusal logged at once", got)
	}
}

// TestGateFairShare: under FairShare a newcomer past the bounds closes
// only a silent handshake of an address holding more than its own, and is
// refused at once otherwise; handshakes whose peers have spoken run on.
func TestGateFairShare(t *testing.T) {
	var mu sync.Mutex
	var reasons []error
	g := NewGate(listen(t), lineHandshake, GateConfig{
		Timeout: time.Minute, MaxPending: 4, MaxPendingPerPeer: 2,
		Policy: FairShare, MinAge: time.Minute, SilentAge: time.Minute,
		Refused: func(_ net.Addr, err error) { mu.Lock(); reasons = append(reasons, err); mu.Unlock() },
	})
	defer g.Close()
	accepted := acceptAll(g)
	addr := g.Addr().String()
	from := func(ip string) net.Conn { return harness.DialFrom(t, ip, addr) }
	// waitState waits for n pending handshakes, silent of them waiting to
	// read with nothing read, and heard of them having read a byte.
	waitState := func(n, silent, heard int) {
		t.Helper()
		harness.WaitFor(t, 5*time.Second, "the pending handshakes' state", func() bool {
			g.mu.Lock()
			defer g.mu.Unlock()
			s, h := 0, 0
			for e := g.shared.pending.Front(); e != nil; e = e.Next() {
				p := e.Value.(*pendingConn)
				switch {
				case p.heard.Load():
					h++
				case p.reading.Load() != 0:
					s++
				}
			}
			return g.shared.pending.Len() == n && s == silent && h == heard
		})
	}
	reported := func(n int) []error {
		t.Helper()
		harness.WaitFor(t, 5*time.Second, "the refusals reported", func() bool { mu.Lock(); defer mu.Unlock(); return len(reasons) >= n })
		mu.Lock()
		defer mu.Unlock()
		return append([]error(nil), reasons...)
	}
	a1, a2 := from("127.0.0.2"), from("127.0.0.2")
	for _, c := range []net.Conn{a1, a2} {
		if _, err := c.Write([]byte("hel")); err != nil {
			t.Fatal(err)
		}
	}
	b1 := from("127.0.0.3")
	waitState(3, 1, 2)
	b2 := from("127.0.0.3")
	waitState(4, 2, 2)

	from("127.0.0.5") // 127.0.0.3 holds two more than 127.0.0.5: its oldest silent one goes
	if !closedBy(b1, harness.Scale(5*time.Second)) {
		t.Fatal("a silent handshake of the address holding two more was not closed for a newcomer")
	}
	if got := reported(1); !errors.Is(got[0], ErrEvicted) || errors.Is(got[0], ErrEvictedPerPeer) {
		t.Fatalf("refusals %v, want ErrEvicted", got)
	}
	waitState(4, 2, 2)
	if c := from("127.0.0.2"); !closedBy(c, harness.Scale(5*time.Second)) { // at its bound, both spoken
		t.Fatal("a newcomer past its address's bound was not refused")
	}
	if got := reported(2); !errors.Is(got[1], ErrFullPerPeer) {
		t.Fatalf("refusals %v, want ErrFullPerPeer second", got)
	}
	if c := from("127.0.0.3"); !closedBy(c, harness.Scale(5*time.Second)) { // holds 1, only 127.0.0.2 holds more, and has spoken
		t.Fatal("a newcomer with nobody to close was not refused")
	}
	if got := reported(3); !errors.Is(got[2], ErrFull) || errors.Is(got[2], ErrFullPerPeer) {
		t.Fatalf("refusals %v, want ErrFull third", got)
	}
	for _, c := range []net.Conn{a1, a2, b2} {
		if closedBy(c, 100*time.Millisecond) {
			t.Fatal("a handshake that was neither silent nor of a bigger address was closed")
		}
	}
	for _, c := range []net.Conn{a1, a2} {
		if _, err := c.Write([]byte("lo\n")); err != nil {
			t.Fatal(err)
		}
		select {
		case <-accepted:
		case <-time.After(harness.Scale(5 * time.Second)):
			t.Fatal("a spoken handshake did not finish after the newcomers")
		}
	}
}

// TestGateRoomsAreNotTakenByStrangers attacks from the stranger's side:
// handshakes from as many addresses as there are shared places, each one
// heard from (so none is silent) and none old enough to close, hold the
// shared places; a newcomer from another address is refused, as it was
// before rooms. The cluster's server address and an address whose
// handshake succeeded before still get through, each in its own room,
// and the stranger's newcomers never take a room's place.
func TestGateRoomsAreNotTakenByStrangers(t *testing.T) {
	var mu sync.Mutex
	var reasons []error
	g := NewGate(listen(t), lineHandshake, GateConfig{
		Timeout: time.Minute, MaxPending: 2, MaxPendingPerPeer: 2,
		Policy: FairShare, MinAge: time.Minute, SilentAge: time.Minute,
		Rooms: []Room{
			{Max: 1, Has: func(host string) bool { return host == "127.0.0.9" }},
			{Max: 1, Proven: true},
		},
		Remember: 4, RememberFor: time.Hour,
		Refused: func(_ net.Addr, err error) { mu.Lock(); reasons = append(reasons, err); mu.Unlock() },
	})
	defer g.Close()
	accepted := acceptAll(g)
	addr := g.Addr().String()
	from := func(ip string) net.Conn { return harness.DialFrom(t, ip, addr) }
	handshake := func(c net.Conn, what string) {
		t.Helper()
		if _, err := c.Write([]byte("hello\n")); err != nil {
			t.Fatal(err)
		}
		select {
		case <-accepted:
		case <-time.After(harness.Scale(5 * time.Second)):
			t.Fatalf("%s's handshake did not finish", what)
		}
	}
	handshake(from("127.0.0.5"), "the client before the attack") // 127.0.0.5 is proven now

	for _, ip := range []string{"127.0.0.2", "127.0.0.3"} {
		if _, err := from(ip).Write([]byte("hel")); err != nil {
			t.Fatal(err)
		}
	}
	harness.WaitFor(t, 5*time.Second, "the stranger to hold the shared places", func() bool { return g.SharedPending() == 2 })
	if c := from("127.0.0.4"); !closedBy(c, harness.Scale(5*time.Second)) {
		t.Fatal("a newcomer from an unknown address was not refused with the shared places full")
	}
	peer := from("127.0.0.9")
	harness.WaitFor(t, 5*time.Second, "the peer's handshake placed", func() bool { return g.PendingFrom("127.0.0.9") == 1 })
	// The peer's room is full now: another from its address competes in the
	// shared places and is refused, and never closes the one in the room.
	if c := from("127.0.0.9"); !closedBy(c, harness.Scale(5*time.Second)) {
		t.Fatal("a second handshake from the peer's address was not refused with its room and the shared places full")
	}
	handshake(peer, "the cluster server's")
	handshake(from("127.0.0.5"), "the proven client's")
	if c := from("127.0.0.4"); !closedBy(c, harness.Scale(5*time.Second)) {
		t.Fatal("a stranger's newcomer was placed in a room")
	}
	if n := g.SharedPending(); n != 2 {
		t.Fatalf("the shared places hold %d handshakes, want the stranger's 2", n)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, err := range reasons {
		if !errors.Is(err, ErrFull) {
			t.Errorf("refusal %v, want ErrFull: nothing was closed for a newcomer", err)
		}
	}
}

// TestBookForgetsTheLeastLatelyProven: the book holds at most its max
// hosts, forgets the least lately proven first, and a proof ages out.
func TestBookForgetsTheLeastLatelyProven(t *testing.T) {
	now := time.Unix(1000, 0)
	b := newBook(2, time.Minute)
	b.add("a", now)
	b.add("b", now)
	b.add("a", now.Add(time.Second)) // a proven again: b is the least lately
	b.add("c", now.Add(2*time.Second))
	if b.has("b", now.Add(2*time.Second)) || !b.has("a", now.Add(2*time.Second)) || !b.has("c", now.Add(2*time.Second)) {
		t.Fatalf("book %v: want a and c, b forgotten", slices.Collect(maps.Keys(b.by)))
	}
	if b.has("a", now.Add(time.Second+time.Minute)) {
		t.Fatal("a proof older than the book's time still counts")
	}
	// A host with a connection open is proven however long it stays, and
	// for the book's time after it closes.
	b.open("c")
	later := now.Add(time.Hour)
	if !b.has("c", later) {
		t.Fatal("a host with a connection open for longer than the book's time is not proven")
	}
	b.closed("c", later)
	if !b.has("c", later.Add(59*time.Second)) || b.has("c", later.Add(time.Minute)) {
		t.Fatal("a closed connection's host is not proven for the book's time after the close, and only that")
	}
}

// TestBookRecallsAnEarlierRun: the proofs an earlier run's book held come
// back as they were (one from the future, a clock that came up behind, as
// of now), the expired ones and what is not an IP left out, the newest
// kept past max.
func TestBookRecallsAnEarlierRun(t *testing.T) {
	now := time.Unix(10000, 0)
	b := newBook(2, time.Minute)
	b.recall([]Proof{
		{Host: "10.0.0.4", At: now.Add(-10 * time.Second)},
		{Host: "10.0.0.1", At: now.Add(-50 * time.Second)},
		{Host: "10.0.0.2", At: now.Add(-2 * time.Minute)}, // expired
		{Host: "10.0.0.3", At: now.Add(time.Minute)},      // from the future
		{Host: "not-an-ip", At: now},
		{Host: "::ffff:10.0.0.5", At: now.Add(-20 * time.Second)},
	}, now)
	got := slices.Sorted(maps.Keys(b.by))
	if want := []string{"10.0.0.3", "10.0.0.4"}; !slices.Equal(got, want) {
		t.Fatalf("recalled %v, want %v (the newest two valid proofs)", got, want)
	}
	if !b.has("10.0.0.3", now.Add(59*time.Second)) || b.has("10.0.0.3", now.Add(time.Minute)) {
		t.Fatal("a proof from the future was not kept as of now")
	}
	if b.has("10.0.0.4", now.Add(50*time.Second)) {
		t.Fatal("a recalled proof was not kept as of when it was made")
	}
	b = newBook(4, time.Minute)
	b.recall([]Proof{{Host: "::ffff:10.0.0.5", At: now}}, now)
	if !b.has("10.0.0.5", now) {
		t.Fatal("an IPv4 address written in IPv6 form was not recalled as the IPv4 host")
	}
}

// watchedConn is a connection the gate's book watches (Watched).
type watchedConn struct {
	net.Conn
	mu      sync.Mutex
	onClose []func()
}

func (c *watchedConn) OnClose(f func()) { c.mu.Lock(); c.onClose = append(c.onClose, f); c.mu.Unlock() }

func (c *watchedConn) Close() error {
	err := c.Conn.Close()
	c.mu.Lock()
	fs := c.onClose
	c.onClose = nil
	c.mu.Unlock()
	for _, f := range fs {
		f()
	}
	return err
}

// TestGateBookWatchesOpenConnections: a host whose handshake succeeded is
// in the book as of now while its connection is open (so a pod connected
// past RememberFor still has its place), and as of the close after.
func TestGateBookWatchesOpenConnections(t *testing.T) {
	g := NewGate(listen(t), func(c net.Conn) (net.Conn, error) {
		if _, err := lineHandshake(c); err != nil {
			return nil, err
		}
		return &watchedConn{Conn: c}, nil
	}, GateConfig{Timeout: time.Minute, MaxPending: 4, Rooms: []Room{{Max: 1, Proven: true}}, RememberFor: 50 * time.Millisecond})
	defer g.Close()
	accepted := acceptAll(g)
	c := harness.DialFrom(t, "127.0.0.7", g.Addr().String())
	if _, err := c.Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	var served net.Conn
	select {
	case served = <-accepted:
	case <-time.After(harness.Scale(5 * time.Second)):
		t.Fatal("the handshake did not finish")
	}
	g.mu.Lock()
	open := g.book.has("127.0.0.7", time.Now().Add(time.Hour)) // long past RememberFor, the connection open
	g.mu.Unlock()
	if !open {
		t.Fatal("a host with its connection open was forgotten after RememberFor")
	}
	served.Close()
	closedAt := time.Now()
	book := g.Book()
	if len(book) != 1 || book[0].Host != "127.0.0.7" || book[0].At.Before(closedAt.Add(-time.Second)) {
		t.Fatalf("book after the close %+v, want 127.0.0.7 as of the close", book)
	}
}

// TestPeerNamesAnIPv6PrefixWhole: the per-address bounds count an IPv6
// /64 as one address (a machine commonly holds the whole prefix); IPv4,
// IPv4 in IPv6 and loopback are whole addresses, and Host never groups.
func TestPeerNamesAnIPv6PrefixWhole(t *testing.T) {
	for in, want := range map[string]string{
		"[2001:db8:1:2:3:4:5:6]:443": "2001:db8:1:2::/64",
		"[2001:db8:1:2::ffff]:80":    "2001:db8:1:2::/64",
		"[fe80::1%eth0]:80":          "fe80::/64",
		"[::1]:80":                   "::1",
		"[::ffff:10.0.0.1]:80":       "::ffff:10.0.0.1",
		"10.0.0.1:80":                "10.0.0.1",
		"not an address":             "not an address",
	} {
		if got := PeerString(in); got != want {
			t.Errorf("PeerString(%q) = %q, want %q", in, got, want)
		}
	}
	if got := HostString("[2001:db8:1:2:3:4:5:6]:443"); got != "2001:db8:1:2:3:4:5:6" {
		t.Errorf("HostString grouped the address: %q", got)
	}
}
