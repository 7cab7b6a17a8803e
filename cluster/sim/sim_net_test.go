package sim

// The simulator's network (sim_world_test.go): forwards and answers in
// flight, gossip's view and the Status probes.

import (
	"errors"
	"fmt"
	"time"

	"github.com/idgen/idgen/cluster/core"
)

// simNet is the network between the nodes: the forwards and answers in
// flight (delayed, lost, duplicated and reordered while the faults last),
// the Status probes of the authenticated transport, and the gossip view.
type simNet struct {
	w      *simWorld
	msgs   []*simMsg
	nextID int // the last request's ID
	// ghosts: the identities wipes ended, as gossip keeps showing them (dead).
	ghosts []core.GossipMember
	// wrongCluster counts forwards refused because they name another
	// cluster than the leader's (a wiped leader's new cluster at its old
	// address); forgedRefused counts forged forwards a leader refused by
	// the layout checks.
	wrongCluster, forgedRefused int
}

// simMsg is a forward (c set) or an answer (to a forward).
type simMsg struct {
	at      time.Duration
	to      int // address
	forward bool
	c       core.Command
	req     int
	from    int // sender's address and life, for the answer
	life    int
	r       core.Result
	err     error
	// forged: a forward no agent sent (a buggy or hostile peer's), which
	// every leader must refuse.
	forged bool
}

type simReq struct {
	id       int
	c        core.Command
	deadline time.Duration
}

// propose sends c from n (apply.go's propose): proposeRoute decides whether
// it is handled here (n acts as leader) or forwarded to the leader n
// believes in. It reports whether an answer will come later (the request is
// then pending); deliver checks it with acceptAnswer.
func (net *simNet) propose(n *simNode, c core.Command) (later bool, r core.Result, err error) {
	c.SentAt = n.clock().Now().UnixNano()
	in := core.ProposeIn{Own: n.ownCluster(), Leader: n.believesLeader(), CanForward: true}
	if n.conflict {
		in.Conflict = core.ErrClusterConflict
	}
	if b := n.believed; b != nil {
		in.LeaderID, in.LeaderAddr = b.id, fmt.Sprint(b.addr)
	}
	c.ClusterID = in.Own
	switch rt, err := core.ProposeRoute(in); rt {
	case core.RouteLocal:
		r, err = net.w.lead.handle(n, c)
		return false, r, err
	case core.RouteRefuse:
		return false, core.Result{}, err
	}
	net.nextID++
	n.pending = &simReq{id: net.nextID, c: c, deadline: net.w.now + simTimeout}
	net.send(&simMsg{to: n.believed.addr, forward: true, c: c, req: net.nextID, from: n.addr, life: n.life})
	return true, core.Result{}, nil
}

func (net *simNet) send(m *simMsg) {
	quiet := net.w.quietAt != 0 // the network has healed
	if !quiet && net.w.r.Float64() < net.w.cfg.loss {
		return
	}
	copies := 1
	if !quiet && net.w.r.Float64() < net.w.cfg.dup {
		copies = 2
	}
	for i := 0; i < copies; i++ {
		mm := *m
		d := time.Duration(1+net.w.r.Intn(int(simNetDelay/time.Millisecond))) * time.Millisecond
		if !quiet && net.w.r.Intn(20) == 0 {
			d = time.Duration(net.w.r.Int63n(int64(3 * time.Second)))
		}
		mm.at = net.w.now + d
		net.msgs = append(net.msgs, &mm)
	}
}

