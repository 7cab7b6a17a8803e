package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idgen/idgen/generator"
)

const (
	// agentTick is how often the agent checks its room without a signal.
	agentTick = 100 * time.Millisecond
	// minReserveGap keeps reservations to a few per second per node, even
	// under saturating load.
	minReserveGap = 200 * time.Millisecond
	// claimRetry is how often a standby or refused node tries to claim again
	// without a state change. A claim that found no leader (or one not ready
	// yet) failed without costing the leader anything and is retried every
	// agentTick, so a node claims within a tick of its cluster's first leader.
	claimRetry = time.Second
)

// claimRetryAfter is the wait before the next claim after one that failed with err.
func claimRetryAfter(err error) time.Duration {
	if errors.Is(err, ErrNoLeader) || errors.Is(err, ErrNotLeader) || errors.Is(err, ErrLeaderNotReady) || errors.Is(err, errNoInitYet) {
		return agentTick
	}
	return claimRetry
}

// runAgent is the slot agent: it claims a slot, runs a generator above the
// claim's floor, keeps the granted window ahead of it, and revokes the
// generator the moment the state shows the slot is no longer this node's.
func (n *Node) runAgent() {
	tick := time.NewTicker(agentTick)
	defer tick.Stop()
	var lastReserve, lastClaim time.Time
	claimGap := time.Duration(0)
	for {
		// Persisted as soon as the state has it: a node that restarts before
		// it was written would gossip no cluster and not be added back.
		n.trackIdentity()
		g := n.gen.Load()
		switch {
		case n.leaving.Load():
		case n.conflict.Load() != nil:
			if g != nil {
				n.revoke(g, ErrClusterConflict)
				g = nil
			}
		case g == nil && time.Since(lastClaim) >= claimGap && !n.cfg.neverClaim:
			lastClaim = time.Now()
			var err error
			if g, err = n.claim(); g != nil {
				lastReserve = time.Now()
				n.reserve(g)
			}
			claimGap = claimRetryAfter(err)
		case g != nil:
			if !n.followLog(g) {
				continue
			}
			// A node refused earlier (clock skew) asks again now and then even
			// with room left, since only an accepted reserve clears the refusal.
			refused := *n.reason.Load() != ""
			if (n.needsRoom(g) && time.Since(lastReserve) >= minReserveGap) || (refused && time.Since(lastReserve) >= claimRetry) {
				lastReserve = time.Now()
				n.reserve(g)
			}
		}
		var waiting <-chan struct{}
		if g != nil {
			waiting = g.Waiting()
		}
		select {
		case <-n.shutdownCh:
			return
		case <-n.fsm.changed:
		case <-waiting:
		case <-tick.C:
		}
	}
}

// claim asks the leader for a slot and starts a generator above its floor.
// The answer only names the claim (its tenure) to wait for: the generator's
// floor and first grant are read from this node's own replica once it has
// applied that claim (a node mints only from its own log, DESIGN.md), and
// so is the layout: the one the replica's Init records. The claim carries
// the layout this node was configured with (else its replica's, once
// known), and the log refuses it if the cluster's differs.
func (n *Node) claim() (*generator.Generator, error) {
	want, known := n.stateLayout()
	if l := n.cfg.Layout; l != (generator.Layout{}) {
		if known && want != l {
			err := layoutMismatch(want, l, "its cluster is one")
			n.setReason(err.Error())
			return nil, err
		}
		want, known = l, true
	}
	var claimed *generator.Layout
	if known {
		claimed = &want
	}
	info := NodeInfo{
		ID: n.id, Name: n.cfg.Name, RaftAddr: n.cfg.RaftAdvertise, GossipAddr: n.cfg.GossipAdvertise,
		GRPCAddr: n.cfg.GRPCAddr, HTTPAddr: n.cfg.HTTPAddr, Datacenter: n.cfg.Datacenter,
	}
	ctx, cancel := context.WithTimeout(context.Background(), applyTimeout)
	defer cancel()
	r, err := n.propose(ctx, command{Type: cmdClaim, Node: &info, Layout: claimed})
	if err != nil {
		n.setReason(n.claimFailure(err))
		n.logger.Debug("claim", "err", err)
		return nil, err
	}
	t, err := n.awaitTenure(ctx, r.Tenure)
	if err != nil {
		n.setReason("no slot yet: " + err.Error())
		n.logger.Warn("claim answered but not found in the local log", "tenure", r.Tenure, "err", err)
		return nil, err
	}
	// The replica applied the claim, so it has the Init before it.
	layout, ok := n.stateLayout()
	if !ok || (claimed != nil && layout != *claimed) {
		err := fmt.Errorf("%w: the local log records layout %s for a claim of layout %s", ErrLayoutMismatch, layout, want)
		n.setReason("cannot start generator: " + err.Error())
		n.logger.Error("start generator", "slot", t.Slot, "err", err)
		return nil, err
	}
	g, err := generator.New(layout, t.Slot, t.Floor, n.clock)
	if err != nil {
		n.setReason("cannot start generator: " + err.Error())
		n.logger.Error("start generator", "slot", t.Slot, "floor", t.Floor, "err", err)
		return nil, err
	}
	g.Grant(t.Granted)
	n.window.Store(&heldWindow{slot: g.Slot(), granted: g.Granted()})
	n.tenure.Store(t.ClaimedIndex)
	n.minted.Store(&mintedTenure{slot: t.Slot, tenure: t.ClaimedIndex})
	n.setReason("")
	n.gen.Store(g)
	n.logger.Info("claimed slot", "slot", t.Slot, "floor", t.Floor, "tenure", t.ClaimedIndex)
	// An entry applied since the tenure was read found no generator to
	// stop: ask the replica again now that there is one.
	n.stopIfEnded()
	return g, nil
}

