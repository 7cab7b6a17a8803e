package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"github.com/idgen/idgen/cluster/core"
)

// monitorLeadership starts and stops the leader loop as leadership changes.
// It watches NotifyCh, which unlike LeaderCh does not drop changes.
func (ld *leader) monitorLeadership() {
	n := ld.n
	var stop, done chan struct{}
	stopLeader := func() {
		if stop != nil {
			close(stop)
			<-done
			stop, done = nil, nil
		}
	}
	for {
		select {
		case isLeader := <-n.rs.notifyCh:
			if isLeader && stop == nil {
				stop, done = make(chan struct{}), make(chan struct{})
				go func(stop, done chan struct{}) {
					defer close(done)
					ld.leaderLoop(stop)
				}(stop, done)
			} else if !isLeader {
				stopLeader()
			}
		case <-n.shutdownCh:
			stopLeader()
			return
		}
	}
}

// leaderLoop runs while this node leads: Barrier first (so the state holds
// everything committed by earlier leaders), then a full reconcile, then
// reconciles on gossip events and on a periodic sweep.
func (ld *leader) leaderLoop(stop chan struct{}) {
	n := ld.n
	n.logger.Info("gained leadership")
	defer n.logger.Info("lost leadership")
	defer ld.n.gate.leaderReady.Store(false)
	n.recon.leaderState = core.NewLeaderState()
	for {
		if err := n.rs.raft.Barrier(core.ApplyTimeout).Error(); err == nil {
			break
		} else {
			n.logger.Warn("leader barrier", "err", err)
		}
		select {
		case <-stop:
			return
		case <-time.After(time.Second):
		}
	}
	ld.n.gate.leaderReady.Store(true)
	ld.n.clusterClock.ledSince.Store(time.Now().UnixNano())
	defer ld.n.clusterClock.ledSince.Store(0)
	pollStop := make(chan struct{})
	defer close(pollStop)
	go ld.n.clusterClock.pollClocks(pollStop)
	// Until the Init entry is applied every Claim is refused, so a failed
	// establish (a slow disk, a commit timeout) is retried with backoff for as
	// long as this node leads; it is never left to a leadership change.
	var (
		retryInit <-chan time.Time
		wait      time.Duration
	)
	establish := func() (handedOff bool) {
		err := ld.establish()
		if errors.Is(err, core.ErrFounderClock) && ld.handOffToClusterTime() {
			return true
		}
		var again bool
		if again, wait = core.EstablishNext(err, wait); again {
			log := n.logger.Error
			if errors.Is(err, core.ErrAwaitingClocks) {
				log = n.logger.Info
			}
			log("establish leadership; retrying", "err", err, "in", wait)
			retryInit = time.After(wait)
		}
		return false
	}
	if establish() {
		return
	}
	tick := time.NewTicker(n.cfg.ReconcileInterval)
	defer tick.Stop()
	for {
		n.recon.reconcile()
		n.recon.fenceForeign()
		if ld.leaderClockIsOutlier() || ld.leaderProtocolIsOdd() {
			return
		}
		// A member whose probe failed is asked again when its backoff ends,
		// not only on the next sweep.
		var wake <-chan time.Time
		if w := n.recon.leaderState.Wake; !w.IsZero() {
			wake = time.After(max(time.Until(w), 0))
		}
		select {
		case <-stop:
			return
		case <-tick.C:
		case <-n.gossip.events:
		case <-wake:
		case <-ld.n.gate.handoff:
			if ld.leaderClockIsOffClusterTime() {
				return
			}
		case <-retryInit:
			retryInit = nil
			if establish() {
				return
			}
		}
	}
}

