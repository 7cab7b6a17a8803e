package main

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	idgenv1 "github.com/idgen/idgen/proto/idgen/v1"
	"github.com/idgen/idgen/rpc/tlsconf"
	"github.com/idgen/idgen/scripts/harness"
)

// pki is a CA directory made with idctl tls, as an operator would.
type pki struct{ dir string }

func newPKI(t *testing.T, names ...string) pki {
	t.Helper()
	p := pki{dir: t.TempDir()}
	mustIdctl(t, "tls", "ca", "create", "--dir", p.dir)
	for _, n := range names {
		mustIdctl(t, "tls", "cert", "create", "--dir", p.dir, "--role", strings.TrimRight(n, "0123456789"), "--name", n)
	}
	return p
}

// flags are the three TLS flags for the holder name (idgend and idctl alike).
func (p pki) flags(name string) []string {
	return []string{"--tls-cert", tlsconf.CertFile(p.dir, name), "--tls-key", tlsconf.KeyFile(p.dir, name), "--tls-ca", filepath.Join(p.dir, tlsconf.CAFile)}
}

func (p pki) material(t *testing.T, name string) *tlsconf.Material {
	t.Helper()
	m, err := tlsconf.Load(tlsconf.Files{Cert: tlsconf.CertFile(p.dir, name), Key: tlsconf.KeyFile(p.dir, name), CA: filepath.Join(p.dir, tlsconf.CAFile)})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func gossipKey(t *testing.T) string {
	t.Helper()
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(b)
}

// memberSlots maps the members a node reports to their slots (-1 for none),
// asked with the given TLS flags.
func memberSlots(t *testing.T, n *node, tlsFlags []string) map[string]int {
	t.Helper()
	var m membersOut
	out := mustIdctl(t, append(append([]string{"--target", n.grpc, "--json"}, tlsFlags...), "members")...)
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatal(err)
	}
	slots := map[string]int{}
	for _, mm := range m.Members {
		slots[mm.Name] = mm.Slot
	}
	return slots
}

