package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/idgen/idgen/cluster/door"
)

// One node ID speaks for one process in Raft. Raft's safety rests on each
// server voting at most once a term and never losing what it acknowledged;
// a second process with the same server ID (a copy of a data dir, twins.go)
// breaks both at once: the two vote twice in a term, and a copy that leads
// its own log would overwrite entries the real cluster committed. The
// greeting cannot tell them apart (same cluster, same certificate), but
// every Raft RPC names its sender's ID and address in its header. So a
// receiver takes an RPC only from the address its configuration lists for
// the sender's ID, and never one that names the receiver's own ID: the
// sender gets an error, and nothing of the RPC is applied.
//
// A member that really moved (restarted on another address) is taken from
// the new address once the leader has written the move, which it does only
// on the member's own answer (reconcile); until then it cannot lead. An ID
// the configuration does not list (a leader this node has not heard of yet,
// or any sender before this node has a configuration) is taken as Raft
// takes it. A configuration address that is a host name is compared by its
// resolved IPs (the header carries the sender's resolved address); when the
// name does not resolve, nothing can be told and the RPC is taken.

// boundRaftIdentity counts Raft RPCs refused because their sender spoke for
// a configured server from another address, or for this node.
const boundRaftIdentity = "raft_identity"

// errRaftIdentity: a Raft RPC named a server of this node's configuration
// but came from another address (or named this node itself).
var errRaftIdentity = errors.New("raft RPC from a process that is not the configured server it names")

// identityTransport is the NetworkTransport with the check above on every
// RPC it hands Raft, heartbeats included.
type identityTransport struct {
	*raft.NetworkTransport
	self    raft.ServerID
	config  atomic.Pointer[func() raft.Configuration]
	addrs   resolvedAddrs
	in      chan raft.RPC
	done    chan struct{}
	stop    sync.Once
	counts  *door.Counts
	refusal *door.RateLog
	// answered: when each server last answered one of this node's
	// AppendEntries (heartbeats included), by ID (time.Time).
	answered sync.Map
}

// AppendEntries implements raft.Transport, noting each answer that names
// the server it was sent to: a server that answers the leader's heartbeats
// as itself over the authenticated Raft transport is there, whatever
// gossip says or a full gRPC port hides. (Whoever listens at the address
// answers; a wiped node restarted there answers as its new ID, and is no
// proof that the old one lives: outside attack round 10.)
func (t *identityTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest,
	resp *raft.AppendEntriesResponse) error {
	err := t.NetworkTransport.AppendEntries(id, target, args, resp)
	if err == nil && len(resp.ID) > 0 && string(resp.ID) == string(id) {
		t.answered.Store(string(id), time.Now())
	}
	return err
}

// answeredAt is when server id last answered this node's AppendEntries
// (zero: never).
func (t *identityTransport) answeredAt(id string) time.Time {
	if v, ok := t.answered.Load(id); ok {
		return v.(time.Time)
	}
	return time.Time{}
}

var (
	_ raft.WithClose   = (*identityTransport)(nil)
	_ raft.WithPreVote = (*identityTransport)(nil)
)

func newIdentityTransport(inner *raft.NetworkTransport, self raft.ServerID, counts *door.Counts, logger *slog.Logger) *identityTransport {
	t := &identityTransport{
		NetworkTransport: inner, self: self, in: make(chan raft.RPC), done: make(chan struct{}),
		counts: counts, refusal: door.NewRateLog(logger, 0),
	}
	go t.relay()
	return t
}

// watch gives the transport the configuration to check against (Raft's
// latest, committed or not); until then every RPC is taken.
func (t *identityTransport) watch(r *raft.Raft) {
	f := func() raft.Configuration { return r.GetConfiguration().Configuration() }
	t.config.Store(&f)
}

// Consumer implements raft.Transport: only RPCs that pass the check.
func (t *identityTransport) Consumer() <-chan raft.RPC { return t.in }

func (t *identityTransport) relay() {
	for {
		var rpc raft.RPC
		select {
		case rpc = <-t.NetworkTransport.Consumer():
		case <-t.done:
			return
		}
		if err := t.check(rpc); err != nil {
			rpc.Respond(nil, err)
			continue
		}
		select {
		case t.in <- rpc:
		case <-t.done:
			rpc.Respond(nil, raft.ErrTransportShutdown)
			return
		}
	}
}

