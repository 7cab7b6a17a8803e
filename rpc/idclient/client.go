// Package idclient is the Go client for idgen: it dials a multi-node target
// with round-robin balancing, client health checking, keepalive, outlier
// ejection and a bounded retry policy, and offers a Pool that prefetches
// batches so that NextID usually costs no network call.
//
// Targets:
//
//	host1:50051,host2:50051,host3:50051   a fixed list of nodes
//	dns:///idgen.internal:50051           every address DNS returns
//	idgen:///seed1:50051,seed2:50051      every member the cluster lists
//
// An idgen:/// target asks any reachable seed or known node for
// ClusterService.Members every WithRefreshInterval and whenever a connection
// fails, so nodes that join are used and removed ones dropped without a
// restart; when nothing answers it keeps the last list.
//
// Any other target with a scheme ("passthrough:///…", "unix://…") is passed to
// gRPC unchanged.
//
// A client of a large fleet can connect to a few of the nodes instead of
// all of them (WithSubset), chosen from its own key so that the fleet
// spreads evenly over the nodes.
//
// It holds what a service that takes IDs or short codes (a URL shortener)
// needs, and nothing else: Dial and its options (timeouts, hedging, TLS), a
// Pool for NextID and NextCode (a generator.Codec keyed by ReadCodeKey), and
// FetchBatch and TargetAddrs for callers that want to know which node served
// or which nodes a target names. It imports nothing of the cluster (Raft,
// gossip, the store). The uniqueness checker behind `idctl verify` and the
// chaos runs is rpc/idcheck, built on this package.
package idclient

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	_ "google.golang.org/grpc/health" // client health checking; without it healthCheckConfig is silently ignored
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/idgen/idgen/generator"
	idgenv1 "github.com/idgen/idgen/proto/idgen/v1"
	"github.com/idgen/idgen/rpc/tlsconf"
)

// HealthService is the health service name a node reports SERVING only while
// it can issue IDs; the client balances over those nodes only.
const HealthService = "idgen.v1.IDService"

// DefaultCallTimeout bounds one GetIDBatch call (all retries included) when
// the caller's context has no earlier deadline.
const DefaultCallTimeout = 2 * time.Second

// serviceConfig: round robin with ejection over SERVING nodes, over a subset
// of them when sub.Size asks for one; GetIDBatch is retried on UNAVAILABLE
// at most 3 more times (4 attempts), with 50-400 ms of jittered backoff, each
// retry going to the next node. Other codes are not retried:
// ResourceExhausted means the deadline is spent, InvalidArgument will not
// change.
func serviceConfig(sub subsetConfig) string {
	lb, _ := json.Marshal(map[string]subsetConfig{balancerName: sub}) // strings and ints only: cannot fail
	return `{
  "loadBalancingConfig": [` + string(lb) + `],
  "healthCheckConfig": {"serviceName": "` + HealthService + `"},
  "methodConfig": [{
    "name": [{"service": "idgen.v1.IDService"}],
    "retryPolicy": {
      "maxAttempts": 4,
      "initialBackoff": "0.05s",
      "maxBackoff": "0.4s",
      "backoffMultiplier": 2,
      "retryableStatusCodes": ["UNAVAILABLE"]
    }
  }]
}`
}

// Option configures Dial.
type Option func(*options)

type options struct {
	callTimeout   time.Duration
	hedgeDelay    time.Duration
	hedgeAttempts int
	follow        time.Duration
	dialOpts      []grpc.DialOption
	tlsFiles      tlsconf.Files
	tlsConfig     *tls.Config
	layout        *generator.Layout
	subset        subsetConfig
}

// WithCallTimeout sets the bound for one GetIDBatch call (default
// DefaultCallTimeout). A caller's earlier deadline still wins.
func WithCallTimeout(d time.Duration) Option { return func(o *options) { o.callTimeout = d } }

// WithHedge sets how long a GetIDBatch attempt may go unanswered before
// another attempt starts on the next node, and how many attempts one call
// makes at most (defaults DefaultHedgeDelay and DefaultHedgeAttempts;
// attempts 1 turns hedging off).
func WithHedge(delay time.Duration, attempts int) Option {
	return func(o *options) { o.hedgeDelay, o.hedgeAttempts = delay, attempts }
}

