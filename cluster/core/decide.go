package core

import (
	"errors"
	"fmt"
	"time"

	"github.com/idgen/idgen/generator"
)

// The decisions that matter for uniqueness, as pure functions of explicit
// inputs (DESIGN.md, "The simulator"). The node gathers the inputs (its
// replica, its generator, its clock, Raft) and carries out what they return;
// the simulator (package cluster/sim) calls the same functions in a seeded world.
// Nothing here reads a clock, a lock, Raft or the network.

// The slot agent's rule (DESIGN.md, "A node mints only from its own log"):
// one step function, driven by its shell. The node's agent loop (agent.go)
// and the simulator call it alike and only carry out what it returns:
// claims and reserves sent to the leader, generators started, granted more
// room and revoked. SlotAgent is what the rule remembers between steps.
type SlotAgent struct {
	// tenure is the running generator's tenure, or the claim's awaited
	// (answered, not yet applied here: awaitUntil is set); 0 for none.
	tenure     uint64
	awaitUntil time.Time
	// fresh: a generator was just started; the next step reserves at once.
	fresh bool
	// nextClaim is when the next claim may go; lastReserve when the last
	// reserve went.
	nextClaim, lastReserve time.Time
	// notOwned counts the reserves answered "not owner" in a row (each
	// doubles the gap before the next one); skewed: the last reserve was
	// refused for this node's clock (only an accepted reserve clears it).
	notOwned int
	skewed   bool
}

// AgentEvent is what wakes the agent: a look (its loop's tick, an entry or
// snapshot applied here, a generator waiting for room), an entry applied
// (the replica's own step, which follows the log but sends nothing: the
// loop looks next), an answer to its claim or reserve, or a start that
// failed.
type AgentEvent struct {
	Kind agentEventKind
	// Tenure: a claim's answer names the claim's tenure; a reserve's answer
	// the tenure the reserve was sent for. UpTo is what the reserve asked,
	// Granted what its answer says was granted.
	Tenure        uint64
	UpTo, Granted int64
	Err           error
}

type agentEventKind int

const (
	AgentLook agentEventKind = iota
	AgentApplied
	AgentClaimAnswered
	AgentReserveAnswered
	AgentStartFailed
)

// AgentIn is what the rule reads at a step: the node and its replica as the
// shell sees them now.
type AgentIn struct {
	Now time.Time
	// Leaving: the node is on its way out (Leave); the agent does nothing.
	// NeverClaim: the node is configured never to claim. Conflict: it met an
	// older cluster and stops for good.
	Leaving, NeverClaim, Conflict bool
	// Running: a generator runs for the agent's tenure. Slot, Granted and
	// Head are its (Head: max of the clock's unit and its cursor).
	Running bool
	Slot    int
	Granted int64
	Head    int64
	// Own, Applied and Held are ownTenure(own replica, this node, tenure)
	// for the agent's tenure (slotAgent.Tenure); SlotOwner and SlotTenure
	// are the replica's current holder of Slot.
	Own        Tenure
	Applied    bool
	Held       bool
	SlotOwner  string
	SlotTenure uint64
	// (No answer from a leader is an input: an answer is a hint, never a
	// grant and never a revocation. The window and the tenure's end come
	// from the replica alone: DESIGN.md, "A node mints only from its own
	// log".)
	//
	// Lead is how far ahead of Head the agent keeps its window, in units.
	Lead int64
}

// AgentOut is what the agent does: at most one of Claim, Start and Revoke;
// Grant and Reserve go with a running generator.
type AgentOut struct {
	// Claim: ask the leader for a slot.
	Claim bool
	// Start a generator for Tenure on Slot above Floor, granted up to
	// Granted; then step again (the first reserve goes at once).
	Start          bool
	Tenure         uint64
	Slot           int
	Floor, Granted int64
	// Grant raises the running generator's granted to this (0: nothing new).
	Grant int64
	// Revoke stops the running generator for good, for this cause.
	Revoke error
	// Reserve asks the leader for the window up to UpTo.
	Reserve bool
	UpTo    int64
	// GaveUp: an answered claim was not seen held in the replica; why.
	GaveUp error
}

// Tenure is the tenure whose hold the next step's input describes.
func (a *SlotAgent) Tenure() uint64 { return a.tenure }

