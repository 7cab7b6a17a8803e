package main

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/idgen/idgen/rpc"
	"github.com/idgen/idgen/scripts/harness"
)

// adminDoorOn serves h behind the admin port's door on a loopback port and
// returns its address and the refusals counted by bound.
func adminDoorOn(t *testing.T, h http.Handler, grace ...time.Duration) (string, func(string) int) {
	t.Helper()
	lis, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", harness.NextPort(t)))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	counts := map[string]int{}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv := newAdminServer(h, log)
	door := limitAdmin(lis, log, func(b string) { mu.Lock(); counts[b]++; mu.Unlock() }).(*adminDoor)
	if len(grace) > 0 {
		door.grace = grace[0]
	}
	go srv.Serve(door)
	t.Cleanup(func() { srv.Close() })
	return lis.Addr().String(), func(b string) int { mu.Lock(); defer mu.Unlock(); return counts[b] }
}

// TestAdminPortAnswersProbesWhateverStrangersHold attacks the HTTP admin
// port from nine addresses: one opens 80 silent connections and 10 that
// send their headers a byte at a time, eight more fill the port's cap of
// 64 with silent ones. A probe from another address still gets /healthz
// answered on every try: each new connection closes the oldest one not
// being answered (of its own address first), and each is counted. (Before,
// the 65th connection was closed at once: 30 new connections a second kept
// probes out.)
func TestAdminPortAnswersProbesWhateverStrangersHold(t *testing.T) {
	addr, refused := adminDoorOn(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	for range 80 {
		harness.DialFrom(t, "127.0.0.2", addr)
	}
	for range 10 {
		c := harness.DialFrom(t, "127.0.0.2", addr)
		go func() {
			for _, b := range []byte("GET /healthz HTTP/1.1\r\nHost: x\r\n") {
				if _, err := c.Write([]byte{b}); err != nil {
					return
				}
				time.Sleep(100 * time.Millisecond)
			}
		}()
	}
	for i := range 8 {
		for range adminMaxConnsPerAddress {
			harness.DialFrom(t, fmt.Sprintf("127.0.0.%d", 3+i), addr)
		}
	}
	harness.WaitFor(t, 5*time.Second, "the strangers' connections past the bounds to be closed", func() bool {
		return refused(rpc.BoundHTTPConnsPerAddress) >= 90-adminMaxConnsPerAddress && refused(rpc.BoundHTTPConns) >= 8*adminMaxConnsPerAddress-(adminMaxConns-adminMaxConnsPerAddress)
	})
	probe := &http.Client{Timeout: harness.Scale(2 * time.Second), Transport: &http.Transport{DisableKeepAlives: true}}
	for i := range 20 {
		resp, err := probe.Get("http://" + addr + "/healthz")
		if err != nil {
			t.Fatalf("probe %d behind the strangers: %v", i, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("probe %d: %s", i, resp.Status)
		}
	}
	t.Logf("closed for newcomers: %d past an address's bound, %d past the port's", refused(rpc.BoundHTTPConnsPerAddress), refused(rpc.BoundHTTPConns))
}

// TestAdminPortRefusesOnlyWhenEveryConnectionIsAnswered: with every
// connection of the port being answered, a new one is refused (and
// counted) rather than cutting an answer off.
func TestAdminPortRefusesOnlyWhenEveryConnectionIsAnswered(t *testing.T) {
	release := make(chan struct{})
	var inside sync.WaitGroup
	// (A grace longer than the test, so that a slow machine cannot turn
	// the connections being answered into ones answered too long.)
	addr, refused := adminDoorOn(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inside.Done()
		<-release
		io.WriteString(w, "ok")
	}), time.Hour)
	defer close(release)
	inside.Add(adminMaxConns)
	for i := range adminMaxConns / adminMaxConnsPerAddress {
		for range adminMaxConnsPerAddress {
			c := harness.DialFrom(t, fmt.Sprintf("127.0.0.%d", 2+i), addr)
			if _, err := c.Write([]byte("GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
				t.Fatal(err)
			}
		}
	}
	inside.Wait()
	c := harness.DialFrom(t, "127.0.0.1", addr)
	_ = c.SetReadDeadline(time.Now().Add(harness.Scale(5 * time.Second)))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("a connection past the cap of busy connections was kept")
	}
	harness.WaitFor(t, 5*time.Second, "the refusal to be counted", func() bool { return refused(rpc.BoundHTTPConnsBusy) == 1 })
	if n := refused(rpc.BoundHTTPConns); n != 0 {
		t.Errorf("%d connections being answered were closed for a newcomer", n)
	}
}

// TestAdminPortClosesConnectionsAnsweredTooLong: connections whose answers
// are never read (the write blocks) or that keep a slow request pipelined
// are "being answered" for as long as the attacker likes; past
// adminBusyGrace they are closed for a newcomer like idle ones, so a probe
// still gets in. (Strangers pipelining /metrics on 64 connections from four
// addresses failed 88 of 100 probes.)
func TestAdminPortClosesConnectionsAnsweredTooLong(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	addr, refused := adminDoorOn(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			<-release
		}
		io.WriteString(w, "ok")
	}))
	for i := range adminMaxConns / adminMaxConnsPerAddress {
		for range adminMaxConnsPerAddress {
			c := harness.DialFrom(t, fmt.Sprintf("127.0.0.%d", 2+i), addr)
			if _, err := c.Write([]byte("GET /slow HTTP/1.1\r\nHost: x\r\n\r\nGET /slow HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
				t.Fatal(err)
			}
		}
	}
	probe := &http.Client{Timeout: harness.Scale(2 * time.Second), Transport: &http.Transport{DisableKeepAlives: true}}
	// Within the grace the port is full of connections being answered.
	resp, err := probe.Get("http://" + addr + "/healthz")
	if err == nil {
		resp.Body.Close()
	}
	harness.WaitFor(t, 10*time.Second, "a probe to get in past connections answered too long", func() bool {
		resp, err := probe.Get("http://" + addr + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	if refused(rpc.BoundHTTPConns) == 0 {
		t.Error("no connection was counted as closed for the newcomer")
	}
}
