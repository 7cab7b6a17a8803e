package rpc

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/idgen/idgen/cluster"
	"github.com/idgen/idgen/generator"
)

func TestErrorMapping(t *testing.T) {
	cases := []struct {
		err  error
		code codes.Code
		is   error // sentinel the round trip must keep; defaults to err
	}{
		{cluster.ErrNotReady, codes.Unavailable, nil},
		{cluster.ErrNoLeader, codes.Unavailable, nil},
		{cluster.ErrNotLeader, codes.Unavailable, nil},
		{cluster.ErrLeaderNotReady, codes.Unavailable, nil},
		{cluster.ErrLeaderClockOff, codes.Unavailable, nil},
		// A leader off the cluster's time is not ready, to every caller.
		{cluster.ErrLeaderClockOff, codes.Unavailable, cluster.ErrLeaderNotReady},
		{cluster.ErrNotInitialized, codes.Unavailable, nil},
		{cluster.ErrShutdown, codes.Unavailable, nil},
		{cluster.ErrClockSkew, codes.Unavailable, nil},
		{cluster.ErrNotOwner, codes.Unavailable, nil},
		{generator.ErrRevoked, codes.Unavailable, nil},
		{raft.ErrNotLeader, codes.Unavailable, nil},
		{raft.ErrLeadershipLost, codes.Unavailable, nil},
		{raft.ErrRaftShutdown, codes.Unavailable, nil},
		{raft.ErrLeadershipTransferInProgress, codes.Unavailable, nil},
		{cluster.ErrClusterFull, codes.FailedPrecondition, nil},
		{cluster.ErrLayoutMismatch, codes.FailedPrecondition, nil},
		{cluster.ErrWrongCluster, codes.FailedPrecondition, nil},
		{cluster.ErrNotMember, codes.FailedPrecondition, nil},
		{cluster.ErrFaultInjectionDisabled, codes.FailedPrecondition, nil},
		{cluster.ErrRemoveSelf, codes.FailedPrecondition, nil},
		{cluster.ErrQuorum, codes.FailedPrecondition, nil},
		{generator.ErrLayoutExhausted, codes.FailedPrecondition, nil},
		{generator.ErrWindowExhausted, codes.ResourceExhausted, nil},
		{generator.ErrBatchSize, codes.InvalidArgument, nil},
		{cluster.ErrUnknownNode, codes.NotFound, nil},
		{context.Canceled, codes.Canceled, nil},
		{context.DeadlineExceeded, codes.DeadlineExceeded, nil},
		// Waiting for room until the deadline is "no room", not a plain timeout.
		{fmt.Errorf("%w: %w", generator.ErrWindowExhausted, context.DeadlineExceeded), codes.ResourceExhausted, generator.ErrWindowExhausted},
		{fmt.Errorf("%w: %w", errNoRoom, context.DeadlineExceeded), codes.ResourceExhausted, errNoRoom},
		{errors.New("something odd"), codes.Internal, nil},
		{status.Error(codes.PermissionDenied, "passes through"), codes.PermissionDenied, nil},
	}
	for _, c := range cases {
		wrapped := fmt.Errorf("doing a thing: %w", c.err)
		st := ToStatus(wrapped)
		if got := status.Code(st); got != c.code {
			t.Errorf("%v -> %v, want %v", c.err, got, c.code)
		}
		if status.Convert(st).Message() == "" {
			t.Errorf("%v: empty message", c.err)
		}
		// Round trip: the receiving side gets the same sentinel back.
		back := ErrorFromStatus(st)
		is := c.is
		if is == nil {
			is = c.err
		}
		if !errors.Is(back, is) && c.code != codes.Internal && c.code != codes.PermissionDenied {
			t.Errorf("round trip of %v gave %v", c.err, back)
		}
		if status.Code(back) != c.code {
			t.Errorf("round trip of %v changed code to %v", c.err, status.Code(back))
		}
	}
	if ToStatus(nil) != nil || ErrorFromStatus(nil) != nil {
		t.Error("nil must stay nil")
	}
}

func TestErrorFromStatusLeavesForeignStatuses(t *testing.T) {
	err := status.Error(codes.Unavailable, "connection refused")
	if got := ErrorFromStatus(err); got != err {
		t.Fatalf("foreign status changed: %v", got)
	}
	plain := errors.New("plain")
	if ErrorFromStatus(plain) != plain {
		t.Fatal("plain error changed")
	}
}

