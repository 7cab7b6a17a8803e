package cluster

import "sync"

// EventCounter counts what happened on a node (Config.Events): event is
// one of refusal, handoff, revocation and fence, reason says why or what
// (EventSeries lists them). Count is called from the node's goroutines,
// concurrently, and must not block.
type EventCounter interface {
	Count(event, reason string)
}

// The events a node counts.
const (
	// eventRefusal: this leader refused a Claim, Reserve, Release or
	// Remove (forwarded or its own), by the error's reason (ReasonOther
	// for none).
	eventRefusal = "refusal"
	// eventHandoff: this leader handed leadership on, by cause (handoff*).
	eventHandoff = "handoff"
	// eventRevocation: this node's running generator stopped for good, by
	// the cause's reason (or revoked*).
	eventRevocation = "revocation"
	// eventFence: this leader wrote an entry that closes off a window
	// another process issued in (a Fence, or the Release of a tenure the
	// window overlaps), by whose window it was (fence*).
	eventFence = "fence"
)

// The causes of hand-offs, revocations and fences that are no error's
// reason.
const (
	handoffClockOff     = "CLOCK_OFF"     // this leader's clock is off the cluster's time
	handoffClockOutlier = "CLOCK_OUTLIER" // most nodes are refused for skew: this leader's clock is the odd one
	handoffProtocolOdd  = "PROTOCOL_ODD"  // this leader shares no protocol version with the other servers
	handoffFounderClock = "FOUNDER_CLOCK" // this leader's clock cannot found the cluster
	handoffLeaving      = "LEAVING"       // this node leaves the cluster
	revokedCopy         = "COPY"          // a copy of this node's data dir issued inside its tenure
	revokedLeaving      = "LEAVING"       // this node leaves the cluster
	fenceOtherCluster   = "OTHER_CLUSTER" // a member of another cluster
	fenceCopy           = "COPY"          // a copy of a data dir of this cluster
)

// EventSeries is every (event, reason) pair a node counts that is known
// in advance, so that a counter can show each at 0 from the start: the
// refusals by every reason of Reasons and ReasonOther, the hand-offs by
// cause, the revocations by the reasons their causes have (NOT_OWNER: the
// tenure ended; CLUSTER_CONFLICT: the node stopped for good; SHUTDOWN), a
// copy and leaving, and the fences by whose window. A pair not listed (a
// revocation for a reason of another error) is counted all the same.
// Each pair is {event, reason}.
func EventSeries() [][2]string {
	var out [][2]string
	for _, r := range reasons {
		out = append(out, [2]string{eventRefusal, r.Name})
	}
	out = append(out, [2]string{eventRefusal, ReasonOther})
	for _, c := range []string{handoffClockOff, handoffClockOutlier, handoffProtocolOdd, handoffFounderClock, handoffLeaving} {
		out = append(out, [2]string{eventHandoff, c})
	}
	for _, c := range []string{"NOT_OWNER", "CLUSTER_CONFLICT", "SHUTDOWN", revokedCopy, revokedLeaving} {
		out = append(out, [2]string{eventRevocation, c})
	}
	return append(out, [2]string{eventFence, fenceOtherCluster}, [2]string{eventFence, fenceCopy})
}

// events is the node's count of its events (Node.events), by event and
// reason, and the Config.Events it passes each one on to (nil: none).
type events struct {
	out    EventCounter
	mu     sync.Mutex
	counts map[eventKey]uint64
}

type eventKey struct{ event, reason string }

// count counts one event for reason.
func (e *events) count(event, reason string) {
	e.mu.Lock()
	if e.counts == nil {
		e.counts = map[eventKey]uint64{}
	}
	e.counts[eventKey{event, reason}]++
	e.mu.Unlock()
	if e.out != nil {
		e.out.Count(event, reason)
	}
}

// get is how many events of event for reason were counted (tests).
func (e *events) get(event, reason string) uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.counts[eventKey{event, reason}]
}
