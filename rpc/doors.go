package rpc

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/idgen/idgen/cluster"
	"github.com/idgen/idgen/cluster/door"
	"github.com/idgen/idgen/rpc/tlsconf"
)

// The gRPC port's bounds (cmd/idgend/README.md, "Securing a cluster"), beside the
// per-call ones in auth.go (MaxRequestBytes, MaxHeaderBytes,
// MaxConcurrentStreams). They are bounds by who is asking: strangers share
// the room for unfinished handshakes, where each address gets a fair share
// and a newcomer never closes a handshake the node has started on before
// HandshakeMinAge (door.FairShare); clients (and admins) that proved who they are share a far
// larger room, each certificate identity a part of it; the cluster's own
// servers have a room of their own that nobody else can fill.
const (
	// HandshakeTimeout bounds a new connection's TLS handshake (done
	// before gRPC sees the connection) and then its HTTP/2 preface
	// (grpc.ConnectionTimeout; gRPC's default is 120 s).
	HandshakeTimeout = 5 * time.Second
	// HandshakeMinAge is how long an unfinished handshake whose peer has
	// sent something is safe from newcomers (door.GateConfig.MinAge): a
	// newcomer past the bounds is closed at once instead. A stranger's
	// silent connections are closed for newcomers at any age.
	HandshakeMinAge = 2 * time.Second
	// HandshakeSilentAge is how long a connection may send nothing before
	// a newcomer from its own address may close it
	// (door.GateConfig.SilentAge): a client behind the same NAT as a
	// stranger has this long to send its ClientHello after connecting.
	HandshakeSilentAge = 500 * time.Millisecond
	// KnownFor is how long after its last handshake that succeeded a host
	// keeps its place in the known room (Bounds.KnownHandshakes): a pod
	// of the fleet redials at least every DefaultMaxConnectionIdle.
	KnownFor = time.Hour
	// DefaultMaxConnectionIdle closes a connection with no call for this
	// long (with a GOAWAY: clients dial again on their next call).
	DefaultMaxConnectionIdle = 5 * time.Minute
	// MaxStreamsPerConn caps the streaming calls other than the health
	// check (reflection) open at once on one connection: they last as long
	// as the caller likes, a goroutine each. Unary calls end by their
	// deadline and are capped by MaxConcurrentStreams.
	MaxStreamsPerConn = 8
	// HealthWatchesPerConn caps the Health.Watch calls open at once on one
	// connection. They count toward no other bound: gRPC's client health
	// check holds one per connection and marks the connection unusable
	// when it is refused, so every connection a bound admits gets its own.
	HealthWatchesPerConn = 2
)

