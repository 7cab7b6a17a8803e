package rpc

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"

	"github.com/idgen/idgen/cluster"
	"github.com/idgen/idgen/cluster/door"
	"github.com/idgen/idgen/generator"
	idgenv1 "github.com/idgen/idgen/proto/idgen/v1"
)

// Defaults for ServerConfig fields left zero.
const (
	// DefaultBatchSize is the batch served for count 0: about one second of a
	// busy shortener's demand (1,160 IDs/s, the demand the layout is sized for), rounded down.
	DefaultBatchSize = 1000
	// DefaultBufferDepth is how many default batches are kept minted ahead.
	DefaultBufferDepth = 4
	// DefaultMaxCount is the largest count one GetIDBatch accepts: the
	// generator's own maximum (about five seconds of one node's capacity).
	DefaultMaxCount = generator.MaxBatch
	// DefaultReadyPollInterval is how often health follows Issuer.Ready:
	// Ready reads a few atomics, and clients start sending to a node only
	// once its health says SERVING, so a node's start waits for this.
	DefaultReadyPollInterval = 50 * time.Millisecond
)

// IDServiceName is the health service name that is SERVING only while the
// node is ready to issue IDs. Service "" reports the process alive.
const IDServiceName = "idgen.v1.IDService"

// notReadyTakeWait bounds how long a call waits for a buffered batch while the
// node is not ready: buffered IDs are still safe to hand out, but a caller is
// better served by a quick Unavailable (and a retry elsewhere) than by a wait.
const notReadyTakeWait = 50 * time.Millisecond

// ServerConfig configures NewServer. Zero values take the defaults above.
type ServerConfig struct {
	// Backend is the node, every role; required. Each service keeps only
	// its role of it (backend.go).
	Backend Backend
	// NodeName and NodeID are reported in GetIDBatch responses.
	NodeName string
	NodeID   string
	// Logger receives call and lifecycle logs; nil means slog.Default().
	Logger *slog.Logger
	// BatchSize is the batch served for count 0 and kept in the buffer.
	BatchSize int
	// BufferDepth is the number of batches the buffer holds.
	BufferDepth int
	// MaxCount is the largest count accepted; at most generator.MaxBatch.
	MaxCount int
	// Registerer receives the metrics; nil keeps them in a private registry.
	Registerer prometheus.Registerer
	// ReadyPollInterval is how often health status follows Issuer.Ready.
	ReadyPollInterval time.Duration
	// TLS, when set, makes the server speak only TLS with these settings
	// (tlsconf.Material.ServerConfig: callers need a certificate from the CA)
	// and check each caller's role per method (RequiredRole).
	TLS *tls.Config
	// Bounds are the port's bounds by who is asking (zero fields:
	// DefaultBounds').
	Bounds Bounds
	// ServerHost, if set, names the hosts where the cluster's servers run
	// (cluster.Node.ServerHost): the door keeps Bounds.PeerHandshakes
	// places for their handshakes.
	ServerHost func(host string) bool
	// KnownHosts is the book of proven hosts an earlier run kept
	// (Server.KnownHosts): a restarted node knows the fleet's pods at once.
	KnownHosts []door.Proof
	// MaxConnectionIdle closes a connection that carried no call for this
	// long (0: DefaultMaxConnectionIdle).
	MaxConnectionIdle time.Duration
}

