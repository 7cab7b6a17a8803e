package idclient

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/resolver"

	idgenv1 "github.com/idgen/idgen/proto/idgen/v1"
)

// followScheme names the resolver that follows the cluster:
// "idgen:///seed1:50051,seed2:50051" starts from the seeds and then balances
// over every node ClusterService.Members lists, refreshed periodically and
// whenever a connection fails. Like listScheme it is passed to each
// ClientConn with grpc.WithResolvers, never registered globally.
const followScheme = "idgen"

// FollowPrefix starts a target that follows the cluster's members.
const FollowPrefix = followScheme + ":///"

const (
	// DefaultRefreshInterval is how often a followed target asks the
	// cluster for its members.
	DefaultRefreshInterval = 10 * time.Second
	// minRefreshGap rate-limits refreshes that connection failures ask for.
	minRefreshGap = time.Second
	// membersTimeout bounds one Members call; the next candidate is asked
	// after membersHedge without an answer.
	membersTimeout = 2 * time.Second
	membersHedge   = 300 * time.Millisecond
)

// followBuilder builds a followResolver per ClientConn.
type followBuilder struct {
	interval time.Duration
	// With a subset, the resolver asks through the client's own
	// connection (self, set once Dial has made it) first, and then the
	// members in subsetKey's rendezvous order, so that it opens no
	// connection outside the subset while the subset answers.
	subsetKey string
	self      *atomic.Pointer[grpc.ClientConn]
}

func (followBuilder) Scheme() string { return followScheme }

func (b followBuilder) Build(target resolver.Target, cc resolver.ClientConn, opts resolver.BuildOptions) (resolver.Resolver, error) {
	seeds, err := parseList(target.Endpoint())
	if err != nil {
		return nil, err
	}
	creds := grpc.WithTransportCredentials(insecure.NewCredentials())
	if opts.DialCreds != nil {
		creds = grpc.WithTransportCredentials(opts.DialCreds)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &followResolver{
		cc: cc, seeds: seeds, creds: creds, interval: b.interval, subsetKey: b.subsetKey, self: b.self,
		conns: map[string]*grpc.ClientConn{}, now: make(chan struct{}, 1),
		cancel: cancel, done: make(chan struct{}),
	}
	// Serve from the seeds at once; the first refresh replaces them.
	if err := r.update(seeds); err != nil {
		cancel()
		return nil, fmt.Errorf("idclient: resolve %q: %w", target.Endpoint(), err)
	}
	go r.run(ctx)
	return r, nil
}

// followResolver keeps the ClientConn's addresses equal to the cluster's
// members. When no member or seed answers it keeps the last list.
type followResolver struct {
	cc        resolver.ClientConn
	seeds     []string
	creds     grpc.DialOption
	interval  time.Duration
	subsetKey string                           // with self: the client's
	self      *atomic.Pointer[grpc.ClientConn] // nil without a subset
	now       chan struct{}                    // a refresh was asked for
	cancel    context.CancelFunc
	done      chan struct{}

	mu    sync.Mutex
	known []string                    // the last list given to cc
	conns map[string]*grpc.ClientConn // for Members calls, by address
}

// ResolveNow is called by gRPC when a connection fails.
func (r *followResolver) ResolveNow(resolver.ResolveNowOptions) {
	select {
	case r.now <- struct{}{}:
	default:
	}
}

func (r *followResolver) Close() {
	r.cancel()
	<-r.done
	r.mu.Lock()
	defer r.mu.Unlock()
	for a, c := range r.conns {
		c.Close()
		delete(r.conns, a)
	}
}

func (r *followResolver) run(ctx context.Context) {
	defer close(r.done)
	tick := time.NewTicker(r.interval)
	defer tick.Stop()
	last := time.Time{}
	for {
		if wait := minRefreshGap - time.Since(last); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return
			}
		}
		last = time.Now()
		r.refresh(ctx)
		select {
		case <-tick.C:
		case <-r.now:
		case <-ctx.Done():
			return
		}
	}
}

