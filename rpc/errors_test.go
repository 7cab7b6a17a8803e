package rpc

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/hashicorp/raft"
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
