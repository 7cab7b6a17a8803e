package rpc

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	idgenv1 "github.com/idgen/idgen/proto/idgen/v1"
	"github.com/idgen/idgen/rpc/tlsconf"
	"github.com/idgen/idgen/scripts/harness"
)

// serveOn runs a Server with cfg on a fresh loopback listener and returns
// its address.
func serveOn(t *testing.T, cfg ServerConfig) string {
	t.Helper()
	if cfg.Backend == nil {
		cfg.Backend = newFakeBackend(2)
	}
	if cfg.Registerer == nil {
		cfg.Registerer = prometheus.NewRegistry()
	}
	if cfg.Logger == nil {
		cfg.Logger = quietLogger()
	}
	cfg.NodeName, cfg.NodeID = "node-1", "0123456789abcdef0123456789abcdef"
	srv, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serveUntilCleanup(t, srv, lis)
	return lis.Addr().String()
}

// TestGRPCPortClosesUnfinishedHandshakes: 300 connections to a TLS gRPC
// port that never start the handshake are all closed within the handshake
// bound, and the goroutines they cost come back.
func TestGRPCPortClosesUnfinishedHandshakes(t *testing.T) {
	dir := testCA(t)
	addr := serveOn(t, ServerConfig{TLS: material(t, dir, "server").ServerConfig()})
	base := harness.SettledGoroutines()
	const attackers = 300
	bound := HandshakeTimeout
	conns := harness.DialSilent(t, addr, attackers)
	limit := harness.Scale(bound + 2*time.Second)
	during := runtime.NumGoroutine()
	if closed, open := harness.AwaitClosed(conns, time.Now().Add(limit)); closed != attackers {
		t.Fatalf("%d of %d connections that never finished the handshake were closed within %v%s; %d still open", closed, attackers, limit, harness.SlowdownNote(), open)
	}
	harness.WaitFor(t, 5*time.Second, "the goroutine count to come back", func() bool { return runtime.NumGoroutine() <= base+20 })
	t.Logf("goroutines: %d before, %d with %d silent connections, %d after", base, during, attackers, runtime.NumGoroutine())
}

// TestGRPCStreamsPerConnectionBounded: a caller that opens many
// Health.Watch streams on a few connections gets only a bounded number
// of them; the rest are refused with ResourceExhausted.
func TestGRPCStreamsPerConnectionBounded(t *testing.T) {
	addr := serveOn(t, ServerConfig{})
	const conns, perConn, wantPerConn = 4, 32, HealthWatchesPerConn
	var mu sync.Mutex
	var opened, refused int
	var other []error
	var wg sync.WaitGroup
	// The streams that open stay open until the test ends.
	ctx, cancel := context.WithTimeout(context.Background(), harness.Scale(20*time.Second))
	defer cancel()
	for range conns {
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		h := healthpb.NewHealthClient(cc)
		for range perConn {
			wg.Add(1)
			go func() {
				defer wg.Done()
				st, err := h.Watch(ctx, &healthpb.HealthCheckRequest{})
				if err == nil {
					_, err = st.Recv()
				}
				mu.Lock()
				defer mu.Unlock()
				switch status.Code(err) {
				case codes.OK:
					opened++
				case codes.ResourceExhausted:
					refused++
				default:
					other = append(other, err)
				}
			}()
		}
	}
	wg.Wait()
	if len(other) > 0 {
		t.Fatalf("%d watches failed otherwise, first: %v", len(other), other[0])
	}
	if opened != conns*wantPerConn || opened+refused != conns*perConn {
		t.Fatalf("%d watches opened and %d refused on %d connections, want at most %d per connection open and the rest refused", opened, refused, conns, wantPerConn)
	}
}

