package cluster

import (
	"sort"
	"sync"
	"time"

	"github.com/idgen/idgen/cluster/core"
)

// twinBook keeps the gRPC addresses where processes of this node's identity,
// or of a member's, were sighted (gossip) or told of (a peer's hint), and
// the proofs of those that answered as copies.
type twinBook struct {
	mu     sync.Mutex
	seen   map[string]time.Time         // by gRPC address
	proofs map[string]core.ForeignProof // by gRPC address
	first  map[string]time.Time         // when each address was first proven a copy
	retry  map[string]time.Time         // by gRPC address
}

// sighted records a sighting, keeping the newest maxTwinSightings.
func (b *twinBook) sighted(grpcAddr string, now time.Time) {
	if grpcAddr == "" {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.seen == nil {
		b.seen = map[string]time.Time{}
	}
	b.seen[grpcAddr] = now
	for len(b.seen) > maxTwinSightings {
		oldest := ""
		for a, at := range b.seen {
			if oldest == "" || at.Before(b.seen[oldest]) {
				oldest = a
			}
		}
		delete(b.seen, oldest)
	}
}

// due returns the recent sightings to ask: not proven lately
// (foreignProof.freshFor), not waiting for a retry.
func (b *twinBook) due(now time.Time, self string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for addr, at := range b.seen {
		p, proven := b.proofs[addr]
		switch {
		case now.Sub(at) > twinSightingTTL, addr == self:
		case proven && now.Sub(p.At) < p.FreshFor():
		case now.Before(b.retry[addr]):
		default:
			out = append(out, addr)
		}
	}
	sort.Strings(out)
	return out
}

// failed: the address answered as no copy (or not at all); ask again later.
func (b *twinBook) failed(addr string, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.retry == nil {
		b.retry = map[string]time.Time{}
	}
	b.retry[addr] = now.Add(core.ForeignRetry)
}

// prove records p and reports whether it is the address's first proof.
func (b *twinBook) prove(p core.ForeignProof) (first bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.proofs == nil {
		b.proofs, b.first = map[string]core.ForeignProof{}, map[string]time.Time{}
	}
	_, known := b.proofs[p.Addr]
	b.proofs[p.Addr] = p
	if !known {
		b.first[p.Addr] = p.At
	}
	return !known
}

// copies returns the proofs of every copy that answered.
func (b *twinBook) copies() []core.ForeignProof {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]core.ForeignProof, 0, len(b.proofs))
	for _, p := range b.proofs {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Addr < out[j].Addr })
	return out
}

// contests reports whether a proven copy closes the claims of node id or
// the reserves of slot to this cluster's leader: while it still serves
// (contestedBy: its windows grow past any fence until it stops), and after
// it stopped until its windows on the slot are fenced (fenced reports
// whether the slot's highWater reaches upTo), within copyContestMax.
func (b *twinBook) contests(id string, slot int, now time.Time, fenced func(slot int, upTo int64) bool) (core.ForeignProof, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if p, ok := core.ContestedBy(b.proofs, b.first, id, slot, now, copyContestMax); ok {
		return p, true
	}
	for k, p := range b.proofs {
		if now.Sub(b.first[k]) > copyContestMax || p.Slot < 0 || !(id != "" && p.ID == id || slot >= 0 && p.Slot == slot) {
			continue
		}
		upTo := max(p.Granted, p.Windows[p.Slot])
		if !fenced(p.Slot, upTo) {
			return p, true
		}
	}
	return core.ForeignProof{}, false
}
