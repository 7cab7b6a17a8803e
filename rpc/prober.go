package rpc

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/idgen/idgen/cluster"
	"github.com/idgen/idgen/generator"
	idgenv1 "github.com/idgen/idgen/proto/idgen/v1"
)

// DefaultProbeTimeout bounds a probe whose context has no deadline.
const DefaultProbeTimeout = 2 * time.Second

// PeerProber implements cluster.Prober: it asks a member for its Status and
// its own entry of Members over gRPC. With TLS, idgend passes the node's
// node-to-node credentials (tlsconf.Material.PeerConfig), so the call shows
// this node's server certificate and fails unless the member shows a server
// certificate from the cluster CA: a gossip member without one never
// answers. Every probe dials its own connection and closes it, so that
// addresses gossip made up leave nothing open.
type PeerProber struct {
	dialOpts []grpc.DialOption
}

var (
	_ cluster.Prober     = (*PeerProber)(nil)
	_ cluster.CopyTeller = (*PeerProber)(nil)
)

// NewPeerProber returns a prober dialing with insecure credentials unless
// opts carry transport credentials, which then replace them.
func NewPeerProber(opts ...grpc.DialOption) *PeerProber {
	base := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	return &PeerProber{dialOpts: append(base, opts...)}
}

// TellCopy implements cluster.CopyTeller: it tells the node at grpcAddr,
// over the same authenticated transport, that another process was seen at
// copyAddr under its identity or another member's. The node asks copyAddr
// itself before it believes anything.
func (p *PeerProber) TellCopy(ctx context.Context, grpcAddr, copyAddr string) error {
	conn, err := grpc.NewClient(grpcAddr, p.dialOpts...)
	if err != nil {
		return fmt.Errorf("tell %s: %w", grpcAddr, err)
	}
	defer conn.Close()
	if _, err := idgenv1.NewClusterServiceClient(conn).Status(ctx, &idgenv1.StatusRequest{CopyGrpcAddr: copyAddr}); err != nil {
		return fmt.Errorf("tell %s: status: %w", grpcAddr, ErrorFromStatus(err))
	}
	return nil
}

// Probe asks the node at grpcAddr who it is. The Status it returns carries
// what the cluster's checks read: ID, ClusterID, AppliedIndex, LastIndex,
// RaftAddr (from the node's own entry of Members: Status does not carry it),
// Leaving, and from protocol 2 on its protocol range and clock.
func (p *PeerProber) Probe(ctx context.Context, grpcAddr string) (cluster.Status, error) {
	if grpcAddr == "" {
		return cluster.Status{}, fmt.Errorf("probe: no gRPC address")
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultProbeTimeout)
		defer cancel()
	}
	conn, err := grpc.NewClient(grpcAddr, p.dialOpts...)
	if err != nil {
		return cluster.Status{}, fmt.Errorf("probe %s: %w", grpcAddr, err)
	}
	defer conn.Close()
	c := idgenv1.NewClusterServiceClient(conn)
	st, err := c.Status(ctx, &idgenv1.StatusRequest{})
	if err != nil {
		return cluster.Status{}, fmt.Errorf("probe %s: status: %w", grpcAddr, ErrorFromStatus(err))
	}
	ms, err := c.Members(ctx, &idgenv1.MembersRequest{})
	if err != nil {
		return cluster.Status{}, fmt.Errorf("probe %s: members: %w", grpcAddr, ErrorFromStatus(err))
	}
	out := cluster.Status{
		ID:           st.GetId(),
		Name:         st.GetName(),
		Slot:         int(st.GetSlot()),
		Ready:        st.GetReady(),
		Reason:       st.GetReason(),
		RaftState:    st.GetRaftState(),
		LeaderID:     st.GetLeaderId(),
		LeaderAddr:   st.GetLeaderAddr(),
		AppliedIndex: st.GetRaftAppliedIndex(),
		LastIndex:    st.GetRaftLastIndex(),
		ClusterID:    st.GetClusterId(),
		// The last window is what another cluster fences (cluster/foreign.go).
		LastWindowSlot:    int(st.GetLastWindowSlot()),
		LastWindowGranted: st.GetLastWindowGranted(),
		Leaving:           !st.GetReady() && st.GetReason() == cluster.ReasonLeaving,
		// Protocol 2 on (zero from an older release): the range the member
		// speaks, and its clock, which the leader counts in the cluster's time.
		Protocols:       cluster.ProtocolRange{Min: int(st.GetProtocolMin()), Max: int(st.GetProtocolMax())},
		ClusterProtocol: int(st.GetClusterProtocol()),
		Clock:           st.GetClockUnixNano(),
		Started:         st.GetProcessStartedUnixNano(),
		Stopped:         st.Stopped,
		// The last applied command entry: a leader takes a member only if
		// its own log holds the same entry (cluster/logmatch.go).
		AppliedCommand:     st.GetAppliedCommandIndex(),
		AppliedCommandHash: st.GetAppliedCommandHash(),
	}
	// The cluster's layout: another cluster's windows are compared with this
	// one's only in one layout (cluster/foreign.go). Empty while the node
	// knows none.
	if l, err := generator.ParseLayout(st.GetLayout()); err == nil {
		out.Layout = l
	}
	// What decides whether it can claim here (protocol 2 on).
	if l, err := generator.ParseLayout(st.GetConfiguredLayout()); err == nil {
		out.ConfiguredLayout = l
	}
	if st.Datacenter != nil {
		dc := int(st.GetDatacenter())
		out.Datacenter = &dc
	}
	// Every window its cluster's log granted (another cluster fences them all).
	if ws := st.GetGrantedWindows(); len(ws) > 0 {
		out.GrantedWindows = make(map[int]int64, len(ws))
		for _, w := range ws {
			out.GrantedWindows[int(w.GetSlot())] = w.GetGranted()
		}
	}
	for _, m := range ms.GetMembers() {
		if m.GetId() == out.ID {
			out.RaftAddr = m.GetRaftAddr()
		}
		if r := m.GetRaftRole(); r == "voter" || r == "leader" {
			out.Voters++
		}
	}
	return out, nil
}
