package cluster

import (
	"container/list"
	"crypto/rand"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/raft"

	"github.com/idgen/idgen/cluster/door"
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
	resp, err := sendAppend(t, addr, peer, clusterID, 0)
	if err != nil {
		t.Fatalf("an authenticated Raft RPC to %s: %v", addr, err)
	}
	if resp.Term == 0 || resp.Success {
		t.Fatalf("term-0 AppendEntries answered %+v, want refused with the server's term", resp)
	}
	return resp.Term
}

// sendAppend sends one empty AppendEntries of the given term to addr, with
// a server certificate and a greeting naming clusterID, over a new
// transport and so a new connection.
func sendAppend(t *testing.T, addr string, peer *tls.Config, clusterID string, term uint64) (*raft.AppendEntriesResponse, error) {
	t.Helper()
	cfg := &Config{RaftAddr: fmt.Sprintf("127.0.0.1:%d", harness.NextPort(t)), RaftTLS: peer}
	adv, _ := net.ResolveTCPAddr("tcp", cfg.RaftAddr)
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	trans, err := raftTransport(cfg, adv, raftGreeter{own: func() string { return clusterID }}, nil, hclog.NewNullLogger(), quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer trans.Close()
	var resp raft.AppendEntriesResponse
	req := &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("probe"), Addr: []byte(cfg.RaftAddr)},
		Term: term, Leader: []byte(cfg.RaftAddr)}
	if err := trans.AppendEntries("target", raft.ServerAddress(addr), req, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}

// TestRaftGreetingNamesTheExactCluster attacks a TLS cluster's Raft port
// with a server certificate of its CA (as a server of another cluster of
// the deployment holds): an AppendEntries of a far higher term, greeted
// with no cluster ID or with another cluster's, is refused on every node,
// and no node's term moves; the cluster keeps issuing. (An empty greeting
// used to match any cluster: forged AppendEntries deposed the leader.)
func TestRaftGreetingNamesTheExactCluster(t *testing.T) {
	peer := raftPeerTLS(t)
	tc := startThree(t, func(c *Config) { c.RaftTLS = peer })
	a := tc.node("a")
	clusterID := a.Status().ClusterID
	tc.issue(a, 100)
	terms := map[string]string{}
	for _, name := range []string{"a", "b", "c"} {
		terms[name] = tc.node(name).rs.raft.Stats()["term"]
	}
	for _, name := range []string{"a", "b", "c"} {
		addr := tc.specs[name].cfg.RaftAddr
		for _, greet := range []string{"", "0123456789abcdef0123456789abcdef"} {
			resp, err := sendAppend(t, addr, peer, greet, 1000)
			if err == nil {
				t.Errorf("%s took an AppendEntries of term 1000 greeted with cluster %q (its own is %s): %+v", name, greet, clusterID, resp)
			}
		}
		// The node's own cluster still gets in.
		probeRaft(t, addr, peer, clusterID)
	}
	for _, name := range []string{"a", "b", "c"} {
		if now := tc.node(name).rs.raft.Stats()["term"]; now != terms[name] {
			t.Errorf("%s's term went %s -> %s under refused greetings", name, terms[name], now)
		}
		// (The gate counts a refusal just after it closes the connection.)
		n := tc.node(name)
		harness.WaitFor(t, 5*time.Second, name+" to count the 2 greetings it refused", func() bool { return n.DoorRefusals()[boundRaftOtherCluster] >= 2 })
	}
	tc.issue(a, 100)
	tc.checkContainment()
}

// TestRaftGreetingAdmits is the greeting's rule: a node with a cluster
// admits exactly its own; one with none admits the leader that adds it and
// fellow founders, but a lone seed no other cluster's leader. Only an
// answer given with a cluster is final.
func TestRaftGreetingAdmits(t *testing.T) {
	for _, c := range []struct {
		ours, theirs string
		alone        bool
		ok, final    bool
	}{
		{"X", "X", false, true, true},
		{"X", "", false, false, true},
		{"X", "Y", false, false, true},
		{"X", "", true, false, true},
		{"", "X", false, true, false},
		{"", "", false, true, false},
		{"", "", true, true, false},
		{"", "X", true, false, false},
	} {
		ok, final := admits(c.ours, c.theirs, c.alone)
		if ok != c.ok || final != c.final {
			t.Errorf("admits(ours %q, theirs %q, alone %v) = %v, %v; want %v, %v", c.ours, c.theirs, c.alone, ok, final, c.ok, c.final)
		}
	}
}