// NotOwned is how many reserves in a row were answered "not owner".
func (a *SlotAgent) NotOwned() int { return a.notOwned }

// Step is the agent's rule for one event.
func (a *SlotAgent) Step(ev AgentEvent, in AgentIn) AgentOut {
	switch ev.Kind {
	case AgentClaimAnswered:
		switch {
		case ev.Err != nil:
			a.nextClaim = in.Now.Add(claimRetryAfter(ev.Err))
		case ev.Tenure == 0:
			// Never a claim: a zero tenure would start a generator on slot 0
			// from floor 0. (Every Claim answer names its tenure.)
			a.nextClaim = in.Now.Add(ClaimRetry)
			return AgentOut{GaveUp: fmt.Errorf("%w: the leader's answer to the claim names no tenure", ErrTenureNotHeld)}
		case !in.Running:
			a.tenure, a.awaitUntil = ev.Tenure, in.Now.Add(ApplyTimeout)
		}
		return AgentOut{}
	case AgentReserveAnswered:
		if ev.Tenure != a.tenure || !in.Running {
			return AgentOut{}
		}
		switch {
		case ev.Err == nil:
			a.notOwned, a.skewed = 0, false
		case errors.Is(ev.Err, ErrNotOwner):
			// Only a hint (a deposed leader whose state lacks the claim says
			// it too): the replica decides. Asking again at once would ask
			// the same leader the same thing: back off.
			a.notOwned++
		case errors.Is(ev.Err, ErrClockSkew):
			a.skewed = true
		}
		// Any other error is an unknown outcome: the reserve may have been
		// applied, but counted as not granted it costs nothing but room.
		// And whatever the answer, it is worth no grant (neither UpTo nor
		// its Granted): the room is taken from the replica once it has
		// applied the grant, by the look that follows.
		return AgentOut{}
	case AgentStartFailed:
		a.tenure, a.awaitUntil, a.fresh = 0, time.Time{}, false
		a.nextClaim = in.Now.Add(ClaimRetry)
		return AgentOut{}
	}
	switch {
	case in.Leaving:
		return AgentOut{}
	case in.Conflict:
		if in.Running {
			a.tenure = 0
			return AgentOut{Revoke: ErrClusterConflict}
		}
		return AgentOut{}
	case !in.Running && !a.awaitUntil.IsZero():
		return a.await(in)
	case !in.Running:
		// Nothing held (a generator stopped outside the rule is forgotten).
		a.tenure, a.fresh = 0, false
		if ev.Kind == AgentApplied || in.NeverClaim || in.Now.Before(a.nextClaim) {
			return AgentOut{}
		}
		a.nextClaim = in.Now.Add(AgentTick)
		return AgentOut{Claim: true}
	}
	var out AgentOut
	granted := in.Granted
	switch {
	case in.Held && in.Own.Slot == in.Slot:
		// While the slot's current tenure is the generator's own, granted
		// follows the slot's highWater as applied here.
		if in.Own.Granted > granted {
			out.Grant, granted = in.Own.Granted, in.Own.Granted
		}
	case in.Applied:
		err := fmt.Errorf("%w: slot %d is now held by %q under tenure %d, not tenure %d",
			ErrNotOwner, in.Slot, in.SlotOwner, in.SlotTenure, a.tenure)
		a.tenure, a.fresh = 0, false
		return AgentOut{Revoke: err}
	}
	// (A replica older than the claim says nothing yet: keep running.)
	if ev.Kind == AgentApplied {
		return out
	}
	since := in.Now.Sub(a.lastReserve)
	if a.fresh || (roomLow(granted, in.Head, in.Lead) && since >= a.reserveGap()) || (a.skewed && since >= ClaimRetry) {
		a.fresh, a.lastReserve = false, in.Now
		out.Reserve, out.UpTo = true, reserveUpTo(in.Head, in.Lead)
	}
	return out
}