// deliver hands a due message (one of them, chosen by the seed) to whoever
// listens at its address now; it reports whether one was due.
func (net *simNet) deliver() bool {
	var due []int
	for i, m := range net.msgs {
		if to := net.w.nodes[m.to]; m.at <= net.w.now && (!to.up || to.awake()) { // a paused node's messages wait
			due = append(due, i)
		}
	}
	if len(due) == 0 {
		return false
	}
	i := due[net.w.r.Intn(len(due))]
	m := net.msgs[i]
	net.msgs = append(net.msgs[:i], net.msgs[i+1:]...)
	n := net.w.nodes[m.to]
	if !n.up {
		return true
	}
	if m.forward {
		r, err := net.w.lead.applyForwarded(n, m.c)
		net.w.logf("%s answers %s of %s: %+v %v", n.name(), m.c.Type, m.c.SpeaksFor(), r, err)
		if errors.Is(err, core.ErrWrongCluster) {
			net.wrongCluster++
		}
		if m.forged {
			if err == nil {
				net.w.fail("%s took a forged %s of %s (datacenter %d): %+v", n.name(), m.c.Type, m.c.SpeaksFor(), m.c.Node.Datacenter, r)
			}
			if errors.Is(err, core.ErrBadCommand) {
				net.forgedRefused++ // by the layout checks, not for want of a leader
			}
			return true
		}
		net.send(&simMsg{to: m.from, from: n.addr, req: m.req, life: m.life, r: r, err: err})
		return true
	}
	if n.life != m.life || n.pending == nil || n.pending.id != m.req {
		return true // an answer for an earlier life or request
	}
	c := n.pending.c
	n.pending = nil
	r, err := m.r, m.err
	if err == nil && !net.w.cfg.faults.trustAnswers {
		err = core.AcceptAnswer(n.ownCluster(), fmt.Sprint(m.from), r, core.OwnProtocols)
	}
	net.w.agents.answered(n, c, r, err)
	return true
}

// gossipView is what gossip shows every member: each node's current
// identity (alive while up, paused ones too; dead since it crashed; left
// once its leave ended in shutdown), and every identity a wipe ended (dead
// since the wipe), with the metadata each node gossips: its addresses, its
// cluster once its replica knows it, and whether it has Raft state.
func (net *simNet) gossipView() map[string]core.GossipMember {
	out := map[string]core.GossipMember{}
	for _, g := range net.ghosts {
		out[g.ID] = g
	}
	for _, n := range net.w.nodes {
		m := core.GossipMember{ID: n.id, Parsed: true, State: core.MemberAlive, Meta: core.Meta{Name: n.name(),
			GRPCAddr: grpcAddr(n.addr), RaftAddr: raftAddr(n.addr), ClusterID: n.ownCluster(),
			Member: n.applied > 0 || (n.cl != nil && n.cl.member(n.id)), Leaving: n.leaving != 0}}
		switch {
		case n.up:
		case n.left:
			m.State, m.Since = core.MemberLeft, net.w.base.Add(n.downAt)
		default:
			m.State, m.Since = core.MemberDead, net.w.base.Add(n.downAt)
		}
		out[n.id] = m
	}
	return out
}

// probe is the leader's Status call to addr over the authenticated
// transport: whoever listens there now answers, unless it is down or paused.
func (net *simNet) probe(addr string) (core.Status, error) {
	for _, n := range net.w.nodes {
		if grpcAddr(n.addr) != addr {
			continue
		}
		if !n.awake() {
			return core.Status{}, errors.New("connection refused")
		}
		if n.stranger() && net.w.cfg.legacy {
			return core.Status{ID: n.id, RaftAddr: raftAddr(n.addr), ClusterID: n.ownCluster(), AppliedIndex: uint64(n.applied),
				LastIndex: uint64(n.applied), Leaving: n.leaving != 0}, nil
		}
		dc := n.dc
		return core.Status{ID: n.id, RaftAddr: raftAddr(n.addr), ClusterID: n.ownCluster(), AppliedIndex: uint64(n.applied),
			LastIndex: uint64(n.applied), Leaving: n.leaving != 0, Protocols: core.OwnProtocols, Clock: n.clock().Now().UnixNano(),
			Datacenter: &dc}, nil
	}
	return core.Status{}, errors.New("no such address")
}