// TestGRPCClosesIdleConnections: a connection that carries no call for
// MaxConnectionIdle is sent away (GOAWAY), and the client's next call
// dials again. The default, 5 minutes, is DefaultMaxConnectionIdle.
func TestGRPCClosesIdleConnections(t *testing.T) {
	if DefaultMaxConnectionIdle != 5*time.Minute {
		t.Fatalf("DefaultMaxConnectionIdle = %v; cmd/idgend/README.md's table says 5m", DefaultMaxConnectionIdle)
	}
	addr := serveOn(t, ServerConfig{MaxConnectionIdle: 300 * time.Millisecond})
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	h := healthpb.NewHealthClient(cc)
	if _, err := h.Check(ctxT(t), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	harness.WaitFor(t, 5*time.Second, "the idle connection to be sent away", func() bool { return cc.GetState() == connectivity.Idle })
	if _, err := h.Check(ctxT(t), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("a call after the idle close: %v", err)
	}
}

// TestGRPCCallsPerConnectionWait: past MaxConcurrentStreams calls in flight
// on one connection, the next call waits (HTTP/2 flow control) until one
// ends; it never reaches the node before.
func TestGRPCCallsPerConnectionWait(t *testing.T) {
	b := newFakeBackend(2)
	b.set(func(f *fakeBackend) { f.block = true })
	addr := serveOn(t, ServerConfig{Backend: b, BatchSize: 100})
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ids := idgenv1.NewIDServiceClient(cc)
	blocked := func() int { b.mu.Lock(); defer b.mu.Unlock(); return b.blocked[7] }
	ctx, cancel := context.WithTimeout(context.Background(), harness.Scale(30*time.Second))
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	call := func(ctx context.Context) {
		defer wg.Done()
		_, _ = ids.GetIDBatch(ctx, &idgenv1.GetIDBatchRequest{Count: 7})
	}
	first, cancelFirst := context.WithCancel(ctx)
	wg.Add(MaxConcurrentStreams)
	go call(first)
	for range MaxConcurrentStreams - 1 {
		go call(ctx)
	}
	harness.WaitFor(t, 5*time.Second, "the calls to reach the node", func() bool { return blocked() == MaxConcurrentStreams })
	wg.Add(1)
	go call(ctx)
	// The extra call has nowhere to go; give it time to show if it did.
	time.Sleep(200 * time.Millisecond)
	if got := blocked(); got != MaxConcurrentStreams {
		t.Fatalf("%d calls reached the node on one connection, want at most %d", got, MaxConcurrentStreams)
	}
	cancelFirst()
	harness.WaitFor(t, 5*time.Second, "the waiting call to take the freed stream", func() bool { return blocked() == MaxConcurrentStreams+1 })
	cancel()
}

// refusedBy reads idgen_door_refused_total for bound from reg.
func refusedBy(t *testing.T, reg *prometheus.Registry, bound string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "idgen_door_refused_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "bound" && l.GetValue() == bound {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no idgen_door_refused_total{bound=%q}", bound)
	return 0
}

// withCerts adds certificates of role and name to the test CA in dir.
func withCerts(t *testing.T, dir string, role tlsconf.Role, names ...string) {
	t.Helper()
	for _, n := range names {
		if err := tlsconf.CreateCert(dir, tlsconf.CertRequest{Role: role, Name: n}); err != nil {
			t.Fatal(err)
		}
	}
}

// checkOnce dials addr with cfg on a connection of its own and makes one
// health check within d; a connection whose check failed is closed, so it
// does not go on dialling.
func checkOnce(t *testing.T, addr string, cfg *tls.Config, d time.Duration) (*grpc.ClientConn, error) {
	t.Helper()
	cc := dialTLS(t, addr, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), harness.Scale(d))
	defer cancel()
	_, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
	if err != nil {
		cc.Close()
	}
	return cc, err
}

