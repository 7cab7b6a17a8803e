package rpc

import (
	"context"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/idgen/idgen/cluster/door"
)

// idRate bounds the IDs one caller identity may draw from this node per
// second (Bounds.IDsPerIdentity, --grpc-max-ids-per-identity; 0: no bound):
// a token bucket per identity (golang.org/x/time/rate) that holds a second
// of the rate, and at least one call of the largest count. A call past it
// is refused at once with ResourceExhausted, before anything is minted, so
// the Pool backs off and its next fetch goes to the next node. The call
// caps bound what waits; this bounds what one certificate takes of the
// cluster's rate, which the layout caps per slot.
type idRate struct {
	perSecond rate.Limit
	burst     int
	ref       *refusals

	mu        sync.Mutex
	limiters  map[string]*idLimiter
	lastSweep time.Time
}

type idLimiter struct {
	lim  *rate.Limiter
	used time.Time
}

// idRateSweepAt: past this many identities, the idle ones are forgotten
// (at most every idRateSweepEvery); an identity idle for longer than its
// bucket takes to refill loses nothing by it.
const (
	idRateSweepAt    = 1024
	idRateSweepEvery = 10 * time.Second
)

func newIDRate(perSecond, maxCount int, ref *refusals) *idRate {
	if perSecond <= 0 {
		return nil
	}
	return &idRate{perSecond: rate.Limit(perSecond), burst: max(perSecond, maxCount), ref: ref, limiters: map[string]*idLimiter{}}
}

// admit takes n IDs from the caller's bucket, or refuses the call.
func (r *idRate) admit(ctx context.Context, n int) error {
	if r == nil {
		return nil
	}
	conn, identity := callerOf(ctx)
	now := time.Now()
	r.mu.Lock()
	l, ok := r.limiters[identity]
	if !ok {
		r.sweep(now)
		l = &idLimiter{lim: rate.NewLimiter(r.perSecond, r.burst)}
		r.limiters[identity] = l
	}
	l.used = now
	allowed := l.lim.AllowN(now, n)
	r.mu.Unlock()
	if allowed {
		return nil
	}
	r.ref.refuse(boundIDsPerIdentity, door.PeerString(conn), "refused a call: its identity draws past its bound of IDs a second",
		"identity", identity, "ids_per_second", int(r.perSecond), "count", n)
	return status.Errorf(codes.ResourceExhausted,
		"%s draws more than %d IDs a second from this node, the most one identity may; draw from the other nodes too, "+
			"or ask the operator to raise --grpc-max-ids-per-identity", identity, int(r.perSecond))
}

// sweep forgets identities whose bucket has refilled (r.mu held).
func (r *idRate) sweep(now time.Time) {
	if len(r.limiters) < idRateSweepAt || now.Sub(r.lastSweep) < idRateSweepEvery {
		return
	}
	r.lastSweep = now
	full := time.Duration(float64(r.burst)/float64(r.perSecond)*float64(time.Second)) + time.Second
	for id, l := range r.limiters {
		if now.Sub(l.used) > full {
			delete(r.limiters, id)
		}
	}
}
