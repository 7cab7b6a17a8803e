package main

import (
	"bufio"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idgen/idgen/scripts/harness"
)

// fakeResolver makes lookupIP answer from names for the test's duration.
func fakeResolver(t *testing.T, names map[string][]string) {
	t.Helper()
	orig := lookupIP
	lookupIP = func(host string) ([]net.IP, error) {
		addrs, ok := names[host]
		if !ok {
			return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
		}
		var ips []net.IP
		for _, a := range addrs {
			ips = append(ips, net.ParseIP(a))
		}
		return ips, nil
	}
	t.Cleanup(func() { lookupIP = orig })
}

// TestBindNamesResolvedOnce: a bind host name is resolved once, in the
// configuration, and every listener gets the IP the loopback check judged;
// a name with several addresses, or none, is refused, and so is a name of a
// non-loopback address without TLS, with the address in the message.
func TestBindNamesResolvedOnce(t *testing.T) {
	fakeResolver(t, map[string][]string{
		"localhost":   {"127.0.0.1", "::1"}, // as most /etc/hosts have it: both loopback
		"lo6.test":    {"::1"},
		"multi.test":  {"10.0.0.1", "10.0.0.2"},
		"mixed.test":  {"127.0.0.1", "10.0.0.3"},
		"public.test": {"10.0.0.5"},
	})
	key := gossipKey(t)
	secure := []string{"--tls-cert", "c.pem", "--tls-key", "k.pem", "--tls-ca", "ca.pem", "--gossip-key", key}
	parse := func(args ...string) (Config, error) {
		return parseConfig(args, func(string) string { return "" }, io.Discard)
	}

	c, err := parse("--grpc-addr", "localhost:50051", "--raft-addr", "localhost:50052", "--gossip-addr", "lo6.test:7946", "--http-addr", "localhost:0")
	if err != nil {
		t.Fatal(err)
	}
	for flag, got := range map[string]string{"--grpc-addr": c.GRPCAddr, "--raft-addr": c.RaftAddr, "--http-addr": c.HTTPAddr} {
		if host, _, _ := net.SplitHostPort(got); host != "127.0.0.1" {
			t.Errorf("%s localhost resolved to %q, want 127.0.0.1", flag, got)
		}
	}
	if c.GossipAddr != "[::1]:7946" {
		t.Errorf("--gossip-addr lo6.test:7946 resolved to %q, want [::1]:7946", c.GossipAddr)
	}

	if c, err := parse(append([]string{"--gossip-addr", "public.test:7946", "--grpc-addr", ":50051"}, secure...)...); err != nil ||
		c.GossipAddr != "10.0.0.5:7946" || c.GRPCAddr != ":50051" {
		t.Errorf("with TLS: public.test and :50051 gave %q, %q, %v; want 10.0.0.5:7946 and :50051 (every interface, as asked)", c.GossipAddr, c.GRPCAddr, err)
	}

	for _, tc := range []struct {
		args []string
		want []string
	}{
		{append([]string{"--gossip-addr", "multi.test:7946"}, secure...), []string{"--gossip-addr", "multi.test", "10.0.0.1", "10.0.0.2", "one IP"}},
		{append([]string{"--raft-addr", "mixed.test:50052"}, secure...), []string{"--raft-addr", "mixed.test", "10.0.0.3"}},
		{[]string{"--raft-addr", "mixed.test:50052"}, []string{"--raft-addr", "mixed.test", "10.0.0.3"}},
		{append([]string{"--grpc-addr", "nowhere.test:50051"}, secure...), []string{"--grpc-addr", "nowhere.test", "does not resolve"}},
		{[]string{"--gossip-addr", "public.test:7946"}, []string{"--gossip-addr", "public.test", "10.0.0.5", "not a loopback address", "--insecure"}},
		{[]string{"--http-addr", "public.test:9090"}, []string{"--http-addr", "10.0.0.5", "not a loopback address"}},
	} {
		_, err := parse(tc.args...)
		for _, w := range tc.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%v: err %v, want one naming %q", tc.args, err, w)
				break
			}
		}
	}
}