// TestErrLeaderNotReadyIsNotClockOff: the Barrier's "not ready" does not come
// back as the clock's, though the clock's comes back as both.
func TestErrLeaderNotReadyIsNotClockOff(t *testing.T) {
	back := ErrorFromStatus(ToStatus(cluster.ErrLeaderNotReady))
	if !errors.Is(back, cluster.ErrLeaderNotReady) || errors.Is(back, cluster.ErrLeaderClockOff) {
		t.Fatalf("LEADER_NOT_READY came back as %v", back)
	}
}

// clusterSentinels is every exported sentinel of package cluster that the
// node's methods the servers call (rpc.Backend) can return, and
// notOverGRPC the others, with why. TestErrorReasonForEveryClusterSentinel
// holds both against cluster's source, so a new sentinel is placed in one
// of them before it can cross gRPC as a bare Internal.
var (
	clusterSentinels = map[string]error{
		"ErrNotReady":               cluster.ErrNotReady,
		"ErrClusterFull":            cluster.ErrClusterFull,
		"ErrLayoutMismatch":         cluster.ErrLayoutMismatch,
		"ErrClockSkew":              cluster.ErrClockSkew,
		"ErrNotOwner":               cluster.ErrNotOwner,
		"ErrUnknownNode":            cluster.ErrUnknownNode,
		"ErrNoLeader":               cluster.ErrNoLeader,
		"ErrNotLeader":              cluster.ErrNotLeader,
		"ErrShutdown":               cluster.ErrShutdown,
		"ErrFaultInjectionDisabled": cluster.ErrFaultInjectionDisabled,
		"ErrRemoveSelf":             cluster.ErrRemoveSelf,
		"ErrQuorum":                 cluster.ErrQuorum,
		"ErrBadCommand":             cluster.ErrBadCommand,
		"ErrLeaderNotReady":         cluster.ErrLeaderNotReady,
		"ErrLeaderClockOff":         cluster.ErrLeaderClockOff,
		"ErrClusterConflict":        cluster.ErrClusterConflict,
		"ErrWrongCluster":           cluster.ErrWrongCluster,
		"ErrNotMember":              cluster.ErrNotMember,
		"ErrNotInitialized":         cluster.ErrNotInitialized,
		"ErrProtocol":               cluster.ErrProtocol,
	}
	notOverGRPC = map[string]string{
		"ErrRaftTLSConfig": "a setting Open refuses",
		"ErrGossipKey":     "a setting Open and the key parser refuse",
		// The core's (cluster/core) that only the node itself reads.
		"ErrNoInitYet":     "wraps ErrNotReady, and crosses as NOT_READY",
		"ErrEntryVersion":  "wraps ErrProtocol; a replica stops on it, nothing returns it",
		"ErrTenureNotHeld": "the agent's reason to claim again, never returned by a Backend method",
		"ErrStateCorrupt":  "a broken invariant of the replicated state: gRPC's own Internal",
		// The sweeps' verdicts on a member and establish's reasons: logged
		// by the leader, never returned by a Backend method.
		"ErrProbeUnanswered":  "a sweep's verdict, logged",
		"ErrProbeOtherNode":   "a sweep's verdict, logged",
		"ErrProbeLeaving":     "a sweep's verdict, logged",
		"ErrProbeRaftAddr":    "a sweep's verdict, logged",
		"ErrProbeCluster":     "a sweep's verdict, logged",
		"ErrProbeBehind":      "a sweep's verdict, logged",
		"ErrProbeOtherLeader": "a sweep's verdict, logged",
		"ErrProbeStopped":     "a sweep's verdict, logged",
		"ErrProbeNoClaim":     "a sweep's verdict, logged",
		"ErrAwaitingClocks":   "why establish wrote no Init yet, logged",
		"ErrFounderClock":     "why establish wrote no Init yet, logged",
	}
)

