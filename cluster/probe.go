package cluster

import (
	"context"
	"errors"
	"sync"

	"github.com/idgen/idgen/cluster/core"
)

// Membership authority. Gossip tells the leader that a node may exist; any
// process with the gossip key can say anything there, in its own name or (by
// claiming another node's gossip address) in another's. So the leader adds a
// member to Raft, promotes it, moves its Raft address or removes it only on
// what the member itself answers over the authenticated transport (Prober:
// with TLS, a gRPC call that needs a server certificate from the cluster CA
// on both ends). DESIGN.md, "Membership as in Consul", says why this check.

// errNoProber: a node built without a Prober adds and promotes nobody.
var errNoProber = errors.New("no prober configured")

// probeAll asks every key's address who it is, probeParallel at a time,
// each within probeTimeout (sooner if the node shuts down).
func (ms *membership) probeAll(keys map[core.ProbeKey]bool) map[core.ProbeKey]core.ProbeAnswer {
	out := make(map[core.ProbeKey]core.ProbeAnswer, len(keys))
	if len(keys) == 0 {
		return out
	}
	var (
		mu  sync.Mutex
		wg  sync.WaitGroup
		sem = make(chan struct{}, core.ProbeParallel)
	)
	for k := range keys {
		wg.Add(1)
		sem <- struct{}{}
		go func(k core.ProbeKey) {
			defer wg.Done()
			defer func() { <-sem }()
			st, err := ms.probe(k.Addr)
			mu.Lock()
			out[k] = core.ProbeAnswer{Status: st, Err: err}
			mu.Unlock()
		}(k)
	}
	wg.Wait()
	return out
}

func (ms *membership) probe(addr string) (Status, error) {
	n := ms.n
	if n.cfg.Prober == nil {
		return Status{}, errNoProber
	}
	ctx, cancel := context.WithTimeout(context.Background(), core.ProbeTimeout)
	defer cancel()
	go func() {
		select {
		case <-n.shutdownCh:
			cancel()
		case <-ctx.Done():
		}
	}()
	return n.cfg.Prober.Probe(ctx, addr)
}

// refuse logs why the leader did not act on a member, once per reason
// (the sentinel) and member while this node leads.
func (rc *reconciler) refuse(id, name, action string, err error) {
	n := rc.n
	kind := err
	for _, s := range []error{core.ErrProbeUnanswered, core.ErrProbeOtherNode, core.ErrProbeLeaving, core.ErrProbeRaftAddr, core.ErrProbeCluster, core.ErrProbeBehind, errNoProber, ErrProtocol, core.ErrProbeNoClaim} {
		if errors.Is(err, s) {
			kind = s
			break
		}
	}
	key := action + ": " + kind.Error()
	if rc.leaderState.Refused[id] == key {
		return
	}
	rc.leaderState.Refused[id] = key
	if errors.Is(err, core.ErrProbeBehind) || errors.Is(err, core.ErrProbeLeaving) {
		n.logger.Info(action, "id", id, "name", name, "reason", err)
		return
	}
	if errors.Is(err, ErrProtocol) || errors.Is(err, core.ErrProbeNoClaim) {
		n.logger.Warn(action+": it cannot take part in this cluster", "id", id, "name", name, "reason", err)
		return
	}
	n.logger.Warn(action+": gossip alone does not make a member", "id", id, "name", name, "reason", err)
}