// Bounds are the gRPC port's bounds by who is asking. Zero fields take
// DefaultBounds'; each is an idgend flag.
type Bounds struct {
	// Handshakes is how many connections may be in their TLS handshake at
	// once. A new one past it closes a silent unfinished one (it has sent
	// nothing yet; or it has run for HandshakeMinAge) of the address
	// holding the most, if that is more than the newcomer's address holds;
	// else the newcomer is closed at once. So a flood of silent
	// connections never keeps a peer out, and a reconnect storm never
	// closes the handshakes the node is finishing (--grpc-max-handshakes).
	Handshakes int
	// HandshakesPerAddress is how many of them one remote address may
	// hold; a new one past it closes that address's oldest one silent for
	// HandshakeSilentAge (or run for HandshakeMinAge), else it is closed
	// at once (--grpc-max-handshakes-per-address).
	HandshakesPerAddress int
	// PeerHandshakes is how many more handshakes may run from the hosts
	// where the cluster's servers run (ServerConfig.ServerHost), and
	// KnownHandshakes from hosts whose handshake succeeded lately (the
	// last KnownAddresses of them, each for KnownFor since its last):
	// places no stranger takes, from however many addresses it floods the
	// shared ones, so the node's peers and the fleet's pods that were
	// here before get through (--grpc-max-peer-handshakes,
	// --grpc-max-known-handshakes, --grpc-known-addresses). A newcomer
	// whose room is full competes in the shared places like anyone.
	PeerHandshakes, KnownHandshakes, KnownAddresses int
	// ClientConns is how many connections of callers that are not the
	// cluster's servers (clients and admins with TLS; everyone without) may
	// be open at once; one past it is refused (--grpc-max-client-conns).
	ClientConns int
	// ConnsPerIdentity is how many of them one certificate identity (role
	// and name; without TLS, one remote address) may hold
	// (--grpc-max-conns-per-identity).
	ConnsPerIdentity int
	// PeerConns is how many connections the cluster's servers (certificate
	// role server) may hold; no client or stranger takes from it
	// (--grpc-max-peer-conns).
	PeerConns int
	// AdminConns is the same for operators (role admin): clients filling
	// their room never lock the operators out (--grpc-max-admin-conns).
	AdminConns int
	// StreamsPerIdentity caps the streaming calls other than the health
	// check one identity may hold open at once (--grpc-max-streams-per-identity).
	StreamsPerIdentity int
	// CallsPerIdentity and Calls cap the unary calls in flight, per
	// identity and in all: one waiting for a batch holds about 15 KB until
	// its deadline, and 40,960 of them took a node from 36 MB to 650 MB
	// (--grpc-max-calls-per-identity, --grpc-max-calls).
	CallsPerIdentity, Calls int
	// IDsPerIdentity bounds the IDs one identity may draw from the node a
	// second (0, the default: no bound): one client cannot take the
	// cluster's rate from the fleet (--grpc-max-ids-per-identity).
	IDsPerIdentity int

	// handshakeMinAge replaces HandshakeMinAge (tests).
	handshakeMinAge time.Duration
}

// DefaultBounds are sized for a fleet: thousands of client pods, each
// holding one connection to every node, on a node whose memory limit is
// 512 MiB. An idle client connection with its health watch costs about
// 125 KB, both ends together (go test -run '^$' -bench
// IdleConnectionMemory ./rpc); the node's share is about half, so 4,096 of
// them take about 250 MB.
var DefaultBounds = Bounds{
	Handshakes: 256, HandshakesPerAddress: 32,
	PeerHandshakes: 64, KnownHandshakes: 256, KnownAddresses: 16384,
	ClientConns: 4096, ConnsPerIdentity: 2048,
	PeerConns:          256,
	AdminConns:         64,
	StreamsPerIdentity: 512,
	CallsPerIdentity:   4096, Calls: 8192,
}

// withDefaults fills zero fields from DefaultBounds and checks the rest.
func (b Bounds) withDefaults() (Bounds, error) {
	d := DefaultBounds
	for _, f := range []struct {
		name   string
		v, def *int
	}{
		{"handshakes", &b.Handshakes, &d.Handshakes},
		{"handshakes per address", &b.HandshakesPerAddress, &d.HandshakesPerAddress},
		{"peer handshakes", &b.PeerHandshakes, &d.PeerHandshakes},
		{"known handshakes", &b.KnownHandshakes, &d.KnownHandshakes},
		{"known addresses", &b.KnownAddresses, &d.KnownAddresses},
		{"client connections", &b.ClientConns, &d.ClientConns},
		{"connections per identity", &b.ConnsPerIdentity, &d.ConnsPerIdentity},
		{"peer connections", &b.PeerConns, &d.PeerConns},
		{"admin connections", &b.AdminConns, &d.AdminConns},
		{"streams per identity", &b.StreamsPerIdentity, &d.StreamsPerIdentity},
		{"calls per identity", &b.CallsPerIdentity, &d.CallsPerIdentity},
		{"calls", &b.Calls, &d.Calls},
		{"IDs a second per identity", &b.IDsPerIdentity, &d.IDsPerIdentity},
	} {
		if *f.v == 0 {
			*f.v = *f.def
		}
		if *f.v < 0 {
			return b, fmt.Errorf("rpc: %s bound %d is negative", f.name, *f.v)
		}
	}
	return b, nil
}

