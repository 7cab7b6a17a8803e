package cluster

import (
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/raft"

	"github.com/idgen/idgen/rpc/tlsconf"
	"github.com/idgen/idgen/scripts/harness"
)

// raftPeerTLS is a server certificate of a fresh CA, as every node of a
// TLS cluster holds one (tlsconf.Material.PeerConfig).
func raftPeerTLS(t *testing.T) *tls.Config {
	t.Helper()
	dir := t.TempDir()
	if err := tlsconf.CreateCA(dir, 0); err != nil {
		t.Fatal(err)
	}
	if err := tlsconf.CreateCert(dir, tlsconf.CertRequest{Role: tlsconf.RoleServer, Name: "server"}); err != nil {
		t.Fatal(err)
	}
	m, err := tlsconf.Load(tlsconf.Files{Cert: tlsconf.CertFile(dir, "server"), Key: tlsconf.KeyFile(dir, "server"), CA: filepath.Join(dir, tlsconf.CAFile)})
	if err != nil {
		t.Fatal(err)
	}
	return m.PeerConfig()
}

// probeRaft sends one harmless Raft RPC (an AppendEntries of term 0, which
// any server answers with its own term and ignores) to addr as a server of
// the cluster would, over a new transport and so a new connection.
func probeRaft(t *testing.T, addr string, peer *tls.Config, clusterID string) uint64 {
	t.Helper()
	cfg := &Config{RaftAddr: fmt.Sprintf("127.0.0.1:%d", harness.NextPort(t)), RaftTLS: peer}
	adv, _ := net.ResolveTCPAddr("tcp", cfg.RaftAddr)
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	trans, err := raftTransport(cfg, adv, func() string { return clusterID }, hclog.NewNullLogger(), quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer trans.Close()
	var resp raft.AppendEntriesResponse
	req := &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("probe"), Addr: []byte(cfg.RaftAddr)}}
	if err := trans.AppendEntries("target", raft.ServerAddress(addr), req, &resp); err != nil {
		t.Fatalf("an authenticated Raft RPC to %s: %v", addr, err)
	}
	if resp.Term == 0 || resp.Success {
		t.Fatalf("term-0 AppendEntries answered %+v, want refused with the server's term", resp)
	}
	return resp.Term
}

// TestRaftPortClosesSilentConnections attacks a TLS cluster's Raft port
// without a certificate: 200 connections that send nothing are all closed
// within the handshake bound, the node's goroutines come back to where they
// were, an authenticated peer gets through during the attack, and the
// node keeps issuing.
func TestRaftPortClosesSilentConnections(t *testing.T) {
	peer := raftPeerTLS(t)
	tc := startThree(t, func(c *Config) { c.RaftTLS = peer })
	a := tc.node("a")
	addr := tc.specs["a"].cfg.RaftAddr
	clusterID := a.Status().ClusterID
	tc.issue(a, 100)

	base := harness.SettledGoroutines()
	const attackers = 200
	bound := raftHandshakeTimeout
	conns := harness.DialSilent(t, addr, attackers)
	deadline := time.Now().Add(harness.Scale(bound + 2*time.Second))
	// While the silent connections are held, a real peer still gets in
	// (it closes the oldest unfinished handshake), and they cost at most
	// one goroutine each up to the cap of unfinished handshakes.
	probeRaft(t, addr, peer, clusterID)
	during := runtime.NumGoroutine()
	if during > base+raftMaxPending+40 {
		t.Errorf("%d goroutines during the attack, %d before: silent connections cost more than the %d pending handshakes", during, base, raftMaxPending)
	}
	if closed, open := harness.AwaitClosed(conns, deadline); closed != attackers {
		t.Fatalf("%d of %d silent Raft connections were closed within %v%s; %d were still open", closed, attackers, harness.Scale(bound+2*time.Second), harness.SlowdownNote(), open)
	}
	harness.WaitFor(t, 10*time.Second, "the goroutine count to come back", func() bool {
		return runtime.NumGoroutine() <= base+40
	})
	t.Logf("goroutines: %d before, %d during the attack, %d after", base, during, runtime.NumGoroutine())
	probeRaft(t, addr, peer, clusterID)
	tc.issue(a, 100)
	tc.checkContainment()
}

// garbage is the n-th junk UDP datagram an attacker sends to a gossip port:
// with and without the (public) label header, with assorted first bytes.
func garbage(n int, label string) []byte {
	b := make([]byte, 24+n%40)
	_, _ = rand.Read(b)
	if n%2 == 0 {
		return b
	}
	return append([]byte{244, byte(len(label))}, append([]byte(label), b...)...)
}

