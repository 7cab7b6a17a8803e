package cluster

import (
	"errors"
	"fmt"
	"time"
)

// The decisions that matter for uniqueness, as pure functions of explicit
// inputs (DESIGN.md, "The simulator"). The node gathers the inputs (its
// replica, its generator, its clock, Raft) and carries out what they return;
// the simulator in sim_test.go calls the same functions in a seeded world.
// Nothing here reads a clock, a lock, Raft or the network.

// agentIn is what the slot agent's decision reads.
type agentIn struct {
	// Tenure is the tenure the agent runs a generator for, or waits to see
	// applied after a claim was answered; 0 when it has none.
	Tenure uint64
	// Running: a generator runs for Tenure. Slot, Granted and Head are its
	// (Head: max of the clock's unit and its cursor).
	Running bool
	Slot    int
	Granted int64
	Head    int64
	// Own, Applied and Held are ownTenure(own replica, this node, Tenure);
	// SlotOwner and SlotTenure are the replica's current holder of Slot.
	Own        Tenure
	Applied    bool
	Held       bool
	SlotOwner  string
	SlotTenure uint64
	// AnswerErr is the error the agent's last reserve just got, if any. An
	// answer is a hint, never a grant: the window comes from the replica
	// alone (DESIGN.md, "A node mints only from its own log"), so a success
	// carries nothing the step reads; only "not owner" stops the generator.
	AnswerErr error
	// Lead is how far ahead of Head the agent keeps its window, in units.
	Lead int64
}

// agentOut is what the agent does. At most one of Start, Revoke, Claim and
// Wait is set; Grant and Reserve go with a running generator.
type agentOut struct {
	// Start a generator for Tenure on Slot above Floor, granted up to Granted.
	Start          bool
	Slot           int
	Floor, Granted int64
	// Grant raises the running generator's granted to this (0: nothing new).
	Grant int64
	// Revoke stops the running generator for good, for this cause.
	Revoke error
	// Reserve asks the leader for the window up to UpTo.
	Reserve bool
	UpTo    int64
	// Claim: the agent holds nothing (or its awaited claim is not its hold):
	// claim again. Err says why, when there is a reason.
	Claim bool
	Err   error
	// Wait: the replica has not applied the claim yet; nothing to do.
	Wait bool
}

// agentStep is the agent's decision for one pass (runAgent, claim, followLog,
// needsRoom, reserve carry it out).
func agentStep(in agentIn) agentOut {
	if in.Tenure == 0 {
		return agentOut{Claim: true}
	}
	if !in.Running {
		switch {
		case in.Held:
			return agentOut{Start: true, Slot: in.Own.Slot, Floor: in.Own.Floor, Granted: in.Own.Granted}
		case in.Applied:
			return agentOut{Claim: true, Err: fmt.Errorf("%w (tenure %d)", errTenureNotHeld, in.Tenure)}
		}
		return agentOut{Wait: true}
	}
	if errors.Is(in.AnswerErr, ErrNotOwner) {
		// The leader's state (past its Barrier) says the tenure is over:
		// stopping is always safe.
		return agentOut{Revoke: in.AnswerErr}
	}
	var out agentOut
	granted := in.Granted
	switch {
	case in.Held && in.Own.Slot == in.Slot:
		// While the slot's current tenure is the generator's own, granted
		// follows the slot's highWater as applied here.
		if in.Own.Granted > granted {
			out.Grant, granted = in.Own.Granted, in.Own.Granted
		}
	case in.Applied:
		return agentOut{Revoke: fmt.Errorf("%w: slot %d is now held by %q under tenure %d, not tenure %d",
			ErrNotOwner, in.Slot, in.SlotOwner, in.SlotTenure, in.Tenure)}
	}
	// (A replica older than the claim says nothing yet: keep running.)
	if roomLow(granted, in.Head, in.Lead) {
		out.Reserve, out.UpTo = true, reserveUpTo(in.Head, in.Lead)
	}
	return out
}

// roomLow: less than half the lead is left between the issuing point and the
// end of the granted window.
func roomLow(granted, head, lead int64) bool { return granted-head < (lead+1)/2 }