// Descriptors is how many file descriptors the bounds let the gRPC port
// hold at once.
func (b Bounds) Descriptors() int {
	return b.Handshakes + b.PeerHandshakes + b.KnownHandshakes + b.ClientConns + b.PeerConns + b.AdminConns
}

// The bounds' names, in metrics (idgen_door_refused_total's bound label)
// and logs.
const (
	// An unfinished handshake closed for a newcomer past the total, and
	// past its address's bound; (_refused) a newcomer closed at once, past
	// the total or its address's bound, because no unfinished one could
	// be closed for it.
	boundHandshakes               = "grpc_handshakes"
	boundHandshakesPerAddr        = "grpc_handshakes_per_address"
	boundHandshakesRefused        = "grpc_handshakes_refused"
	boundHandshakesPerAddrRefused = "grpc_handshakes_per_address_refused"
	boundHandshake                = "grpc_handshake_timeout"
	boundTLS                      = "grpc_tls"
	boundClientConns              = "grpc_client_conns"
	boundConnsPerIdentity         = "grpc_conns_per_identity"
	boundPeerConns                = "grpc_peer_conns"
	boundAdminConns               = "grpc_admin_conns"
	boundStreamsPerConn           = "grpc_streams_per_conn"
	boundStreamsPerID             = "grpc_streams_per_identity"
	boundWatchesPerConn           = "grpc_health_watches_per_conn"
	boundCallsPerIdentity         = "grpc_calls_per_identity"
	boundCalls                    = "grpc_calls"
	boundIDsPerIdentity           = "grpc_ids_per_identity"

	// The HTTP admin port's (cmd/idgend counts them with DoorRefused): an
	// idle connection closed for a new one past the port's bound or the
	// address's, and (_busy) a new one refused because every connection of
	// its room was being answered.
	BoundHTTPConns               = "http_conns"
	BoundHTTPConnsPerAddress     = "http_conns_per_address"
	BoundHTTPConnsBusy           = "http_conns_busy"
	BoundHTTPConnsPerAddressBusy = "http_conns_per_address_busy"
)

// doorBounds lists every bound name, so each counter exists at 0 from the
// start.
var doorBounds = []string{boundHandshakes, boundHandshakesPerAddr, boundHandshakesRefused, boundHandshakesPerAddrRefused, boundHandshake, boundTLS, boundClientConns,
	boundConnsPerIdentity, boundPeerConns, boundAdminConns, boundStreamsPerConn, boundStreamsPerID, boundWatchesPerConn,
	boundCallsPerIdentity, boundCalls, boundIDsPerIdentity,
	BoundHTTPConns, BoundHTTPConnsPerAddress, BoundHTTPConnsBusy, BoundHTTPConnsPerAddressBusy}

// DoorCounter is a Backend that counts what its own ports' bounds refused
// (cluster.Node: the Raft and gossip ports), by bound; the server exports
// the counts in idgen_door_refused_total beside the gRPC and HTTP ports'.
type DoorCounter interface {
	DoorRefusals() map[string]uint64
}

var _ DoorCounter = (*cluster.Node)(nil)

// refusals counts and logs (rate-limited per peer and bound) what the
// bounds refuse. As a collector it is idgen_door_refused_total: the gRPC
// and HTTP ports' counts, and the Raft and gossip ports' the node keeps
// (others), read at each scrape.
type refusals struct {
	counter *prometheus.CounterVec
	desc    *prometheus.Desc
	others  func() map[string]uint64
	log     *door.RateLog
}