// TestSecurityFromOutside attacks a TLS cluster with a gossip key from the
// outside: plaintext, another CA's certificate, a client certificate on
// admin and peer calls, a Raft connection without a server certificate, and
// gossip with another key or none. Each is refused and changes nothing; an
// admin certificate can remove a node, a client certificate gets IDs, and
// grpcurl and grpc-health-probe work with their usual TLS flags.
func TestSecurityFromOutside(t *testing.T) {
	p := newPKI(t, "server", "client", "admin")
	foreign := newPKI(t, "admin", "server")
	key := gossipKey(t)
	nodes := startCluster(t, 3, append(p.flags("server"), "--gossip-key", key)...)
	target := targetOf(nodes...)
	client, admin := p.flags("client"), p.flags("admin")
	idctlAs := func(flags []string, args ...string) (string, string, int) {
		t.Helper()
		return idctl(t, append(append([]string{"--target", nodes[0].grpc, "--timeout", "5s"}, flags...), args...)...)
	}

	t.Run("a client certificate gets IDs", func(t *testing.T) {
		ids := strings.Fields(mustIdctl(t, append(append([]string{"--target", target}, client...), "ids", "-n", "5")...))
		if len(ids) != 5 {
			t.Fatalf("ids: %v", ids)
		}
	})

	t.Run("plaintext and another CA's certificate get nothing", func(t *testing.T) {
		for what, flags := range map[string][]string{"plaintext": nil, "another CA": foreign.flags("admin")} {
			_, errOut, code := idctlAs(flags, "ids", "-n", "1")
			if code != 1 || !strings.Contains(errOut, "Unavailable") {
				t.Errorf("%s: idctl ids exit %d: %s", what, code, errOut)
			}
			_, errOut, code = idctlAs(flags, "remove", "n3")
			if code != 1 || !strings.Contains(errOut, "Unavailable") {
				t.Errorf("%s: idctl remove exit %d: %s", what, code, errOut)
			}
		}
		conn, err := grpc.NewClient(nodes[0].grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), harness.Scale(5*time.Second))
		defer cancel()
		_, err = idgenv1.NewPeerServiceClient(conn).Apply(ctx, &idgenv1.ApplyRequest{Command: []byte{1}})
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("plaintext PeerService.Apply: %v, want a refused connection", err)
		}
	})

	t.Run("a client certificate is refused every write and the peer service", func(t *testing.T) {
		for _, args := range [][]string{
			{"remove", "n3"}, {"leave"}, {"join", "127.0.0.1:1"}, {"fault", "clock", "--offset", "60s"},
		} {
			_, errOut, code := idctlAs(client, args...)
			if code != 1 || !strings.Contains(errOut, "PermissionDenied") || !strings.Contains(errOut, "role admin") {
				t.Errorf("idctl %v with a client certificate: exit %d: %s", args, code, errOut)
			}
		}
		for name, cfg := range map[string]*tls.Config{"client": p.material(t, "client").ClientConfig(), "admin": p.material(t, "admin").ClientConfig()} {
			conn, err := grpc.NewClient(nodes[0].grpc, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), harness.Scale(5*time.Second))
			_, err = idgenv1.NewPeerServiceClient(conn).Apply(ctx, &idgenv1.ApplyRequest{Command: []byte{1}})
			cancel()
			conn.Close()
			if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "role server") {
				t.Errorf("PeerService.Apply with a %s certificate: %v, want PermissionDenied naming role server", name, err)
			}
		}
		if got := memberSlots(t, nodes[0], client); len(got) != 3 {
			t.Fatalf("members after refused calls: %v", got)
		}
		for _, n := range nodes {
			if !n.running() {
				t.Fatalf("%s exited after refused calls", n.name)
			}
			harness.WaitFor(t, 10*time.Second, n.name+" serving after refused calls", n.ready)
		}
	})

	t.Run("grpcurl and grpc-health-probe with the client certificate", func(t *testing.T) {
		grpcurl := tool(t, "grpcurl")
		probe := tool(t, "grpc-health-probe")
		ca, cert, ckey := filepath.Join(p.dir, "ca.pem"), tlsconf.CertFile(p.dir, "client"), tlsconf.KeyFile(p.dir, "client")
		out, errOut, code := runBin(t, grpcurl, "-cacert", ca, "-cert", cert, "-key", ckey, "-max-time", "5", "-d", `{"count": 3}`,
			nodes[1].grpc, "idgen.v1.IDService/GetIDBatch")
		if code != 0 || !strings.Contains(out, `"ids"`) {
			t.Fatalf("grpcurl GetIDBatch over TLS: exit %d: %s%s", code, out, errOut)
		}
		out, errOut, code = runBin(t, grpcurl, "-cacert", ca, "-cert", cert, "-key", ckey, "-max-time", "5", nodes[1].grpc, "list")
		if code != 0 || !strings.Contains(out, "idgen.v1.ClusterService") {
			t.Fatalf("grpcurl list over TLS: exit %d: %s%s", code, out, errOut)
		}
		_, errOut, code = runBin(t, grpcurl, "-cacert", ca, "-cert", cert, "-key", ckey, "-max-time", "5", "-d", `{"node": "n3"}`,
			nodes[1].grpc, "idgen.v1.ClusterService/Remove")
		if code == 0 || !strings.Contains(errOut, "PermissionDenied") {
			t.Fatalf("grpcurl Remove with a client certificate: exit %d: %s", code, errOut)
		}
		if _, _, code := runBin(t, grpcurl, "-plaintext", "-max-time", "5", nodes[1].grpc, "list"); code == 0 {
			t.Fatal("grpcurl -plaintext listed a TLS node's services")
		}
		out, errOut, code = runBin(t, probe, "-addr", nodes[0].grpc, "-tls", "-tls-ca-cert", ca, "-tls-client-cert", cert,
			"-tls-client-key", ckey, "-service", "idgen.v1.IDService")
		if code != 0 || !strings.Contains(out+errOut, "SERVING") {
			t.Fatalf("grpc-health-probe over TLS: exit %d: %s%s", code, out, errOut)
		}
	})

	t.Run("raft needs a server certificate", func(t *testing.T) {
		// The same handshake with a server certificate is held open (Raft
		// waits for a command), so a refusal below is the role's doing.
		for name, pk := range map[string]pki{"server": p, "client": p, "admin": p, "foreign server": foreign} {
			cert := strings.TrimPrefix(name, "foreign ")
			err := raftHandshake(t, nodes[0].raft, pk.material(t, cert).ClientConfig())
			switch {
			case name == "server" && err != nil:
				t.Fatalf("a server certificate's Raft connection was dropped: %v", err)
			case name != "server" && err == nil:
				t.Errorf("a %s certificate completed a Raft connection", name)
			}
		}
		// Plaintext bytes (a forged AppendEntries starts with type byte 0)
		// get no Raft answer.
		c, err := net.DialTimeout("tcp", nodes[0].raft, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		c.Write(append([]byte{0}, make([]byte, 64)...))
		buf := make([]byte, 64)
		n, _ := c.Read(buf)
		if n > 0 && buf[0] != 0x15 { // 0x15: a TLS alert record
			t.Fatalf("plaintext to the Raft port got %d bytes back that are not a TLS alert: %x", n, buf[:n])
		}
	})

	t.Run("gossip with another key or none never makes a member", func(t *testing.T) {
		rogues := []*node{
			newNode(t, nodeOpts{name: "rogue-key", join: []string{nodes[0].gossip}, extra: append(p.flags("server"), "--gossip-key", gossipKey(t))}),
			newNode(t, nodeOpts{name: "rogue-nokey", join: []string{nodes[0].gossip}}),
		}
		for _, r := range rogues {
			r.start()
		}
		// Long enough for several join retries (every 5 s) and for the
		// leader's promotion after a second, were they heard.
		deadline := time.Now().Add(12 * time.Second)
		for time.Now().Before(deadline) {
			for _, n := range nodes {
				if got := memberSlots(t, n, client); len(got) != 3 {
					t.Fatalf("%s lists members %v after rogue gossip", n.name, got)
				}
			}
			time.Sleep(500 * time.Millisecond)
		}
		for _, r := range rogues {
			if !r.running() {
				t.Fatalf("%s exited; it should have kept trying", r.name)
			}
		}
	})

	t.Run("an admin certificate can remove a node", func(t *testing.T) {
		victim := nodes[2]
		victim.kill()
		slot := memberSlots(t, nodes[0], admin)[victim.name]
		var rm struct {
			FreedSlot int `json:"freed_slot"`
		}
		harness.WaitFor(t, 30*time.Second, "admin remove of the killed node", func() bool {
			out, _, code := idctlAs(append(admin, "--json"), "remove", victim.name)
			return code == 0 && json.Unmarshal([]byte(out), &rm) == nil
		})
		if rm.FreedSlot != slot || slot < 0 {
			t.Fatalf("remove freed slot %d, the victim held %d", rm.FreedSlot, slot)
		}
		harness.WaitFor(t, 10*time.Second, "the removed node's slot to be free", func() bool {
			return memberSlots(t, nodes[0], admin)[victim.name] == -1
		})
	})
}