// await is a step while an answered claim is awaited in the replica.
func (a *SlotAgent) await(in AgentIn) AgentOut {
	var why error
	switch {
	case in.Held:
		a.awaitUntil, a.fresh, a.notOwned, a.skewed = time.Time{}, true, 0, false
		return AgentOut{Start: true, Tenure: a.tenure, Slot: in.Own.Slot, Floor: in.Own.Floor, Granted: in.Own.Granted}
	case in.Applied:
		why = fmt.Errorf("%w (tenure %d)", ErrTenureNotHeld, a.tenure)
	case in.Now.After(a.awaitUntil):
		why = fmt.Errorf("%w: the claim of tenure %d was not applied here within %v", ErrTenureNotHeld, a.tenure, ApplyTimeout)
	default:
		return AgentOut{}
	}
	a.tenure, a.awaitUntil = 0, time.Time{}
	a.nextClaim = in.Now.Add(ClaimRetry)
	return AgentOut{GaveUp: why}
}

// reserveGap is the least time between two reserves: minReserveGap,
// doubled for each "not owner" in a row, up to maxReserveBackoff.
func (a *SlotAgent) reserveGap() time.Duration {
	gap := MinReserveGap
	for i := 0; i < a.notOwned && gap < MaxReserveBackoff; i++ {
		gap *= 2
	}
	return min(gap, MaxReserveBackoff)
}

// roomLow: less than half the lead is left between the issuing point and the
// end of the granted window.
func roomLow(granted, head, lead int64) bool { return granted-head < (lead+1)/2 }

// reserveUpTo is the window a reserve asks for: the issuing point plus the lead.
func reserveUpTo(head, lead int64) int64 { return head + lead }

// LeaderIn is what the leader's check of a command reads besides its state.
type LeaderIn struct {
	// Now is this leader's clock; ClusterNow the cluster's time (clusterTime),
	// Known whether a quorum of voters' clocks stands behind it.
	Now        time.Time
	ClusterNow time.Time
	Known      bool
	// Member: a Claim's node is a server of the leader's Raft configuration.
	Member            bool
	MaxAhead, MaxSkew time.Duration
}

// LeaderOut is the leader's decision on a command: propose Cmd (a Reserve
// clamped), or answer Answer without proposing, or refuse with Err. Answer
// carries the leader's and the cluster's time either way.
type LeaderOut struct {
	Propose bool
	Cmd     Command
	Answer  Result
	// Handoff: this leader's clock is off the cluster's time; it hands off.
	Handoff bool
	Err     error
}

// LeaderCheck is the leader-side guard in front of the log (DESIGN.md, "The
// safety argument, in our words" and "One wrong clock cannot lend an hour"):
// the layout checks Apply makes, membership for a Claim, the skew refusals,
// and the clamp of a Reserve's UpTo to the cluster's time plus max-ahead. s
// is the leader's state (past its Barrier); it is only read.
func LeaderCheck(s *State, c Command, in LeaderIn) LeaderOut {
	if err := s.Admit(c); err != nil {
		return LeaderOut{Err: err}
	}
	if c.Type == CmdClaim && !in.Member {
		return LeaderOut{Err: fmt.Errorf("%w: node %s is not a server in cluster %s's Raft configuration; the leader adds "+
			"members it meets in gossip, and gives slots only to them", ErrNotMember, c.Node.ID, s.ClusterID)}
	}
	ct, known := in.ClusterNow, in.Known
	answer := Result{LeaderTime: in.Now.UnixNano(), ClusterID: s.ClusterID}
	if known {
		answer.ClusterTime = ct.UnixNano()
	}
	if c.Type == CmdClaim || c.Type == CmdReserve {
		if off := in.Now.Sub(ct); known && (off > in.MaxSkew || off < -in.MaxSkew) {
			return LeaderOut{Handoff: true, Err: fmt.Errorf("%w by %v (the quorum-th latest of the voters' clocks, max skew %v); "+
				"it grants nothing and hands off leadership", ErrLeaderClockOff, off.Round(time.Millisecond), in.MaxSkew)}
		}
		// Until a quorum of voters' clocks is known there is nothing to judge
		// the sender's clock by but this leader's own, which may be the wrong
		// one: the check waits (and a Reserve grants nothing new, below).
		if skew := time.Unix(0, c.SentAt).Sub(ct); known && (skew > in.MaxSkew || skew < -in.MaxSkew) {
			return LeaderOut{Err: fmt.Errorf("%w: the node's clock is %v off the cluster's time (max %v); fix its time source",
				ErrClockSkew, skew.Round(time.Millisecond), in.MaxSkew)}
		}
	}
	if c.Type == CmdReserve {
		if !s.Holds(c.NodeID, c.Slot, c.Tenure) {
			return LeaderOut{Err: fmt.Errorf("%w: node %s does not hold slot %d under tenure %d", ErrNotOwner, c.NodeID, c.Slot, c.Tenure)}
		}
		highWater := s.Slots[c.Slot].HighWater
		limit := s.Layout.Units(ct) + UnitsCeil(in.MaxAhead, s.Layout.Unit)
		if !known {
			// Fewer than a quorum of voters' clocks are known (a new leader's
			// first seconds): no grant rests on this leader's clock alone. Its
			// polls of the voters bring the reports.
			limit = highWater
		}
		c.UpTo = min(c.UpTo, limit, s.Layout.MaxTimestamp()) // past the layout's last units the generator says "exhausted"
		if c.UpTo <= highWater {
			// Nothing new to grant yet; highWater was granted to this tenure
			// already (a new tenure starts at it), so repeating it is safe.
			answer.Slot, answer.Granted, answer.Tenure = c.Slot, highWater, c.Tenure
			return LeaderOut{Answer: answer}
		}
	}
	return LeaderOut{Propose: true, Cmd: c, Answer: answer}
}

