package core

import (
	"errors"
	"fmt"
	"time"

	"github.com/idgen/idgen/generator"
)

const (
	// ProbeTimeout bounds one probe: a member that does not answer within it
	// counts as unreachable.
	ProbeTimeout = 2 * time.Second
	// ProbeParallel is how many probes one sweep runs at once.
	ProbeParallel = 8
	// PromoteMaxLag is how far (in log entries) a non-voter's applied index
	// may trail the leader's for it to count as following this log.
	PromoteMaxLag = 64
	// A member not in Raft whose probe failed is asked again after
	// ProbeBackoffMin, doubling up to probeBackoffMax, so that members
	// gossip made up cost a probe now and then, not one per sweep.
	ProbeBackoffMin = 100 * time.Millisecond
	probeBackoffMax = 10 * time.Second
)

// Why a probe's answer does not prove a member. Sentinels, so that a reason
// is logged once per member rather than on every sweep.
var (
	ErrProbeUnanswered  = errors.New("it does not answer over the authenticated transport")
	ErrProbeOtherNode   = errors.New("another node answers at its gRPC address")
	ErrProbeLeaving     = errors.New("it is leaving")
	ErrProbeRaftAddr    = errors.New("its own raft address is not the one gossip shows")
	ErrProbeCluster     = errors.New("it does not belong to this cluster")
	ErrProbeBehind      = errors.New("it has not caught up with this cluster's log")
	ErrProbeOtherLeader = errors.New("it follows another raft leader")
	errProbeStopped     = errors.New("it stopped issuing for good (its not-ready reason says why)")
	ErrProbeNoClaim     = errors.New("it could never claim a slot under this cluster's layout")
)

type ProbeKey struct{ ID, Addr string }

type ProbeAnswer struct {
	Status Status
	Err    error
}

// probeAddrs are the gRPC addresses where id may answer: where it last
// answered as itself, the one its own Claim recorded in the replicated state,
// and the one gossip shows. Gossip's alone could be forged, so a member is
// asked at each.
func probeAddrs(id string, proven, fromState string, m GossipMember, seen bool) []string {
	var out []string
	add := func(a string) {
		if a == "" {
			return
		}
		for _, o := range out {
			if o == a {
				return
			}
		}
		out = append(out, a)
	}
	add(proven)
	add(fromState)
	if seen && m.Parsed {
		add(m.Meta.GRPCAddr)
	}
	return out
}

// AnswerOf is id's own answer among a sweep's probes: the first address
// that answered naming id. It returns the address too.
func AnswerOf(id string, addrs []string, answers map[ProbeKey]ProbeAnswer) (Status, string, error) {
	var firstErr error
	for _, a := range addrs {
		ans, ok := answers[ProbeKey{id, a}]
		if !ok {
			continue
		}
		switch {
		case ans.Err != nil:
			if firstErr == nil {
				firstErr = fmt.Errorf("%w (%s: %v)", ErrProbeUnanswered, a, ans.Err)
			}
		case ans.Status.ID != id:
			if firstErr == nil {
				firstErr = fmt.Errorf("%w (%s answers as node %q)", ErrProbeOtherNode, a, ans.Status.ID)
			}
		default:
			return ans.Status, a, nil
		}
	}
	if firstErr == nil {
		firstErr = fmt.Errorf("%w (no gRPC address known)", ErrProbeUnanswered)
	}
	return Status{}, "", firstErr
}

// JoinProof: a member not in Raft may be added as a non-voter at raftAddr if
// it answers as itself, at that Raft address, and is of this cluster or a
// fresh node (no cluster, no log).
func JoinProof(st Status, raftAddr, own string) error {
	switch {
	case st.Leaving:
		return ErrProbeLeaving
	case st.RaftAddr != raftAddr:
		return fmt.Errorf("%w (it says %s, gossip %s)", ErrProbeRaftAddr, st.RaftAddr, raftAddr)
	case st.ClusterID == "" && st.LastIndex == 0:
		return nil
	case st.ClusterID != own:
		return fmt.Errorf("%w (it names cluster %q, last log index %d)", ErrProbeCluster, st.ClusterID, st.LastIndex)
	}
	return nil
}

