package rpc

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/idgen/idgen/cluster"
	"github.com/idgen/idgen/generator"
	idgenv1 "github.com/idgen/idgen/proto/idgen/v1"
	"github.com/idgen/idgen/rpc/buildinfo"
	"github.com/idgen/idgen/rpc/tlsconf"
)

type clusterService struct {
	idgenv1.UnimplementedClusterServiceServer
	s     *Server // the join slot, the log and Left
	admin Admin
	peer  Peer // takes the hints of copies Status carries
	fault FaultInjector
}

func (h *clusterService) Members(ctx context.Context, _ *idgenv1.MembersRequest) (*idgenv1.MembersResponse, error) {
	members, leader := h.admin.Members()
	out := &idgenv1.MembersResponse{LeaderId: leader, Members: make([]*idgenv1.Member, 0, len(members))}
	for _, m := range members {
		out.Members = append(out.Members, memberToProto(m))
	}
	return out, nil
}

func memberToProto(m cluster.MemberInfo) *idgenv1.Member {
	return &idgenv1.Member{
		Id:            m.ID,
		Name:          m.Name,
		GrpcAddr:      m.GRPCAddr,
		RaftAddr:      m.RaftAddr,
		GossipAddr:    m.GossipAddr,
		HttpAddr:      m.HTTPAddr,
		Slot:          int32(m.Slot),
		RaftRole:      m.RaftRole,
		GossipState:   m.GossipState,
		GrantedLeadMs: m.GrantedLead.Milliseconds(),
		ClockSkewMs:   m.ClockSkew.Milliseconds(),
		Version:       m.Version,
		Revision:      m.Revision,
		ProtocolMin:   uint32(max(m.Protocols.Min, 0)),
		ProtocolMax:   uint32(max(m.Protocols.Max, 0)),
	}
}

func (h *clusterService) Status(ctx context.Context, req *idgenv1.StatusRequest) (*idgenv1.StatusResponse, error) {
	if addr := req.GetCopyGrpcAddr(); addr != "" {
		// A hint of a copy counts only from a node of the cluster: anyone
		// else could make this node dial where it likes.
		if !fromServer(ctx) {
			return nil, status.Errorf(codes.PermissionDenied, "copy_grpc_addr is a hint between nodes of the cluster: it needs a "+
				"certificate with role %s", tlsconf.RoleServer)
		}
		if len(addr) > maxHintAddr {
			return nil, status.Errorf(codes.InvalidArgument, "copy_grpc_addr is %d bytes; at most %d", len(addr), maxHintAddr)
		}
		h.peer.SightedCopy(addr)
	}
	return statusToProto(h.admin.Status()), nil
}

// maxHintAddr bounds a hinted address (a host name and a port).
const maxHintAddr = 300

// fromServer: the caller showed a server certificate of the cluster CA, or
// the port runs without TLS (--insecure, where every caller is trusted).
func fromServer(ctx context.Context) bool {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return false
	}
	if p.AuthInfo == nil {
		return true
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return false
	}
	_, role := certIdentity(info.State)
	return role == tlsconf.RoleServer
}

func statusToProto(st cluster.Status) *idgenv1.StatusResponse {
	// The build is the process's: the node and this server are one binary.
	b := buildinfo.Read()
	return &idgenv1.StatusResponse{
		Version:                b.Version,
		Revision:               b.Revision,
		GoVersion:              b.GoVersion,
		LastWindowSlot:         int32(st.LastWindowSlot),
		LastWindowGranted:      st.LastWindowGranted,
		Id:                     st.ID,
		Name:                   st.Name,
		Slot:                   int32(st.Slot),
		Ready:                  st.Ready,
		Reason:                 st.Reason,
		RaftState:              st.RaftState,
		LeaderId:               st.LeaderID,
		LeaderAddr:             st.LeaderAddr,
		Granted:                st.Granted,
		Cursor:                 st.Cursor,
		Floor:                  st.Floor,
		IdsIssued:              st.IDsIssued,
		Layout:                 layoutText(st.Layout),
		RaftAppliedIndex:       st.AppliedIndex,
		RaftLastIndex:          st.LastIndex,
		ClusterId:              st.ClusterID,
		ConflictingClusters:    st.ConflictingClusters,
		ProtocolMin:            uint32(max(st.Protocols.Min, 0)),
		ProtocolMax:            uint32(max(st.Protocols.Max, 0)),
		ClusterProtocol:        uint32(max(st.ClusterProtocol, 0)),
		ClockUnixNano:          st.Clock,
		ProcessStartedUnixNano: st.Started,
		Stopped:                st.Stopped,
		AppliedCommandIndex:    st.AppliedCommand,
		AppliedCommandHash:     st.AppliedCommandHash,
		ConfiguredLayout:       layoutText(st.ConfiguredLayout),
		Datacenter:             datacenterOf(st.Datacenter),
		GrantedWindows:         windowsOf(st.GrantedWindows),
	}
}