// The shell's decisions (apply.go): how a command travels from a node to its
// leader and how the answer travels back. propose, ApplyForwarded, handle and
// leaderApply gather the inputs (Raft's view, the replica, gossip) and carry
// these out; the simulator calls the same functions.

// route is where propose sends a command.
type route int

const (
	RouteRefuse  route = iota // not at all: the error says why
	RouteLocal                // this node leads: handle it here
	routeForward              // forward it to the leader's gRPC address
)

// ProposeIn is what propose reads to route a command.
type ProposeIn struct {
	// Conflict: this node met an older cluster (Node.Conflict).
	Conflict error
	// Own is this node's cluster ("" until its replica has applied Init).
	Own string
	// Leader: Raft says this node leads.
	Leader bool
	// LeaderID is the leader Raft knows of ("" for none), LeaderAddr its
	// gRPC address ("" if not known).
	LeaderID, LeaderAddr string
	// CanForward: a Forwarder is configured.
	CanForward bool
}

// ErrNoInitYet: a node that knows no cluster yet has nothing to send a
// leader (it could not check the answer).
var ErrNoInitYet = fmt.Errorf("%w yet: this node has not applied its cluster's first log entry (it is new, or still catching up with the leader's log)", ErrNotReady)

// ProposeRoute decides where a command goes: refused when the node is in
// conflict, handled here when it leads, else forwarded to the leader it
// knows, if it knows one, has its address, and its own replica names the
// cluster (nothing it could do with an answer before that).
func ProposeRoute(in ProposeIn) (route, error) {
	switch {
	case in.Conflict != nil:
		return RouteRefuse, in.Conflict
	case in.Leader:
		return RouteLocal, nil
	case in.Own == "":
		return RouteRefuse, ErrNoInitYet
	case in.LeaderID == "":
		return RouteRefuse, ErrNoLeader
	case in.LeaderAddr == "":
		return RouteRefuse, fmt.Errorf("%w: leader %s has no known gRPC address yet", ErrNoLeader, in.LeaderID)
	case !in.CanForward:
		return RouteRefuse, fmt.Errorf("%w: no forwarder configured", ErrNotLeader)
	}
	return routeForward, nil
}

// AcceptAnswer is the follower's check of the answer to a forward it sent
// to addr: an answer of another cluster is ignored. (An accepted answer is
// still only a hint: a node mints only from its own log.)
//
// An answer written in a protocol version this node does not speak is
// ignored too (speaks is this node's range; protocol.go).
func AcceptAnswer(own, addr string, r Result, speaks ProtocolRange) error {
	if r.ClusterID != own {
		return fmt.Errorf("%w: the leader at %s answered for cluster %q, this node belongs to %q; answer ignored",
			ErrWrongCluster, addr, r.ClusterID, own)
	}
	return checkMessageVersion("the answer", "the leader at "+addr, r.Protocol, speaks)
}

