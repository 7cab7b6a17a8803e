package cluster

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idgen/idgen/cluster/core"
)

// runningAgent is a rule that has claimed tenure 5 on slot 1 and started its
// generator, and the input of a look with its window used up.
func runningAgent(t *testing.T, now time.Time) (*core.SlotAgent, core.AgentIn) {
	t.Helper()
	a := &core.SlotAgent{}
	in := core.AgentIn{Now: now, Own: Tenure{Slot: 1, Granted: 10, ClaimedIndex: 5}, Applied: true, Held: true}
	if out := a.Step(core.AgentEvent{Kind: core.AgentLook}, in); !out.Claim {
		t.Fatalf("a look with nothing held: %+v, want a claim", out)
	}
	a.Step(core.AgentEvent{Kind: core.AgentClaimAnswered, Tenure: 5}, in)
	if out := a.Step(core.AgentEvent{Kind: core.AgentLook}, in); !out.Start || out.Tenure != 5 || out.Slot != 1 {
		t.Fatalf("a look with the claim applied: %+v, want a start of tenure 5 on slot 1", out)
	}
	in.Running, in.Slot, in.Granted, in.Head, in.Lead = true, 1, 10, 10, 100
	return a, in
}

// reservesIn steps a's looks every agentTick for d from in.Now, answering
// each reserve with answer, and counts the reserves.
func reservesIn(a *core.SlotAgent, in core.AgentIn, d time.Duration, answer error) (int, time.Time) {
	n, start := 0, in.Now
	for at := time.Duration(0); at < d; at += core.AgentTick {
		in.Now = start.Add(at)
		if out := a.Step(core.AgentEvent{Kind: core.AgentLook}, in); out.Reserve {
			n++
			a.Step(core.AgentEvent{Kind: core.AgentReserveAnswered, Tenure: 5, Err: answer}, in)
		}
	}
	return n, start.Add(d)
}

// TestNotOwnerReservesBackOff: a reserve answered "not owner" while the
// replica still shows the tenure held (a deposed leader's answer, or a
// replica a little behind) is asked again after a gap that doubles up to
// maxReserveBackoff, not every minReserveGap: before, such an agent asked
// about five times a second, for as long as it lasted, each logged at Info.
// It never stops asking (the answer is a hint), and one accepted answer
// brings the gap back to minReserveGap.
func TestNotOwnerReservesBackOff(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	a, in := runningAgent(t, now)
	notOwner := fmt.Errorf("%w: node x does not hold slot 1 under tenure 5", ErrNotOwner)
	n, at := reservesIn(a, in, 20*time.Second, notOwner)
	// 0, 0.2, 0.6, 1.4, 3.0 s, then every 2 s: 13 in 20 s (100 without the backoff).
	if n > 14 || n < 8 {
		t.Fatalf("%d reserves in 20 s all answered \"not owner\"; want about 13 (backing off to one per %v)", n, core.MaxReserveBackoff)
	}
	if a.NotOwned() != n {
		t.Fatalf("NotOwned() = %d after %d \"not owner\" answers", a.NotOwned(), n)
	}
	in.Now = at
	for ; ; in.Now = in.Now.Add(core.AgentTick) {
		if out := a.Step(core.AgentEvent{Kind: core.AgentLook}, in); out.Reserve {
			a.Step(core.AgentEvent{Kind: core.AgentReserveAnswered, Tenure: 5}, in)
			break
		}
	}
	if n, _ := reservesIn(a, in, 2*time.Second, nil); n < 9 {
		t.Fatalf("%d reserves in 2 s after an accepted one (room still low); want one per %v", n, core.MinReserveGap)
	}
}

// TestSkewRefusedReserveAsksAgain: a reserve refused for this node's clock
// is asked again every claimRetry even with room left (only an accepted
// reserve clears the refusal), and no more often.
func TestSkewRefusedReserveAsksAgain(t *testing.T) {
	a, in := runningAgent(t, time.Unix(1_000_000, 0))
	in.Granted = 1000 // room enough
	if out := a.Step(core.AgentEvent{Kind: core.AgentLook}, in); !out.Reserve {
		t.Fatalf("the first look after a start: %+v, want the first reserve", out)
	}
	a.Step(core.AgentEvent{Kind: core.AgentReserveAnswered, Tenure: 5, Err: fmt.Errorf("%w: off by 1h", ErrClockSkew)}, in)
	n, _ := reservesIn(a, in, 10*time.Second, ErrClockSkew)
	if n < 9 || n > 10 {
		t.Fatalf("%d reserves in 10 s after a clock-skew refusal with room left; want one per %v", n, core.ClaimRetry)
	}
	if n, _ := reservesIn(a, in, 10*time.Second, nil); n > 1 {
		t.Fatalf("%d reserves in 10 s once accepted, with room left; want at most one", n)
	}
}

// TestAgentRevokesOnlyOnItsReplica: a running generator is revoked when its
// replica shows the tenure ended or the cluster in conflict, never on an
// answer, and an applied entry follows the log without sending anything.
func TestAgentRevokesOnlyOnItsReplica(t *testing.T) {
	a, in := runningAgent(t, time.Unix(1_000_000, 0))
	a.Step(core.AgentEvent{Kind: core.AgentReserveAnswered, Tenure: 5, Err: ErrNotOwner}, in)
	if out := a.Step(core.AgentEvent{Kind: core.AgentApplied}, in); out.Revoke != nil || out.Reserve || out.Claim {
		t.Fatalf("an applied entry with the tenure still held: %+v, want nothing sent and nothing revoked", out)
	}
	in.Own.Granted = 40
	if out := a.Step(core.AgentEvent{Kind: core.AgentApplied}, in); out.Grant != 40 {
		t.Fatalf("an applied grant: %+v, want Grant 40", out)
	}
	in.Held, in.SlotOwner, in.SlotTenure = false, "y", 9
	out := a.Step(core.AgentEvent{Kind: core.AgentApplied}, in)
	if !errors.Is(out.Revoke, ErrNotOwner) {
		t.Fatalf("an applied end of the tenure: %+v, want a revoke", out)
	}
	b, in := runningAgent(t, time.Unix(1_000_000, 0))
	in.Conflict = true
	if out := b.Step(core.AgentEvent{Kind: core.AgentLook}, in); !errors.Is(out.Revoke, ErrClusterConflict) {
		t.Fatalf("a look in conflict: %+v, want a revoke", out)
	}
}