func newRefusals(reg prometheus.Registerer, others func() map[string]uint64, log *slog.Logger) (*refusals, error) {
	const name, help = "door_refused_total", "Connections and calls a bound of the node's ports refused, by bound."
	r := &refusals{
		counter: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metricsNamespace, Name: name, Help: help}, []string{"bound"}),
		desc:    prometheus.NewDesc(prometheus.BuildFQName(metricsNamespace, "", name), help, []string{"bound"}, nil),
		others:  others,
		log:     door.NewRateLog(log.With("component", "grpc"), 0),
	}
	for _, b := range doorBounds {
		r.counter.WithLabelValues(b)
	}
	if err := reg.Register(r); err != nil {
		return nil, fmt.Errorf("rpc: register metrics: %w", err)
	}
	return r, nil
}

func (r *refusals) Describe(ch chan<- *prometheus.Desc) { ch <- r.desc }

func (r *refusals) Collect(ch chan<- prometheus.Metric) {
	r.counter.Collect(ch)
	counts := r.others()
	for _, b := range slices.Sorted(maps.Keys(counts)) {
		if !slices.Contains(doorBounds, b) {
			ch <- prometheus.MustNewConstMetric(r.desc, prometheus.CounterValue, float64(counts[b]), b)
		}
	}
}

// refuse counts one refusal of bound from peer and logs it (at most one
// line per peer and bound a minute).
func (r *refusals) refuse(bound, peer, msg string, args ...any) {
	r.counter.WithLabelValues(bound).Inc()
	r.log.Log(slog.LevelWarn, bound, peer, msg, append(args, "bound", bound)...)
}

// DoorRefused counts one refusal of a bound of another port of the node
// (the HTTP admin port's) in idgen_door_refused_total.
func (s *Server) DoorRefused(bound string) { s.refusals.counter.WithLabelValues(bound).Inc() }

// errRoom: an authenticated connection past its room's bound.
var errRoom = errors.New("no room")

// rooms counts the open connections past their handshake: the servers'
// and the operators' rooms, the clients' room and each client identity's
// part of it.
type rooms struct {
	b Bounds

	mu         sync.Mutex
	peers      int
	admins     int
	clients    int
	byIdentity map[string]int
}

// take admits one connection of identity whose certificate has role (""
// without TLS: a client) or returns the bound it is past.
func (r *rooms) take(identity string, role tlsconf.Role) (release func(), bound string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	own := func(n *int, max int, bound string) (func(), string) {
		if *n >= max {
			return nil, bound
		}
		*n++
		return sync.OnceFunc(func() { r.mu.Lock(); *n--; r.mu.Unlock() }), ""
	}
	switch role {
	case tlsconf.RoleServer:
		return own(&r.peers, r.b.PeerConns, boundPeerConns)
	case tlsconf.RoleAdmin:
		return own(&r.admins, r.b.AdminConns, boundAdminConns)
	}
	switch {
	case r.clients >= r.b.ClientConns:
		return nil, boundClientConns
	case r.byIdentity[identity] >= r.b.ConnsPerIdentity:
		return nil, boundConnsPerIdentity
	}
	r.clients++
	r.byIdentity[identity]++
	return sync.OnceFunc(func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.clients--
		if r.byIdentity[identity]--; r.byIdentity[identity] <= 0 {
			delete(r.byIdentity, identity)
		}
	}), ""
}

// grpcDoor is the gRPC port's listener: a door.Gate runs each
// connection's TLS handshake under HandshakeTimeout and the handshake
// bounds (door.FairShare, HandshakeMinAge), then admits the connection into
// its room by the certificate's role and identity. gRPC only ever sees
// admitted connections, already past TLS (doneTLS).
type grpcDoor struct {
	*door.Gate
}