// TestRaftConnectionAdmittedBeforeAClusterIsCheckedAgain: a connection a
// node without a cluster admitted (an old cluster's leader dialling a wiped
// seed's address) is closed on its next read once the node has founded a
// cluster of its own, and one naming that cluster goes on.
func TestRaftConnectionAdmittedBeforeAClusterIsCheckedAgain(t *testing.T) {
	var own atomic.Value
	own.Store("")
	layer := &clusterStreamLayer{greeter: raftGreeter{own: func() string { return own.Load().(string) }, alone: func() bool { return false }},
		refusals: door.NewRateLog(slog.New(slog.NewTextHandler(io.Discard, nil)), 0)}
	conn := func(theirs string) (*greetedConn, net.Conn) {
		server, client := net.Pipe()
		t.Cleanup(func() { server.Close(); client.Close() })
		go fmt.Fprintf(client, "%s%s\nraft bytes", raftGreeting, theirs)
		c, err := layer.checkGreeting(server)
		if err != nil {
			t.Fatalf("a node without a cluster refused a greeting naming %q: %v", theirs, err)
		}
		return c.(*greetedConn), client
	}
	old, _ := conn("OLD")
	founder, _ := conn("")
	mine, mineClient := conn("NEW")
	own.Store("NEW")
	buf := make([]byte, 4)
	if _, err := old.Read(buf); err != io.EOF {
		t.Errorf("a connection from cluster OLD read on after the node founded NEW: err %v", err)
	}
	if _, err := founder.Read(buf); err != io.EOF {
		t.Errorf("a connection greeted with no cluster read on after the node founded NEW: err %v", err)
	}
	go mineClient.Write([]byte("more"))
	if n, err := io.ReadFull(mine, buf); err != nil || string(buf[:n]) != "raft" {
		t.Errorf("the connection naming the node's own cluster: read %q, %v", buf[:n], err)
	}
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
	// (From 127.0.0.1, where the cluster's servers run, they take the
	// servers' places and the proven addresses' too.)
	if most := raftMaxPending + 2*raftServerPending; during > base+most+40 {
		t.Errorf("%d goroutines during the attack, %d before: silent connections cost more than the %d pending handshakes", during, base, most)
	}
	if !a.ServerHost("127.0.0.1") || a.ServerHost("127.0.0.2") {
		t.Errorf("ServerHost(127.0.0.1) = %v, ServerHost(127.0.0.2) = %v: want the log's members' host only", a.ServerHost("127.0.0.1"), a.ServerHost("127.0.0.2"))
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

// keyedNode is a one-node test cluster's spec "a", not started, whose
// gossip is encrypted with a fresh key and carries label.
func keyedNode(t *testing.T, label string) (*testCluster, *nodeSpec, []byte) {
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	tc := newTestCluster(t)
	s := tc.add("a", 1)
	s.cfg.GossipKeys, s.cfg.GossipLabel = [][]byte{key}, label
	return tc, s, key
}

// TestGarbageGossipIsLoggedBounded: 5,000 junk datagrams to an encrypted
// gossip port give a handful of log lines, not one each.
func TestGarbageGossipIsLoggedBounded(t *testing.T) {
	const label = "doors"
	tc, s, key := keyedNode(t, label)
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
// connections that send nothing. One address gets gossipMaxStreamsPerAddr
// of them: the rest are closed at once, so that one stranger cannot take
// the port's slots from the node's peers (another address still gets in).
// Past the port's cap of gossipMaxStreams, from a few addresses, a
// newcomer from another closes the oldest of an address past its share;
// one from the host of a member of the log has gossipServerStreams of its
// own. Those held are closed at memberlist's stream deadline
// (10 s with the LAN profile), and the goroutines come back.
func TestGossipTCPPortCapsSilentStreams(t *testing.T) {
	const lanTCPTimeout = 10 * time.Second
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
	const fromOne = 200
	start := time.Now()
	var one []net.Conn
	for range fromOne {
		one = append(one, harness.DialFrom(t, "127.0.0.2", s.cfg.GossipAddr))
	}
	if closed, _ := harness.CountClosed(one, time.Now().Add(harness.Scale(3*time.Second))); closed != fromOne-gossipMaxStreamsPerAddr {
		t.Fatalf("one address's %d silent streams: %d closed at once, want the %d past its cap of %d", fromOne, closed,
			fromOne-gossipMaxStreamsPerAddr, gossipMaxStreamsPerAddr)
	}
	if got := n.DoorRefusals()[boundGossipStreamsPerAddr]; got != fromOne-gossipMaxStreamsPerAddr {
		t.Fatalf("%s counted %d, want %d", boundGossipStreamsPerAddr, got, fromOne-gossipMaxStreamsPerAddr)
	}
	// Other addresses fill the rest of the port's cap; one more is refused.
	var others []net.Conn
	for i := 3; len(others)+gossipMaxStreamsPerAddr < gossipMaxStreams; i++ {
		for range gossipMaxStreamsPerAddr {
			others = append(others, harness.DialFrom(t, fmt.Sprintf("127.0.0.%d", i), s.cfg.GossipAddr))
		}
	}
	// The port is full, from eight addresses of sixteen: a newcomer from a
	// ninth closes the oldest of an address past its share instead of
	// being refused, so a stranger from a few addresses cannot keep a node
	// that is not yet a member from joining.
	past := harness.DialFrom(t, "127.0.0.250", s.cfg.GossipAddr)
	if closed, _ := harness.CountClosed([]net.Conn{past}, time.Now().Add(harness.Scale(2*time.Second))); closed != 0 {
		t.Fatal("a newcomer from a ninth address was refused with eight addresses past their share")
	}
	full := append(slices.Clone(one[:gossipMaxStreamsPerAddr]), others...)
	if closed, _ := harness.CountClosed(full, time.Now().Add(harness.Scale(2*time.Second))); closed != 1 {
		t.Fatalf("%d of the full port's streams were closed for the newcomer, want its one", closed)
	}
	if got := n.DoorRefusals()[boundGossipStreamsShare]; got != 1 {
		t.Fatalf("%s counted %d, want 1", boundGossipStreamsShare, got)
	}
	one = append(one, past)
	// The host of the log's member (127.0.0.1, the node's own) has a room
	// of its own that the full shared streams do not take.
	var room []net.Conn
	for range gossipServerStreams {
		room = append(room, harness.DialFrom(t, "127.0.0.1", s.cfg.GossipAddr))
	}
	if closed, open := harness.CountClosed(room, time.Now().Add(time.Second)); closed != 0 {
		t.Fatalf("%d of the servers' %d streams were closed before the stream deadline (%d open)", closed, len(room), open)
	}
	others = append(others, room...)
	if time.Since(start) >= lanTCPTimeout {
		t.Skipf("the attack took %v, past the stream deadline: too slow a machine to tell", time.Since(start))
	}
	all := append(one, others...)
	if closed, open := harness.AwaitClosed(all, time.Now().Add(harness.Scale(lanTCPTimeout+5*time.Second))); open != 0 {
		t.Fatalf("%d silent gossip streams still open past the stream deadline (%d closed)", open, closed)
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

// TestGossipStreamIsReadToItsBudgetOnly attacks an encrypted node's gossip
// TCP port without the key (only the label, which is public): 8 streams
// each announce an encrypted push of 20 MiB and send junk. memberlist
// reads such a push whole before it tries the key, so each used to make
// the node buffer 20 MiB (8 of them: RSS 46 MB -> 826 MB; here, with
// 4 MiB each, the heap grew by about 38 MB). Each stream is now closed once
// it has sent its budget, the node's heap stays within a few times the
// streams' budgets, and the node goes on issuing.
func TestGossipStreamIsReadToItsBudgetOnly(t *testing.T) {
	const label = "doors"
	tc, s, _ := keyedNode(t, label)
	n := tc.start("a")
	waitReady(t, n)
	tc.issue(n, 100)

	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapInuse
	}
	before := heap()
	const streams, send = 8, 4 << 20
	header := append([]byte{244, byte(len(label))}, label...)
	header = append(header, 10, 0x01, 0x40, 0x00, 0x00) // encryptMsg, 20 MiB to come
	junk := make([]byte, 64<<10)
	_, _ = rand.Read(junk)
	sent := make([]int, streams)
	conns := make([]net.Conn, streams)
	var wg sync.WaitGroup
	for i := range streams {
		c, err := net.Dial("tcp", s.cfg.GossipAddr)
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = c
		defer c.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = c.SetWriteDeadline(time.Now().Add(harness.Scale(20 * time.Second)))
			if _, err := c.Write(header); err != nil {
				return
			}
			for sent[i] < send {
				m, err := c.Write(junk)
				sent[i] += m
				if err != nil {
					return
				}
			}
		}()
	}
	// Once every sender is done (it sent 4 MiB, or the node closed its
	// stream), the streams are still open on this side: look at what the
	// node holds for them.
	wg.Wait()
	during := heap()
	const most = 16 << 20 // 8 times the streams' budgets of 256 KiB
	if grown := int64(during) - int64(before); grown > most {
		t.Errorf("the heap grew by %d bytes under %d streams of junk, over %d", grown, streams, most)
	}
	t.Logf("heap in use: %d before, %d during; bytes the streams got in: %v", before, during, sent)
	tc.issue(n, 100)
}

// TestRaftPortKeepsPlacesForTheClustersServers attacks the Raft port from
// the stranger's side: with a server of the log (by its host) in the middle
// of a slow handshake, silent connections from two other addresses, three
// times the port's unfinished handshakes, each close the oldest of the
// shared places. The server's handshake is in a place of its own: it is
// still open, finishes its TLS handshake and is greeted through. (Before,
// the stranger's newcomers closed it with the rest.)
func TestRaftPortKeepsPlacesForTheClustersServers(t *testing.T) {
	peer := raftPeerTLS(t)
	cfg := &Config{RaftAddr: fmt.Sprintf("127.0.0.1:%d", harness.NextPort(t)), RaftTLS: peer}
	adv, _ := net.ResolveTCPAddr("tcp", cfg.RaftAddr)
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	greeter := raftGreeter{own: func() string { return "c1" }, servers: func(host string) bool { return host == "127.0.0.1" }}
	trans, err := raftTransport(cfg, adv, greeter, door.NewCounts(boundRaftHandshakes), hclog.NewNullLogger(), quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer trans.Close()
	server := harness.DialFrom(t, "127.0.0.1", cfg.RaftAddr)
	var stranger []net.Conn
	for i := range 3 * raftMaxPending {
		stranger = append(stranger, harness.DialFrom(t, fmt.Sprintf("127.0.0.%d", 2+i%2), cfg.RaftAddr))
	}
	// The shared places closed the stranger's oldest ones for its newest.
	closed, _ := harness.CountClosed(stranger[:raftMaxPending], time.Now().Add(harness.Scale(5*time.Second)))
	if closed == 0 {
		t.Fatal("none of the stranger's oldest handshakes was closed for its newer ones: the shared places were not full")
	}
	tc := tls.Client(server, peer)
	_ = tc.SetDeadline(time.Now().Add(harness.Scale(5 * time.Second)))
	if err := tc.Handshake(); err != nil {
		t.Fatalf("the server's handshake, begun before the stranger's flood, was cut: %v", err)
	}
	if _, err := fmt.Fprintf(tc, "%s%s\n", raftGreeting, "c1"); err != nil {
		t.Fatal(err)
	}
}

// TestServerHostsAreCanonical: the hosts the doors keep places for are the
// nodes' advertised addresses and the gossip members' and seeds', each as
// a connection's remote address names it (an IPv4 address in IPv6 form,
// or one written with capitals and zeros, is the same host); names that
// are not IPs are left out.
func TestServerHostsAreCanonical(t *testing.T) {
	set := serverHosts([]NodeInfo{{RaftAddr: "[::ffff:10.0.0.1]:7000", GRPCAddr: "[FD00::0001]:50051", HTTPAddr: "n1.internal:9090"}},
		[]string{"10.0.0.2:7946"}, []string{"10.0.0.3"})
	for _, host := range []string{"10.0.0.1", "fd00::1", "10.0.0.2", "10.0.0.3"} {
		if !set[netip.MustParseAddr(host)] {
			t.Errorf("%s is not a server host in %v", host, set)
		}
	}
	if len(set) != 4 {
		t.Errorf("server hosts %v, want the four IPs only", set)
	}
}

// TestGossipShareVictim: with the port's streams full, a newcomer closes
// the oldest stream of the address holding the most if that is past its
// share and two more than the newcomer's; from as many addresses as
// streams, nobody is past a share and the newcomer is refused.
func TestGossipShareVictim(t *testing.T) {
	fill := func(addrs, each int) *cappedTransport {
		tr := &cappedTransport{slots: make(chan struct{}, addrs*each), byPeer: map[string]int{}, shared: list.New()}
		for range each {
			for a := range addrs {
				peer := fmt.Sprintf("10.0.%d.%d", a/250, a%250)
				sc := &slotConn{peer: peer}
				sc.elem = tr.shared.PushBack(sc)
				tr.byPeer[peer]++
				tr.slots <- struct{}{}
			}
		}
		return tr
	}
	tr := fill(8, 16)
	tr.byPeer["10.9.9.9"]++ // the newcomer, as takePeer counts it
	v := tr.fairVictim("10.9.9.9")
	oldest := map[*slotConn]bool{} // each address's oldest: the first round of the fill
	for e, i := tr.shared.Front(), 0; i < 8; e, i = e.Next(), i+1 {
		oldest[e.Value.(*slotConn)] = true
	}
	if v == nil || !oldest[v] {
		t.Fatalf("victim %+v, want the oldest stream of an address holding 16", v)
	}
	tr = fill(128, 1)
	tr.byPeer["10.9.9.9"]++
	if v := tr.fairVictim("10.9.9.9"); v != nil {
		t.Fatalf("victim %+v from 128 addresses of one stream each, want none (the newcomer refused)", v)
	}
	tr = fill(8, 16)
	tr.byPeer["10.0.0.1"]++ // a newcomer from an address holding as many as any
	if v := tr.fairVictim("10.0.0.1"); v != nil {
		t.Fatalf("victim %+v for a newcomer of an address holding 16, want none", v)
	}
}