func (c *ServerConfig) withDefaults() (ServerConfig, error) {
	out := *c
	if out.Backend == nil {
		return out, errors.New("rpc: ServerConfig.Backend is required")
	}
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	if out.BatchSize == 0 {
		out.BatchSize = DefaultBatchSize
	}
	if out.BufferDepth == 0 {
		out.BufferDepth = DefaultBufferDepth
	}
	if out.MaxCount == 0 {
		out.MaxCount = DefaultMaxCount
	}
	if out.ReadyPollInterval == 0 {
		out.ReadyPollInterval = DefaultReadyPollInterval
	}
	if out.MaxConnectionIdle == 0 {
		out.MaxConnectionIdle = DefaultMaxConnectionIdle
	}
	if out.Registerer == nil {
		out.Registerer = prometheus.NewRegistry()
	}
	var err error
	if out.Bounds, err = out.Bounds.withDefaults(); err != nil {
		return out, err
	}
	switch {
	case out.MaxCount < 1 || out.MaxCount > generator.MaxBatch:
		return out, fmt.Errorf("rpc: max count %d not in 1..%d", out.MaxCount, generator.MaxBatch)
	case out.BatchSize < 1 || out.BatchSize > out.MaxCount:
		return out, fmt.Errorf("rpc: batch size %d not in 1..%d (the max count)", out.BatchSize, out.MaxCount)
	case out.BufferDepth < 1:
		return out, fmt.Errorf("rpc: buffer depth %d, want at least 1", out.BufferDepth)
	case out.ReadyPollInterval < 0:
		return out, fmt.Errorf("rpc: ready poll interval %s is negative", out.ReadyPollInterval)
	case out.MaxConnectionIdle < 0:
		return out, fmt.Errorf("rpc: max connection idle %s is negative", out.MaxConnectionIdle)
	}
	return out, nil
}

// Server is one node's gRPC endpoint: IDService, ClusterService, PeerService,
// grpc.health.v1 and reflection on one grpc.Server, plus the prefetch buffer
// GetIDBatch serves from.
type Server struct {
	cfg     ServerConfig
	log     *slog.Logger
	issuer  Issuer // the serving role: IDService, producer, health
	grpc    *grpc.Server
	health  *health.Server
	metrics *metrics

	buf      *generator.Buffer
	producer *generator.Producer
	layout   atomic.Pointer[servedLayout] // cached once the cluster has one

	startOnce    sync.Once
	shutdownOnce sync.Once
	healthCtx    context.Context
	stopHealth   context.CancelFunc
	producerCtx  context.Context
	stopProducer context.CancelFunc
	bg           sync.WaitGroup

	leftOnce sync.Once
	left     chan struct{}
	joinSlot chan struct{} // holds a token while a Join runs

	lastMintErr atomic.Int64 // unix nanos of the last logged producer error

	refusals *refusals // what the port's bounds refused (doors.go)
	door     atomic.Pointer[grpcDoor]
	idRate   *idRate   // IDs a second per identity (rate.go); nil: no bound
	fair     *fairTake // hands the buffer's batches to waiting callers in turn (fair.go)
}

