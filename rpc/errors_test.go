package rpc

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
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
	}
)

// TestErrorReasonForEveryClusterSentinel: each cluster sentinel a gRPC caller
// can get is a code other than Internal with an ErrorInfo reason of its
// own, and comes back as itself on the receiving side.
func TestErrorReasonForEveryClusterSentinel(t *testing.T) {
	files, err := filepath.Glob("../cluster/*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("cluster's source: %v (%d files)", err, len(files))
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
			t.Errorf("clusterSentinels lists %s, which cluster does not declare", name)
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