// WithRefreshInterval sets how often an idgen:/// target asks the cluster
// for its members (default DefaultRefreshInterval, at least 1 s).
func WithRefreshInterval(d time.Duration) Option { return func(o *options) { o.follow = d } }

// WithSubset makes the client connect to size of the target's nodes instead
// of all of them, for a fleet whose pods times nodes would pass a node's
// bound on client connections (idgend --grpc-max-client-conns). The subset
// is chosen from the client's key (WithSubsetKey) by rendezvous hashing, so
// a fleet spreads evenly over the nodes and a node joining or leaving moves
// only the clients whose subset it enters or leaves. A node in the subset
// that fails (its connection, or its health check: not ready) stays
// connected while the next node in the client's order is added, and is used
// again once it recovers. size <= 0, the default, or at least the number of
// nodes means all of them.
func WithSubset(size int) Option { return func(o *options) { o.subset.Size = size } }

// WithSubsetKey sets the identity the subset is chosen from (default: the
// host name, os.Hostname, which on Kubernetes is the pod's name). Clients
// with one key pick the same nodes, so every pod needs its own: pods that
// share one client certificate still need distinct keys, which is why the
// default is the host name and not the certificate.
func WithSubsetKey(key string) Option { return func(o *options) { o.subset.Key = key } }

// WithTLS dials with mutual TLS: the client shows the certificate in
// certFile (key in keyFile) and trusts servers whose certificate chains to the
// CA in caFile and names the host dialed. The files are read by Dial.
func WithTLS(certFile, keyFile, caFile string) Option {
	return func(o *options) { o.tlsFiles = tlsconf.Files{Cert: certFile, Key: keyFile, CA: caFile} }
}

// WithTLSConfig dials with the given TLS configuration (it should carry a
// client certificate: idgend nodes with TLS refuse callers without one).
func WithTLSConfig(cfg *tls.Config) Option { return func(o *options) { o.tlsConfig = cfg } }

// TransportCredentials returns the dial option that opts' TLS settings make
// (insecure without any), for other gRPC clients of the same nodes, such as
// idctl's admin calls.
func TransportCredentials(opts ...Option) (grpc.DialOption, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	return o.transportCredentials()
}

// transportCredentials are insecure unless a TLS option was given.
func (o *options) transportCredentials() (grpc.DialOption, error) {
	cfg := o.tlsConfig
	if o.tlsFiles.Enabled() {
		m, err := tlsconf.Load(o.tlsFiles)
		if err != nil {
			return nil, fmt.Errorf("idclient: %w", err)
		}
		cfg = m.ClientConfig()
	}
	if cfg == nil {
		return grpc.WithTransportCredentials(insecure.NewCredentials()), nil
	}
	return grpc.WithTransportCredentials(credentials.NewTLS(cfg)), nil
}

// WithDialOptions appends gRPC dial options (e.g. TLS credentials, which then
// replace the default insecure ones).
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(o *options) { o.dialOpts = append(o.dialOpts, opts...) }
}

// Client calls IDService on a set of idgen nodes. It is safe for concurrent use.
type Client struct {
	conn          *grpc.ClientConn
	ids           idgenv1.IDServiceClient
	callTimeout   time.Duration
	hedgeDelay    time.Duration
	hedgeAttempts int
	layouts       layouts
}

