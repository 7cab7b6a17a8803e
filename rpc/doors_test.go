package rpc

import (
	"context"
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
	"google.golang.org/grpc/status"

	idgenv1 "github.com/idgen/idgen/proto/idgen/v1"
	"github.com/idgen/idgen/scripts/harness"
)

// serveOn runs a Server with cfg on a fresh loopback listener and returns
// its address.
func serveOn(t *testing.T, cfg ServerConfig) string {
	t.Helper()
	if cfg.Backend == nil {
		cfg.Backend = newFakeBackend(2)
	}
	cfg.Registerer = prometheus.NewRegistry()
	cfg.Logger = quietLogger()
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

// TestGRPCConnectionCap: past MaxConnections, a new connection is closed at
// once while the ones held wait out their handshake bound; afterwards the
// port serves again.
func TestGRPCConnectionCap(t *testing.T) {
	if DefaultMaxConnections != 1024 {
		t.Fatalf("DefaultMaxConnections = %d; cmd/idgend/README.md's table says 1024", DefaultMaxConnections)
	}
	const max = 16
	addr := serveOn(t, ServerConfig{MaxConnections: max})
	held := harness.DialSilent(t, addr, max)
	extra := harness.DialSilent(t, addr, 1)
	start := time.Now()
	if closed, _ := harness.AwaitClosed(extra, start.Add(harness.Scale(HandshakeTimeout/2))); closed != 1 {
		t.Fatalf("connection %d, past the cap of %d, was not closed within %v", max+1, max, harness.Scale(HandshakeTimeout/2))
	}
	if closed, open := harness.AwaitClosed(held, start.Add(harness.Scale(HandshakeTimeout+2*time.Second))); closed != max {
		t.Fatalf("%d held connections still open past the handshake bound", open)
	}
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	if _, err := healthpb.NewHealthClient(cc).Check(ctxT(t), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("health after the cap: %v", err)
	}
}

// TestGRPCStreamsPerConnectionBounded: a caller that opens many
// Health.Watch streams on a few connections gets only a bounded number
// of them; the rest are refused with ResourceExhausted.
func TestGRPCStreamsPerConnectionBounded(t *testing.T) {
	addr := serveOn(t, ServerConfig{})
	const conns, perConn, wantPerConn = 4, 32, MaxStreamsPerConn
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