// NewServer builds the gRPC server and registers every service and the
// metrics. Nothing runs until Serve.
func NewServer(cfg ServerConfig) (*Server, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	buf, err := generator.NewBuffer(c.BufferDepth)
	if err != nil {
		return nil, fmt.Errorf("rpc: %w", err)
	}
	s := &Server{
		cfg:      c,
		log:      c.Logger,
		issuer:   c.Backend,
		buf:      buf,
		health:   health.NewServer(),
		left:     make(chan struct{}),
		joinSlot: make(chan struct{}, 1),
	}
	s.healthCtx, s.stopHealth = context.WithCancel(context.Background())
	s.producerCtx, s.stopProducer = context.WithCancel(context.Background())
	s.producer = generator.NewProducer(buf, c.BatchSize, s.mint, s.onMintError)
	s.fair = newFairTake(buf)

	s.metrics, err = newMetrics(c.Registerer, c.Backend, buf)
	if err != nil {
		return nil, err
	}

	unary := []grpc.UnaryServerInterceptor{recoveryUnary(s.log), s.metrics.grpc.UnaryServerInterceptor()}
	// (the call bound is added after auth, below: it counts by identity)
	stream := []grpc.StreamServerInterceptor{recoveryStream(s.log), s.metrics.grpc.StreamServerInterceptor()}
	var opts []grpc.ServerOption
	others := func() map[string]uint64 { return nil }
	if d, ok := c.Backend.(DoorCounter); ok {
		others = d.DoorRefusals
	}
	if s.refusals, err = newRefusals(c.Registerer, others, s.log); err != nil {
		return nil, err
	}
	if c.TLS != nil {
		// The door does the TLS handshake before gRPC sees a connection
		// (doors.go).
		opts = append(opts, grpc.Creds(doneTLS{}))
		unary = append(unary, authUnary())
		stream = append(stream, authStream())
	}
	// Unary calls in flight are bounded per identity and in all: a call
	// waiting for a batch holds memory for as long as its deadline (doors.go).
	s.idRate = newIDRate(c.Bounds.IDsPerIdentity, c.MaxCount, s.refusals)
	unary = append(unary, newCallLimit(c.Bounds.CallsPerIdentity, c.Bounds.Calls, s.refusals).interceptor())
	// Streaming calls last as long as the caller likes: a bounded number
	// per connection and per identity (doors.go).
	stream = append(stream, newStreamLimit(MaxStreamsPerConn, c.Bounds.StreamsPerIdentity, s.refusals).interceptor())
	s.grpc = grpc.NewServer(append(opts,
		grpc.ChainUnaryInterceptor(append(unary, deadlineUnary(), loggingUnary(s.log))...),
		grpc.ChainStreamInterceptor(stream...),
		grpc.MaxRecvMsgSize(MaxRequestBytes),
		// Idle connections are what a fleet holds: they keep no write
		// buffer and a small read buffer (calls are small), see
		// BenchmarkIdleConnectionMemory.
		grpc.SharedWriteBuffer(true),
		grpc.ReadBufferSize(8<<10),
		grpc.MaxHeaderListSize(MaxHeaderBytes),
		grpc.MaxConcurrentStreams(MaxConcurrentStreams),
		// A connection that has not finished its TLS handshake and HTTP/2
		// preface within HandshakeTimeout is closed.
		grpc.ConnectionTimeout(HandshakeTimeout),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime:             10 * time.Second,
			PermitWithoutStream: true,
		}),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			// Probe idle clients so dead peers' connections are reclaimed,
			// and close connections that carry no call for a while.
			Time:              30 * time.Second,
			Timeout:           10 * time.Second,
			MaxConnectionIdle: c.MaxConnectionIdle,
		}),
	)...)
	idgenv1.RegisterIDServiceServer(s.grpc, &idService{s: s})
	idgenv1.RegisterClusterServiceServer(s.grpc, &clusterService{s: s, admin: c.Backend, peer: c.Backend, fault: c.Backend})
	idgenv1.RegisterPeerServiceServer(s.grpc, &peerService{peer: c.Backend})
	healthpb.RegisterHealthServer(s.grpc, s.health)
	reflection.Register(s.grpc)
	// Every method's series exist at 0 from the start, so rate() and the
	// error-ratio alert see a method before its first call.
	s.metrics.grpc.InitializeMetrics(s.grpc)

	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	s.updateReadiness()
	return s, nil
}

// Serve starts the producer and the health loop (on the first call) and
// serves gRPC on lis, behind the door of its Bounds, until Shutdown.
// It returns nil after Shutdown.
func (s *Server) Serve(lis net.Listener) error {
	s.startOnce.Do(func() {
		s.bg.Add(3)
		go func() {
			defer s.bg.Done()
			s.fair.run(s.producerCtx)
		}()
		go func() {
			defer s.bg.Done()
			s.producer.Run(s.producerCtx)
		}()
		go func() {
			defer s.bg.Done()
			s.healthLoop(s.healthCtx)
		}()
	})
	d := newGRPCDoor(lis, s.cfg.TLS, s.cfg.Bounds, s.cfg.ServerHost, s.cfg.KnownHosts, s.refusals)
	s.door.Store(d)
	return s.grpc.Serve(d)
}

// KnownHosts is the door's book of hosts whose handshake succeeded
// (Bounds.KnownHandshakes), for the next run's ServerConfig.KnownHosts;
// nil before Serve.
func (s *Server) KnownHosts() []door.Proof {
	if d := s.door.Load(); d != nil {
		return d.Book()
	}
	return nil
}