// Dial prepares a client for target (see the package doc for the forms). Like
// grpc.NewClient it does not wait for a connection; the first call does.
func Dial(target string, opts ...Option) (*Client, error) {
	o := options{callTimeout: DefaultCallTimeout, hedgeDelay: DefaultHedgeDelay, hedgeAttempts: DefaultHedgeAttempts,
		follow: DefaultRefreshInterval}
	for _, opt := range opts {
		opt(&o)
	}
	if o.callTimeout <= 0 {
		return nil, fmt.Errorf("idclient: call timeout %s must be positive", o.callTimeout)
	}
	if o.hedgeDelay <= 0 || o.hedgeAttempts < 1 || o.hedgeAttempts > maxHedgeAttempts {
		return nil, fmt.Errorf("%w: hedge delay %s must be positive and attempts %d in 1..%d",
			ErrBadOption, o.hedgeDelay, o.hedgeAttempts, maxHedgeAttempts)
	}
	if o.follow < minRefreshGap {
		return nil, fmt.Errorf("%w: refresh interval %s is under %s", ErrBadOption, o.follow, minRefreshGap)
	}
	if o.layout != nil {
		if err := o.layout.Validate(); err != nil {
			return nil, fmt.Errorf("%w: WithLayout: %v", ErrBadOption, err)
		}
	}
	if o.subset.Size > 0 && o.subset.Key == "" {
		host, err := os.Hostname()
		if err != nil || host == "" {
			return nil, fmt.Errorf("%w: WithSubset needs a key, and the host name is unknown (%v): give WithSubsetKey", ErrBadOption, err)
		}
		o.subset.Key = host
	}
	target = strings.TrimSpace(target)
	if target == "" {
		return nil, errors.New("idclient: empty target; want host:port[,host:port…] or dns:///name:port")
	}
	if !strings.Contains(target, "://") {
		if _, err := parseList(target); err != nil {
			return nil, err
		}
		target = listScheme + ":///" + target
	}
	if seeds, ok := strings.CutPrefix(target, FollowPrefix); ok {
		if _, err := parseList(seeds); err != nil {
			return nil, err
		}
	}
	creds, err := o.transportCredentials()
	if err != nil {
		return nil, err
	}
	follow := followBuilder{interval: o.follow}
	var self atomic.Pointer[grpc.ClientConn]
	if o.subset.Size > 0 {
		follow.subsetKey, follow.self = o.subset.Key, &self
	}
	dialOpts := append([]grpc.DialOption{
		creds,
		grpc.WithResolvers(listBuilder{}, follow),
		grpc.WithDefaultServiceConfig(serviceConfig(o.subset)),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{
			Time:                20 * time.Second, // servers permit pings every 10 s
			Timeout:             5 * time.Second,
			PermitWithoutStream: true,
		}),
	}, o.dialOpts...)
	conn, err := grpc.NewClient(target, dialOpts...)
	if err != nil {
		return nil, fmt.Errorf("idclient: dial %q: %w", target, err)
	}
	self.Store(conn)
	c := &Client{conn: conn, ids: idgenv1.NewIDServiceClient(conn), callTimeout: o.callTimeout,
		hedgeDelay: o.hedgeDelay, hedgeAttempts: o.hedgeAttempts}
	if o.layout != nil {
		c.layouts.cur.Store(newKnownLayout(*o.layout, ""))
	}
	return c, nil
}

// Batch is one GetIDBatch answer: the IDs, the slot they were minted in and
// the name and ID of the node that served them.
type Batch struct {
	IDs    []int64
	Slot   int
	Node   string
	NodeID string
}

// GetIDBatch asks one node for count IDs (0: the node's default batch size).
// Errors are gRPC statuses: Unavailable when no node could serve after the
// retries, ResourceExhausted when no room was found within the deadline,
// InvalidArgument for a count over the node's maximum; or ErrBadBatch for a
// malformed answer and ErrBadCount for a count the protocol cannot carry.
func (c *Client) GetIDBatch(ctx context.Context, count int) ([]int64, error) {
	b, err := c.FetchBatch(ctx, count)
	if err != nil {
		return nil, err
	}
	return b.IDs, nil
}

// FetchBatch is GetIDBatch that also says who served the batch. A malformed
// batch comes back with an error wrapping ErrBadBatch and, as evidence, the
// batch as the node sent it; its IDs must not be handed out.
func (c *Client) FetchBatch(ctx context.Context, count int) (Batch, error) {
	if count < 0 || count > math.MaxUint32 {
		return Batch{}, fmt.Errorf("%w: %d, want 0..%d", ErrBadCount, count, uint32(math.MaxUint32))
	}
	ctx, cancel := context.WithTimeout(ctx, c.callTimeout)
	defer cancel()
	return hedge(ctx, c.hedgeAttempts, c.hedgeDelay, tryAnotherNode,
		func(ctx context.Context) (Batch, error) { return c.fetchOnce(ctx, count) })
}