// TestGRPCStrangersMakeWayForPeers attacks a TLS port without a
// certificate: 80 connections that never finish the handshake, 5 times its
// bound of unfinished handshakes, all from its own address. A client, an
// admin and a server of the cluster each still get in (a newcomer closes
// the address's oldest unfinished handshake silent for
// HandshakeSilentAge), and every eviction and refusal is counted. (Before, past the
// one cap of open connections the newest was closed, so strangers kept
// everyone out.)
func TestGRPCStrangersMakeWayForPeers(t *testing.T) {
	dir := testCA(t)
	reg := prometheus.NewRegistry()
	addr := serveOn(t, ServerConfig{TLS: material(t, dir, "server").ServerConfig(), Registerer: reg,
		Bounds: Bounds{Handshakes: 16, HandshakesPerAddress: 16}})
	strangers := harness.DialSilent(t, addr, 80)
	defer func() {
		for _, c := range strangers {
			c.Close()
		}
	}()
	// All from 127.0.0.1, so past its bound per address: each newcomer
	// closes one of the address's silent ones, or (all of them silent for
	// less than HandshakeSilentAge) is refused.
	harness.WaitFor(t, 5*time.Second, "the strangers past the bound to be closed", func() bool {
		return refusedBy(t, reg, boundHandshakesPerAddr)+refusedBy(t, reg, boundHandshakesPerAddrRefused) >= 64
	})
	// The backend's own ports' counts (the Raft and gossip ports of a
	// cluster.Node) are in the same metric.
	if got := refusedBy(t, reg, "raft_tls"); got != 3 {
		t.Errorf("idgen_door_refused_total{bound=\"raft_tls\"} = %v, want the backend's 3", got)
	}
	for _, who := range []string{"client", "admin", "server"} {
		cfg := material(t, dir, who).ClientConfig()
		if who == "server" {
			cfg = material(t, dir, who).PeerConfig()
		}
		start := time.Now()
		cc, err := checkOnce(t, addr, cfg, 3*time.Second)
		if err != nil {
			t.Fatalf("a %s behind 80 unfinished handshakes: %v", who, err)
		}
		cc.Close()
		t.Logf("%s got in after %v", who, time.Since(start).Round(time.Millisecond))
	}
}