// errTenureNotHeld: the local log shows the claim's tenure is not (or no
// longer) this node's current hold on a slot.
var errTenureNotHeld = errors.New("the local log does not show this node holding the claimed tenure")

// ownTenure reads this node's hold under tenure from its own replica: ok when
// the state has applied the claim and the tenure is still its slot's current
// one; applied reports whether the state has reached the claim's index at all.
func ownTenure(s *state, nodeID string, tenure uint64) (t Tenure, applied, ok bool) {
	if tenure == 0 || s.Index < tenure {
		return Tenure{}, false, false
	}
	i := s.slotOf(nodeID)
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

// awaitTenure waits until the local replica has applied the claim that opened
// tenure, and returns the hold it records.
func (n *Node) awaitTenure(ctx context.Context, tenure uint64) (Tenure, error) {
	if tenure == 0 {
		// Never a success: a zero Tenure would start a generator on slot 0
		// from floor 0. (Every Claim answer names its tenure today.)
		return Tenure{}, fmt.Errorf("%w: the leader's answer to the claim names no tenure", errTenureNotHeld)
	}
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		var (
			t           Tenure
			applied, ok bool
		)
		n.fsm.view(func(s *state) { t, applied, ok = ownTenure(s, n.id, tenure) })
		switch d := agentStep(agentIn{Tenure: tenure, Own: t, Applied: applied, Held: ok}); {
		case d.Start:
			return t, nil
		case d.Claim:
			if d.Err == nil {
				return Tenure{}, fmt.Errorf("%w (tenure %d)", errTenureNotHeld, tenure)
			}
			return Tenure{}, d.Err
		}
		select {
		case <-ctx.Done():
			return Tenure{}, fmt.Errorf("claim of tenure %d not applied locally: %w", tenure, ctx.Err())
		case <-n.shutdownCh:
			return Tenure{}, ErrShutdown
		case <-tick.C:
		}
	}
}

func (n *Node) claimFailure(err error) string {
	switch {
	case errors.Is(err, ErrClusterFull):
		return "standby: every slot is owned; waiting for one to be freed"
	case errors.Is(err, ErrLayoutMismatch), errors.Is(err, ErrClockSkew):
		return err.Error()
	case (errors.Is(err, ErrNoLeader) || errors.Is(err, errNoInitYet)) && !n.partOfCluster():
		if why := n.joinBlocked(); why != "" {
			return "no slot: " + why
		}
		if n.cfg.BootstrapExpect == 1 && len(n.cfg.Join) == 0 {
			return "no slot yet: founding a cluster of its own (--bootstrap-expect 1, no --join)"
		}
		return "no slot: waiting to be added to a cluster by its leader (check --join), or for --bootstrap-expect nodes to meet"
	case errors.Is(err, errNoInitYet):
		return "no slot: " + err.Error()
	case errors.Is(err, ErrNoLeader):
		return "no slot: no raft leader known"
	default:
		return fmt.Sprintf("no slot yet: %v", err)
	}
}