// TestGarbageGossipIsLoggedBounded: 5,000 junk datagrams to an encrypted
// gossip port give a handful of log lines, not one each.
func TestGarbageGossipIsLoggedBounded(t *testing.T) {
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	const label = "doors"
	tc := newTestCluster(t)
	s := tc.add("a", 1)
	s.cfg.GossipKeys, s.cfg.GossipLabel = [][]byte{key}, label
	var buf syncBuffer
	s.cfg.Logger = jsonLogger(&buf, slog.LevelInfo)
	n := tc.start("a")
	waitReady(t, n)

	target, err := net.ResolveUDPAddr("udp", s.cfg.GossipAddr)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.DialUDP("udp", nil, target)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const packets = 5000
	for i := range packets {
		if _, err := c.Write(garbage(i, label)); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		if i%500 == 499 {
			time.Sleep(time.Millisecond) // let the node's socket drain a little
		}
	}

	// A keyed member's ping is answered only after the node has read every
	// datagram queued before it.
	mc := memberlist.DefaultLocalConfig()
	mc.Name, mc.BindAddr, mc.BindPort = "probe", "127.0.0.1", harness.NextPort(t)
	mc.AdvertisePort = mc.BindPort
	mc.Label = label
	mc.Keyring, _ = memberlist.NewKeyring([][]byte{key}, key)
	mc.GossipVerifyIncoming, mc.GossipVerifyOutgoing = true, true
	mc.LogOutput = discard{}
	probe, err := memberlist.Create(mc)
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Shutdown()
	harness.WaitFor(t, 10*time.Second, "the node to answer a keyed ping after the garbage", func() bool {
		_, err := probe.Ping(n.ID(), target)
		return err == nil
	})

	// The node read (nearly) all of them: loopback may drop a few.
	if seen := n.gossip.noise.Seen(); seen < packets*9/10 {
		t.Fatalf("the node noted %d of %d garbage datagrams", seen, packets)
	}
	// The interval's counts, which would come when the minute ends, now.
	n.gossip.noise.Flush()
	var lines []string
	var suppressed float64
	for _, r := range buf.records(t) {
		if r["component"] == "memberlist" && (r["level"] == "ERROR" || r["level"] == "WARN") {
			lines = append(lines, fmt.Sprint(r["msg"]))
			if c, ok := r["suppressed"].(float64); ok {
				suppressed += c
			}
		}
	}
	if len(lines) > 10 {
		t.Fatalf("%d garbage datagrams gave %d memberlist warning/error lines, want at most 10; first: %s", packets, len(lines), strings.Join(lines[:3], " | "))
	}
	if int64(suppressed)+int64(len(lines)) < n.gossip.noise.Seen() {
		t.Fatalf("%d lines counting %v suppressed, for %d noted: the counts lost some", len(lines), suppressed, n.gossip.noise.Seen())
	}
	t.Logf("%d garbage datagrams: %d lines, %v counted as suppressed: %s", packets, len(lines), suppressed, strings.Join(lines, " | "))
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// TestGossipTCPPortCapsSilentStreams attacks a node's gossip TCP port with
// 200 connections that send nothing: those past the stream cap are closed
// at once, the rest at memberlist's stream deadline (10 s with the LAN
// profile), and the goroutines come back.
func TestGossipTCPPortCapsSilentStreams(t *testing.T) {
	const capStreams, lanTCPTimeout = gossipMaxStreams, 10 * time.Second
	if d := memberlist.DefaultLANConfig().TCPTimeout; d != lanTCPTimeout {
		t.Fatalf("memberlist's LAN stream deadline is %v; cmd/idgend/README.md's table says %v", d, lanTCPTimeout)
	}
	tc := newTestCluster(t)
	s := tc.add("a", 1)
	s.cfg.GossipLocal = false
	n := tc.start("a")
	waitReady(t, n)
	tc.issue(n, 100)

	base := harness.SettledGoroutines()
	const attackers = 200
	conns := harness.DialSilent(t, s.cfg.GossipAddr, attackers)
	start := time.Now()
	var mu sync.Mutex
	closedAt := make([]time.Duration, 0, attackers)
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = c.SetReadDeadline(start.Add(harness.Scale(lanTCPTimeout + 5*time.Second)))
			buf := make([]byte, 64)
			for {
				if _, err := c.Read(buf); err != nil {
					var ne net.Error
					if !(errors.As(err, &ne) && ne.Timeout()) {
						mu.Lock()
						closedAt = append(closedAt, time.Since(start))
						mu.Unlock()
					}
					return
				}
			}
		}()
	}
	closedCount := func() int { mu.Lock(); defer mu.Unlock(); return len(closedAt) }
	harness.WaitFor(t, 5*time.Second, fmt.Sprintf("the %d streams past the cap of %d to be closed", attackers-capStreams, capStreams), func() bool {
		return closedCount() >= attackers-capStreams
	})
	if got := closedCount(); got > attackers-capStreams && time.Since(start) < lanTCPTimeout {
		t.Fatalf("%d streams closed before the stream deadline, want the %d past the cap", got, attackers-capStreams)
	}
	wg.Wait()
	if got := closedCount(); got != attackers {
		t.Fatalf("%d of %d silent gossip streams closed within %v", got, attackers, harness.Scale(lanTCPTimeout+5*time.Second))
	}
	harness.WaitFor(t, 10*time.Second, "the goroutine count to come back", func() bool {
		return runtime.NumGoroutine() <= base+20
	})
	tc.issue(n, 100)
}

