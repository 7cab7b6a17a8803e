package tlsconf

import (
	"crypto/tls"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// newCA makes a CA in a temp dir with certificates named after their roles.
func newCA(t *testing.T, roles ...Role) string {
	t.Helper()
	dir := t.TempDir()
	if err := CreateCA(dir, 0); err != nil {
		t.Fatal(err)
	}
	for _, r := range roles {
		if err := CreateCert(dir, CertRequest{Role: r, Name: string(r)}); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func load(t *testing.T, dir string, name string) *Material {
	t.Helper()
	m, err := Load(Files{Cert: CertFile(dir, name), Key: KeyFile(dir, name), CA: filepath.Join(dir, CAFile)})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestCreateAndLoadCarriesRoleAndKeepsKeysPrivate(t *testing.T) {
	dir := newCA(t, RoleServer, RoleClient, RoleAdmin)
	for _, r := range []Role{RoleServer, RoleClient, RoleAdmin} {
		m := load(t, dir, string(r))
		if m.Role != r {
			t.Fatalf("%s certificate loads as role %s", r, m.Role)
		}
		fi, err := os.Stat(KeyFile(dir, string(r)))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s key mode %v (%v), want 0600", r, fi.Mode().Perm(), err)
		}
	}
	if fi, err := os.Stat(filepath.Join(dir, CAKeyFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("CA key mode %v (%v), want 0600", fi.Mode().Perm(), err)
	}
	if ips := load(t, dir, "server").Leaf.IPAddresses; len(ips) == 0 || !ips[0].Equal(net.IPv4(127, 0, 0, 1)) {
		t.Fatalf("server certificate IPs %v lack 127.0.0.1", ips)
	}
}

func TestCreateRefusesOverwriteAndBadInput(t *testing.T) {
	dir := newCA(t, RoleClient)
	before, _ := os.ReadFile(filepath.Join(dir, CAKeyFile))
	if err := CreateCA(dir, 0); !errors.Is(err, ErrExists) {
		t.Fatalf("second CA in one dir: %v, want ErrExists", err)
	}
	if err := CreateCert(dir, CertRequest{Role: RoleAdmin, Name: "client"}); !errors.Is(err, ErrExists) {
		t.Fatalf("certificate over an existing name: %v, want ErrExists", err)
	}
	after, _ := os.ReadFile(filepath.Join(dir, CAKeyFile))
	if string(before) != string(after) {
		t.Fatal("a refused create changed the CA key")
	}
	for _, req := range []CertRequest{
		{Role: "root", Name: "x"},
		{Role: RoleClient, Name: "../escape"},
		{Role: RoleClient, Name: "ca"},
		{Role: RoleClient, Name: "x", Days: -1},
	} {
		if err := CreateCert(dir, req); err == nil {
			t.Errorf("CreateCert(%+v) succeeded", req)
		}
	}
	if err := CreateCert(t.TempDir(), CertRequest{Role: RoleClient, Name: "x"}); err == nil || !strings.Contains(err.Error(), "tls ca create") {
		t.Fatalf("certificate without a CA: %v", err)
	}
}

func TestLoadRefusesForeignCertAndPartialFiles(t *testing.T) {
	a, b := newCA(t, RoleServer), newCA(t, RoleServer)
	_, err := Load(Files{Cert: CertFile(a, "server"), Key: KeyFile(a, "server"), CA: filepath.Join(b, CAFile)})
	if err == nil || !strings.Contains(err.Error(), "not signed by the CA") {
		t.Fatalf("certificate of another CA: %v", err)
	}
	if _, err := Load(Files{Cert: CertFile(a, "server")}); !errors.Is(err, ErrIncomplete) {
		t.Fatalf("one file of three: %v", err)
	}
}

// handshake runs a TLS handshake between the two configs over loopback and
// returns the acceptor's and the dialer's errors.
func handshake(t *testing.T, server, client *tls.Config) (error, error) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	srvErr := make(chan error, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			srvErr <- err
			return
		}
		defer c.Close()
		tc := tls.Server(c, server)
		tc.SetDeadline(time.Now().Add(5 * time.Second))
		err = tc.Handshake()
		if err == nil {
			// TLS 1.3 finishes the client's side first; a read sees the alert.
			_, err = tc.Read(make([]byte, 1))
		}
		srvErr <- err
	}()
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", l.Addr().String(), client)
	if err == nil {
		c.SetDeadline(time.Now().Add(5 * time.Second))
		_, err = c.Write([]byte("x"))
		if err == nil {
			_, err = c.Read(make([]byte, 1))
		}
		c.Close()
	}
	return <-srvErr, err
}

func TestPeerConfigNeedsServerCertificatesOnBothEnds(t *testing.T) {
	dir := newCA(t, RoleServer, RoleClient, RoleAdmin)
	if err := CreateCert(dir, CertRequest{Role: RoleServer, Name: "server2"}); err != nil {
		t.Fatal(err)
	}
	srv, srv2 := load(t, dir, "server"), load(t, dir, "server2")
	if serr, _ := handshake(t, srv.PeerConfig(), srv2.PeerConfig()); serr != nil && !strings.Contains(serr.Error(), "EOF") {
		t.Fatalf("two servers: acceptor says %v", serr)
	}
	for _, name := range []string{"client", "admin"} {
		serr, _ := handshake(t, srv.PeerConfig(), load(t, dir, name).PeerConfig())
		if !errors.Is(serr, ErrWrongRole) {
			t.Errorf("%s dialing a node link: acceptor error %v, want ErrWrongRole", name, serr)
		}
		_, cerr := handshake(t, load(t, dir, name).PeerConfig(), srv.PeerConfig())
		if cerr == nil || !strings.Contains(cerr.Error(), "wrong role") {
			t.Errorf("a node dialing a %s: dialer error %v, want a wrong role", name, cerr)
		}
	}
	other := load(t, newCA(t, RoleServer), "server")
	if serr, _ := handshake(t, srv.PeerConfig(), other.PeerConfig()); serr == nil {
		t.Error("a server of another CA completed a node link")
	}
}
