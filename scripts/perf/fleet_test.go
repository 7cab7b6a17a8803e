package main

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// The subset stand-in gives each client k distinct nodes of the list, the
// same ones every time, and spreads the clients evenly over the nodes.
func TestSubsetOfIsDeterministicAndEven(t *testing.T) {
	addrs := []string{"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"}
	if got := subsetOf(7, 0, addrs); !slices.Equal(got, addrs) {
		t.Fatalf("subset 0: %v, want every node", got)
	}
	per := map[string]int{}
	const clients = 3000
	for i := range clients {
		s := subsetOf(i, 2, addrs)
		if len(s) != 2 || s[0] == s[1] || !slices.Equal(s, subsetOf(i, 2, addrs)) {
			t.Fatalf("client %d: %v, want the same 2 distinct nodes every time", i, s)
		}
		for _, a := range s {
			per[a]++
		}
	}
	for _, a := range addrs {
		// 2,000 each when even; 5% either way is far outside chance.
		if per[a] < 1900 || per[a] > 2100 {
			t.Errorf("%s in %d of %d subsets, want about 2000: %v", a, per[a], clients, per)
		}
	}
}

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