// tryAnotherNode: the codes that say a node cannot serve now, where another
// node may. A broken node (Internal) or a malformed batch is returned to the
// caller, as evidence, and counted toward ejection.
func tryAnotherNode(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.ResourceExhausted, codes.DeadlineExceeded:
		return true
	}
	return false
}

// fetchOnce is one attempt of FetchBatch.
func (c *Client) fetchOnce(ctx context.Context, count int) (Batch, error) {
	// The balancer counts this call's success only once the batch is checked.
	ctx, verdict := withOutcome(ctx)
	resp, err := c.ids.GetIDBatch(ctx, &idgenv1.GetIDBatchRequest{Count: uint32(count)})
	if err != nil {
		verdict.settle(nil) // an attempt the node answered is not held against it
		return Batch{}, err
	}
	l, err := c.layouts.of(resp)
	if err == nil {
		err = checkBatch(resp, count, l)
	}
	verdict.settle(err)
	return Batch{IDs: resp.GetIds(), Slot: int(resp.GetSlot()), Node: resp.GetNode(), NodeID: resp.GetNodeId()}, err
}

var (
	// ErrBadBatch: a node answered with IDs that cannot be right (wrong
	// count, out of the layout, not of the slot it names, or not strictly
	// increasing), or under another layout than the cluster's (layout.go).
	// The batch is discarded and counts against the node.
	ErrBadBatch = errors.New("idclient: node answered with a malformed batch")
	// ErrBadCount: a count below 0 or over what the protocol carries.
	ErrBadCount = errors.New("idclient: count out of range")
	// ErrBadOption: a Dial option out of range.
	ErrBadOption = errors.New("idclient: invalid option")
	// ErrNoMembers: a node answered Members with no member that has a gRPC
	// address (an idgen:/// target keeps its last list).
	ErrNoMembers = errors.New("idclient: no members with a gRPC address")

	// errAttemptTooSlow is the cancel cause of a hedged attempt still
	// unanswered after the hedge delay when another attempt answered; the
	// balancer counts it against the node like DEADLINE_EXCEEDED, so a node
	// that never answers is ejected instead of costing every call a hedge
	// delay. errAttemptNotNeeded cancels an attempt another one made
	// unnecessary; it says nothing about the node.
	errAttemptTooSlow   = errors.New("idclient: attempt unanswered past the hedge delay")
	errAttemptNotNeeded = errors.New("idclient: another attempt answered first")
)

// checkBatch guards against a node that answers wrongly: a batch is used only
// if it has the IDs asked for, each one is a valid ID of the slot the
// response names under the cluster's layout l, and they strictly increase,
// as a generator mints them (a repeated ID would go to two callers).
func checkBatch(resp *idgenv1.GetIDBatchResponse, count int, l *knownLayout) error {
	ids := resp.GetIds()
	if len(ids) == 0 || (count > 0 && len(ids) != count) {
		return fmt.Errorf("%w: %d IDs for a request of %d, from node %q", ErrBadBatch, len(ids), count, resp.GetNode())
	}
	maxID, slotMask, seqBits, slot := l.maxID, l.slotMask, l.seqBits, int64(resp.GetSlot())
	for i, id := range ids {
		if id < 0 || id > maxID || (id>>seqBits)&slotMask != slot {
			return fmt.Errorf("%w: ID %d is not an ID of slot %d in layout %s, from node %q", ErrBadBatch, id, slot, l.text, resp.GetNode())
		}
		if i > 0 && id <= ids[i-1] {
			return fmt.Errorf("%w: ID %d follows %d (position %d), not strictly increasing, from node %q",
				ErrBadBatch, id, ids[i-1], i, resp.GetNode())
		}
	}
	return nil
}

// Conn is the underlying connection, for the admin API or health checks.
func (c *Client) Conn() *grpc.ClientConn { return c.conn }

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }
