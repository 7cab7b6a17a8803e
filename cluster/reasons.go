package cluster

import (
	"errors"
	"slices"
)

// Kind is what a caller should do about a cluster error: the rpc layer
// turns it into the gRPC code (Unavailable, FailedPrecondition,
// InvalidArgument, NotFound, ResourceExhausted).
type Kind int

const (
	// KindRetry: the node cannot serve right now; another node, or a later
	// try, may (Unavailable).
	KindRetry Kind = iota + 1
	// KindPrecondition: the cluster is in a state the caller has to change
	// first (FailedPrecondition).
	KindPrecondition
	// KindBadInput: the request itself is malformed (InvalidArgument).
	KindBadInput
	// KindNotFound: what the request names does not exist (NotFound).
	KindNotFound
	// KindNoRoom: nothing can be issued within the caller's deadline
	// (ResourceExhausted). No cluster error is of this kind today; the
	// generator's window and rpc's waits are.
	KindNoRoom
)

// Reason is a cluster sentinel error, the reason string that names it on
// the wire (the ErrorInfo reason of a gRPC status, which every release
// reads: it never changes) and its kind.
type Reason struct {
	Err  error
	Name string
	Kind Kind
}

// reasons is every cluster sentinel that crosses gRPC. Order matters: the
// first match (errors.Is) wins, so ErrLeaderClockOff, which wraps
// ErrLeaderNotReady, comes before it.
var reasons = []Reason{
	{ErrNotReady, "NOT_READY", KindRetry},
	{ErrNoLeader, "NO_LEADER", KindRetry},
	{ErrNotLeader, "NOT_LEADER", KindRetry},
	// Before ErrLeaderNotReady, which it wraps.
	{ErrLeaderClockOff, "LEADER_CLOCK_OFF", KindRetry},
	{ErrLeaderNotReady, "LEADER_NOT_READY", KindRetry},
	{ErrNotInitialized, "NOT_INITIALIZED", KindRetry},
	{ErrClusterConflict, "CLUSTER_CONFLICT", KindRetry},
	{ErrShutdown, "SHUTDOWN", KindRetry},
	{ErrClockSkew, "CLOCK_SKEW", KindRetry},
	{ErrNotOwner, "NOT_OWNER", KindRetry},

	{ErrClusterFull, "CLUSTER_FULL", KindPrecondition},
	{ErrWrongCluster, "WRONG_CLUSTER", KindPrecondition},
	{ErrNotMember, "NOT_MEMBER", KindPrecondition},
	{ErrProtocol, "PROTOCOL", KindPrecondition},
	{ErrBadCommand, "BAD_COMMAND", KindBadInput},
	{ErrLayoutMismatch, "LAYOUT_MISMATCH", KindPrecondition},
	{ErrFaultInjectionDisabled, "FAULT_INJECTION_DISABLED", KindPrecondition},
	{ErrRemoveSelf, "REMOVE_SELF", KindPrecondition},
	{ErrQuorum, "QUORUM", KindPrecondition},

	{ErrUnknownNode, "UNKNOWN_NODE", KindNotFound},
}

// Reasons is the table of every cluster sentinel that crosses gRPC, its
// reason string and its kind, in the order ReasonOf tries them (a copy).
func Reasons() []Reason { return slices.Clone(reasons) }

// ReasonOf is the first row of Reasons that err is (errors.Is).
func ReasonOf(err error) (Reason, bool) {
	for _, r := range reasons {
		if errors.Is(err, r.Err) {
			return r, true
		}
	}
	return Reason{}, false
}

// ReasonOther is the reason counted for an error no row names.
const ReasonOther = "OTHER"

// reasonName is err's reason string, ReasonOther when it has none.
func reasonName(err error) string {
	if r, ok := ReasonOf(err); ok {
		return r.Name
	}
	return ReasonOther
}