// TestGRPCRoomsByIdentity: clients share their room, each identity a part
// of it; the servers' room is their own. With room for 3 clients and 2 per
// identity, a third connection of one certificate is refused, another
// certificate takes the last place, a server and an operator still get in
// when the clients' room is full, and a closed connection frees its place.
func TestGRPCRoomsByIdentity(t *testing.T) {
	dir := testCA(t)
	withCerts(t, dir, tlsconf.RoleClient, "fleet-b")
	withCerts(t, dir, tlsconf.RoleServer, "server-2")
	reg := prometheus.NewRegistry()
	addr := serveOn(t, ServerConfig{TLS: material(t, dir, "server").ServerConfig(), Registerer: reg,
		Bounds: Bounds{ClientConns: 3, ConnsPerIdentity: 2, PeerConns: 1}})
	a, b := material(t, dir, "client").ClientConfig(), material(t, dir, "fleet-b").ClientConfig()
	a1, err := checkOnce(t, addr, a, 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := checkOnce(t, addr, a, 3*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := checkOnce(t, addr, a, time.Second); err == nil {
		t.Fatal("a third connection of one identity got in, past its bound of 2")
	}
	if got := refusedBy(t, reg, boundConnsPerIdentity); got < 1 {
		t.Errorf("refusals counted for %s: %v", boundConnsPerIdentity, got)
	}
	if _, err := checkOnce(t, addr, b, 3*time.Second); err != nil {
		t.Fatalf("another identity, with room left: %v", err)
	}
	if _, err := checkOnce(t, addr, b, time.Second); err == nil {
		t.Fatal("a fourth client connection got in, past the clients' room of 3")
	}
	if got := refusedBy(t, reg, boundClientConns); got < 1 {
		t.Errorf("refusals counted for %s: %v", boundClientConns, got)
	}
	s1, err := checkOnce(t, addr, material(t, dir, "server").PeerConfig(), 3*time.Second)
	if err != nil {
		t.Fatalf("a server, with the clients' room full: %v", err)
	}
	if _, err := checkOnce(t, addr, material(t, dir, "admin").ClientConfig(), 3*time.Second); err != nil {
		t.Fatalf("an operator, with the clients' room full: %v", err)
	}
	if _, err := checkOnce(t, addr, material(t, dir, "server-2").PeerConfig(), time.Second); err == nil {
		t.Fatal("a second server connection got in, past the servers' room of 1")
	}
	s1.Close()
	a1.Close()
	if _, err := checkOnce(t, addr, b, 3*time.Second); err != nil {
		t.Fatalf("a client once a place was freed: %v", err)
	}
	if _, err := checkOnce(t, addr, material(t, dir, "server-2").PeerConfig(), 3*time.Second); err != nil {
		t.Fatalf("a server once the servers' place was freed: %v", err)
	}
}

// TestGRPCHealthWatchIsAlwaysServed: one identity that holds its bound of
// streaming calls still gets a health watch on every connection it opens
// (gRPC's client health check marks a connection unusable when its watch
// is refused), and holding many watches takes nobody's streams.
func TestGRPCHealthWatchIsAlwaysServed(t *testing.T) {
	addr := serveOn(t, ServerConfig{Bounds: Bounds{StreamsPerIdentity: 1}})
	ctx, cancel := context.WithTimeout(context.Background(), harness.Scale(20*time.Second))
	defer cancel()
	dial := func() *grpc.ClientConn {
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return cc
	}
	first := dial()
	refl, err := reflectionpb.NewServerReflectionClient(first).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := refl.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	if _, err := refl.Recv(); err != nil {
		t.Fatalf("the identity's one streaming call: %v", err)
	}
	for i := range 20 {
		st, err := healthpb.NewHealthClient(dial()).Watch(ctx, &healthpb.HealthCheckRequest{})
		if err == nil {
			_, err = st.Recv()
		}
		if err != nil {
			t.Fatalf("health watch %d of an identity at its bound of streaming calls: %v", i, err)
		}
	}
	second, err := reflectionpb.NewServerReflectionClient(dial()).ServerReflectionInfo(ctx)
	if err == nil {
		_, err = second.Recv()
	}
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a second streaming call of the identity: %v, want ResourceExhausted", err)
	}
}

// TestFailedCallsAreLoggedBounded: a caller that retries a failing call in
// a loop (2,000 GetIDBatch on a node that is not ready) costs a line or
// two, not one each; the count of the rest is kept.
func TestFailedCallsAreLoggedBounded(t *testing.T) {
	b := newFakeBackend(1)
	b.setReady(false, "no slot")
	var logs harness.LogBuffer
	addr := serveOn(t, ServerConfig{Backend: b, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ids := idgenv1.NewIDServiceClient(cc)
	before := logs.Lines()
	const calls = 2000
	for range calls {
		if _, err := ids.GetIDBatch(ctxT(t), &idgenv1.GetIDBatchRequest{Count: 1}); status.Code(err) != codes.Unavailable {
			t.Fatalf("GetIDBatch on a node that is not ready: %v, want Unavailable", err)
		}
	}
	if n := logs.Lines() - before; n > 3 {
		t.Fatalf("%d failed calls gave %d log lines, want at most 3", calls, n)
	}
}

// TestGRPCCallsPerIdentityBounded: one identity that keeps calls in flight
// (each waiting as long as its deadline lets it) gets its bound of them and
// ResourceExhausted past it, counted; another identity's calls still reach
// the node.
func TestGRPCCallsPerIdentityBounded(t *testing.T) {
	dir := testCA(t)
	withCerts(t, dir, tlsconf.RoleClient, "fleet-b")
	b := newFakeBackend(2)
	b.set(func(f *fakeBackend) { f.block = true })
	reg := prometheus.NewRegistry()
	addr := serveOn(t, ServerConfig{Backend: b, BatchSize: 100, TLS: material(t, dir, "server").ServerConfig(), Registerer: reg,
		Bounds: Bounds{CallsPerIdentity: 3}})
	blocked := func() int { b.mu.Lock(); defer b.mu.Unlock(); return b.blocked[7] }
	ctx, cancel := context.WithTimeout(context.Background(), harness.Scale(30*time.Second))
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	hog := idgenv1.NewIDServiceClient(dialTLS(t, addr, material(t, dir, "client").ClientConfig()))
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = hog.GetIDBatch(ctx, &idgenv1.GetIDBatchRequest{Count: 7})
		}()
	}
	harness.WaitFor(t, 5*time.Second, "the hog's calls to reach the node", func() bool { return blocked() == 3 })
	_, err := hog.GetIDBatch(ctxT(t), &idgenv1.GetIDBatchRequest{Count: 7})
	wantCode(t, err, codes.ResourceExhausted, "calls in flight")
	if got := refusedBy(t, reg, boundCallsPerIdentity); got != 1 {
		t.Errorf("%s counted %v refusals, want 1", boundCallsPerIdentity, got)
	}
	other := idgenv1.NewIDServiceClient(dialTLS(t, addr, material(t, dir, "fleet-b").ClientConfig()))
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, _ = other.GetIDBatch(ctx, &idgenv1.GetIDBatchRequest{Count: 7})
	}()
	harness.WaitFor(t, 5*time.Second, "another identity's call to reach the node", func() bool { return blocked() == 4 })
}