// establish writes the Init entry of a new cluster (initCommand, decide.go)
// unless the state holds one: a fresh random identity, and every slot's
// highWater at the cluster's time plus max-ahead. Every input to a grant
// comes from the log or from a quorum: the cluster's time is the founding
// voters' (clusterNow), never the founding leader's clock alone, so one
// clock an hour (or a year) ahead cannot put every slot that far ahead; a
// leader whose own clock is off it, or outside the layout's range (an RTC
// reset to 2000), hands leadership to a voter that can found it.
func (ld *leader) establish() error {
	n := ld.n
	var inited bool
	n.fsm.view(func(s *core.State) { inited = s.Layout != nil })
	if inited {
		return nil
	}
	now := n.clock.Now()
	ct, known := ld.n.clusterClock.clusterNow(now)
	if err := core.FounderCheck(n.cfg.bootstrapLayout(), now, ct, known, n.cfg.MaxSkew); err != nil {
		if errors.Is(err, core.ErrAwaitingClocks) {
			err = fmt.Errorf("%w (not heard from: %s; a release before protocol 2 reports no clock before Init: "+
				"found a cluster with nodes of one release)", err, strings.Join(ld.n.clusterClock.unreportedVoters(), ", "))
		}
		return err
	}
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return err
	}
	_, _, err := ld.n.gate.raftApply(context.Background(), core.InitCommand(n.cfg.bootstrapLayout(), hex.EncodeToString(b[:]), ct, n.cfg.MaxAhead))
	return err
}

// handOffToClusterTime hands leadership to the voter whose clock is closest
// to the cluster's time, if one is within max-skew of it, else to whoever
// Raft picks; it reports whether leadership moved.
func (ld *leader) handOffToClusterTime() bool {
	n := ld.n
	ct, _ := ld.n.clusterClock.clusterNow(n.clock.Now())
	f := n.rs.raft.LeadershipTransfer
	if id, addr, ok := ld.inStepVoter(ct); ok {
		f = func() raft.Future { return n.rs.raft.LeadershipTransferToServer(id, addr) }
	}
	if n.members.otherVoters() == 0 {
		return false
	}
	n.logger.Warn("this leader's clock cannot found the cluster; handing off leadership")
	if err := f().Error(); err != nil {
		n.logger.Warn("leadership transfer", "err", err)
		return false
	}
	n.events.count(eventHandoff, handoffFounderClock)
	return true
}

// reconcile brings Raft membership and slot ownership in line with what the
// members themselves answer: gossip shows who may exist, and the leader asks
// them over the authenticated transport (probe.go) before it acts. Alive
// members that answer as themselves join as non-voters; non-voters that
// follow this log are promoted while voters < 5, and ones that never prove
// themselves go after ReapAfter. A server gossip shows as left goes at once
// if it says so itself; one gossip shows dead, missing or left goes once it
// has been away for ReapAfter and failed every probe over the second half
// of it; one that still answers as a member stays. It never removes the leader itself
// nor breaks quorum. The decisions are sweepProbes and sweepActions
// (reconcile.go); this gathers their inputs, probes, and carries them out.
func (rc *reconciler) reconcile() {
	n := rc.n
	defer rc.sweeps.Add(1)
	// A leader whose cluster is outranked by another it meets in gossip
	// changes no membership: it would race the other cluster's leader for
	// the same fresh nodes, and a fresh node's log would mix both clusters.
	// Checked here, not only on the housekeeping tick, because a gossip
	// event that shows a new member may show the other cluster as well.
	n.ident.checkConflict()
	if n.ident.conflictErr() != nil {
		return
	}
	cf := n.rs.raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		n.logger.Warn("reconcile: raft configuration", "err", err)
		return
	}
	v := &core.MemberView{
		Self: n.id, SelfRaftAddr: n.cfg.RaftAdvertise, SelfSpeaksAs: string(n.rs.transport.LocalAddr()), Own: n.ident.ownCluster(),
		LogHolds: n.log.logHolds,
		Servers:  sweepServers(cf.Configuration()), Members: n.gossip.snapshot(), Addable: map[string]bool{},
		StateAddr: map[string]string{}, LeaderApplied: n.rs.raft.AppliedIndex(),
		Now: time.Now(), ReapAfter: n.cfg.ReapAfter, RaftAnswered: n.rs.transport.answeredAt,
	}
	v.Protocols, _, _ = n.versions.clusterProtocol()
	if l, ok := n.log.clusterLayout(); ok {
		v.Layout = &l
	}
	for id, m := range v.Members {
		v.Addable[id] = core.Addable(m, v.Own)
	}
	inRaft := core.ServersByID(v.Servers)
	n.fsm.view(func(s *core.State) {
		v.Holders = s.Holders()
		for _, id := range s.SortedNodeIDs() {
			v.StateAddr[id] = s.Nodes[id].GRPCAddr
			if _, ok := inRaft[id]; !ok && id != n.id {
				v.StateOnly = append(v.StateOnly, id)
			}
		}
	})
	ls := &rc.leaderState
	probes, gone := ls.SweepProbes(v)
	// A sweep waits at most one probeTimeout per probeParallel members it
	// asks, and members that failed are asked again only after a backoff.
	answers := n.members.probeAll(probes)
	for _, a := range ls.SweepActions(v, gone, answers) {
		rc.memberAct(a, v.Now)
	}
}

