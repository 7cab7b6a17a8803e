package rpc

import (
	"context"
	"crypto/tls"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

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
			srv, err := NewServer(ServerConfig{Backend: newFakeBackend(1), Logger: quietLogger(), TLS: bc.server})
			if err != nil {
				b.Fatal(err)
			}
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			go srv.Serve(lis)
			defer srv.Shutdown(time.Second)
			conn, err := grpc.NewClient(lis.Addr().String(), bc.client)
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