// TestLocalhostBindsStayOnLoopback starts a node whose four binds are
// localhost:PORT and checks from the outside that every socket it listens on
// (gRPC, Raft, gossip TCP and UDP, HTTP) is on 127.0.0.1: by the kernel's
// socket table, and by dialing the ports on the host's other addresses.
func TestLocalhostBindsStayOnLoopback(t *testing.T) {
	n := newNode(t, nodeOpts{name: "lo"})
	ports := map[string]int{}
	for what, a := range map[string]*string{"grpc": &n.grpc, "raft": &n.raft, "gossip": &n.gossip, "http": &n.http} {
		_, ps, _ := net.SplitHostPort(*a)
		ports[what], _ = strconv.Atoi(ps)
		*a = "localhost:" + ps
	}
	n.start()
	harness.WaitFor(t, 30*time.Second, "the node on localhost binds to be ready", func() bool {
		if !n.running() {
			t.Fatal("the node exited")
		}
		return n.ready()
	})

	if _, err := os.Stat("/proc/net/tcp"); err == nil {
		for what, port := range ports {
			tcp := localSockets(t, port, "/proc/net/tcp", "/proc/net/tcp6")
			udp := localSockets(t, port, "/proc/net/udp", "/proc/net/udp6")
			if len(tcp) == 0 {
				t.Errorf("%s port %d: no TCP socket in /proc/net/tcp{,6}", what, port)
			}
			if what == "gossip" && len(udp) == 0 {
				t.Errorf("gossip port %d: no UDP socket in /proc/net/udp{,6}", port)
			}
			for _, ip := range append(tcp, udp...) {
				if !ip.Equal(net.IPv4(127, 0, 0, 1)) {
					t.Errorf("%s port %d: a socket is bound to %s, want 127.0.0.1 (tcp %v, udp %v)", what, port, ip, tcp, udp)
					break
				}
			}
		}
	} else {
		t.Logf("no /proc/net/tcp (%v): checking by dialing only", err)
	}

	others := nonLoopbackIPs(t)
	if len(others) == 0 {
		t.Log("this host has no non-loopback address to dial from")
	}
	for _, ip := range others {
		for what, port := range ports {
			addr := net.JoinHostPort(ip.String(), strconv.Itoa(port))
			if c, err := net.DialTimeout("tcp", addr, harness.Scale(2*time.Second)); err == nil {
				c.Close()
				t.Errorf("%s port reachable on %s: a localhost bind must stay on loopback", what, addr)
			}
		}
	}
}

// localSockets lists the local IPs of the sockets on port in the kernel's
// tables (the files of /proc/net: tcp, tcp6, udp, udp6).
func localSockets(t *testing.T, port int, files ...string) []net.IP {
	t.Helper()
	var ips []net.IP
	for _, name := range files {
		f, err := os.Open(name)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Scan() // header
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 2 {
				continue
			}
			ip, p, err := parseProcAddr(fields[1])
			if err != nil {
				f.Close()
				t.Fatalf("%s: %q: %v", name, sc.Text(), err)
			}
			if p == port {
				ips = append(ips, ip)
			}
		}
		f.Close()
	}
	return ips
}

// parseProcAddr decodes /proc/net's "0100007F:1F90": the IP in host byte
// order, 32 bits at a time (little-endian here), and the port in hex.
func parseProcAddr(s string) (net.IP, int, error) {
	hexIP, hexPort, ok := strings.Cut(s, ":")
	if !ok {
		return nil, 0, fmt.Errorf("no port in %q", s)
	}
	b, err := hex.DecodeString(hexIP)
	if err != nil || (len(b) != 4 && len(b) != 16) {
		return nil, 0, fmt.Errorf("bad address %q", hexIP)
	}
	for i := 0; i < len(b); i += 4 {
		b[i], b[i+1], b[i+2], b[i+3] = b[i+3], b[i+2], b[i+1], b[i]
	}
	port, err := strconv.ParseUint(hexPort, 16, 16)
	if err != nil {
		return nil, 0, fmt.Errorf("bad port %q", hexPort)
	}
	return net.IP(b), int(port), nil
}

// nonLoopbackIPs are this host's IPv4 addresses other than loopback.
func nonLoopbackIPs(t *testing.T) []net.IP {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	var ips []net.IP
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && !ipn.IP.IsLoopback() && ipn.IP.To4() != nil {
			ips = append(ips, ipn.IP)
		}
	}
	return ips
}