func (h *clusterService) Join(ctx context.Context, req *idgenv1.JoinRequest) (*idgenv1.JoinResponse, error) {
	var addrs []string
	for _, a := range req.GetAddrs() {
		if a = strings.TrimSpace(a); a != "" {
			addrs = append(addrs, a)
		}
	}
	if len(addrs) == 0 {
		return nil, status.Error(codes.InvalidArgument, "join needs at least one gossip address (host:port of another node's --gossip-addr)")
	}
	if len(addrs) > MaxJoinAddrs {
		return nil, status.Errorf(codes.InvalidArgument, "join takes at most %d addresses, got %d; one seed of a cluster is enough", MaxJoinAddrs, len(addrs))
	}
	for _, a := range addrs {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "join address %q: want host:port of another node's --gossip-addr", a)
		}
	}
	// One join at a time: each may dial every address with memberlist's
	// own timeouts, which no caller should be able to pile up.
	select {
	case h.s.joinSlot <- struct{}{}:
	default:
		return nil, status.Error(codes.Unavailable, "another join is in progress on this node; retry when it is done")
	}
	type result struct {
		n   int
		err error
	}
	done := make(chan result, 1)
	go func() {
		defer func() { <-h.s.joinSlot }()
		n, err := h.admin.Join(addrs)
		done <- result{n, err}
	}()
	// The caller's deadline bounds the answer; the join itself runs out
	// its memberlist timeouts and only then frees the slot.
	var r result
	select {
	case r = <-done:
	case <-ctx.Done():
		return nil, ToStatus(fmt.Errorf("join %v: %w (the join goes on in the background)", addrs, ctx.Err()))
	}
	if r.err != nil {
		return nil, ToStatus(fmt.Errorf("%w: %v: %w (check that they are --gossip-addr addresses of running nodes)", errJoin, addrs, r.err))
	}
	return &idgenv1.JoinResponse{Contacted: int32(r.n)}, nil
}

// Leave returns once the node has left; the binary exits after the response
// is sent (see Server.Left).
func (h *clusterService) Leave(ctx context.Context, _ *idgenv1.LeaveRequest) (*idgenv1.LeaveResponse, error) {
	if err := h.admin.Leave(ctx); err != nil {
		return nil, ToStatus(fmt.Errorf("leave: %w", err))
	}
	h.s.log.Info("node left the cluster on request")
	h.s.markLeft()
	return &idgenv1.LeaveResponse{}, nil
}

func (h *clusterService) Remove(ctx context.Context, req *idgenv1.RemoveRequest) (*idgenv1.RemoveResponse, error) {
	node := strings.TrimSpace(req.GetNode())
	if node == "" {
		return nil, status.Error(codes.InvalidArgument, "remove needs a node ID or name (see idctl members)")
	}
	id, freed, err := h.admin.Remove(ctx, node)
	if err != nil {
		return nil, ToStatus(fmt.Errorf("remove %q: %w", node, err))
	}
	h.s.log.Info("removed node on request", "node", node, "id", id, "freed_slot", freed)
	return &idgenv1.RemoveResponse{Id: id, FreedSlot: int32(freed)}, nil
}

func (h *clusterService) History(ctx context.Context, _ *idgenv1.HistoryRequest) (*idgenv1.HistoryResponse, error) {
	tenures, err := h.admin.History(ctx)
	if err != nil {
		return nil, ToStatus(fmt.Errorf("history: %w", err))
	}
	out := &idgenv1.HistoryResponse{
		Layout:  layoutText(h.admin.Status().Layout),
		Tenures: make([]*idgenv1.Tenure, 0, len(tenures)),
	}
	for _, t := range tenures {
		out.Tenures = append(out.Tenures, &idgenv1.Tenure{
			Slot:          uint32(t.Slot),
			NodeId:        t.NodeID,
			Floor:         t.Floor,
			Granted:       t.Granted,
			ClaimedIndex:  t.ClaimedIndex,
			ReleasedIndex: t.ReleasedIndex,
		})
	}
	return out, nil
}

func (h *clusterService) Fault(ctx context.Context, req *idgenv1.FaultRequest) (*idgenv1.FaultResponse, error) {
	ms := req.GetClockOffsetMs()
	if ms > MaxFaultOffsetMS || ms < -MaxFaultOffsetMS {
		return nil, status.Errorf(codes.InvalidArgument, "clock offset %s is beyond the limit of ±1h", time.Duration(ms)*time.Millisecond)
	}
	if err := h.fault.SetClockOffset(time.Duration(ms) * time.Millisecond); err != nil {
		return nil, ToStatus(err)
	}
	h.s.log.Warn("fault injection: clock offset set", "offset_ms", ms)
	return &idgenv1.FaultResponse{ClockOffsetMs: ms}, nil
}

// layoutText is the layout as the responses carry it (generator's String,
// which ParseLayout reads), or "" while the node knows no cluster layout.
// windowsOf is a Status's granted windows on the wire, by slot.
func windowsOf(w map[int]int64) []*idgenv1.SlotWindow {
	out := make([]*idgenv1.SlotWindow, 0, len(w))
	for slot, g := range w {
		out = append(out, &idgenv1.SlotWindow{Slot: uint32(max(slot, 0)), Granted: g})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Slot < out[j].Slot })
	return out
}

// datacenterOf is a Status's preferred datacenter on the wire (nil: none said).
func datacenterOf(dc *int) *int32 {
	if dc == nil {
		return nil
	}
	v := int32(*dc)
	return &v
}

func layoutText(l generator.Layout) string {
	if l.Validate() != nil {
		return ""
	}
	return l.String()
}
