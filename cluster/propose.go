package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"

	"github.com/idgen/idgen/cluster/core"
)

// propose sends a command to the leader: applied here when this node leads,
// forwarded otherwise (proposeRoute and acceptAnswer decide, decide.go). Any
// error means the outcome is unknown or refused; callers treat both as "not
// granted".
func (pr *proposer) propose(ctx context.Context, c core.Command) (core.Result, error) {
	n := pr.n
	c.SentAt = n.clock.Now().UnixNano()
	in := core.ProposeIn{Conflict: n.ident.conflictErr(), CanForward: n.cfg.Forwarder != nil}
	if in.Conflict == nil {
		in.Own = n.ident.ownCluster()
		in.Leader = n.rs.raft.State() == raft.Leader
		if !in.Leader && in.Own != "" {
			_, id := n.rs.raft.LeaderWithID()
			if in.LeaderID = string(id); in.LeaderID != "" {
				in.LeaderAddr = n.members.grpcAddrOf(in.LeaderID)
			}
		}
	}
	c.ClusterID = in.Own
	_, c.Protocol, _ = n.versions.clusterProtocol()
	switch rt, err := core.ProposeRoute(in); rt {
	case core.RouteLocal:
		return n.gate.handle(ctx, c)
	case core.RouteRefuse:
		return core.Result{}, err
	}
	data, err := core.EncodeCommand(c)
	if err != nil {
		return core.Result{}, err
	}
	fctx, stop := pr.whileLeader(ctx, in.LeaderID)
	out, err := n.cfg.Forwarder.Forward(fctx, in.LeaderAddr, data)
	stop()
	if err != nil {
		if cause := context.Cause(fctx); errors.Is(cause, errLeaderMoved) && ctx.Err() == nil {
			return core.Result{}, fmt.Errorf("%w (%w)", cause, err)
		}
		return core.Result{}, err
	}
	r, err := core.DecodeResult(out)
	if err != nil {
		return core.Result{}, err
	}
	if err := core.AcceptAnswer(in.Own, in.LeaderAddr, r, n.cfg.protocols); err != nil {
		n.peerLog.Refused("answer:"+in.LeaderAddr, "ignored the leader's answer", "leader", in.LeaderID, "err", err)
		return core.Result{}, err
	}
	return r, nil
}

// errLeaderMoved ends a forward whose leader this node's Raft no longer
// names; it is ErrNotLeader, so the caller asks again at once.
var errLeaderMoved = fmt.Errorf("%w: this node's raft no longer names the leader the command went to", ErrNotLeader)

// whileLeader is ctx, ended with errLeaderMoved as soon as this node's Raft
// names another leader than id, or none (a heartbeat timeout clears it),
// and stop releases it. A forward to a leader that died otherwise waits out
// its whole deadline: a dial to an address where nothing answers, not even
// with a refusal (a killed container's), waits for the connection to become
// ready. Every member's Reserve did (2 s) after a `docker kill` of the
// leader, so no node issued for 2 s however soon the next leader was
// elected. The outcome of an ended forward is unknown, as after a timeout;
// callers treat it as not granted and read the log.
func (pr *proposer) whileLeader(ctx context.Context, id string) (_ context.Context, stop func()) {
	n := pr.n
	ctx, cancel := context.WithCancelCause(ctx)
	seen := make(chan raft.Observation, 1)
	obs := raft.NewObserver(seen, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.LeaderObservation)
		return ok
	})
	n.rs.raft.RegisterObserver(obs)
	go func() {
		defer n.rs.raft.DeregisterObserver(obs)
		for {
			// Read after registering, so a change between the caller's
			// read of the leader and the registration is not missed.
			if _, cur := n.rs.raft.LeaderWithID(); string(cur) != id {
				cancel(errLeaderMoved)
				return
			}
			select {
			case <-seen:
			case <-ctx.Done():
				return
			}
		}
	}()
	return ctx, func() { cancel(context.Canceled) }
}

// retry calls f until it succeeds, returns a permanent error, or ctx ends.
func retry(ctx context.Context, every time.Duration, f func() error) error {
	for {
		err := f()
		// ErrQuorum is retried: right after a restart gossip may not yet show
		// every live voter, and the count catches up within seconds.
		if err == nil || errors.Is(err, ErrUnknownNode) || errors.Is(err, ErrRemoveSelf) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
		case <-time.After(every):
		}
	}
}