// followLog brings the generator in line with the local replica, the only
// source of its window: while the slot's current tenure is the generator's
// own, granted follows the slot's highWater as applied here; once it is not
// (another node's, a later claim of this node's, or none), the generator
// stops at once. It reports whether the generator is still running.
// It carries out agentStep's decision (decide.go).
func (n *Node) followLog(g *generator.Generator) bool {
	// The agent and stopIfEnded both follow the log: one at a time, and
	// only for the generator that is still the node's.
	n.following.Lock()
	defer n.following.Unlock()
	if n.gen.Load() != g {
		return false
	}
	tenure := n.tenure.Load()
	var (
		t           Tenure
		applied, ok bool
		owner       string
		current     uint64
	)
	n.fsm.view(func(s *state) {
		t, applied, ok = ownTenure(s, n.id, tenure)
		if g.Slot() < len(s.Slots) {
			owner, current = s.Slots[g.Slot()].Owner, s.Slots[g.Slot()].Tenure
		}
	})
	d := agentStep(agentIn{
		Tenure: tenure, Running: true, Slot: g.Slot(), Granted: g.Granted(), Head: g.Head(),
		Own: t, Applied: applied, Held: ok, SlotOwner: owner, SlotTenure: current,
		Lead: unitsCeil(n.cfg.Lead, g.Layout().Unit),
	})
	if d.Revoke != nil {
		n.revoke(g, d.Revoke)
		return false
	}
	if d.Grant > g.Granted() {
		n.lastGrant.Store(time.Now().UnixNano())
		g.Grant(d.Grant)
	}
	if ok && t.Slot == g.Slot() {
		n.window.Store(&heldWindow{slot: g.Slot(), granted: g.Granted()})
	}
	return true
}

// stopIfEnded runs after the replica applies an entry or a snapshot, before
// Raft applies the next (fsm.afterApply): a generator whose tenure the
// replica just ended (a Release, a Remove, a fence, another claim) stops
// there and then, by the agent's own rule (followLog). The agent itself may
// be blocked in a claim or a reserve for seconds, and past a fence the rest
// of the window may be another cluster's: the simulator found IDs a holder
// minted in that gap repeating a younger cluster's.
func (n *Node) stopIfEnded() {
	n.noteEnded()
	if g := n.gen.Load(); g != nil {
		n.followLog(g)
	}
}

func (n *Node) revoke(g *generator.Generator, cause error) {
	g.Revoke(cause)
	n.gen.CompareAndSwap(g, nil)
	n.setReason("slot lost: " + cause.Error())
	n.logger.Warn("stopped issuing", "slot", g.Slot(), "cause", cause)
}

// needsRoom: less than half the lead left between the issuing point and the
// end of the granted window.
func (n *Node) needsRoom(g *generator.Generator) bool {
	return roomLow(g.Granted(), g.Head(), unitsCeil(n.cfg.Lead, g.Layout().Unit))
}

// reserve asks for the window up to the issuing point plus the lead. The
// answer grants nothing by itself: the room is taken from the local replica
// once it has applied the grant (followLog). A "not owner" stops nothing by
// itself either: the generator stops when the local replica shows its
// tenure's end. An unknown outcome counts as not granted.
func (n *Node) reserve(g *generator.Generator) {
	upTo := reserveUpTo(g.Head(), unitsCeil(n.cfg.Lead, g.Layout().Unit))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	sent := n.clock.Now()
	r, err := n.propose(ctx, command{Type: cmdReserve, NodeID: n.id, Slot: g.Slot(), Tenure: n.tenure.Load(), UpTo: upTo})
	follow, grant := reserveAnswered(upTo, r, err)
	if grant > g.Granted() {
		g.Grant(grant) // never: an answer grants nothing by itself (reserveAnswered)
	}
	if follow {
		n.followLog(g)
	}
	switch {
	case err == nil:
		switch {
		case r.ClusterTime != 0:
			n.skew.Store(int64(sent.Sub(time.Unix(0, r.ClusterTime))))
		case r.LeaderTime != 0:
			n.skew.Store(int64(sent.Sub(time.Unix(0, r.LeaderTime))))
		}
		if *n.reason.Load() != "" {
			n.setReason("")
		}
	case errors.Is(err, ErrNotOwner):
		// Only a hint: a deposed leader whose state lacks this tenure's
		// claim says it too. The replica decides (followLog, above).
		n.logger.Info("reserve refused as not the slot owner; this node's log decides", "slot", g.Slot(),
			"tenure", n.tenure.Load(), "err", err)
	case errors.Is(err, ErrClockSkew):
		n.setReason(err.Error())
	default:
		n.logger.Debug("reserve", "slot", g.Slot(), "up_to", upTo, "err", err)
	}
}

// heldWindow is a slot and the end of the window granted on it.
type heldWindow struct {
	slot    int
	granted int64
}
