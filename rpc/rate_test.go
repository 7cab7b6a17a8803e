package rpc

import (
	"context"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	idgenv1 "github.com/idgen/idgen/proto/idgen/v1"
)

// TestIDsPerIdentityBound: with --grpc-max-ids-per-identity, one identity
// (here, without TLS, one remote address) that draws past its second's worth
// is refused with ResourceExhausted before anything is minted, the refusal
// is counted under its bound, and another identity is served meanwhile.
func TestIDsPerIdentityBound(t *testing.T) {
	b := newFakeBackend(1)
	ts := startServer(t, b, ServerConfig{BatchSize: 10, MaxCount: 50, Bounds: Bounds{IDsPerIdentity: 100}})
	c := idgenv1.NewIDServiceClient(ts.conn)
	for i := range 2 {
		if _, err := c.GetIDBatch(ctxT(t), &idgenv1.GetIDBatchRequest{Count: 50}); err != nil {
			t.Fatalf("draw %d within the bound: %v", i, err)
		}
	}
	mints := b.mintCount()
	_, err := c.GetIDBatch(ctxT(t), &idgenv1.GetIDBatchRequest{Count: 50})
	wantCode(t, err, codes.ResourceExhausted, "--grpc-max-ids-per-identity")
	if b.mintCount() != mints {
		t.Fatalf("a refused call minted: %d mints, want %d", b.mintCount(), mints)
	}
	if got := counterValue(t, ts.reg, "idgen_door_refused_total", "bound", "grpc_ids_per_identity"); got != 1 {
		t.Fatalf("refusals counted: %v, want 1", got)
	}

	other, err := grpc.NewClient(ts.addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
			return d.DialContext(ctx, "tcp", addr)
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := idgenv1.NewIDServiceClient(other).GetIDBatch(ctxT(t), &idgenv1.GetIDBatchRequest{}); err != nil {
		t.Fatalf("another identity refused while the first is over its bound: %v", err)
	}
}

// TestIDsPerIdentityBoundIsOffByDefault: no bound unless asked.
func TestIDsPerIdentityBoundIsOffByDefault(t *testing.T) {
	ts := startServer(t, newFakeBackend(1), ServerConfig{BatchSize: 10, MaxCount: 1000})
	c := idgenv1.NewIDServiceClient(ts.conn)
	for i := range 20 {
		if _, err := c.GetIDBatch(ctxT(t), &idgenv1.GetIDBatchRequest{Count: 1000}); err != nil {
			t.Fatalf("draw %d: %v", i, err)
		}
	}
}
