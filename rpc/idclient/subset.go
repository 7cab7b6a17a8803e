package idclient

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"

	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/serviceconfig"
)

// Subsetting: a client of a large fleet connects to SubsetSize of the
// target's nodes, the first ones in its rendezvous order that are not
// failing, instead of to all of them. The subset balancer sits above the
// ejecting round robin and hands it only those addresses, plus the failing
// ones ranked before them: they stay connected, so their recovery is seen,
// and once they are back the extra nodes are dropped again. Failing is
// TRANSIENT_FAILURE as the child's SubConns report it, which with health
// checking on includes a node that answers NOT_SERVING.

// subsetConfig is the balancer's part of the service config.
type subsetConfig struct {
	serviceconfig.LoadBalancingConfig `json:"-"`

	Size int    `json:"subsetSize,omitempty"` // 0: every address
	Key  string `json:"subsetKey,omitempty"`
}

// ParseConfig reads the config that serviceConfig writes.
func (ejectingBuilder) ParseConfig(js json.RawMessage) (serviceconfig.LoadBalancingConfig, error) {
	var c subsetConfig
	if err := json.Unmarshal(js, &c); err != nil {
		return nil, fmt.Errorf("idclient: balancer config %s: %w", js, err)
	}
	return &c, nil
}

// rendezvousOrder sorts addrs by highest random weight for key, best first:
// each client ranks the nodes by its own key, so a fleet's subsets spread
// evenly, and a node joining or leaving moves only the clients whose subset
// it enters or leaves.
func rendezvousOrder(key string, addrs []string) []string {
	out := slices.Clone(addrs)
	slices.SortFunc(out, func(a, b string) int {
		if c := cmp.Compare(rendezvousWeight(key, b), rendezvousWeight(key, a)); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	return out
}

// rendezvousWeight is the first 8 bytes, big-endian, of SHA-256(key, 0, addr).
// The Python client (rpc/python/idgen_client.py) computes the same, so a Go
// and a Python client with one key pick the same nodes.
func rendezvousWeight(key, addr string) uint64 {
	h := sha256.Sum256([]byte(key + "\x00" + addr))
	return binary.BigEndian.Uint64(h[:8])
}

// subsetOf walks order and keeps addresses until size of them are not
// failing: the subset, with the failing ones ranked before its last member.
func subsetOf(order []string, size int, failing func(string) bool) []string {
	if size <= 0 || size >= len(order) {
		return order
	}
	var keep []string
	for _, a := range order {
		keep = append(keep, a)
		if !failing(a) {
			size--
		}
		if size == 0 {
			break
		}
	}
	return keep
}

// subsetBalancer filters the resolver's addresses down to the subset before
// the child (the ejecting round robin) sees them, and watches each SubConn
// the child makes. grpc-go calls the balancer and the SubConns' listeners
// one at a time, so it needs no lock.
type subsetBalancer struct {
	balancer.Balancer // the child, which does all else
	cfg               subsetConfig
	state             balancer.ClientConnState // the resolver's last, whole
	kept              []string                 // the addresses the child has
	watched           map[string]*watchedConn  // the newest SubConn per address
}

// watchedConn is what the subset knows of one SubConn.
type watchedConn struct{ failing bool }

// subsetConn is the child's ClientConn: the channel's, with each new
// SubConn's state listener told to the subset balancer too.
type subsetConn struct {
	balancer.ClientConn
	b *subsetBalancer
}

func (c subsetConn) NewSubConn(addrs []resolver.Address, opts balancer.NewSubConnOptions) (balancer.SubConn, error) {
	w := &watchedConn{}
	addr := addrs[0].Addr // the base balancer makes one SubConn per address
	listener := opts.StateListener
	opts.StateListener = func(s balancer.SubConnState) {
		// The subset moves first: a node that failed is joined by the next
		// one before the child hears of it, so the child never reports
		// failure (calls failing) while another node is there to take them.
		c.b.observe(addr, w, s.ConnectivityState)
		listener(s)
	}
	sc, err := c.ClientConn.NewSubConn(addrs, opts)
	if err == nil {
		c.b.watched[addr] = w
	}
	return sc, err
}

// observe records a SubConn's new state and moves the subset when a node
// turned failing or recovered. Like the base balancer, it keeps a SubConn
// that failed failing while it reconnects, until it is READY again.
func (b *subsetBalancer) observe(addr string, w *watchedConn, s connectivity.State) {
	if b.watched[addr] != w {
		return // an older SubConn of the address, shut down
	}
	switch s {
	case connectivity.Shutdown:
		delete(b.watched, addr)
		return
	case connectivity.TransientFailure:
		if w.failing {
			return
		}
		w.failing = true
	case connectivity.Ready:
		if !w.failing {
			return
		}
		w.failing = false
	default:
		return
	}
	b.updateChild(false)
}

func (b *subsetBalancer) UpdateClientConnState(s balancer.ClientConnState) error {
	if c, ok := s.BalancerConfig.(*subsetConfig); ok {
		b.cfg = *c
	}
	b.state = s
	return b.updateChild(true)
}

// updateChild gives the child the subset of the resolver's last state; only
// a new resolver state (fresh) is passed on when the subset stays the same.
func (b *subsetBalancer) updateChild(fresh bool) error {
	var addrs []string
	for _, a := range b.state.ResolverState.Addresses {
		addrs = append(addrs, a.Addr)
	}
	keep := subsetOf(rendezvousOrder(b.cfg.Key, addrs), b.cfg.Size, func(a string) bool {
		w := b.watched[a]
		return w != nil && w.failing
	})
	if !fresh && slices.Equal(keep, b.kept) {
		return nil
	}
	b.kept = keep
	s := b.state
	rs := &s.ResolverState
	rs.Addresses = slices.DeleteFunc(slices.Clone(rs.Addresses), func(a resolver.Address) bool {
		return !slices.Contains(keep, a.Addr)
	})
	rs.Endpoints = slices.DeleteFunc(slices.Clone(rs.Endpoints), func(e resolver.Endpoint) bool {
		return len(e.Addresses) == 0 || !slices.Contains(keep, e.Addresses[0].Addr)
	})
	return b.Balancer.UpdateClientConnState(s)
}