// refresh asks for the member list (through the subset first, if the
// client has one) and passes it on; on failure the last list stays.
func (r *followResolver) refresh(ctx context.Context) {
	addrs, err := r.membersThroughSubset(ctx)
	if err != nil {
		addrs, err = r.membersFromAny(ctx)
	}
	if err != nil {
		if ctx.Err() == nil || ctx.Err() == context.DeadlineExceeded {
			slog.Debug("idclient: no member list from any node or seed; keeping the last", "err", err)
		}
		return
	}
	if err := r.update(addrs); err != nil {
		slog.Debug("idclient: member list refused", "err", err)
	}
}

// membersThroughSubset asks through the client's own connection, which
// reaches its subset's nodes.
func (r *followResolver) membersThroughSubset(ctx context.Context) ([]string, error) {
	var conn *grpc.ClientConn
	if r.self != nil {
		conn = r.self.Load()
	}
	if conn == nil {
		return nil, errors.New("idclient: no subset connection")
	}
	ctx, cancel := context.WithTimeout(ctx, membersTimeout)
	defer cancel()
	return members(ctx, conn, "the subset")
}

// membersFromAny asks the known members and the seeds, over connections of
// its own: in the subset's order with a subset, in random order without.
func (r *followResolver) membersFromAny(ctx context.Context) ([]string, error) {
	r.mu.Lock()
	cands := slices.Clone(r.known)
	r.mu.Unlock()
	if r.self != nil {
		cands = rendezvousOrder(r.subsetKey, cands)
	} else {
		rand.Shuffle(len(cands), func(i, j int) { cands[i], cands[j] = cands[j], cands[i] })
	}
	for _, s := range r.seeds {
		if !slices.Contains(cands, s) {
			cands = append(cands, s)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, membersTimeout)
	defer cancel()
	// Ask one candidate at a time, the next one when the last has not
	// answered within membersHedge: a paused node must not hold this up.
	next := 0
	return hedge(ctx, len(cands), membersHedge, func(error) bool { return true },
		func(ctx context.Context) ([]string, error) {
			r.mu.Lock()
			a := cands[next]
			next++
			r.mu.Unlock()
			conn, err := r.conn(a)
			if err != nil {
				return nil, err
			}
			return members(ctx, conn, a)
		})
}

// members asks conn (reaching from) for the gRPC addresses of the members
// that gossip has not declared dead or gone.
func members(ctx context.Context, conn *grpc.ClientConn, from string) ([]string, error) {
	resp, err := idgenv1.NewClusterServiceClient(conn).Members(ctx, &idgenv1.MembersRequest{})
	if err != nil {
		return nil, fmt.Errorf("members from %s: %w", from, err)
	}
	var out []string
	for _, m := range resp.GetMembers() {
		switch m.GetGossipState() {
		case "dead", "left":
			continue
		}
		if a := m.GetGrpcAddr(); a != "" && !slices.Contains(out, a) {
			if _, _, err := net.SplitHostPort(a); err == nil {
				out = append(out, a)
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("members from %s: %w", from, ErrNoMembers)
	}
	return out, nil
}

// conn returns a kept connection to addr for Members calls.
func (r *followResolver) conn(addr string) (*grpc.ClientConn, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c := r.conns[addr]; c != nil {
		return c, nil
	}
	c, err := grpc.NewClient("passthrough:///"+addr, r.creds)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	r.conns[addr] = c
	return c, nil
}

// update gives cc the addresses and closes Members connections to addresses
// that are neither listed nor seeds.
func (r *followResolver) update(addrs []string) error {
	addrs = slices.Clone(addrs)
	slices.Sort(addrs)
	r.mu.Lock()
	same := slices.Equal(addrs, r.known)
	r.known = addrs
	for a, c := range r.conns {
		if !slices.Contains(addrs, a) && !slices.Contains(r.seeds, a) {
			c.Close()
			delete(r.conns, a)
		}
	}
	r.mu.Unlock()
	if same {
		return nil
	}
	return r.cc.UpdateState(listState(addrs))
}
