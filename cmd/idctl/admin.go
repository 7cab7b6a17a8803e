package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/idgen/idgen/generator"
	idgenv1 "github.com/idgen/idgen/proto/idgen/v1"
	"github.com/idgen/idgen/rpc/idcheck"
	"github.com/idgen/idgen/rpc/idclient"
)

// adminTarget is where admin commands go: the first address of a list (or
// of an idgen:/// target's seeds), or a scheme target (dns:///…) as is,
// where gRPC picks one address.
func adminTarget(target string) string {
	target = strings.TrimSpace(target)
	if seeds, ok := strings.CutPrefix(target, idclient.FollowPrefix); ok {
		target = seeds
	}
	if strings.Contains(target, "://") {
		return target
	}
	first, _, _ := strings.Cut(target, ",")
	return strings.TrimSpace(first)
}

// adminClient dials the admin target. Like grpc.NewClient it does not
// connect until the first call.
func adminClient(g globals) (idgenv1.ClusterServiceClient, func(), error) {
	t := adminTarget(g.target)
	if t == "" || (!strings.Contains(t, "://") && !strings.Contains(t, ":")) {
		return nil, nil, usagef("--target %q: want host:port[,host:port...], idgen:///seed:port[,...] or dns:///name:port", g.target)
	}
	creds, err := idclient.TransportCredentials(g.clientOptions()...)
	if err != nil {
		return nil, nil, err
	}
	conn, err := grpc.NewClient(t, creds)
	if err != nil {
		return nil, nil, usagef("--target %q: %v", g.target, err)
	}
	return idgenv1.NewClusterServiceClient(conn), func() { conn.Close() }, nil
}

// callAdmin dials the admin target and makes one call, bounded by --timeout.
func callAdmin[T any](ctx context.Context, g globals, call func(context.Context, idgenv1.ClusterServiceClient) (T, error)) (T, error) {
	c, done, err := adminClient(g)
	if err != nil {
		var zero T
		return zero, err
	}
	defer done()
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	return call(ctx, c)
}