func newGRPCDoor(lis net.Listener, cfg *tls.Config, b Bounds, serverHost func(string) bool, known []door.Proof, ref *refusals) *grpcDoor {
	r := &rooms{b: b, byIdentity: map[string]int{}}
	if cfg != nil {
		cfg = cfg.Clone()
		if !slices.Contains(cfg.NextProtos, "h2") {
			cfg.NextProtos = append(cfg.NextProtos, "h2") // gRPC clients require ALPN h2
		}
	}
	handshake := func(c net.Conn) (net.Conn, error) {
		identity, role := door.Peer(c.RemoteAddr()), tlsconf.Role("")
		var tc *tls.Conn
		if cfg != nil {
			tc = tls.Server(c, cfg)
			if err := tc.Handshake(); err != nil {
				return nil, fmt.Errorf("%w: %w", errRPCTLS, err)
			}
			identity, role = certIdentity(tc.ConnectionState())
		}
		release, bound := r.take(identity, role)
		if bound != "" {
			return nil, &roomError{bound: bound, identity: identity, b: b}
		}
		if tc != nil {
			return &admittedConn{Conn: tc, tls: tc, release: release}, nil
		}
		return &admittedConn{Conn: c, release: release}, nil
	}
	g := door.NewGate(lis, handshake, door.GateConfig{
		Timeout: HandshakeTimeout, MaxPending: b.Handshakes, MaxPendingPerPeer: b.HandshakesPerAddress,
		Rooms:    []door.Room{{Max: b.PeerHandshakes, Has: serverHost}, {Max: b.KnownHandshakes, Proven: true}},
		Remember: b.KnownAddresses, RememberFor: KnownFor, Recall: known,
		Policy: door.FairShare, MinAge: cmp.Or(b.handshakeMinAge, HandshakeMinAge), SilentAge: HandshakeSilentAge,
		Refused: func(remote net.Addr, err error) { ref.refused(remote, err, b) },
		AcceptError: func(err error) {
			ref.log.Log(slog.LevelError, "accept", "", "gRPC port cannot accept connections", "err", err)
		},
	})
	return &grpcDoor{Gate: g}
}

// errRPCTLS: an accepted gRPC connection's TLS handshake failed.
var errRPCTLS = errors.New("TLS handshake failed")

// roomError: an authenticated connection past its room's bound.
type roomError struct {
	bound, identity string
	b               Bounds
}

func (e *roomError) Error() string { return fmt.Sprintf("%v: %s (%s)", errRoom, e.bound, e.identity) }
func (e *roomError) Unwrap() error { return errRoom }

// handshakeRefusals are the handshake bounds' closings and refusals
// (door.FairShare), the most particular error first.
var handshakeRefusals = []struct {
	err        error
	bound, msg string
	perAddress bool
}{
	{door.ErrEvictedPerPeer, boundHandshakesPerAddr, "closed an unfinished gRPC handshake to make room for a newer one from its address", true},
	{door.ErrEvicted, boundHandshakes, "closed an unfinished gRPC handshake to make room for a newer one", false},
	{door.ErrFullPerPeer, boundHandshakesPerAddrRefused, "refused a gRPC connection: its address holds its cap of unfinished handshakes, none of them silent", true},
	{door.ErrFull, boundHandshakesRefused, "refused a gRPC connection: the cap of unfinished handshakes is reached, none of them silent of an address holding more", false},
}

// refused counts and logs a connection the door refused.
func (r *refusals) refused(remote net.Addr, err error, b Bounds) {
	peer, rs := door.Peer(remote), fmt.Sprint(remote)
	for _, h := range handshakeRefusals {
		if errors.Is(err, h.err) {
			limit, n := "cap", b.Handshakes
			if h.perAddress {
				limit, n = "cap_per_address", b.HandshakesPerAddress
			}
			r.refuse(h.bound, peer, h.msg, "remote", rs, limit, n)
			return
		}
	}
	var room *roomError
	var ne net.Error
	switch {
	case errors.As(err, &room):
		limit := map[string]int{boundPeerConns: b.PeerConns, boundAdminConns: b.AdminConns, boundClientConns: b.ClientConns, boundConnsPerIdentity: b.ConnsPerIdentity}[room.bound]
		r.refuse(room.bound, peer, "refused a gRPC connection: its room is full", "remote", rs, "identity", room.identity, "cap", limit)
	case errors.As(err, &ne) && ne.Timeout():
		r.refuse(boundHandshake, peer, "closed a gRPC connection that did not finish its TLS handshake in time", "remote", rs,
			"bound", HandshakeTimeout.String())
	case errors.Is(err, errRPCTLS):
		r.refuse(boundTLS, peer, "refused a gRPC connection: TLS handshake failed (no certificate of the cluster CA?)", "remote", rs, "err", err)
	default:
		r.log.Log(slog.LevelDebug, "closed", peer, "a gRPC connection closed before its handshake", "remote", rs, "err", err)
	}
}

