package rpc

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	idgenv1 "github.com/idgen/idgen/proto/idgen/v1"
)

// TestCopyHintOnlyFromServers: a Status that carries a hint of a copy
// (copy_grpc_addr) is taken only from a node of the cluster. A client or an
// admin certificate, which could otherwise make the node dial an address of
// its choosing, is refused with PermissionDenied and the node records
// nothing; an oversized address is refused too; a plain Status from anyone
// still answers.
func TestCopyHintOnlyFromServers(t *testing.T) {
	dir := testCA(t)
	b := newFakeBackend(2)
	ts := startServer(t, b, ServerConfig{TLS: material(t, dir, "server").ServerConfig()})
	hints := func() []string {
		b.mu.Lock()
		defer b.mu.Unlock()
		return append([]string(nil), b.hints...)
	}
	for _, name := range []string{"client", "admin"} {
		c := idgenv1.NewClusterServiceClient(dialTLS(t, ts.addr, material(t, dir, name).ClientConfig()))
		_, err := c.Status(ctxT(t), &idgenv1.StatusRequest{CopyGrpcAddr: "10.0.0.9:7000"})
		if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "role server") {
			t.Fatalf("%s's hint: %v, want PermissionDenied naming the server role", name, err)
		}
		if _, err := c.Status(ctxT(t), &idgenv1.StatusRequest{}); err != nil {
			t.Fatalf("%s's plain Status: %v", name, err)
		}
	}
	if h := hints(); len(h) != 0 {
		t.Fatalf("hints from a client and an admin were recorded: %q", h)
	}
	server := idgenv1.NewClusterServiceClient(dialTLS(t, ts.addr, material(t, dir, "server").ClientConfig()))
	if _, err := server.Status(ctxT(t), &idgenv1.StatusRequest{CopyGrpcAddr: strings.Repeat("a", maxHintAddr+1)}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("an oversized hint: %v, want InvalidArgument", err)
	}
	st, err := server.Status(ctxT(t), &idgenv1.StatusRequest{CopyGrpcAddr: "10.0.0.9:7000"})
	if err != nil {
		t.Fatal(err)
	}
	if h := hints(); len(h) != 1 || h[0] != "10.0.0.9:7000" {
		t.Fatalf("a server's hint recorded %q, want the one address", h)
	}
	if st.GetId() == "" {
		t.Fatalf("the hinted Status answered no node: %v", st)
	}
}
