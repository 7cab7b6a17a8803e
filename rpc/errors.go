package rpc

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/hashicorp/raft"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/idgen/idgen/cluster"
	"github.com/idgen/idgen/generator"
)

// ErrorDomain is the ErrorInfo domain under which the sentinel behind a status
// travels, so the receiving side can turn it back into the same sentinel.
const ErrorDomain = "idgen.v1"

// errMapping ties a sentinel to its gRPC code and to the reason string that
// carries its identity across the wire.
type errMapping struct {
	err    error
	code   codes.Code
	reason string
}

// errTable is the one place errors become gRPC codes. Order matters: the first
// match wins, so a generator error wrapped together with a context error (for
// example a window that stayed exhausted until the deadline) keeps its meaning.
// The cluster's rows are cluster.Reasons (its reason strings and kinds, in its
// order); each kind's rows stand where that kind's code begins, before the
// rows of this package's, the generator's and Raft's errors of the same code.
var errTable = slices.Concat(
	// Not able to serve right now; another node may be: Unavailable, which the
	// client retries elsewhere.
	clusterRows(cluster.KindRetry),
	[]errMapping{
		{generator.ErrRevoked, codes.Unavailable, "REVOKED"},
		{raft.ErrNotLeader, codes.Unavailable, "RAFT_NOT_LEADER"},
		{raft.ErrLeadershipLost, codes.Unavailable, "RAFT_LEADERSHIP_LOST"},
		{raft.ErrRaftShutdown, codes.Unavailable, "RAFT_SHUTDOWN"},
		{raft.ErrLeadershipTransferInProgress, codes.Unavailable, "RAFT_LEADERSHIP_TRANSFER"},
		{raft.ErrEnqueueTimeout, codes.Unavailable, "RAFT_ENQUEUE_TIMEOUT"},
	},

	// The cluster is in a state the caller has to change first (and the
	// cluster's malformed command, among them as before).
	clusterRows(cluster.KindPrecondition, cluster.KindBadInput),
	[]errMapping{
		{generator.ErrLayoutExhausted, codes.FailedPrecondition, "LAYOUT_EXHAUSTED"},

		// No room to issue within the caller's deadline.
		{generator.ErrWindowExhausted, codes.ResourceExhausted, "WINDOW_EXHAUSTED"},
		{errNoRoom, codes.ResourceExhausted, "NO_ROOM"},

		// Gossip could not reach any of the given addresses.
		{errJoin, codes.Unavailable, "JOIN_FAILED"},

		{generator.ErrBatchSize, codes.InvalidArgument, "BATCH_SIZE"},
		{errBadRequest, codes.InvalidArgument, "BAD_REQUEST"},
	},
	clusterRows(cluster.KindNotFound, cluster.KindNoRoom),
	[]errMapping{
		{context.Canceled, codes.Canceled, "CANCELED"},
		{context.DeadlineExceeded, codes.DeadlineExceeded, "DEADLINE_EXCEEDED"},
	},
)

// kindCodes is the gRPC code of each kind of cluster error.
var kindCodes = map[cluster.Kind]codes.Code{
	cluster.KindRetry:        codes.Unavailable,
	cluster.KindPrecondition: codes.FailedPrecondition,
	cluster.KindBadInput:     codes.InvalidArgument,
	cluster.KindNotFound:     codes.NotFound,
	cluster.KindNoRoom:       codes.ResourceExhausted,
}

// clusterRows is cluster.Reasons' rows of the given kinds, in its order, as
// errTable's rows.
func clusterRows(kinds ...cluster.Kind) []errMapping {
	var out []errMapping
	for _, r := range cluster.Reasons() {
		if slices.Contains(kinds, r.Kind) {
			out = append(out, errMapping{r.Err, kindCodes[r.Kind], r.Name})
		}
	}
	return out
}

var (
	// errNoRoom marks a wait for IDs (buffer or window) that ran into the
	// caller's deadline; GetIDBatch wraps deadline errors with it.
	errNoRoom = errors.New("no IDs could be issued within the deadline")
	// errJoin marks a gossip join that reached none of the addresses.
	errJoin = errors.New("gossip join failed")
	// errBadRequest marks a request the server refuses as malformed.
	errBadRequest = errors.New("bad request")
)

// ToStatus turns an error from the cluster or generator layer into a gRPC
// status error: the code from the table above, the error's text as the message,
// and an ErrorInfo detail naming the sentinel. Errors that already are statuses
// pass through; anything else is Internal. nil stays nil.
func ToStatus(err error) error {
	if err == nil {
		return nil
	}
	for _, m := range errTable {
		if errors.Is(err, m.err) {
			st := status.New(m.code, err.Error())
			if withInfo, derr := st.WithDetails(&errdetails.ErrorInfo{Reason: m.reason, Domain: ErrorDomain}); derr == nil {
				st = withInfo
			}
			return st.Err()
		}
	}
	if st, ok := status.FromError(err); ok {
		return st.Err()
	}
	return status.Error(codes.Internal, err.Error())
}

// ErrorFromStatus reverses ToStatus on the receiving side of a call: a status
// that names a known sentinel becomes an error for which errors.Is(err,
// sentinel) holds, with the remote message kept. Other errors are returned
// unchanged (status.Code still works on them).
func ErrorFromStatus(err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	for _, d := range st.Details() {
		info, ok := d.(*errdetails.ErrorInfo)
		if !ok || info.GetDomain() != ErrorDomain {
			continue
		}
		for _, m := range errTable {
			if m.reason == info.GetReason() {
				return &remoteError{sentinel: m.err, st: st}
			}
		}
	}
	return err
}

// remoteError is a sentinel that arrived over gRPC. It matches the sentinel
// with errors.Is and still answers GRPCStatus, so passing it on through
// another gRPC hop keeps the original code.
type remoteError struct {
	sentinel error
	st       *status.Status
}

func (e *remoteError) Error() string {
	return fmt.Sprintf("remote: %s", e.st.Message())
}

func (e *remoteError) Unwrap() error { return e.sentinel }

func (e *remoteError) GRPCStatus() *status.Status { return e.st }
