package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idgen/idgen/cluster/core"
	"github.com/idgen/idgen/generator"
)

// agentShell is the slot agent's shell: it gathers the rule's input (the
// node, its generator and its replica), steps the rule (decide.go's
// slotAgent) and carries out what it returns. It claims a slot, runs a
// generator above the claim's floor, keeps the granted window ahead of it,
// and revokes the generator once the replica shows the slot is no longer
// this node's.
type agentShell struct {
	n *Node
	// mu serializes the steps: the agent loop's and the applies' (stopIfEnded).
	mu   sync.Mutex
	rule core.SlotAgent
	// claimed is the layout the awaited claim asked for (nil: none named).
	claimed *generator.Layout

	gen atomic.Pointer[generator.Generator]
	// tenure is the claim the generator belongs to; only the agent writes
	// both, tenure before gen.
	tenure atomic.Uint64
	// minted is the tenure and slot the latest generator mints under, and
	// withdrawn what ended tenures of this process leave behind (withdraw.go).
	minted    atomic.Pointer[core.MintedTenure]
	withdrawn core.Withdrawals
	lastGrant atomic.Int64 // when the window last grew to a grant the replica applied, Unix ns
	// window is the last window a generator of this node held, for gossip
	// and Status.
	window atomic.Pointer[heldWindow]
	// skew is this node's clock minus the cluster's time (else the
	// leader's clock) in its last accepted reserve answer, ns.
	skew atomic.Int64
}