// reserveUpTo is the window a reserve asks for: the issuing point plus the lead.
func reserveUpTo(head, lead int64) int64 { return head + lead }

// leaderIn is what the leader's check of a command reads besides its state.
type leaderIn struct {
	// Now is this leader's clock; ClusterNow the cluster's time (clusterTime),
	// Known whether a quorum of voters' clocks stands behind it.
	Now        time.Time
	ClusterNow time.Time
	Known      bool
	// Member: a Claim's node is a server of the leader's Raft configuration.
	Member            bool
	MaxAhead, MaxSkew time.Duration
}

// leaderOut is the leader's decision on a command: propose Cmd (a Reserve
// clamped), or answer Answer without proposing, or refuse with Err. Answer
// carries the leader's and the cluster's time either way.
type leaderOut struct {
	Propose bool
	Cmd     command
	Answer  result
	// Handoff: this leader's clock is off the cluster's time; it hands off.
	Handoff bool
	Err     error
}

// leaderCheck is the leader-side guard in front of the log (DESIGN.md
// section 3 and "One wrong clock cannot lend an hour"): the layout checks
// Apply makes, membership for a Claim, the skew refusals, and the clamp of a
// Reserve to the cluster's time plus max-ahead. s is the leader's state (past
// its Barrier); it is only read.
func leaderCheck(s *state, c command, in leaderIn) leaderOut {
	if err := s.admit(c); err != nil {
		return leaderOut{Err: err}
	}
	if c.Type == cmdClaim && !in.Member {
		return leaderOut{Err: fmt.Errorf("%w: node %s is not a server in cluster %s's Raft configuration; the leader adds "+
			"members it meets in gossip, and gives slots only to them", ErrNotMember, c.Node.ID, s.ClusterID)}
	}
	ct, known := in.ClusterNow, in.Known
	answer := result{LeaderTime: in.Now.UnixNano(), ClusterID: s.ClusterID}
	if known {
		answer.ClusterTime = ct.UnixNano()
	}
	if c.Type == cmdClaim || c.Type == cmdReserve {
		if off := in.Now.Sub(ct); known && (off > in.MaxSkew || off < -in.MaxSkew) {
			return leaderOut{Handoff: true, Err: fmt.Errorf("%w: this leader's clock is %v off the cluster's time (the quorum-th latest of the voters' clocks, max skew %v); "+
				"it grants nothing and hands off leadership", ErrLeaderNotReady, off.Round(time.Millisecond), in.MaxSkew)}
		}
		// Until a quorum of voters' clocks is known there is nothing to judge
		// the sender's clock by but this leader's own, which may be the wrong
		// one: the check waits (and a Reserve grants nothing new, below).
		if skew := time.Unix(0, c.SentAt).Sub(ct); known && (skew > in.MaxSkew || skew < -in.MaxSkew) {
			return leaderOut{Err: fmt.Errorf("%w: the node's clock is %v off the cluster's time (max %v); fix its time source",
				ErrClockSkew, skew.Round(time.Millisecond), in.MaxSkew)}
		}
	}
	if c.Type == cmdReserve {
		if !s.holds(c.NodeID, c.Slot, c.Tenure) {
			return leaderOut{Err: fmt.Errorf("%w: node %s does not hold slot %d under tenure %d", ErrNotOwner, c.NodeID, c.Slot, c.Tenure)}
		}
		highWater := s.Slots[c.Slot].HighWater
		limit := s.Layout.Units(ct) + unitsCeil(in.MaxAhead, s.Layout.Unit)
		if !known {
			// Fewer than a quorum of voters' clocks are known (a new leader's
			// first seconds): no grant rests on this leader's clock alone. The
			// next reserves bring the reports.
			limit = highWater
		}
		c.UpTo = min(c.UpTo, limit, s.Layout.MaxTimestamp()) // past the layout's last units the generator says "exhausted"
		if c.UpTo <= highWater {
			// Nothing new to grant yet; highWater was granted to this tenure
			// already (a new tenure starts at it), so repeating it is safe.
			answer.Slot, answer.Granted, answer.Tenure = c.Slot, highWater, c.Tenure
			return leaderOut{Answer: answer}
		}
	}
	return leaderOut{Propose: true, Cmd: c, Answer: answer}
}
