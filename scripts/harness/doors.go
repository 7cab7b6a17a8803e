package harness

import (
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

// AwaitClosed reads from every connection until the other end closes it or
// the deadline passes, and returns how many were closed and how many were
// still open at the deadline.
func AwaitClosed(conns []net.Conn, deadline time.Time) (closed, open int) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
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