// ForwardIn is what the leader's checks of a forwarded command read.
type ForwardIn struct {
	// Leader: Raft says this node leads.
	Leader bool
	// Conflict: this node met an older cluster.
	Conflict error
	// Own is this node's cluster.
	Own string
	// Speaks is the protocol versions this node speaks.
	Speaks ProtocolRange
}

// ForwardCheck is ApplyForwarded's identity checks, in its order: only a
// leader, not in conflict, takes a command written in a protocol version it
// speaks, well-formed (decodeErr is the error decoding it, if any), that
// names the leader's own cluster.
func ForwardCheck(in ForwardIn, c Command, decodeErr error) error {
	if !in.Leader {
		return ErrNotLeader
	}
	if in.Conflict != nil {
		return in.Conflict
	}
	if decodeErr != nil {
		return fmt.Errorf("%w: %v", ErrBadCommand, decodeErr)
	}
	if err := checkMessageVersion(fmt.Sprintf("the %s command", c.Type), "node "+c.SpeaksFor(), c.Protocol, in.Speaks); err != nil {
		return err
	}
	if err := c.Validate(); err != nil {
		return err
	}
	if c.ClusterID != in.Own {
		return fmt.Errorf("%w: this leader belongs to cluster %q, the %s from node %s names cluster %q. "+
			"The sender is a member of another cluster now reaching this address (was this node's data dir wiped "+
			"while the sender's cluster still lists its old identity here?); nothing was applied. Remove the stale "+
			"member from the sender's cluster (idctl remove) or give this node its own addresses",
			ErrWrongCluster, in.Own, c.Type, c.SpeaksFor(), c.ClusterID)
	}
	return nil
}

// Handling is what the leader does with a command that passed handleCheck.
type Handling int

const (
	HandleApply  Handling = iota // Claim, Reserve, Release: leaderCheck, then the log
	HandleRemove                 // Remove: leaderRemove
)

// HandleCheck is handle's gate: a well-formed command, a leader past its
// Barrier (before it, its state may lack entries an earlier leader
// committed, and a "not owner" from it would revoke a valid generator), the
// checks Apply makes against the layout, and a type that may be forwarded.
// s is the leader's state; it is only read.
func HandleCheck(s *State, c Command, ready bool) (Handling, error) {
	if err := c.Validate(); err != nil {
		return 0, err
	}
	if !ready {
		return 0, ErrLeaderNotReady
	}
	if err := s.Admit(c); err != nil {
		return 0, err
	}
	switch c.Type {
	case CmdClaim, CmdReserve, CmdRelease:
		return HandleApply, nil
	case CmdRemove:
		return HandleRemove, nil
	}
	return 0, fmt.Errorf("%w: command %s cannot be forwarded", ErrBadCommand, c.Type)
}

// CountsCommandClock: a command's clock (SentAt) counts in the cluster's
// time only from a voter of the release before protocol 2 (legacy: its own
// Status, which the leader's polls proved, carries no clock), which reports
// its clock only in its Claims and Reserves, and then only from a Claim of a
// member or a Reserve of the slot's holder under the tenure it names. Every
// other voter's clock is its own answer to the leader's poll (cluster/
// DESIGN.md, "The leader believes nothing of a sender before checking it").
func CountsCommandClock(s *State, c Command, member, legacy bool) bool {
	if !member || !legacy {
		return false
	}
	switch c.Type {
	case CmdClaim:
		return true
	case CmdReserve:
		return s.Holds(c.NodeID, c.Slot, c.Tenure)
	}
	return false
}

// AppliedResult is the leader's reading of what Apply returned for its
// entry of type t at index: an error is the command's refusal.
func AppliedResult(t CommandType, index uint64, resp interface{}) (Result, error) {
	switch resp := resp.(type) {
	case error:
		return Result{}, resp
	case Result:
		resp.Index = index
		return resp, nil
	}
	return Result{}, fmt.Errorf("raft apply %s: unexpected response %T", t, resp)
}

// LeaderAnswer is the answer to a command the leader proposed: the applied
// entry's result, with the leader's and the cluster's time and the cluster
// ID of the decision (d.Answer).
func LeaderAnswer(d LeaderOut, applied Result) Result {
	applied.LeaderTime, applied.ClusterTime, applied.ClusterID = d.Answer.LeaderTime, d.Answer.ClusterTime, d.Answer.ClusterID
	return applied
}

