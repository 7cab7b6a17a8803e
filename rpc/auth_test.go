package rpc

import (
	"context"
	"crypto/tls"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	idgenv1 "github.com/idgen/idgen/proto/idgen/v1"
	"github.com/idgen/idgen/rpc/tlsconf"
)

// testCA makes a CA with one certificate per role, named after the role.
func testCA(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	if err := tlsconf.CreateCA(dir, 0); err != nil {
		t.Fatal(err)
	}
	for _, r := range []tlsconf.Role{tlsconf.RoleServer, tlsconf.RoleClient, tlsconf.RoleAdmin} {
		if err := tlsconf.CreateCert(dir, tlsconf.CertRequest{Role: r, Name: string(r)}); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func material(t testing.TB, dir, name string) *tlsconf.Material {
	t.Helper()
	m, err := tlsconf.Load(tlsconf.Files{Cert: tlsconf.CertFile(dir, name), Key: tlsconf.KeyFile(dir, name), CA: filepath.Join(dir, tlsconf.CAFile)})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func dialTLS(t testing.TB, addr string, cfg *tls.Config) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// TestRolesDecideEachCall: with TLS on, a client certificate takes IDs and
// reads state but is refused every write and the peer service; an admin may
// write but not act as a node; a server may forward; callers without a
// certificate of the CA get nothing.
func TestRolesDecideEachCall(t *testing.T) {
	dir := testCA(t)
	b := newFakeBackend(2)
	b.set(func(f *fakeBackend) {
		f.applyFn = func(context.Context, []byte) ([]byte, error) { return []byte("ok"), nil }
	})
	ts := startServer(t, b, ServerConfig{TLS: material(t, dir, "server").ServerConfig()})

	type call func(context.Context, *grpc.ClientConn) error
	ids := func(ctx context.Context, c *grpc.ClientConn) error {
		_, err := idgenv1.NewIDServiceClient(c).GetIDBatch(ctx, &idgenv1.GetIDBatchRequest{Count: 3})
		return err
	}
	admin := idgenv1.NewClusterServiceClient
	calls := map[string]call{
		"GetIDBatch": ids,
		"Health": func(ctx context.Context, c *grpc.ClientConn) error {
			_, err := healthpb.NewHealthClient(c).Check(ctx, &healthpb.HealthCheckRequest{})
			return err
		},
		"Members": func(ctx context.Context, c *grpc.ClientConn) error {
			_, err := admin(c).Members(ctx, &idgenv1.MembersRequest{})
			return err
		},
		"History": func(ctx context.Context, c *grpc.ClientConn) error {
			_, err := admin(c).History(ctx, &idgenv1.HistoryRequest{})
			return err
		},
		"Remove": func(ctx context.Context, c *grpc.ClientConn) error {
			_, err := admin(c).Remove(ctx, &idgenv1.RemoveRequest{Node: "n2"})
			return err
		},
		"Join": func(ctx context.Context, c *grpc.ClientConn) error {
			_, err := admin(c).Join(ctx, &idgenv1.JoinRequest{Addrs: []string{"127.0.0.1:1"}})
			return err
		},
		"Fault": func(ctx context.Context, c *grpc.ClientConn) error {
			_, err := admin(c).Fault(ctx, &idgenv1.FaultRequest{ClockOffsetMs: 1})
			return err
		},
		"Apply": func(ctx context.Context, c *grpc.ClientConn) error {
			_, err := idgenv1.NewPeerServiceClient(c).Apply(ctx, &idgenv1.ApplyRequest{Command: []byte{1}})
			return err
		},
		"Leave": func(ctx context.Context, c *grpc.ClientConn) error {
			_, err := admin(c).Leave(ctx, &idgenv1.LeaveRequest{})
			return err
		},
	}
	denied := map[string][]string{
		"client": {"Remove", "Join", "Fault", "Apply", "Leave"},
		"admin":  {"Apply"},
		"server": {"Remove", "Join", "Fault", "Leave"},
	}
	for _, name := range []string{"client", "server", "admin"} { // admin last: its Leave succeeds
		conn := dialTLS(t, ts.addr, material(t, dir, name).ClientConfig())
		for _, m := range []string{"GetIDBatch", "Health", "Members", "History", "Remove", "Join", "Fault", "Apply", "Leave"} {
			err := calls[m](ctxT(t), conn)
			refused := strings.Contains(strings.Join(denied[name], " "), m)
			switch {
			case refused:
				wantCode(t, err, codes.PermissionDenied, "needs a certificate with role")
			case status.Code(err) == codes.PermissionDenied || status.Code(err) == codes.Unauthenticated:
				t.Fatalf("%s certificate refused %s: %v", name, m, err)
			}
		}
	}
	if _, err := admin(dialTLS(t, ts.addr, material(t, dir, "admin").ClientConfig())).Remove(ctxT(t), &idgenv1.RemoveRequest{Node: "n2"}); err != nil {
		t.Fatalf("admin Remove: %v", err)
	}

	// No certificate, another CA's certificate, plaintext: not even IDs.
	noCert := material(t, dir, "client").ClientConfig()
	noCert.Certificates = nil
	other := material(t, testCA(t), "admin").ClientConfig()
	other.RootCAs = noCert.RootCAs // it trusts the server; the server must not trust it
	plain, err := grpc.NewClient(ts.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	for what, conn := range map[string]*grpc.ClientConn{
		"no certificate": dialTLS(t, ts.addr, noCert), "another CA": dialTLS(t, ts.addr, other), "plaintext": plain,
	} {
		if err := ids(ctxT(t), conn); status.Code(err) != codes.Unavailable {
			t.Errorf("%s: GetIDBatch answered %v, want a failed connection (Unavailable)", what, err)
		}
	}
}

// TestLimitsOnAnyCaller: Join takes at most 16 addresses and answers within
// the caller's deadline; Fault offsets beyond an hour and oversized requests
// are refused; nothing reaches the backend.
func TestLimitsOnAnyCaller(t *testing.T) {
	b := newFakeBackend(2)
	release := make(chan struct{})
	joins := make(chan []string, 4)
	b.set(func(f *fakeBackend) {
		f.joinFn = func(addrs []string) (int, error) { joins <- addrs; <-release; return 1, nil }
	})
	ts := startServer(t, b, ServerConfig{})
	admin := idgenv1.NewClusterServiceClient(ts.conn)

	many := make([]string, MaxJoinAddrs+1)
	for i := range many {
		many[i] = fmt.Sprintf("127.0.0.1:%d", 1000+i)
	}
	_, err := admin.Join(ctxT(t), &idgenv1.JoinRequest{Addrs: many})
	wantCode(t, err, codes.InvalidArgument, "at most 16")
	_, err = admin.Join(ctxT(t), &idgenv1.JoinRequest{Addrs: []string{"no-port"}})
	wantCode(t, err, codes.InvalidArgument, "host:port")

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = admin.Join(ctx, &idgenv1.JoinRequest{Addrs: []string{"127.0.0.1:1"}})
	if elapsed := time.Since(start); status.Code(err) != codes.DeadlineExceeded || elapsed > 3*time.Second {
		t.Fatalf("a join that hangs: %v after %s, want DeadlineExceeded near the 300ms deadline", err, elapsed)
	}
	_, err = admin.Join(ctxT(t), &idgenv1.JoinRequest{Addrs: []string{"127.0.0.1:2"}})
	wantCode(t, err, codes.Unavailable, "another join is in progress")
	close(release)
	if got := <-joins; len(got) != 1 || len(joins) != 0 {
		t.Fatalf("backend saw joins %v and %d more, want only the one within limits", got, len(joins))
	}

	_, err = admin.Fault(ctxT(t), &idgenv1.FaultRequest{ClockOffsetMs: MaxFaultOffsetMS + 1})
	wantCode(t, err, codes.InvalidArgument, "1h")
	_, err = admin.Fault(ctxT(t), &idgenv1.FaultRequest{ClockOffsetMs: -MaxFaultOffsetMS - 1})
	wantCode(t, err, codes.InvalidArgument, "1h")

	_, err = idgenv1.NewPeerServiceClient(ts.conn).Apply(ctxT(t), &idgenv1.ApplyRequest{Command: make([]byte, MaxRequestBytes+1)})
	wantCode(t, err, codes.ResourceExhausted, "larger than max")
}