// run is the agent loop: one look per wake (a tick, an applied entry, a
// generator waiting for room).
func (a *agentShell) run() {
	n := a.n
	tick := time.NewTicker(core.AgentTick)
	defer tick.Stop()
	for {
		// Persisted as soon as the state has it: a node that restarts before
		// it was written would gossip no cluster and not be added back.
		n.ident.trackIdentity()
		a.drive(core.AgentEvent{Kind: core.AgentLook})
		var waiting <-chan struct{}
		if g := a.gen.Load(); g != nil {
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

// drive steps the rule for ev and carries out what it asks, sending a claim
// or a reserve outside the lock and stepping the answer in turn.
func (a *agentShell) drive(ev core.AgentEvent) {
	for {
		out, g := a.step(ev)
		switch {
		case out.Claim:
			tenure, err := a.sendClaim()
			ev = core.AgentEvent{Kind: core.AgentClaimAnswered, Tenure: tenure, Err: err}
		case out.Reserve && g != nil:
			tenure, granted, err := a.sendReserve(g, out.UpTo)
			ev = core.AgentEvent{Kind: core.AgentReserveAnswered, Tenure: tenure, UpTo: out.UpTo, Granted: granted, Err: err}
		case out.Start:
			ev = core.AgentEvent{Kind: core.AgentLook} // the first reserve goes at once
		default:
			return
		}
	}
}

// step steps the rule for ev (and, after an answer, looks again) under the
// lock, and carries out what needs no leader: a start, a grant, a revoke. It
// returns the rule's output and the generator running after it.
func (a *agentShell) step(ev core.AgentEvent) (core.AgentOut, *generator.Generator) {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := a.rule.Step(ev, a.input())
	if (ev.Kind == core.AgentClaimAnswered || ev.Kind == core.AgentReserveAnswered) && out.GaveUp == nil {
		a.carryOut(out) // (an answer's worth: no grant)
		out = a.rule.Step(core.AgentEvent{Kind: core.AgentLook}, a.input())
	}
	if err := a.carryOut(out); err != nil {
		a.rule.Step(core.AgentEvent{Kind: core.AgentStartFailed}, a.input())
		return core.AgentOut{}, nil
	}
	if out.Start {
		// An entry applied since the tenure was read found no generator to
		// stop: follow the replica again now that there is one.
		a.carryOut(a.rule.Step(core.AgentEvent{Kind: core.AgentApplied}, a.input()))
	}
	return out, a.gen.Load()
}

// carryOut does what out asks that needs no leader (under the lock); the
// error is a start's.
func (a *agentShell) carryOut(out core.AgentOut) error {
	n := a.n
	g := a.gen.Load()
	switch {
	case out.GaveUp != nil:
		n.reason.set("no slot yet: " + out.GaveUp.Error())
		n.logger.Warn("claim answered but not found in the local log", "err", out.GaveUp)
	case out.Revoke != nil:
		if g != nil {
			a.revoke(g, out.Revoke, reasonName(out.Revoke))
		}
		return nil
	case out.Start:
		var err error
		if g, err = a.start(out); err != nil {
			return err
		}
	}
	if g != nil && out.Grant > g.Granted() {
		a.lastGrant.Store(time.Now().UnixNano())
		g.Grant(out.Grant)
	}
	if g != nil {
		var held bool
		n.fsm.view(func(s *core.State) { _, _, held = core.OwnTenure(s, n.id, a.rule.Tenure()) })
		if held {
			a.window.Store(&heldWindow{slot: g.Slot(), granted: g.Granted()})
		}
	}
	return nil
}

// input is the rule's input now (under the lock).
func (a *agentShell) input() core.AgentIn {
	n := a.n
	g := a.gen.Load()
	in := core.AgentIn{
		Now: time.Now(), Leaving: n.leaving.Load(), NeverClaim: n.cfg.neverClaim, Conflict: n.ident.conflict.Load() != nil,
		Running: g != nil,
	}
	if g != nil {
		in.Slot, in.Granted, in.Head = g.Slot(), g.Granted(), g.Head()
		in.Lead = core.UnitsCeil(n.cfg.Lead, g.Layout().Unit)
	}
	n.fsm.view(func(s *core.State) {
		in.Own, in.Applied, in.Held = core.OwnTenure(s, n.id, a.rule.Tenure())
		if g != nil && g.Slot() < len(s.Slots) {
			in.SlotOwner, in.SlotTenure = s.Slots[g.Slot()].Owner, s.Slots[g.Slot()].Tenure
		}
	})
	return in
}

// sendClaim asks the leader for a slot and returns the tenure the answer
// names. The answer only names the claim to wait for: the generator's floor
// and first grant are read from this node's own replica once it has applied
// that claim (a node mints only from its own log, DESIGN.md), and so is the
// layout: the one the replica's Init records. The claim carries the layout
// this node was configured with (else its replica's, once known), and the
// log refuses it if the cluster's differs.
func (a *agentShell) sendClaim() (uint64, error) {
	n := a.n
	want, known := n.log.stateLayout()
	if l := n.cfg.Layout; l != (generator.Layout{}) {
		if known && want != l {
			err := core.LayoutMismatch(want, l, "its cluster is one")
			n.reason.set(err.Error())
			return 0, err
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
	ctx, cancel := context.WithTimeout(context.Background(), core.ApplyTimeout)
	defer cancel()
	r, err := n.proposer.propose(ctx, core.Command{Type: core.CmdClaim, Node: &info, Layout: claimed})
	if err != nil {
		n.reason.set(a.claimFailure(err))
		n.logger.Debug("claim", "err", err)
		return 0, err
	}
	a.mu.Lock()
	a.claimed = claimed
	a.mu.Unlock()
	return r.Tenure, nil
}

// start starts the generator the rule asked for (under the lock), from the
// layout the replica's Init records.
func (a *agentShell) start(out core.AgentOut) (*generator.Generator, error) {
	n := a.n
	// The replica applied the claim, so it has the Init before it.
	layout, ok := n.log.stateLayout()
	if !ok || (a.claimed != nil && layout != *a.claimed) {
		err := fmt.Errorf("%w: the local log records layout %s for a claim of layout %v", ErrLayoutMismatch, layout, a.claimed)
		n.reason.set("cannot start generator: " + err.Error())
		n.logger.Error("start generator", "slot", out.Slot, "err", err)
		return nil, err
	}
	g, err := generator.New(layout, out.Slot, out.Floor, n.clock)
	if err != nil {
		n.reason.set("cannot start generator: " + err.Error())
		n.logger.Error("start generator", "slot", out.Slot, "floor", out.Floor, "err", err)
		return nil, err
	}
	g.Grant(out.Granted)
	a.window.Store(&heldWindow{slot: g.Slot(), granted: g.Granted()})
	a.tenure.Store(out.Tenure)
	a.minted.Store(&core.MintedTenure{Slot: out.Slot, Tenure: out.Tenure})
	n.reason.set("")
	a.gen.Store(g)
	n.logger.Info("claimed slot", "slot", out.Slot, "floor", out.Floor, "tenure", out.Tenure)
	return g, nil
}

// sendReserve asks for the window up to upTo and returns the tenure it
// spoke for, what the answer says was granted and the answer's error. The answer grants nothing by itself: the
// room is taken from the local replica once it has applied the grant. A
// "not owner" stops nothing by itself either: the generator stops when the
// local replica shows its tenure's end, and the rule backs off. An unknown
// outcome counts as not granted.
func (a *agentShell) sendReserve(g *generator.Generator, upTo int64) (uint64, int64, error) {
	n := a.n
	tenure := a.tenure.Load()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	sent := n.clock.Now()
	r, err := n.proposer.propose(ctx, core.Command{Type: core.CmdReserve, NodeID: n.id, Slot: g.Slot(), Tenure: tenure, UpTo: upTo})
	switch {
	case err == nil:
		switch {
		case r.ClusterTime != 0:
			a.skew.Store(int64(sent.Sub(time.Unix(0, r.ClusterTime))))
		case r.LeaderTime != 0:
			a.skew.Store(int64(sent.Sub(time.Unix(0, r.LeaderTime))))
		}
		if n.reason.get() != "" {
			n.reason.set("")
		}
	case errors.Is(err, ErrNotOwner):
		// Only a hint: a deposed leader whose state lacks this tenure's
		// claim says it too. The replica decides; the rule backs off, and
		// only the first of a run is worth a line at Info.
		level := slog.LevelDebug
		if a.notOwned() == 0 {
			level = slog.LevelInfo
		}
		n.logger.Log(context.Background(), level, "reserve refused as not the slot owner; this node's log decides", "slot", g.Slot(),
			"tenure", tenure, "err", err)
	case errors.Is(err, ErrClockSkew):
		n.reason.set(err.Error())
	default:
		n.logger.Debug("reserve", "slot", g.Slot(), "up_to", upTo, "err", err)
	}
	return tenure, r.Granted, err
}

func (a *agentShell) notOwned() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.rule.NotOwned()
}

func (a *agentShell) claimFailure(err error) string {
	n := a.n
	switch {
	case errors.Is(err, ErrClusterFull):
		return "standby: every slot is owned; waiting for one to be freed"
	case errors.Is(err, ErrLayoutMismatch), errors.Is(err, ErrClockSkew):
		return err.Error()
	case (errors.Is(err, ErrNoLeader) || errors.Is(err, core.ErrNoInitYet)) && !n.members.partOfCluster():
		if why := n.versions.joinBlocked(); why != "" {
			return "no slot: " + why
		}
		if n.cfg.BootstrapExpect == 1 && len(n.cfg.Join) == 0 {
			return "no slot yet: founding a cluster of its own (--bootstrap-expect 1, no --join)"
		}
		return "no slot: waiting to be added to a cluster by its leader (check --join), or for --bootstrap-expect nodes to meet"
	case errors.Is(err, core.ErrNoInitYet):
		return "no slot: " + err.Error()
	case errors.Is(err, ErrNoLeader):
		return "no slot: no raft leader known"
	default:
		return fmt.Sprintf("no slot yet: %v", err)
	}
}

// stopIfEnded runs after the replica applies an entry or a snapshot, before
// Raft applies the next (fsm.afterApply): a generator whose tenure the
// replica just ended (a Release, a Remove, a fence, another claim) stops
// there and then, by the agent's own rule. The agent loop itself may be
// blocked in a claim or a reserve for seconds, and past a fence the rest of
// the window may be another cluster's: the simulator found IDs a holder
// minted in that gap repeating a younger cluster's.
func (a *agentShell) stopIfEnded() {
	a.noteEnded()
	a.step(core.AgentEvent{Kind: core.AgentApplied})
}

// revoke stops g for good, for cause, and counts the revocation for
// reason (events.go).
func (a *agentShell) revoke(g *generator.Generator, cause error, reason string) {
	n := a.n
	g.Revoke(cause)
	if a.gen.CompareAndSwap(g, nil) {
		n.events.count(eventRevocation, reason)
	}
	n.reason.set("slot lost: " + cause.Error())
	n.logger.Warn("stopped issuing", "slot", g.Slot(), "cause", cause)
}

// heldWindow is a slot and the end of the window granted on it.
type heldWindow struct {
	slot    int
	granted int64
}

// noteEnded records the end of the tenure the node's generator minted under,
// once its replica shows it (fsm.afterApply, through stopIfEnded).
func (a *agentShell) noteEnded() {
	n := a.n
	m := a.minted.Load()
	if m == nil {
		return
	}
	var (
		upTo  int64
		ended bool
	)
	n.fsm.view(func(s *core.State) { upTo, ended = core.EndedUpTo(s, n.id, *m) })
	if ended {
		a.withdrawn.Add(m.Slot, upTo)
	}
}