// memberProof: a server of this cluster at raftAddr, not leaving. It
// allows moving a server's Raft address.
func memberProof(st Status, raftAddr, own string) error {
	switch {
	case st.Leaving:
		return ErrProbeLeaving
	case st.ClusterID != own:
		return fmt.Errorf("%w (it names cluster %q)", ErrProbeCluster, st.ClusterID)
	case st.RaftAddr != raftAddr:
		return fmt.Errorf("%w (it says %s, gossip %s)", ErrProbeRaftAddr, st.RaftAddr, raftAddr)
	}
	return nil
}

// promoteProof: a non-voter may become a voter once it is a member at its
// configured address and follows this log, within promoteMaxLag of the
// leader's applied index.
func promoteProof(st Status, raftAddr, own string, leaderApplied uint64) error {
	if st.ClusterID == "" && !st.Leaving {
		return fmt.Errorf("%w (it has not applied the cluster's first entry yet)", ErrProbeBehind)
	}
	if err := memberProof(st, raftAddr, own); err != nil {
		return err
	}
	if st.AppliedIndex+PromoteMaxLag < leaderApplied {
		return fmt.Errorf("%w (applied %d, leader %d)", ErrProbeBehind, st.AppliedIndex, leaderApplied)
	}
	return nil
}

// CanTakePart: only a node that can take part is a voter. A member started
// with another layout than the cluster's l, or with a preferred datacenter
// outside it, would be refused every claim, and as a voter it would count
// toward the quorum without ever holding a slot. nil l (before Init) and a
// Status that says neither (a release before protocol 2) pass.
func CanTakePart(st Status, l *generator.Layout) error {
	if l == nil {
		return nil
	}
	if st.ConfiguredLayout != (generator.Layout{}) && st.ConfiguredLayout != *l {
		return fmt.Errorf("%w (it was started with layout %s, the cluster's is %s; restart it without --layout, --layout-unit "+
			"and --layout-epoch, or with the cluster's)", ErrProbeNoClaim, st.ConfiguredLayout, l)
	}
	if st.Datacenter != nil {
		if dc, dcs := *st.Datacenter, 1<<l.DatacenterBits; dc < -1 || dc >= dcs {
			return fmt.Errorf("%w (its --datacenter %d is not in -1..%d under layout %s; restart it with one that is)",
				ErrProbeNoClaim, dc, dcs-1, l)
		}
	}
	return nil
}

// shownToTakePart: a non-voter is promoted only once it has shown that it
// can take part: it holds a slot in the log (holds), or its Status says
// the layout and datacenter it was started with (protocol 2), which
// canTakePart has checked. A release before protocol 2 says neither, and
// started under another layout it never claims: as a voter it would never
// report a clock (its Status carries none), and a majority of such voters
// left the cluster without a quorum of clocks, or a leader of that release
// that grants nothing without one. It stays a non-voter, and is promoted
// once it holds a slot.
func shownToTakePart(st Status, holds bool) error {
	if holds || st.Datacenter != nil {
		return nil
	}
	return fmt.Errorf("%w (it holds no slot, and its Status says neither its layout nor its datacenter, as a release "+
		"before protocol 2's does: it is promoted once it holds a slot; if it never claims, see its log for a layout mismatch)", ErrProbeNoClaim)
}

// probeBackoff is when a member not in Raft whose probe failed is asked
// again, for the addresses gossip showed then (key).
type probeBackoff struct {
	key   string
	fails int
	next  time.Time
}

func (ls *LeaderState) backedOff(id, key string, now time.Time) bool {
	b, ok := ls.backoff[id]
	return ok && b.key == key && now.Before(b.next)
}

func (ls *LeaderState) probeFailed(id, key string, now time.Time) {
	b := ls.backoff[id]
	if b.key != key {
		b = probeBackoff{key: key}
	}
	b.fails++
	b.next = now.Add(min(ProbeBackoffMin<<min(b.fails-1, 16), probeBackoffMax))
	ls.backoff[id] = b
}