// memberAct carries out one of sweepActions' decisions.
func (rc *reconciler) memberAct(a core.MemberAction, now time.Time) {
	n := rc.n
	ls := &rc.leaderState
	readd := func(voter bool) error {
		add := n.rs.raft.AddNonvoter
		if voter {
			add = n.rs.raft.AddVoter
		}
		return add(raft.ServerID(a.ID), raft.ServerAddress(a.Addr), 0, core.ApplyTimeout).Error()
	}
	switch a.Kind {
	case core.ActOwnAddr:
		if err := readd(a.Voter); err != nil {
			n.logger.Warn("reconcile: update own raft address", "err", err)
		} else {
			n.logger.Info("updated own raft address", "from", a.Why, "to", a.Addr)
		}
	case core.ActReap:
		rc.reap(a.ID, a.Why)
	case core.ActRefuse:
		n.recon.refuse(a.ID, a.Name, a.Why, a.Err)
	case core.ActNote:
		n.logger.Debug(a.Why, "id", a.ID)
	case core.ActWait:
		n.logger.Info(a.Why, "id", a.ID, "raft", a.Addr)
	case core.ActAddNonvoter:
		if err := n.rs.raft.AddNonvoter(raft.ServerID(a.ID), raft.ServerAddress(a.Addr), 0, core.ApplyTimeout).Error(); err != nil {
			n.logger.Warn("reconcile: add non-voter", "id", a.ID, "err", err)
			return
		}
		n.logger.Info("added non-voter", "id", a.ID, "name", a.Name, "raft", a.Addr)
		ls.Added(a.ID, now)
	case core.ActMoveAddr:
		if err := readd(a.Voter); err != nil {
			n.logger.Warn("reconcile: update raft address", "id", a.ID, "err", err)
			return
		}
		n.logger.Info("updated raft address", "id", a.ID, "from", a.Why, "to", a.Addr)
		ls.Moved(a.ID)
	case core.ActPromote:
		if err := n.rs.raft.AddVoter(raft.ServerID(a.ID), raft.ServerAddress(a.Addr), 0, core.ApplyTimeout).Error(); err != nil {
			n.logger.Warn("reconcile: promote", "id", a.ID, "err", err)
			return
		}
		ls.Promoted(a.ID)
		n.logger.Info("promoted to voter", "id", a.ID)
	}
}

// reap removes a node from the state and from Raft, logging the reason.
func (rc *reconciler) reap(id, why string) {
	n := rc.n
	ctx, cancel := context.WithTimeout(context.Background(), core.ApplyTimeout)
	defer cancel()
	slot, err := n.gate.leaderRemove(ctx, id)
	if err != nil {
		n.logger.Warn("reap", "id", id, "reason", why, "err", err)
		return
	}
	rc.leaderState.Reaped(id)
	n.logger.Info("reaped node", "id", id, "reason", why, "freed_slot", slot)
}