// TestErrorReasonForEveryClusterSentinel: each cluster sentinel a gRPC caller
// can get is a code other than Internal with an ErrorInfo reason of its
// own, and comes back as itself on the receiving side.
func TestErrorReasonForEveryClusterSentinel(t *testing.T) {
	files, err := filepath.Glob("../cluster/*.go")
	core, err2 := filepath.Glob("../cluster/core/*.go")
	files = append(files, core...)
	if err != nil || err2 != nil || len(files) == 0 || len(core) == 0 {
		t.Fatalf("cluster's source: %v %v (%d files, %d of the core)", err, err2, len(files), len(core))
	}
	seen := map[string]bool{}
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.VAR {
				continue
			}
			for _, sp := range gd.Specs {
				for _, name := range sp.(*ast.ValueSpec).Names {
					if strings.HasPrefix(name.Name, "Err") {
						seen[name.Name] = true
					}
				}
			}
		}
	}
	for name := range seen {
		_, listed := clusterSentinels[name]
		if _, why := notOverGRPC[name]; !listed && !why {
			t.Errorf("cluster.%s is in neither clusterSentinels nor notOverGRPC: give it an errTable entry", name)
		}
	}
	reasons := map[string]string{}
	for name, sentinel := range clusterSentinels {
		if !seen[name] {
			t.Errorf("clusterSentinels lists %s, which cluster and its core do not declare", name)
		}
		st := status.Convert(ToStatus(fmt.Errorf("doing a thing: %w", sentinel)))
		if st.Code() == codes.Internal || st.Code() == codes.Unknown {
			t.Errorf("cluster.%s crosses gRPC as %v", name, st.Code())
		}
		var reason string
		for _, d := range st.Details() {
			if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == ErrorDomain {
				reason = info.GetReason()
			}
		}
		if reason == "" {
			t.Errorf("cluster.%s crosses gRPC without a reason", name)
		} else if other, dup := reasons[reason]; dup {
			t.Errorf("cluster.%s and cluster.%s share the reason %s", name, other, reason)
		}
		reasons[reason] = name
		if back := ErrorFromStatus(st.Err()); !errors.Is(back, sentinel) {
			t.Errorf("cluster.%s came back as %v", name, back)
		}
	}
}

// todaysTable is errTable as it was written out before the cluster's rows
// came from cluster.Reasons: every error's code and reason, and the order
// in which they are tried, must stay exactly so (the reasons travel between
// releases).
var todaysTable = []errMapping{
	{cluster.ErrNotReady, codes.Unavailable, "NOT_READY"},
	{cluster.ErrNoLeader, codes.Unavailable, "NO_LEADER"},
	{cluster.ErrNotLeader, codes.Unavailable, "NOT_LEADER"},
	{cluster.ErrLeaderClockOff, codes.Unavailable, "LEADER_CLOCK_OFF"},
	{cluster.ErrLeaderNotReady, codes.Unavailable, "LEADER_NOT_READY"},
	{cluster.ErrNotInitialized, codes.Unavailable, "NOT_INITIALIZED"},
	{cluster.ErrClusterConflict, codes.Unavailable, "CLUSTER_CONFLICT"},
	{cluster.ErrShutdown, codes.Unavailable, "SHUTDOWN"},
	{cluster.ErrClockSkew, codes.Unavailable, "CLOCK_SKEW"},
	{cluster.ErrNotOwner, codes.Unavailable, "NOT_OWNER"},
	{generator.ErrRevoked, codes.Unavailable, "REVOKED"},
	{raft.ErrNotLeader, codes.Unavailable, "RAFT_NOT_LEADER"},
	{raft.ErrLeadershipLost, codes.Unavailable, "RAFT_LEADERSHIP_LOST"},
	{raft.ErrRaftShutdown, codes.Unavailable, "RAFT_SHUTDOWN"},
	{raft.ErrLeadershipTransferInProgress, codes.Unavailable, "RAFT_LEADERSHIP_TRANSFER"},
	{raft.ErrEnqueueTimeout, codes.Unavailable, "RAFT_ENQUEUE_TIMEOUT"},
	{cluster.ErrClusterFull, codes.FailedPrecondition, "CLUSTER_FULL"},
	{cluster.ErrWrongCluster, codes.FailedPrecondition, "WRONG_CLUSTER"},
	{cluster.ErrNotMember, codes.FailedPrecondition, "NOT_MEMBER"},
	{cluster.ErrProtocol, codes.FailedPrecondition, "PROTOCOL"},
	{cluster.ErrBadCommand, codes.InvalidArgument, "BAD_COMMAND"},
	{cluster.ErrLayoutMismatch, codes.FailedPrecondition, "LAYOUT_MISMATCH"},
	{cluster.ErrFaultInjectionDisabled, codes.FailedPrecondition, "FAULT_INJECTION_DISABLED"},
	{cluster.ErrRemoveSelf, codes.FailedPrecondition, "REMOVE_SELF"},
	{cluster.ErrQuorum, codes.FailedPrecondition, "QUORUM"},
	{generator.ErrLayoutExhausted, codes.FailedPrecondition, "LAYOUT_EXHAUSTED"},
	{generator.ErrWindowExhausted, codes.ResourceExhausted, "WINDOW_EXHAUSTED"},
	{errNoRoom, codes.ResourceExhausted, "NO_ROOM"},
	{errJoin, codes.Unavailable, "JOIN_FAILED"},
	{generator.ErrBatchSize, codes.InvalidArgument, "BATCH_SIZE"},
	{errBadRequest, codes.InvalidArgument, "BAD_REQUEST"},
	{cluster.ErrUnknownNode, codes.NotFound, "UNKNOWN_NODE"},
	{context.Canceled, codes.Canceled, "CANCELED"},
	{context.DeadlineExceeded, codes.DeadlineExceeded, "DEADLINE_EXCEEDED"},
}