// certIdentity names a verified peer by its certificate's role and name,
// and gives the role ("" for none).
func certIdentity(cs tls.ConnectionState) (string, tlsconf.Role) {
	if len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return "unverified", ""
	}
	leaf := cs.VerifiedChains[0][0]
	role, err := tlsconf.RoleOf(leaf)
	if err != nil {
		return "no role/" + leaf.Subject.CommonName, ""
	}
	return string(role) + "/" + leaf.Subject.CommonName, role
}

// admittedConn is a connection in its room; closing it frees its place.
type admittedConn struct {
	net.Conn
	tls     *tls.Conn // nil without TLS
	release func()
}

func (c *admittedConn) Close() error {
	err := c.Conn.Close()
	c.release()
	return err
}

// OnClose has f run once when c closes (door.Watched: the door's book
// keeps a host known while a connection of its is open). It is called
// before the connection is handed on, so it races nothing.
func (c *admittedConn) OnClose(f func()) {
	release := c.release
	c.release = sync.OnceFunc(func() { release(); f() })
}

// doneTLS is the gRPC server's credentials when the door has done the TLS
// handshake: it hands gRPC the connection and what the handshake
// established, which authorize reads as from gRPC's own TLS credentials.
type doneTLS struct{}

func (doneTLS) ServerHandshake(c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	ac, ok := c.(*admittedConn)
	if !ok || ac.tls == nil {
		return nil, nil, errors.New("rpc: a connection that did not come through the gRPC door's TLS handshake")
	}
	return c, credentials.TLSInfo{State: ac.tls.ConnectionState(), CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}}, nil
}

func (doneTLS) ClientHandshake(context.Context, string, net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("rpc: doneTLS is a server's credentials")
}

func (doneTLS) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "tls", SecurityVersion: "1.3"}
}

func (doneTLS) Clone() credentials.TransportCredentials { return doneTLS{} }

func (doneTLS) OverrideServerName(string) error { return nil }

// streamLimit counts the streaming calls open: health watches per
// connection (in no other count), the rest per connection and per
// identity.
type streamLimit struct {
	perConn, perIdentity, watchesPerConn int
	ref                                  *refusals

	mu         sync.Mutex
	byConn     map[string]int
	watches    map[string]int
	byIdentity map[string]int
}

func newStreamLimit(perConn, perIdentity int, ref *refusals) *streamLimit {
	return &streamLimit{perConn: perConn, perIdentity: perIdentity, watchesPerConn: HealthWatchesPerConn, ref: ref,
		byConn: map[string]int{}, watches: map[string]int{}, byIdentity: map[string]int{}}
}

// callerOf names the connection a call came on (its remote address, which
// no two open connections share) and the caller's identity (its
// certificate's role and name; without TLS, its remote address).
func callerOf(ctx context.Context) (conn, identity string) {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return "", ""
	}
	conn, identity = p.Addr.String(), door.Peer(p.Addr)
	if info, ok := p.AuthInfo.(credentials.TLSInfo); ok {
		identity, _ = certIdentity(info.State)
	}
	return conn, identity
}

const healthWatch = "/grpc.health.v1.Health/Watch"