// leaderClockIsOffClusterTime hands leadership away when this leader's clock
// is more than max-skew off the cluster's time: it grants nothing meanwhile
// (leaderApply), and a voter with a good clock can. It returns true when
// leadership was handed off.
func (ld *leader) leaderClockIsOffClusterTime() bool {
	n := ld.n
	now := n.clock.Now()
	ct, known := ld.n.clusterClock.clusterNow(now)
	off := now.Sub(ct)
	if !known || (off <= n.cfg.MaxSkew && off >= -n.cfg.MaxSkew) {
		return false
	}
	n.logger.Warn("this leader's clock is off the cluster's time; handing off leadership",
		"offset", off.Round(time.Millisecond), "max_skew", n.cfg.MaxSkew)
	// To a voter whose clock agrees with the cluster's time if one is known:
	// left to Raft, the most caught-up follower may be another wrong clock.
	f := n.rs.raft.LeadershipTransfer
	if id, addr, ok := ld.inStepVoter(ct); ok {
		f = func() raft.Future { return n.rs.raft.LeadershipTransferToServer(id, addr) }
	}
	if err := f().Error(); err != nil {
		n.logger.Warn("leadership transfer", "err", err)
		return false
	}
	n.events.count(eventHandoff, handoffClockOff)
	return true
}

// inStepVoter picks the voter (other than this node) whose reported clock is
// closest to ct, if it is within max-skew of it.
func (ld *leader) inStepVoter(ct time.Time) (raft.ServerID, raft.ServerAddress, bool) {
	n := ld.n
	cf := n.rs.raft.GetConfiguration()
	if cf.Error() != nil {
		return "", "", false
	}
	var (
		best     raft.Server
		bestSkew time.Duration = -1
	)
	for _, s := range cf.Configuration().Servers {
		if s.Suffrage != raft.Voter || string(s.ID) == n.id {
			continue
		}
		est := ld.n.clusterClock.clocks.ByID([]string{string(s.ID)}, time.Now(), n.cfg.clockTTL)
		if len(est) == 0 {
			continue
		}
		skew := est[0].Sub(ct)
		if skew < 0 {
			skew = -skew
		}
		if skew <= n.cfg.MaxSkew && (bestSkew < 0 || skew < bestSkew) {
			best, bestSkew = s, skew
		}
	}
	return best.ID, best.Address, bestSkew >= 0
}

// leaderProtocolIsOdd hands leadership away when this leader shares no
// protocol version with the other servers (protocolOdd): they refuse every
// answer it gives, so while it leads nobody gets room. It returns true when
// leadership was handed off.
func (ld *leader) leaderProtocolIsOdd() bool {
	n := ld.n
	why := n.versions.protocolOdd()
	if why == "" {
		return false
	}
	n.logger.Warn("handing off leadership: " + why)
	if err := n.rs.raft.LeadershipTransfer().Error(); err != nil {
		n.logger.Warn("leadership transfer", "err", err)
		return false
	}
	n.events.count(eventHandoff, handoffProtocolOdd)
	return true
}

// leaderClockIsOutlier hands leadership away when most nodes that spoke to
// this leader recently are refused for clock skew: then the leader's clock,
// not theirs, is the one that is off, and while it leads nobody else can get
// room. It returns true when leadership was handed off.
func (ld *leader) leaderClockIsOutlier() bool {
	n := ld.n
	off, within := ld.n.clusterClock.clocks.Recent(n.id, 5*time.Second, n.cfg.MaxSkew, time.Now())
	if off < 2 || off <= within {
		return false
	}
	n.logger.Warn("most nodes are refused for clock skew; this leader's clock looks wrong, handing off leadership",
		"skewed_nodes", off, "in_step_nodes", within)
	if err := n.rs.raft.LeadershipTransfer().Error(); err != nil {
		n.logger.Warn("leadership transfer", "err", err)
		return false
	}
	ld.n.clusterClock.clocks.Reset()
	n.events.count(eventHandoff, handoffClockOutlier)
	return true
}

