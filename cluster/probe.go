package cluster

import (
	"context"
	"errors"
	"sync"
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
func (ms *membership) probeAll(keys map[ProbeKey]bool) map[ProbeKey]ProbeAnswer {
	out := make(map[ProbeKey]ProbeAnswer, len(keys))
	if len(keys) == 0 {
		return out
	}
	var (
		mu  sync.Mutex
		wg  sync.WaitGroup
		sem = make(chan struct{}, ProbeParallel)
	)
	for k := range keys {
		wg.Add(1)
		sem <- struct{}{}
		go func(k ProbeKey) {
			defer wg.Done()
			defer func() { <-sem }()
			st, err := ms.probe(k.Addr)
			mu.Lock()
			out[k] = ProbeAnswer{st, err}
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
	ctx, cancel := context.WithTimeout(context.Background(), ProbeTimeout)
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
	for _, s := range []error{ErrProbeUnanswered, ErrProbeOtherNode, ErrProbeLeaving, ErrProbeRaftAddr, ErrProbeCluster, ErrProbeBehind, errNoProber, ErrProtocol, ErrProbeNoClaim} {
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
	if errors.Is(err, ErrProbeBehind) || errors.Is(err, ErrProbeLeaving) {
		n.logger.Info(action, "id", id, "name", name, "reason", err)
		return
	}
	if errors.Is(err, ErrProtocol) || errors.Is(err, ErrProbeNoClaim) {
		n.logger.Warn(action+": it cannot take part in this cluster", "id", id, "name", name, "reason", err)
		return
	}
	n.logger.Warn(action+": gossip alone does not make a member", "id", id, "name", name, "reason", err)
}