func (l *streamLimit) acquire(method, conn, identity string) (release func(), err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if method == healthWatch {
		if l.watches[conn] >= l.watchesPerConn {
			l.ref.refuse(boundWatchesPerConn, door.PeerString(conn), "refused a health watch: its connection holds its cap", "remote", conn, "cap", l.watchesPerConn)
			return nil, status.Errorf(codes.ResourceExhausted,
				"this connection already has %d health watches open, the most a connection may hold; close one or use another connection", l.watchesPerConn)
		}
		l.watches[conn]++
		return sync.OnceFunc(func() { l.mu.Lock(); defer l.mu.Unlock(); decr(l.watches, conn) }), nil
	}
	switch {
	case l.byConn[conn] >= l.perConn:
		l.ref.refuse(boundStreamsPerConn, door.PeerString(conn), "refused a streaming call: its connection holds its cap", "remote", conn, "cap", l.perConn)
		return nil, status.Errorf(codes.ResourceExhausted,
			"this connection already has %d streaming calls open, the most a connection may hold; close one or use another connection", l.perConn)
	case l.byIdentity[identity] >= l.perIdentity:
		l.ref.refuse(boundStreamsPerID, door.PeerString(conn), "refused a streaming call: its identity holds its cap", "identity", identity, "cap", l.perIdentity)
		return nil, status.Errorf(codes.ResourceExhausted,
			"%s already has %d streaming calls open on this node, the most one identity may hold; close some and try again", identity, l.perIdentity)
	}
	l.byConn[conn]++
	l.byIdentity[identity]++
	return sync.OnceFunc(func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		decr(l.byConn, conn)
		decr(l.byIdentity, identity)
	}), nil
}

// decr takes one from m[k], dropping the key at zero.
func decr(m map[string]int, k string) {
	if m[k]--; m[k] <= 0 {
		delete(m, k)
	}
}

// interceptor refuses a streaming call past its caps with
// ResourceExhausted, before its handler runs.
func (l *streamLimit) interceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		conn, identity := callerOf(ss.Context())
		release, err := l.acquire(info.FullMethod, conn, identity)
		if err != nil {
			return err
		}
		defer release()
		return handler(srv, ss)
	}
}

// callLimit counts the unary calls in flight, per identity and in all.
type callLimit struct {
	perIdentity, total int
	ref                *refusals

	mu         sync.Mutex
	byIdentity map[string]int
	open       int
}

func newCallLimit(perIdentity, total int, ref *refusals) *callLimit {
	return &callLimit{perIdentity: perIdentity, total: total, ref: ref, byIdentity: map[string]int{}}
}

// interceptor refuses a unary call past either cap with ResourceExhausted,
// before its handler runs.
func (l *callLimit) interceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		conn, identity := callerOf(ctx)
		l.mu.Lock()
		switch {
		case l.byIdentity[identity] >= l.perIdentity:
			l.mu.Unlock()
			l.ref.refuse(boundCallsPerIdentity, door.PeerString(conn), "refused a call: its identity holds its cap of calls in flight", "identity", identity, "cap", l.perIdentity)
			return nil, status.Errorf(codes.ResourceExhausted,
				"%s already has %d calls in flight on this node, the most one identity may; let some finish (shorter deadlines) and try again", identity, l.perIdentity)
		case l.open >= l.total:
			l.mu.Unlock()
			l.ref.refuse(boundCalls, door.PeerString(conn), "refused a call: the node holds its cap of calls in flight", "cap", l.total)
			return nil, status.Errorf(codes.ResourceExhausted, "the node already has %d calls in flight, the most it holds; try another node", l.total)
		}
		l.byIdentity[identity]++
		l.open++
		l.mu.Unlock()
		defer func() {
			l.mu.Lock()
			decr(l.byIdentity, identity)
			l.open--
			l.mu.Unlock()
		}()
		return handler(ctx, req)
	}
}