// TestRefusedRaftPeersAreLoggedBounded: 300 connections without a
// greeting and 300 that greet as another cluster give a line or two each,
// not one per connection.
func TestRefusedRaftPeersAreLoggedBounded(t *testing.T) {
	tc := newTestCluster(t)
	s := tc.add("a", 1)
	var buf syncBuffer
	s.cfg.Logger = jsonLogger(&buf, slog.LevelInfo)
	n := tc.start("a")
	waitReady(t, n)

	before := len(buf.records(t))
	const each = 300
	var conns []net.Conn
	for i := range 2 * each {
		c := harness.DialSilent(t, s.cfg.RaftAddr, 1)[0]
		greeting := "HELLO\n"
		if i%2 == 1 {
			greeting = raftGreeting + "0123456789abcdef0123456789abcdef\n"
		}
		if _, err := c.Write([]byte(greeting)); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	limit := harness.Scale(5 * time.Second)
	if closed, open := harness.AwaitClosed(conns, time.Now().Add(limit)); open != 0 {
		t.Fatalf("%d refused Raft connections closed, %d still open after %v", closed, open, limit)
	}
	var lines []string
	harness.WaitFor(t, 5*time.Second, "the refusals to be logged", func() bool {
		lines = lines[:0]
		for _, r := range buf.records(t)[before:] {
			if lvl := r["level"]; r["component"] == "raft" && (lvl == "WARN" || lvl == "ERROR") {
				lines = append(lines, fmt.Sprint(r["msg"]))
			}
		}
		return len(lines) >= 2
	})
	if len(lines) > 4 {
		t.Fatalf("%d refused Raft connections gave %d warning/error lines, want at most 4; first: %s", 2*each, len(lines), strings.Join(lines[:4], " | "))
	}
	t.Logf("%d refused connections: %s", 2*each, strings.Join(lines, " | "))
	tc.issue(n, 100)
}

// TestNoiseKeyIgnoresAttackerDetail: what an attacker chooses (a label, an
// encryption version, a source port) never makes a new kind of line.
func TestNoiseKeyIgnoresAttackerDetail(t *testing.T) {
	for _, c := range []struct{ a, b, kind, peer string }{
		{`discarding packet with unacceptable label "": from=10.0.0.9:1`, `discarding packet with unacceptable label "zz": from=10.0.0.9:2`, "discarding packet with unacceptable label", "10.0.0.9"},
		{"Decrypt packet failed: unsupported encryption version 28 from=10.0.0.9:1", "Decrypt packet failed: unsupported encryption version 224 from=10.0.0.9:7", "Decrypt packet failed", "10.0.0.9"},
		{"msg type (42) not supported from=[::1]:5", "msg type (7) not supported from=[::1]:6", "msg type", "::1"},
		{"Got invalid checksum for UDP packet: 1a, 2b", "Got invalid checksum for UDP packet: 3c, 4d", "Got invalid checksum for UDP packet", ""},
	} {
		ka, pa := noiseKey(c.a)
		kb, pb := noiseKey(c.b)
		if ka != c.kind || kb != c.kind || pa != c.peer || pb != c.peer {
			t.Errorf("noiseKey(%q) = %q %q, noiseKey(%q) = %q %q; want %q %q", c.a, ka, pa, c.b, kb, pb, c.kind, c.peer)
		}
	}
}