// Shutdown stops serving: health turns NOT_SERVING at once (so balancers move
// away), in-flight calls finish within timeout, after which the rest are cut
// off, and then the producer stops. It is safe to call more than once.
func (s *Server) Shutdown(timeout time.Duration) {
	s.shutdownOnce.Do(func() {
		s.stopHealth()
		s.health.Shutdown()
		done := make(chan struct{})
		go func() {
			s.grpc.GracefulStop()
			close(done)
		}()
		t := time.NewTimer(timeout)
		select {
		case <-done:
			t.Stop()
		case <-t.C:
			s.log.Warn("graceful stop timed out; closing remaining calls", "timeout", timeout)
			s.grpc.Stop()
			<-done
		}
		s.stopProducer()
		// Serve may never have run; then nothing was started.
		s.startOnce.Do(func() {})
		s.bg.Wait()
	})
}

// Left is closed after a ClusterService.Leave call has made the node leave the
// cluster. The binary then shuts down and exits 0; the Leave response goes out
// during the graceful stop.
func (s *Server) Left() <-chan struct{} { return s.left }

// GRPCServer exposes the underlying server, e.g. for extra services in tests.
func (s *Server) GRPCServer() *grpc.Server { return s.grpc }

// healthLoop keeps the IDService health status in step with readiness.
func (s *Server) healthLoop(ctx context.Context) {
	t := time.NewTicker(s.cfg.ReadyPollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.updateReadiness()
		}
	}
}

func (s *Server) updateReadiness() {
	ok, reason := ready(s.issuer)
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if ok {
		st = healthpb.HealthCheckResponse_SERVING
	}
	if prev, err := s.health.Check(context.Background(), &healthpb.HealthCheckRequest{Service: IDServiceName}); err != nil || prev.GetStatus() != st {
		s.log.Info("readiness changed", "ready", ok, "reason", reason)
	}
	s.health.SetServingStatus(IDServiceName, st)
}

// ready is readiness as the server reports it (health, /readyz, idgen_ready):
// Issuer.Ready, but never ready while Issuer.Conflict is set, whatever Ready
// says. cluster.Node's Ready already reports the conflict itself.
func ready(i Issuer) (bool, string) {
	ok, reason := i.Ready()
	if ok {
		if err := i.Conflict(); err != nil {
			return false, err.Error()
		}
	}
	return ok, reason
}

// mint is the producer's source of batches.
func (s *Server) mint(ctx context.Context, n int) ([]int64, error) {
	ids, _, err := s.nextBatch(ctx, n)
	return ids, err
}

// nextBatch is the one way the server mints: a node that met an older
// cluster (Issuer.Conflict) mints nothing, whatever its NextBatch would do.
func (s *Server) nextBatch(ctx context.Context, n int) ([]int64, int, error) {
	if err := s.issuer.Conflict(); err != nil {
		return nil, -1, err
	}
	return s.issuer.NextBatch(ctx, n)
}

// onMintError logs producer failures, at most once a second: a node that is
// not ready fails every attempt and would otherwise flood the log.
func (s *Server) onMintError(err error) {
	now := time.Now().UnixNano()
	last := s.lastMintErr.Load()
	if now-last < int64(time.Second) || !s.lastMintErr.CompareAndSwap(last, now) {
		return
	}
	lvl := slog.LevelWarn
	if errors.Is(err, cluster.ErrNotReady) {
		lvl = slog.LevelDebug
	}
	s.log.Log(context.Background(), lvl, "prefetch producer could not mint", "err", err)
}

// servedLayout is the cluster's layout and its text, as responses carry it.
type servedLayout struct {
	layout generator.Layout
	text   string
}

// layoutForSlot returns the cluster's layout, cached after the first valid one
// (the layout is fixed for the cluster's lifetime: the one its log's first
// entry records). It is first asked for once IDs have been minted, when the
// node's replica has applied that entry and Status reports its layout.
func (s *Server) layoutForSlot() (servedLayout, error) {
	if l := s.layout.Load(); l != nil {
		return *l, nil
	}
	l := s.issuer.Status().Layout
	if err := l.Validate(); err != nil {
		return servedLayout{}, fmt.Errorf("no cluster layout known yet: %w", err)
	}
	sl := &servedLayout{layout: l, text: l.String()}
	s.layout.Store(sl)
	return *sl, nil
}

func (s *Server) markLeft() {
	s.leftOnce.Do(func() { close(s.left) })
}