// InitCommand is the Init entry a new cluster's first leader writes
// (establish): the cluster's identity id and layout, its creation time (now:
// the founding voters' time, not this leader's clock), and every slot's
// first highWater at now plus max-ahead, above anything an earlier life of
// any node could have stamped (it could borrow at most max-ahead past its
// own cluster's time).
func InitCommand(l generator.Layout, id string, now time.Time, maxAhead time.Duration) Command {
	return Command{
		Type: CmdInit, Layout: &l, ClusterID: id, Created: now.UnixNano(),
		Start: l.Units(now) + UnitsCeil(maxAhead, l.Unit),
	}
}

// EstablishNext is the leader loop's decision after an establish attempt
// that ended with err and was made prev after the one before (0 for the
// first): until Init is applied every Claim is refused, so a failed attempt
// is retried for as long as this node leads, never left to a leadership
// change that may not come, after establishBackoff, doubling to
// maxEstablishBackoff.
func EstablishNext(err error, prev time.Duration) (again bool, wait time.Duration) {
	if err == nil {
		return false, 0
	}
	if prev == 0 {
		return true, establishBackoff
	}
	return true, min(2*prev, maxEstablishBackoff)
}

// UnitsCeil converts a duration into whole layout units, rounding up.
func UnitsCeil(d, unit time.Duration) int64 {
	return int64((d + unit - 1) / unit)
}

// claimRetryAfter is the wait before the next claim after one that failed with err.
func claimRetryAfter(err error) time.Duration {
	if errors.Is(err, ErrNoLeader) || errors.Is(err, ErrNotLeader) || errors.Is(err, ErrLeaderNotReady) || errors.Is(err, ErrNoInitYet) ||
		errors.Is(err, ErrNotInitialized) {
		return AgentTick
	}
	return ClaimRetry
}

const (
	// AgentTick is how often the agent checks its room without a signal.
	AgentTick = 100 * time.Millisecond
	// MinReserveGap keeps reserve requests to a few per second per node, even
	// under saturating load.
	MinReserveGap = 200 * time.Millisecond
	// ClaimRetry is how often a standby or refused node tries to claim again
	// without a state change. A claim that found no leader (or one not ready
	// yet, or a cluster not founded yet) failed without costing the leader
	// anything and is retried every agentTick, so a node claims within a tick
	// of its cluster's first leader and of its Init.
	ClaimRetry = time.Second
	// MaxReserveBackoff caps the gap between reserves that a run of "not
	// owner" answers doubles from minReserveGap: a false one (a deposed
	// leader's) costs at most this of the room left.
	MaxReserveBackoff = 2 * time.Second
)

// ErrTenureNotHeld: the local log shows the claim's tenure is not (or no
// longer) this node's current hold on a slot.
var ErrTenureNotHeld = errors.New("the local log does not show this node holding the claimed tenure")

// OwnTenure reads this node's hold under tenure from its own replica: ok when
// the state has applied the claim and the tenure is still its slot's current
// one; applied reports whether the state has reached the claim's index at all.
func OwnTenure(s *State, nodeID string, tenure uint64) (t Tenure, applied, ok bool) {
	if tenure == 0 || s.Index < tenure {
		return Tenure{}, false, false
	}
	i := s.SlotOf(nodeID)
	if i < 0 || s.Slots[i].Tenure != tenure {
		return Tenure{}, true, false
	}
	for j := len(s.Tenures) - 1; j >= 0; j-- {
		if r := s.Tenures[j]; r.Slot == i && r.ClaimedIndex == tenure && r.NodeID == nodeID && r.ReleasedIndex == 0 {
			// While the tenure is current its grant is the slot's highWater.
			r.Granted = s.Slots[i].HighWater
			return r, true, true
		}
	}
	return Tenure{}, true, false
}

// The first retry of a failed establish comes after establishBackoff, each
// next one after twice the wait, up to maxEstablishBackoff.
const (
	establishBackoff    = 100 * time.Millisecond
	maxEstablishBackoff = 5 * time.Second
)

// ApplyTimeout bounds a Raft apply when the caller's context has no deadline.
const ApplyTimeout = 5 * time.Second