// TestErrTableIsTodays: errTable, its cluster rows taken from
// cluster.Reasons, is row for row the table it replaced, and every row
// round-trips: the sentinel (wrapped) crosses as its code and reason and
// comes back as itself.
func TestErrTableIsTodays(t *testing.T) {
	if len(errTable) != len(todaysTable) {
		t.Errorf("errTable has %d rows, the table it replaced %d", len(errTable), len(todaysTable))
	}
	for i := range min(len(errTable), len(todaysTable)) {
		got, want := errTable[i], todaysTable[i]
		if got.err != want.err || got.code != want.code || got.reason != want.reason {
			t.Errorf("errTable row %d is {%v, %v, %s}, want {%v, %v, %s}", i, got.err, got.code, got.reason, want.err, want.code, want.reason)
		}
	}
	for _, m := range errTable {
		st := status.Convert(ToStatus(fmt.Errorf("doing a thing: %w", m.err)))
		if st.Code() != m.code || reasonOf(st) != m.reason {
			t.Errorf("%v crosses as %v %q, want %v %q", m.err, st.Code(), reasonOf(st), m.code, m.reason)
		}
		back := ErrorFromStatus(st.Err())
		if !errors.Is(back, m.err) || status.Code(back) != m.code {
			t.Errorf("%s came back as %v (%v)", m.reason, back, status.Code(back))
		}
	}
}

// TestClusterReasonsAreErrTables: every row of cluster's reason table is
// a row of errTable with the code of its kind, what crosses gRPC as its
// reason comes back as the same row of cluster's table, and the table
// covers every cluster sentinel that crosses gRPC (clusterSentinels).
func TestClusterReasonsAreErrTables(t *testing.T) {
	wantCode := map[cluster.Kind]codes.Code{
		cluster.KindRetry: codes.Unavailable, cluster.KindPrecondition: codes.FailedPrecondition,
		cluster.KindBadInput: codes.InvalidArgument, cluster.KindNotFound: codes.NotFound,
		cluster.KindNoRoom: codes.ResourceExhausted,
	}
	inTable := map[error]bool{}
	for _, r := range cluster.Reasons() {
		inTable[r.Err] = true
		if got, ok := cluster.ReasonOf(fmt.Errorf("doing a thing: %w", r.Err)); !ok || got != r {
			t.Errorf("cluster.ReasonOf(%v) = %+v, %v; want its own row %+v", r.Err, got, ok, r)
		}
		i := slices.IndexFunc(errTable, func(m errMapping) bool { return m.err == r.Err })
		if i < 0 {
			t.Errorf("cluster's %s is not in errTable", r.Name)
			continue
		}
		if m := errTable[i]; m.reason != r.Name || m.code != wantCode[r.Kind] {
			t.Errorf("errTable has %s as {%v, %s}, cluster's table as {kind %d, %s}", r.Name, m.code, m.reason, r.Kind, r.Name)
		}
		st := status.Convert(ToStatus(r.Err))
		back := ErrorFromStatus(st.Err())
		if got, ok := cluster.ReasonOf(back); !ok || got != r {
			t.Errorf("%s came back as %v, whose row in cluster's table is %+v", r.Name, back, got)
		}
	}
	for name, sentinel := range clusterSentinels {
		if !inTable[sentinel] {
			t.Errorf("cluster.%s crosses gRPC but is not in cluster.Reasons", name)
		}
	}
	if len(inTable) != len(clusterSentinels) {
		t.Errorf("cluster.Reasons has %d sentinels, clusterSentinels %d", len(inTable), len(clusterSentinels))
	}
	if _, ok := cluster.ReasonOf(errors.New("something odd")); ok {
		t.Error("cluster.ReasonOf names an error of nobody's")
	}
	if r, _ := cluster.ReasonOf(cluster.ErrLeaderClockOff); r.Name != "LEADER_CLOCK_OFF" {
		t.Errorf("ErrLeaderClockOff, which wraps ErrLeaderNotReady, has the reason %s", r.Name)
	}
}

// reasonOf is the ErrorInfo reason of st ("" for none).
func reasonOf(st *status.Status) string {
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == ErrorDomain {
			return info.GetReason()
		}
	}
	return ""
}
