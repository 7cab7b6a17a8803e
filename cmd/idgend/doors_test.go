package main

import (
	"bufio"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idgen/idgen/scripts/harness"
)

// closedWithin reads c until the server closes it; it reports how long
// that took, or false if c was still open after limit.
func closedWithin(c net.Conn, limit time.Duration) (time.Duration, bool) {
	start := time.Now()
	_ = c.SetReadDeadline(start.Add(limit))
	buf := make([]byte, 4096)
	for {
		if _, err := c.Read(buf); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return time.Since(start), false
			}
			return time.Since(start), true
		}
	}
}

// TestAdminPortBoundsSlowClients attacks a node's HTTP admin port: a request
// that promises a 100,000-byte body and sends 1,000 bytes, and a keep-alive
// connection left idle after its answer, are both closed within their
// bounds (adminReadTimeout, adminIdleTimeout); a probe behind a port full
// of silent connections is answered; the node still answers afterwards.
func TestAdminPortBoundsSlowClients(t *testing.T) {
	n := newNode(t, nodeOpts{name: "n1"})
	n.start()
	harness.WaitFor(t, 30*time.Second, "n1 ready", n.ready)

	readBound, idleBound := adminReadTimeout, adminIdleTimeout
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		c, err := net.Dial("tcp", n.http)
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close()
		req := "POST /readyz HTTP/1.1\r\nHost: idgend\r\nContent-Length: 100000\r\n\r\n" + strings.Repeat("x", 1000)
		if _, err := c.Write([]byte(req)); err != nil {
			t.Error(err)
			return
		}
		limit := harness.Scale(readBound + 3*time.Second)
		if took, ok := closedWithin(c, limit); !ok {
			t.Errorf("a request with a partial body was still open after %v", took)
		} else {
			t.Logf("a request with a partial body was closed after %v", took)
		}
	}()
	go func() {
		defer wg.Done()
		c, err := net.Dial("tcp", n.http)
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close()
		if _, err := c.Write([]byte("GET /healthz HTTP/1.1\r\nHost: idgend\r\n\r\n")); err != nil {
			t.Error(err)
			return
		}
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Error(err)
			return
		}
		resp.Body.Close()
		if resp.Close {
			t.Errorf("the server closed a keep-alive connection at once; the test wants it idle")
		}
		limit := harness.Scale(idleBound + 3*time.Second)
		if took, ok := closedWithin(c, limit); !ok {
			t.Errorf("an idle keep-alive connection was still open after %v", took)
		} else {
			t.Logf("an idle keep-alive connection was closed after %v", took)
		}
	}()
	wg.Wait()
	if !n.ready() {
		t.Fatalf("n1 no longer answers /readyz after the slow clients")
	}

	// Headers past adminMaxHeaderBytes (net/http allows 4 KiB of slack).
	c, err := net.Dial("tcp", n.http)
	if err != nil {
		t.Fatal(err)
	}
	big := "GET /healthz HTTP/1.1\r\nHost: idgend\r\nX-Junk: " + strings.Repeat("x", adminMaxHeaderBytes+8<<10) + "\r\n\r\n"
	go c.Write([]byte(big))
	_ = c.SetReadDeadline(time.Now().Add(harness.Scale(5 * time.Second)))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("%d bytes of headers: %v %v, want 431", len(big), resp, err)
	}
	c.Close()

	// The bounds: connections past them close the oldest one not being
	// answered, so a probe behind a port full of silent connections is
	// answered, and the silent ones go (made way for, or at the header
	// bound).
	held := make([]net.Conn, 0, adminMaxConns)
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for range adminMaxConns {
		c, err := net.Dial("tcp", n.http)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	if !n.ready() {
		t.Fatalf("n1 did not answer /readyz behind %d silent connections", adminMaxConns)
	}
	for i, c := range held {
		if took, ok := closedWithin(c, harness.Scale(adminReadHeaderTimeout+3*time.Second)); !ok {
			t.Fatalf("silent connection %d was still open after %v", i, took)
		}
	}
	harness.WaitFor(t, 5*time.Second, "n1 to answer /readyz after the cap", n.ready)
}
