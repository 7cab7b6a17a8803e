package rpc

import (
	"context"
	"crypto/tls"
	"net"
	"runtime"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	idgenv1 "github.com/idgen/idgen/proto/idgen/v1"
)

// BenchmarkGetIDBatch measures one GetIDBatch call of 100 IDs over a real
// loopback connection, plaintext against mutual TLS, in the same run: the
// ratio of the two is the cost of TLS on the call (the handshake is paid once
// per connection and is not in it).
//
//	go test -run '^$' -bench GetIDBatch -count 5 ./rpc
func BenchmarkGetIDBatch(b *testing.B) {
	dir := testCA(b)
	for _, bc := range []struct {
		name   string
		server *tls.Config
		client grpc.DialOption
	}{
		{"plaintext", nil, grpc.WithTransportCredentials(insecure.NewCredentials())},
		{"mtls", material(b, dir, "server").ServerConfig(), grpc.WithTransportCredentials(credentials.NewTLS(material(b, dir, "client").ClientConfig()))},
	} {
		b.Run(bc.name, func(b *testing.B) {
			conn, err := grpc.NewClient(benchServer(b, bc.server), bc.client)
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			ids := idgenv1.NewIDServiceClient(conn)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if _, err := ids.GetIDBatch(ctx, &idgenv1.GetIDBatchRequest{Count: 100}); err != nil {
				b.Fatal(err) // connects (and handshakes) before the clock starts
			}
			b.ResetTimer()
			for b.Loop() {
				if _, err := ids.GetIDBatch(ctx, &idgenv1.GetIDBatchRequest{Count: 100}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// benchServer serves a fake backend (with TLS when cfg is set) on a
// loopback port until the benchmark ends, and returns its address.
func benchServer(b *testing.B, cfg *tls.Config) string {
	b.Helper()
	srv, err := NewServer(ServerConfig{Backend: newFakeBackend(1), Logger: quietLogger(), TLS: cfg})
	if err != nil {
		b.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go srv.Serve(lis)
	b.Cleanup(func() { srv.Shutdown(time.Second) })
	return lis.Addr().String()
}

// BenchmarkIdleConnectionMemory measures what an idle mutual-TLS client
// connection holding its health watch costs in memory (heap and stacks),
// both ends together in this one process, the client's own buffers set to
// gRPC's smallest: the node's share is at most the figure reported as
// bytes/conn. The fleet bounds (DefaultBounds) are sized from it.
//
//	go test -run '^$' -bench IdleConnectionMemory -benchtime 500x ./rpc
func BenchmarkIdleConnectionMemory(b *testing.B) {
	dir := testCA(b)
	addr := benchServer(b, material(b, dir, "server").ServerConfig())
	creds := grpc.WithTransportCredentials(credentials.NewTLS(material(b, dir, "client").ClientConfig()))
	inUse := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapInuse + m.StackInuse
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	before := inUse()
	b.ResetTimer()
	for range b.N {
		cc, err := grpc.NewClient(addr, creds, grpc.WithReadBufferSize(0), grpc.WithWriteBufferSize(0))
		if err != nil {
			b.Fatal(err)
		}
		defer cc.Close()
		st, err := healthpb.NewHealthClient(cc).Watch(ctx, &healthpb.HealthCheckRequest{})
		if err == nil {
			_, err = st.Recv()
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(inUse()-before)/float64(b.N), "bytes/conn")
}