// describe renders an error for people: gRPC code and the server's message,
// which says what to do.
func describe(err error) string {
	if st, ok := status.FromError(err); ok {
		return fmt.Sprintf("%s: %s", st.Code(), st.Message())
	}
	return err.Error()
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func table(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
}

func noArgs(args []string) error {
	if len(args) > 0 {
		return usagef("unexpected arguments %q", args)
	}
	return nil
}

type memberJSON struct {
	ID            string `json:"id"`
	Name          string `json:"name"`
	Slot          int32  `json:"slot"`
	RaftRole      string `json:"raft_role"`
	GossipState   string `json:"gossip_state"`
	GRPCAddr      string `json:"grpc_addr"`
	RaftAddr      string `json:"raft_addr"`
	GossipAddr    string `json:"gossip_addr"`
	HTTPAddr      string `json:"http_addr"`
	GrantedLeadMS int64  `json:"granted_lead_ms"`
	ClockSkewMS   int64  `json:"clock_skew_ms"`
	Version       string `json:"version"`
	Revision      string `json:"revision"`
	Protocols     string `json:"protocols"`
}

func runMembers(ctx context.Context, g globals, args []string, e env) error {
	if err := noArgs(args); err != nil {
		return err
	}
	resp, err := callAdmin(ctx, g, func(ctx context.Context, c idgenv1.ClusterServiceClient) (*idgenv1.MembersResponse, error) {
		return c.Members(ctx, &idgenv1.MembersRequest{})
	})
	if err != nil {
		return err
	}
	// The protocol the cluster runs, as the answering node sees it (0 from
	// a node of a release before protocol 2, which runs 1).
	var running uint32
	if st, err := callAdmin(ctx, g, func(ctx context.Context, c idgenv1.ClusterServiceClient) (*idgenv1.StatusResponse, error) {
		return c.Status(ctx, &idgenv1.StatusRequest{})
	}); err == nil {
		running = max(st.GetClusterProtocol(), 1)
	}
	if g.json {
		out := struct {
			LeaderID        string       `json:"leader_id"`
			ClusterProtocol uint32       `json:"cluster_protocol"`
			Members         []memberJSON `json:"members"`
		}{LeaderID: resp.GetLeaderId(), ClusterProtocol: running, Members: []memberJSON{}}
		for _, m := range resp.GetMembers() {
			out.Members = append(out.Members, memberJSON{
				ID: m.GetId(), Name: m.GetName(), Slot: m.GetSlot(), RaftRole: m.GetRaftRole(), GossipState: m.GetGossipState(),
				GRPCAddr: m.GetGrpcAddr(), RaftAddr: m.GetRaftAddr(), GossipAddr: m.GetGossipAddr(), HTTPAddr: m.GetHttpAddr(),
				GrantedLeadMS: m.GetGrantedLeadMs(), ClockSkewMS: m.GetClockSkewMs(),
				Version: m.GetVersion(), Revision: m.GetRevision(), Protocols: protocolText(m.GetProtocolMin(), m.GetProtocolMax()),
			})
		}
		return printJSON(e.stdout, out)
	}
	tw := table(e.stdout)
	fmt.Fprintln(tw, "NAME\tID\tSLOT\tRAFT\tGOSSIP\tGRPC\tGOSSIP ADDR\tLEAD\tSKEW\tVERSION\tPROTOCOLS")
	for _, m := range resp.GetMembers() {
		slot := "-"
		lead := "-"
		if m.GetSlot() >= 0 {
			slot = fmt.Sprint(m.GetSlot())
			lead = (time.Duration(m.GetGrantedLeadMs()) * time.Millisecond).Round(100 * time.Millisecond).String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", orDash(m.GetName()), m.GetId(), slot, m.GetRaftRole(),
			m.GetGossipState(), orDash(m.GetGrpcAddr()), orDash(m.GetGossipAddr()), lead,
			(time.Duration(m.GetClockSkewMs()) * time.Millisecond).String(), versionText(m.GetVersion(), m.GetRevision()),
			protocolText(m.GetProtocolMin(), m.GetProtocolMax()))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if running > 0 {
		_, err = fmt.Fprintf(e.stdout, "cluster protocol: %d\n", running)
	}
	return err
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

type statusJSON struct {
	ID               string   `json:"id"`
	Name             string   `json:"name"`
	Slot             int32    `json:"slot"`
	Ready            bool     `json:"ready"`
	Reason           string   `json:"reason"`
	RaftState        string   `json:"raft_state"`
	LeaderID         string   `json:"leader_id"`
	LeaderAddr       string   `json:"leader_addr"`
	Floor            int64    `json:"floor"`
	Cursor           int64    `json:"cursor"`
	Granted          int64    `json:"granted"`
	IDsIssued        uint64   `json:"ids_issued"`
	Layout           string   `json:"layout"`
	RaftAppliedIndex uint64   `json:"raft_applied_index"`
	RaftLastIndex    uint64   `json:"raft_last_index"`
	ClusterID        string   `json:"cluster_id"`
	Conflicting      []string `json:"conflicting_clusters,omitempty"`
}

func runStatus(ctx context.Context, g globals, args []string, e env) error {
	if err := noArgs(args); err != nil {
		return err
	}
	st, err := callAdmin(ctx, g, func(ctx context.Context, c idgenv1.ClusterServiceClient) (*idgenv1.StatusResponse, error) {
		return c.Status(ctx, &idgenv1.StatusRequest{})
	})
	if err != nil {
		return err
	}
	if g.json {
		return printJSON(e.stdout, statusJSON{
			ID: st.GetId(), Name: st.GetName(), Slot: st.GetSlot(), Ready: st.GetReady(), Reason: st.GetReason(),
			RaftState: st.GetRaftState(), LeaderID: st.GetLeaderId(), LeaderAddr: st.GetLeaderAddr(),
			Floor: st.GetFloor(), Cursor: st.GetCursor(), Granted: st.GetGranted(), IDsIssued: st.GetIdsIssued(),
			Layout: st.GetLayout(), RaftAppliedIndex: st.GetRaftAppliedIndex(), RaftLastIndex: st.GetRaftLastIndex(),
			ClusterID: st.GetClusterId(), Conflicting: st.GetConflictingClusters(),
		})
	}
	layout, lerr := generator.ParseLayout(st.GetLayout())
	at := func(ts int64) string {
		if lerr != nil || st.GetSlot() < 0 {
			return fmt.Sprint(ts)
		}
		return fmt.Sprintf("%d (%s)", ts, layout.Time(ts).Format(time.RFC3339))
	}
	ready := "yes"
	if !st.GetReady() {
		ready = "no: " + st.GetReason()
	}
	slot := "none"
	if st.GetSlot() >= 0 {
		slot = fmt.Sprint(st.GetSlot())
	}
	tw := table(e.stdout)
	for _, kv := range [][2]string{
		{"name", st.GetName()},
		{"id", st.GetId()},
		{"cluster", orDash(st.GetClusterId())},
		{"slot", slot},
		{"ready", ready},
		{"raft state", st.GetRaftState()},
		{"leader", fmt.Sprintf("%s (%s)", orDash(st.GetLeaderId()), orDash(st.GetLeaderAddr()))},
		{"floor", at(st.GetFloor())},
		{"cursor", at(st.GetCursor())},
		{"granted", at(st.GetGranted())},
		{"ids minted", fmt.Sprint(st.GetIdsIssued())},
		{"layout", orDash(st.GetLayout())},
		{"raft index", fmt.Sprintf("applied %d, last %d", st.GetRaftAppliedIndex(), st.GetRaftLastIndex())},
		{"other clusters met", orDash(strings.Join(st.GetConflictingClusters(), ", "))},
	} {
		fmt.Fprintf(tw, "%s:\t%s\n", kv[0], kv[1])
	}
	return tw.Flush()
}

func runJoin(ctx context.Context, g globals, args []string, e env) error {
	var addrs []string
	for _, a := range args {
		for _, p := range strings.Split(a, ",") {
			if p = strings.TrimSpace(p); p != "" {
				addrs = append(addrs, p)
			}
		}
	}
	if len(addrs) == 0 {
		return usagef("join needs at least one gossip address (host:port of another node's --gossip-addr)")
	}
	resp, err := callAdmin(ctx, g, func(ctx context.Context, c idgenv1.ClusterServiceClient) (*idgenv1.JoinResponse, error) {
		return c.Join(ctx, &idgenv1.JoinRequest{Addrs: addrs})
	})
	if err != nil {
		return err
	}
	if g.json {
		return printJSON(e.stdout, map[string]any{"contacted": resp.GetContacted()})
	}
	fmt.Fprintf(e.stdout, "contacted %d of %d\n", resp.GetContacted(), len(addrs))
	return nil
}

func runLeave(ctx context.Context, g globals, args []string, e env) error {
	if err := noArgs(args); err != nil {
		return err
	}
	if _, err := callAdmin(ctx, g, func(ctx context.Context, c idgenv1.ClusterServiceClient) (*idgenv1.LeaveResponse, error) {
		return c.Leave(ctx, &idgenv1.LeaveRequest{})
	}); err != nil {
		return err
	}
	if g.json {
		return printJSON(e.stdout, map[string]any{"left": adminTarget(g.target)})
	}
	fmt.Fprintf(e.stdout, "%s left the cluster; its slot is free and the process exits\n", adminTarget(g.target))
	return nil
}

func runRemove(ctx context.Context, g globals, args []string, e env) error {
	if len(args) != 1 {
		return usagef("remove takes exactly one node ID or name (see idctl members)")
	}
	resp, err := callAdmin(ctx, g, func(ctx context.Context, c idgenv1.ClusterServiceClient) (*idgenv1.RemoveResponse, error) {
		return c.Remove(ctx, &idgenv1.RemoveRequest{Node: args[0]})
	})
	if err != nil {
		return err
	}
	if g.json {
		return printJSON(e.stdout, map[string]any{"id": resp.GetId(), "freed_slot": resp.GetFreedSlot()})
	}
	if resp.GetFreedSlot() >= 0 {
		fmt.Fprintf(e.stdout, "removed %s; slot %d is free\n", resp.GetId(), resp.GetFreedSlot())
	} else {
		fmt.Fprintf(e.stdout, "removed %s; it held no slot\n", resp.GetId())
	}
	return nil
}

// tenureJSON is a tenure as `idctl history --json` prints it. generator.Tenure
// carries no JSON tags: its JSON form, under the Go field names, is the one
// the Raft snapshots store.
type tenureJSON struct {
	Slot          int    `json:"slot"`
	NodeID        string `json:"node_id"`
	Floor         int64  `json:"floor"`
	Granted       int64  `json:"granted"`
	ClaimedIndex  uint64 `json:"claimed_index"`
	ReleasedIndex uint64 `json:"released_index"`
}

func runHistory(ctx context.Context, g globals, args []string, e env) error {
	if err := noArgs(args); err != nil {
		return err
	}
	addrs, err := idclient.TargetAddrs(ctx, g.target)
	if err != nil {
		return usagef("%v", err)
	}
	h, err := idcheck.FetchHistory(ctx, addrs, g.timeout, g.clientOptions()...)
	if err != nil {
		return err
	}
	for _, herr := range h.Errors {
		fmt.Fprintf(e.stderr, "idctl history: warning: %s\n", describe(errors.Unwrap(herr)))
	}
	overlaps := idcheck.CheckTenures(h.Tenures)
	if g.json {
		out := struct {
			Layout   string       `json:"layout"`
			Answered int          `json:"answered"`
			Tenures  []tenureJSON `json:"tenures"`
			Overlaps []string     `json:"overlaps"`
		}{h.Layout.String(), h.Answered, make([]tenureJSON, 0, len(h.Tenures)), overlaps}
		for _, t := range h.Tenures {
			out.Tenures = append(out.Tenures, tenureJSON(t))
		}
		if out.Overlaps == nil {
			out.Overlaps = []string{}
		}
		return printJSON(e.stdout, out)
	}
	tw := table(e.stdout)
	fmt.Fprintln(tw, "SLOT\tNODE\tCLAIMED AT\tRELEASED AT\tFLOOR\tGRANTED\tGRANTED UNTIL")
	for _, t := range h.Tenures {
		rel := "-"
		if t.ReleasedIndex > 0 {
			rel = fmt.Sprint(t.ReleasedIndex)
		}
		until := h.Layout.Time(t.Granted + 1).Format(time.RFC3339)
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%d\t%d\t%s\n", t.Slot, t.NodeID, t.ClaimedIndex, rel, t.Floor, t.Granted, until)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "%d tenures from %d of %d nodes; layout %s\n", len(h.Tenures), h.Answered, len(addrs), h.Layout)
	if len(overlaps) > 0 {
		for _, o := range overlaps {
			fmt.Fprintln(e.stdout, "OVERLAP:", o)
		}
		return violationError{fmt.Sprintf("%d overlapping tenures", len(overlaps))}
	}
	return nil
}

func bindFault(fs *flag.FlagSet) runner {
	offset := fs.Duration("offset", 0, "clock offset to set, e.g. -60s or 60s; 0 resets the clock")
	return func(ctx context.Context, g globals, args []string, e env) error {
		if len(args) != 1 || args[0] != "clock" {
			return usagef("fault takes one kind of fault: clock")
		}
		resp, err := callAdmin(ctx, g, func(ctx context.Context, c idgenv1.ClusterServiceClient) (*idgenv1.FaultResponse, error) {
			return c.Fault(ctx, &idgenv1.FaultRequest{ClockOffsetMs: offset.Milliseconds()})
		})
		if err != nil {
			return err
		}
		if g.json {
			return printJSON(e.stdout, map[string]any{"clock_offset_ms": resp.GetClockOffsetMs()})
		}
		fmt.Fprintf(e.stdout, "clock offset of %s is now %s\n", adminTarget(g.target), time.Duration(resp.GetClockOffsetMs())*time.Millisecond)
		return nil
	}
}