// raftHandshake dials the Raft port with cfg and reports whether the node
// kept the connection: nil when a read times out (held open), the error when
// the node closed it or sent an alert.
func raftHandshake(t *testing.T, addr string, cfg *tls.Config) error {
	t.Helper()
	cfg = cfg.Clone()
	cfg.InsecureSkipVerify = true // host names are not what this checks
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(time.Second))
	_, err = c.Read(make([]byte, 1))
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return nil
	}
	if err == nil {
		return errors.New("the node sent data unasked")
	}
	return err
}

// TestExposedPlaintextRefused: a non-loopback bind without TLS and a gossip
// key exits non-zero before anything is opened, naming --insecure and the
// TLS flags; with --insecure it starts and warns.
func TestExposedPlaintextRefused(t *testing.T) {
	port := harness.NextPorts(t, 1)[0]
	n := newNode(t, nodeOpts{name: "exposed"})
	n.grpc = "0.0.0.0:" + strings.TrimPrefix(addr(port), "127.0.0.1:")
	_, errOut, code := runBin(t, bin("idgend"), n.args()...)
	if code == 0 || !strings.Contains(errOut, "--insecure") || !strings.Contains(errOut, "--tls-cert") {
		t.Fatalf("idgend --grpc-addr %s without TLS: exit %d, stderr %q", n.grpc, code, errOut)
	}
	if _, err := os.Stat(n.dataDir); !os.IsNotExist(err) {
		t.Fatalf("a refused start touched the data dir: %v", err)
	}
	n.extra = append(n.extra, "--insecure")
	n.start()
	harness.WaitFor(t, 30*time.Second, "the --insecure node to be ready", n.ready)
	if !strings.Contains(n.log(), "--insecure: plaintext is allowed") {
		t.Fatal("no warning logged for --insecure")
	}
}
