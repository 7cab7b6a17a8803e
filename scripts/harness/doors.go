package harness

import (
	"bytes"
	"errors"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"
)

// Helpers for tests of bounded listeners, from the attacker's side.

// DialSilent opens n TCP connections to addr that never send a byte.
func DialSilent(t testing.TB, addr string, n int) []net.Conn {
	t.Helper()
	conns := make([]net.Conn, 0, n)
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	for range n {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatalf("dial %s: %v (after %d connections)", addr, err, len(conns))
		}
		conns = append(conns, c)
	}
	return conns
}

// DialFrom opens a connection to addr from the loopback address ip (all of
// 127.0.0.0/8 is loopback), as a peer on another host would: bounds per
// remote address tell them apart. It is closed when the test ends.
func DialFrom(t testing.TB, ip, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial %s from %s: %v", addr, ip, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// AwaitClosed reads from every connection until the other end closes it or
// the deadline passes, and returns how many were closed and how many were
// still open at the deadline. It closes them all then.
func AwaitClosed(conns []net.Conn, deadline time.Time) (closed, open int) {
	closed, open = CountClosed(conns, deadline)
	for _, c := range conns {
		c.Close()
	}
	return closed, open
}

// CountClosed is AwaitClosed without closing: those still open stay open,
// holding whatever they hold on the other end.
func CountClosed(conns []net.Conn, deadline time.Time) (closed, open int) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.SetReadDeadline(time.Time{})
			_ = c.SetReadDeadline(deadline)
			buf := make([]byte, 512)
			for {
				_, err := c.Read(buf)
				if err == nil {
					continue // a TLS alert, a settings frame or the like: the server still has to close
				}
				var ne net.Error
				mu.Lock()
				if errors.As(err, &ne) && ne.Timeout() {
					open++
				} else {
					closed++
				}
				mu.Unlock()
				return
			}
		}()
	}
	wg.Wait()
	return closed, open
}

// SettledGoroutines waits briefly for the goroutine count to stop falling
// and returns it.
func SettledGoroutines() int {
	n := runtime.NumGoroutine()
	for range 20 {
		time.Sleep(50 * time.Millisecond)
		m := runtime.NumGoroutine()
		if m >= n {
			return min(m, n)
		}
		n = m
	}
	return n
}

// LogBuffer is a log destination many goroutines may write at once; Lines
// counts the lines written so far.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// Lines is how many lines were written so far.
func (l *LogBuffer) Lines() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return bytes.Count(l.b.Bytes(), []byte("\n"))
}

// Stranger holds connections to an address from loopback source
// addresses, as an attacker on other hosts would: each sends First once
// (if set) and then nothing, and each one the other end closes is dialled
// again at once (a failed dial after a short pause), until Halt or Stop.
type Stranger struct {
	First []byte
	stop  chan struct{}
	wg    sync.WaitGroup
	mu    sync.Mutex
	open  map[net.Conn]bool
	dials int
}

// NewStranger is a Stranger whose connections send first.
func NewStranger(first []byte) *Stranger {
	return &Stranger{First: first, stop: make(chan struct{}), open: map[net.Conn]bool{}}
}

// Hold keeps n connections from ip to addr.
func (s *Stranger) Hold(ip, addr string, n int) {
	for range n {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
			buf := make([]byte, 512)
			for {
				select {
				case <-s.stop:
					return
				default:
				}
				c, err := d.Dial("tcp", addr)
				if err != nil {
					select {
					case <-s.stop:
						return
					case <-time.After(50 * time.Millisecond):
					}
					continue
				}
				s.mu.Lock()
				s.open[c] = true
				s.dials++
				select {
				case <-s.stop: // halted while dialling: Halt did not see c
					c.Close()
				default:
				}
				s.mu.Unlock()
				if len(s.First) > 0 {
					_, _ = c.Write(s.First)
				}
				for {
					if _, err := c.Read(buf); err != nil {
						break
					}
				}
				c.Close()
				s.mu.Lock()
				delete(s.open, c)
				s.mu.Unlock()
			}
		}()
	}
}

// Halt stops redialling and returns the connections still open.
func (s *Stranger) Halt() []net.Conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	out := make([]net.Conn, 0, len(s.open))
	for c := range s.open {
		out = append(out, c)
	}
	return out
}

// Wait waits for the stranger's goroutines, once halted and its
// connections closed.
func (s *Stranger) Wait() { s.wg.Wait() }

// Stop halts the stranger, closes what it holds and waits.
func (s *Stranger) Stop() {
	for _, c := range s.Halt() {
		c.Close()
	}
	s.Wait()
}

// Dialled is how many connections it has opened.
func (s *Stranger) Dialled() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dials
}