// fenceForeign closes off, in this cluster's log, every window that members
// of another cluster proved to have held (their own answer over the
// authenticated transport, foreign.go; never gossip alone, which a gossip key
// could fill with windows that burn slots for good). A meeting fences
// everything the other side could have issued, held slots included
// (cluster/DESIGN.md, "Where clusters meet"): for each slot k with a proven
// foreign window up to W,
//   - a current tenure of k whose floor lies below W ends (a Release in its
//     holder's name), whatever its granted window already covers: the
//     holder's cursor may be anywhere below W, and it would stamp the other
//     cluster's seconds again as real time reaches them;
//   - k's highWater rises to W if it is below (a Fence), so that k's next
//     tenure starts above everything the other cluster granted there.
//
// Both are entries of protocol 1, which every node applies the same way.
// Windows are compared in one layout or not at all: a proof of another
// layout fences nothing and says so. Members that have died since still
// count: their last proven window is all that is known of them.
func (rc *reconciler) fenceForeign() {
	n := rc.n
	own := n.ident.ownCluster()
	if own == "" || n.ident.conflictErr() != nil {
		return
	}
	layout, ok := n.log.clusterLayout()
	if !ok {
		return
	}
	// Copies of this node's data dir that stopped are fenced like another
	// cluster (twins.go): their log granted windows this one never saw.
	proofs := append(rc.n.members.proveForeign(own), n.ident.copies.copies()...)
	for _, f := range core.ForeignFences(proofs, layout) {
		kind := fenceOtherCluster
		if f.Foreign == own {
			kind = fenceCopy // a copy's proof names this cluster (twins.go)
		}
		if f.OtherLayout {
			n.peerLog.Refused("fence:"+f.Foreign, "not fencing a window of another cluster of another layout: its IDs "+
				"are not comparable with this cluster's", "other_cluster", f.Foreign, "other_layout", f.Layout.String(), "own_layout", layout.String())
			continue
		}
		var cmds []core.Command
		n.fsm.view(func(s *core.State) { cmds = core.FenceCommands(s, f, own) })
		for _, c := range cmds {
			ctx, cancel := context.WithTimeout(context.Background(), core.ApplyTimeout)
			_, _, err := n.gate.raftApply(ctx, c)
			cancel()
			if err == nil {
				n.events.count(eventFence, kind)
			}
			switch {
			case c.Type == core.CmdRelease && err == nil:
				n.logger.Warn("ended a tenure that another cluster's window overlaps: the holder claims again above it",
					"slot", f.Slot, "holder", c.NodeID, "tenure", c.Tenure, "other_window_up_to", f.UpTo, "other_cluster", f.Foreign)
			case c.Type == core.CmdRelease && !errors.Is(err, ErrNotOwner):
				n.logger.Warn("end a tenure that another cluster's window overlaps", "slot", f.Slot, "holder", c.NodeID, "tenure", c.Tenure, "err", err)
			case c.Type == core.CmdRelease:
				// Not owner: the tenure ended meanwhile; its successor's
				// floor is the slot's highWater, above the window.
			case err != nil:
				n.logger.Warn("fence a window of another cluster", "slot", f.Slot, "up_to", f.UpTo, "other_cluster", f.Foreign, "err", err)
			case c.Type == core.CmdFence:
				n.logger.Warn("fenced a window another cluster held: the slot's next tenure starts above it",
					"slot", f.Slot, "up_to", f.UpTo, "other_cluster", f.Foreign)
			}
		}
	}
}

// sweepServers is Raft's configuration as a sweep reads it.
func sweepServers(cf raft.Configuration) []core.Server {
	out := make([]core.Server, 0, len(cf.Servers))
	for _, s := range cf.Servers {
		out = append(out, core.Server{ID: string(s.ID), Address: string(s.Address), Voter: s.Suffrage == raft.Voter})
	}
	return out
}
