package idclient

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	idgenv1 "github.com/idgen/idgen/proto/idgen/v1"
	"github.com/idgen/idgen/rpc"
	"github.com/idgen/idgen/scripts/harness"
)

// seedNode is a real gRPC server whose ClusterService.Members answers a
// list the test sets, and which reports NOT_SERVING for IDs: a seed that
// only tells the client where the nodes are.
type seedNode struct {
	idgenv1.UnimplementedClusterServiceServer
	mu      sync.Mutex
	members []*idgenv1.Member
	srv     *grpc.Server
	addr    string
}

func (s *seedNode) Members(context.Context, *idgenv1.MembersRequest) (*idgenv1.MembersResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return &idgenv1.MembersResponse{Members: s.members}, nil
}

// set makes Members list addrs as alive, and gone as left.
func (s *seedNode) set(addrs []string, gone ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.members = nil
	for _, a := range addrs {
		s.members = append(s.members, &idgenv1.Member{GrpcAddr: a, GossipState: "alive", Slot: -1})
	}
	for _, a := range gone {
		s.members = append(s.members, &idgenv1.Member{GrpcAddr: a, GossipState: "left", Slot: -1})
	}
}

func startSeed(t *testing.T) *seedNode {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &seedNode{addr: lis.Addr().String(), srv: grpc.NewServer()}
	idgenv1.RegisterClusterServiceServer(s.srv, s)
	hs := health.NewServer()
	hs.SetServingStatus(HealthService, healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(s.srv, hs)
	go s.srv.Serve(lis)
	t.Cleanup(s.srv.Stop)
	return s
}

// servedBy draws batches until every name in want has served one and none
// in avoid has served any of the last rounds.
func servedBy(t *testing.T, c *Client, what string, want []string, avoid ...string) {
	t.Helper()
	harness.WaitFor(t, 10*time.Second, what, func() bool {
		seen := map[string]bool{}
		for range 12 {
			b, err := c.FetchBatch(context.Background(), 2)
			if err != nil {
				t.Fatalf("FetchBatch: %v", err)
			}
			seen[b.Node] = true
		}
		for _, a := range avoid {
			if seen[a] {
				return false
			}
		}
		for _, w := range want {
			if !seen[w] {
				return false
			}
		}
		return true
	})
}

// An idgen:/// target learns the nodes from a seed's Members, uses a node
// that joins and drops one that left without being redialled, and keeps its
// last list when the seed is gone.
func TestFollowedTargetTracksMembers(t *testing.T) {
	n0 := startNode(t, 0, rpc.ServerConfig{BatchSize: 10})
	n1 := startNode(t, 1, rpc.ServerConfig{BatchSize: 10})
	n2 := startNode(t, 2, rpc.ServerConfig{BatchSize: 10})
	seed := startSeed(t)
	seed.set([]string{n0.addr, n1.addr})
	c := dial(t, "idgen:///"+seed.addr, WithRefreshInterval(time.Second))

	servedBy(t, c, "the seed's two members", []string{"node-0", "node-1"}, "node-2")
	seed.set([]string{n0.addr, n1.addr, n2.addr})
	servedBy(t, c, "the joined node used", []string{"node-0", "node-1", "node-2"})
	seed.set([]string{n0.addr, n2.addr}, n1.addr)
	servedBy(t, c, "the node that left dropped", []string{"node-0", "node-2"}, "node-1")

	// Every seed down: the last list stays in use.
	seed.srv.Stop()
	deadline := time.Now().Add(3 * time.Second) // past two refreshes
	for time.Now().Before(deadline) {
		b, err := c.FetchBatch(context.Background(), 2)
		if err != nil {
			t.Fatalf("FetchBatch with the seed down: %v", err)
		}
		if b.Node == "node-1" {
			t.Fatal("a dropped node came back with the seed down")
		}
	}
}

// Bad idgen:/// targets are refused at Dial or by the first call, and a
// member list with nothing usable does not replace a good one.
func TestFollowedTargetRefusesBadInput(t *testing.T) {
	for _, target := range []string{"idgen:///", "idgen:///no-port", "idgen:///,"} {
		if c, err := Dial(target); err == nil {
			c.Close()
			t.Errorf("target %q accepted", target)
		}
	}
	n0 := startNode(t, 0, rpc.ServerConfig{BatchSize: 10})
	seed := startSeed(t)
	seed.set([]string{n0.addr})
	c := dial(t, "idgen:///"+seed.addr, WithRefreshInterval(time.Second))
	servedBy(t, c, "the one member", []string{"node-0"})
	// Members with no gRPC address, a bad one, or only departed ones.
	seed.mu.Lock()
	seed.members = []*idgenv1.Member{{GossipState: "alive"}, {GrpcAddr: "no-port", GossipState: "alive"},
		{GrpcAddr: n0.addr, GossipState: "dead"}}
	seed.mu.Unlock()
	deadline := time.Now().Add(2500 * time.Millisecond)
	for time.Now().Before(deadline) {
		if _, err := c.FetchBatch(context.Background(), 2); err != nil {
			t.Fatalf("a member list with nothing usable broke the client: %v", err)
		}
	}
}
