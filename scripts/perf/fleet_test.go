package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// /proc/net/tcp lines name the local port and remote address in hex, the
// address in host byte order.
func TestParseTCPLine(t *testing.T) {
	ports := map[int]int{0xC350: 2}
	for _, c := range []struct {
		line string
		ip   uint32
		ok   bool
	}{
		{"   0: 0100007F:C350 0100007F:D2F0 01 00000000:00000000 00:00000000 00000000  1000 0 1 1 0 20 4 30 10 -1", 0x0100007F, true},
		{"   1: 0100007F:C350 0200007F:D2F0 01 00000000:00000000 00:00000000 00000000  1000 0 1 1 0 20 4 30 10 -1", 0x0200007F, true},
		{"   2: 0100007F:C350 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000 0 1 1 0 20 4 30 10 -1", 0, false}, // listening
		{"   3: 0100007F:C351 0100007F:D2F0 01 00000000:00000000 00:00000000 00000000  1000 0 1 1 0 20 4 30 10 -1", 0, false}, // another port
	} {
		idx, ip, ok := parseTCPLine(c.line, ports)
		if ok != c.ok || (ok && (idx != 2 || ip != c.ip)) {
			t.Errorf("%q: %d %#x %v, want 2 %#x %v", c.line, idx, ip, ok, c.ip, c.ok)
		}
	}
}

func TestMetricSamples(t *testing.T) {
	body := "# HELP go_goroutines x\ngo_goroutines 42\ngo_goroutines_extra 7\n" +
		"idgen_door_refused_total{bound=\"grpc_tls\"} 3\nidgen_door_refused_total{bound=\"grpc_calls\"} 0\n"
	if got := metricSum(body, "go_goroutines"); got != 42 {
		t.Errorf("go_goroutines %v, want 42", got)
	}
	got := metricSamples(body, "idgen_door_refused_total")
	if len(got) != 2 || got[`bound="grpc_tls"`] != 3 {
		t.Errorf("refusals %v", got)
	}
}

// Clients dial from addresses of their own, none of them the attacker's.
func TestClientSourcesAreDistinct(t *testing.T) {
	seen := map[string]bool{}
	for i := range 5000 {
		ip := clientSource(i, 0).String()
		if seen[ip] || strings.HasPrefix(ip, "127.0.0.") {
			t.Fatalf("client %d: %s, taken or the attacker's", i, ip)
		}
		seen[ip] = true
	}
	if ip := clientSource(9, 1).String(); ip != "127.0.0.1" {
		t.Errorf("one source: %s, want 127.0.0.1", ip)
	}
}

func TestMostAtOnce(t *testing.T) {
	t0 := time.Now()
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	rs := []clientResult{{start: at(0), end: at(3)}, {start: at(1), end: at(2)}, {start: at(3), end: at(5)}, {start: at(4), end: at(6)}}
	if got := mostAtOnce(rs); got != 2 {
		t.Errorf("%d at once, want 2 (one ending as another starts counts once)", got)
	}
}

// A failed draw's cause is the status of the Pool's last fetch, digits
// blanked, or the deadline alone.
func TestDrawCause(t *testing.T) {
	fetch := status.Error(codes.Unavailable, "connection error: desc = \"transport: Error while dialing: dial tcp 127.1.0.9:4001\"")
	for _, c := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("idclient: no ID available: %w", context.DeadlineExceeded), "deadline, no fetch failed"},
		{fmt.Errorf("idclient: no ID available: %w; last fetch failed: %w", context.DeadlineExceeded, fetch),
			"Unavailable: connection error: desc = \"transport: Error while dialing: di…"},
		{status.Error(codes.ResourceExhausted, "3 calls"), "ResourceExhausted: # calls"},
	} {
		if got := drawCause(c.err); got != c.want {
			t.Errorf("drawCause(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}