// SetHeartbeatHandler implements raft.Transport: heartbeats take a fast
// path past the consumer, checked the same way.
func (t *identityTransport) SetHeartbeatHandler(cb func(raft.RPC)) {
	if cb == nil {
		t.NetworkTransport.SetHeartbeatHandler(nil)
		return
	}
	t.NetworkTransport.SetHeartbeatHandler(t.guard(cb))
}

// guard runs cb only on RPCs that pass the check; the others are answered
// with the refusal.
func (t *identityTransport) guard(cb func(raft.RPC)) func(raft.RPC) {
	return func(rpc raft.RPC) {
		if err := t.check(rpc); err != nil {
			rpc.Respond(nil, err)
			return
		}
		cb(rpc)
	}
}

// Close implements raft.WithClose.
func (t *identityTransport) Close() error {
	t.stop.Do(func() { close(t.done) })
	return t.NetworkTransport.Close()
}

// check is the rule above for one RPC.
func (t *identityTransport) check(rpc raft.RPC) error {
	w, ok := rpc.Command.(raft.WithRPCHeader)
	if !ok {
		return nil
	}
	h := w.GetRPCHeader()
	id, addr := raft.ServerID(h.ID), string(h.Addr)
	if id == "" {
		return nil // a sender of Raft protocol 2 names nobody
	}
	if id == t.self {
		return t.refuse(id, addr, "this node itself")
	}
	f := t.config.Load()
	if f == nil {
		return nil
	}
	for _, s := range (*f)().Servers {
		if s.ID != id {
			continue
		}
		if t.addrs.same(string(s.Address), addr) {
			return nil
		}
		return t.refuse(id, addr, string(s.Address))
	}
	return nil
}

func (t *identityTransport) refuse(id raft.ServerID, from, configured string) error {
	t.counts.Add(boundRaftIdentity)
	t.refusal.Log(slog.LevelError, "identity", string(id),
		"refused Raft traffic that names a server of this cluster from another address: another process runs that "+
			"node's identity (a copy of its data dir?), or the node moved and the leader has not yet written its new address",
		"node_id", string(id), "from", from, "configured", configured)
	return fmt.Errorf("%w: %s speaks from %s, configured at %s", errRaftIdentity, id, from, configured)
}

// resolvedAddrs compares a configured Raft address with the resolved one a
// sender names, resolving a configured host name at most once a second
// (and keeping the answer for a minute while it matches).
type resolvedAddrs struct {
	mu    sync.Mutex
	hosts map[string]resolved
}

type resolved struct {
	ips []net.IP
	at  time.Time
	err error
}

const (
	resolvedFresh = time.Second
	resolvedKeep  = time.Minute
)

func (r *resolvedAddrs) same(configured, from string) bool {
	if configured == from {
		return true
	}
	ch, cp, err1 := net.SplitHostPort(configured)
	fh, fp, err2 := net.SplitHostPort(from)
	if err1 != nil || err2 != nil {
		return false
	}
	if cp != fp {
		return false
	}
	fip := net.ParseIP(fh)
	if ip := net.ParseIP(ch); ip != nil || fip == nil {
		return ip != nil && fip != nil && ip.Equal(fip) || strings.EqualFold(ch, fh)
	}
	match := func(res resolved) bool {
		for _, ip := range res.ips {
			if ip.Equal(fip) {
				return true
			}
		}
		return false
	}
	r.mu.Lock()
	res, ok := r.hosts[ch]
	r.mu.Unlock()
	now := time.Now()
	if ok && res.err == nil && match(res) && now.Sub(res.at) < resolvedKeep {
		return true
	}
	if !ok || now.Sub(res.at) >= resolvedFresh {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		addrs, err := net.DefaultResolver.LookupIPAddr(ctx, ch)
		cancel()
		res = resolved{at: now, err: err}
		for _, a := range addrs {
			res.ips = append(res.ips, a.IP)
		}
		r.mu.Lock()
		if r.hosts == nil {
			r.hosts = map[string]resolved{}
		}
		r.hosts[ch] = res
		r.mu.Unlock()
	}
	// A name that does not resolve tells nothing: the RPC is taken.
	return res.err != nil || match(res)
}
