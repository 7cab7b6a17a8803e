package rpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/idgen/idgen/cluster"
	idgenv1 "github.com/idgen/idgen/proto/idgen/v1"
	"github.com/idgen/idgen/scripts/harness"
)

type testServer struct {
	srv  *Server
	reg  *prometheus.Registry
	conn *grpc.ClientConn
	addr string
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func startServer(t *testing.T, b Backend, cfg ServerConfig) *testServer {
	t.Helper()
	reg := prometheus.NewRegistry()
	cfg.Backend = b
	cfg.Registerer = reg
	if cfg.Logger == nil {
		cfg.Logger = quietLogger()
	}
	if cfg.NodeName == "" {
		cfg.NodeName, cfg.NodeID = "node-1", "0123456789abcdef0123456789abcdef"
	}
	if cfg.ReadyPollInterval == 0 {
		cfg.ReadyPollInterval = 10 * time.Millisecond
	}
	srv, err := NewServer(cfg)
	if err != nil {
		t.Fatalf("NewServer: %v", err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serveUntilCleanup(t, srv, lis)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() }) // (cleanups run last first: before the shutdown)
	return &testServer{srv: srv, reg: reg, conn: conn, addr: lis.Addr().String()}
}

// serveUntilCleanup serves srv on lis until the test ends, and fails the test
// if Serve fails. A test that ends at once may shut the server down before
// the goroutine reaches Serve: gRPC then answers ErrServerStopped, which is
// Shutdown working, not a failure (TestEveryServedMethodIsListed hit it).
func serveUntilCleanup(t *testing.T, srv *Server, lis net.Listener) {
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	t.Cleanup(func() {
		srv.Shutdown(2 * time.Second)
		if err := <-served; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			t.Errorf("Serve: %v", err)
		}
	})
}

// ctxT is a context for one test call: 5 s times IDGEN_TEST_SLOWDOWN.
func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), harness.Scale(5*time.Second))
	t.Cleanup(cancel)
	return ctx
}

func wantCode(t *testing.T, err error, code codes.Code, msgPart string) {
	t.Helper()
	if got := status.Code(err); got != code {
		t.Fatalf("code = %v (%v), want %v", got, err, code)
	}
	if msgPart != "" && !strings.Contains(status.Convert(err).Message(), msgPart) {
		t.Fatalf("message %q does not contain %q", status.Convert(err).Message(), msgPart)
	}
}

func TestPanicAnswersInternalAndServerKeepsServing(t *testing.T) {
	b := newFakeBackend(2)
	b.set(func(f *fakeBackend) { f.panicMem = true })
	ts := startServer(t, b, ServerConfig{})
	admin := idgenv1.NewClusterServiceClient(ts.conn)

	_, err := admin.Members(ctxT(t), &idgenv1.MembersRequest{})
	wantCode(t, err, codes.Internal, "panic")

	b.set(func(f *fakeBackend) { f.panicMem = false })
	resp, err := admin.Members(ctxT(t), &idgenv1.MembersRequest{})
	if err != nil {
		t.Fatalf("after panic: %v", err)
	}
	if len(resp.GetMembers()) != 1 || resp.GetLeaderId() != "n1" || resp.GetMembers()[0].GetGrantedLeadMs() != 1500 {
		t.Fatalf("members = %v", resp)
	}
}

func TestDeadlineRequiredExceptHealth(t *testing.T) {
	ts := startServer(t, newFakeBackend(1), ServerConfig{})
	_, err := idgenv1.NewIDServiceClient(ts.conn).GetIDBatch(context.Background(), &idgenv1.GetIDBatchRequest{})
	wantCode(t, err, codes.InvalidArgument, "without a deadline")

	// Probes call health without a deadline.
	resp, err := healthpb.NewHealthClient(ts.conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health without deadline: %v %v", resp, err)
	}
}

func TestInterceptorOrderRecoveryBeforeDeadline(t *testing.T) {
	// A panicking handler called without a deadline is refused by the deadline
	// interceptor before it can panic; with a deadline it panics and recovery
	// answers Internal. Both answers prove recovery wraps deadline.
	b := newFakeBackend(1)
	b.set(func(f *fakeBackend) { f.panicMem = true })
	ts := startServer(t, b, ServerConfig{})
	admin := idgenv1.NewClusterServiceClient(ts.conn)
	_, err := admin.Members(context.Background(), &idgenv1.MembersRequest{})
	wantCode(t, err, codes.InvalidArgument, "deadline")
	_, err = admin.Members(ctxT(t), &idgenv1.MembersRequest{})
	wantCode(t, err, codes.Internal, "")
}

func TestGetIDBatchDefaultComesFromBuffer(t *testing.T) {
	b := newFakeBackend(5)
	ts := startServer(t, b, ServerConfig{BatchSize: 100, BufferDepth: 3})
	// The producer fills the buffer before anyone asks.
	harness.WaitFor(t, 5*time.Second, "buffer full", func() bool { return ts.srv.buf.Len() == 3 })

	resp, err := idgenv1.NewIDServiceClient(ts.conn).GetIDBatch(ctxT(t), &idgenv1.GetIDBatchRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetIds()) != 100 || resp.GetSlot() != 5 || resp.GetNode() != "node-1" || resp.GetNodeId() != "0123456789abcdef0123456789abcdef" {
		t.Fatalf("got %d ids slot %d node %q (%q)", len(resp.GetIds()), resp.GetSlot(), resp.GetNode(), resp.GetNodeId())
	}
	if got := counterValue(t, ts.reg, "idgen_batches_served_total", "source", "buffer"); got != 1 {
		t.Fatalf("buffer batches served = %v, want 1", got)
	}
	seen := map[int64]bool{}
	for _, id := range resp.GetIds() {
		if seen[id] {
			t.Fatalf("duplicate id %d", id)
		}
		seen[id] = true
	}
}

func TestGetIDBatchOtherCountMintsDirectly(t *testing.T) {
	ts := startServer(t, newFakeBackend(1), ServerConfig{BatchSize: 100})
	resp, err := idgenv1.NewIDServiceClient(ts.conn).GetIDBatch(ctxT(t), &idgenv1.GetIDBatchRequest{Count: 7})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetIds()) != 7 || resp.GetSlot() != 1 {
		t.Fatalf("got %d ids slot %d", len(resp.GetIds()), resp.GetSlot())
	}
}

func TestGetIDBatchCountOverMax(t *testing.T) {
	ts := startServer(t, newFakeBackend(1), ServerConfig{BatchSize: 10, MaxCount: 500})
	_, err := idgenv1.NewIDServiceClient(ts.conn).GetIDBatch(ctxT(t), &idgenv1.GetIDBatchRequest{Count: 501})
	wantCode(t, err, codes.InvalidArgument, "maximum of 500")
}

func TestGetIDBatchNotReady(t *testing.T) {
	b := newFakeBackend(1)
	b.setReady(false, "no slot: cluster full")
	ts := startServer(t, b, ServerConfig{BatchSize: 10})
	c := idgenv1.NewIDServiceClient(ts.conn)
	_, err := c.GetIDBatch(ctxT(t), &idgenv1.GetIDBatchRequest{})
	wantCode(t, err, codes.Unavailable, "no slot: cluster full")
	_, err = c.GetIDBatch(ctxT(t), &idgenv1.GetIDBatchRequest{Count: 3})
	wantCode(t, err, codes.Unavailable, "no slot: cluster full")
}

func TestBufferedIDsServedAfterLosingReadinessThenUnavailable(t *testing.T) {
	b := newFakeBackend(1)
	ts := startServer(t, b, ServerConfig{BatchSize: 10, BufferDepth: 2})
	harness.WaitFor(t, 5*time.Second, "buffer full", func() bool { return ts.srv.buf.Len() == 2 })
	b.setReady(false, "clock skew")
	c := idgenv1.NewIDServiceClient(ts.conn)
	// The buffer's batches (plus at most one the producer held when readiness
	// went) are still served, then the node answers Unavailable with the reason.
	served := 0
	for {
		_, err := c.GetIDBatch(ctxT(t), &idgenv1.GetIDBatchRequest{})
		if err != nil {
			wantCode(t, err, codes.Unavailable, "clock skew")
			break
		}
		served++
		if served > 3 {
			t.Fatal("served more batches than were buffered while ready")
		}
	}
	if served < 2 {
		t.Fatalf("served %d buffered batches, want at least 2", served)
	}
}

func TestGetIDBatchNoRoomWithinDeadline(t *testing.T) {
	b := newFakeBackend(1)
	b.set(func(f *fakeBackend) { f.block = true })
	ts := startServer(t, b, ServerConfig{BatchSize: 10})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := idgenv1.NewIDServiceClient(ts.conn).GetIDBatch(ctx, &idgenv1.GetIDBatchRequest{Count: 3})
	// The server sees its deadline pass while waiting; the client may see its
	// own deadline first. Either way the call is not retried as Unavailable.
	if c := status.Code(err); c != codes.ResourceExhausted && c != codes.DeadlineExceeded {
		t.Fatalf("code = %v (%v)", c, err)
	}
}

func TestHealthFollowsReadiness(t *testing.T) {
	b := newFakeBackend(1)
	ts := startServer(t, b, ServerConfig{})
	h := healthpb.NewHealthClient(ts.conn)
	check := func(svc string) healthpb.HealthCheckResponse_ServingStatus {
		resp, err := h.Check(ctxT(t), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil {
			t.Fatalf("check %q: %v", svc, err)
		}
		return resp.GetStatus()
	}
	harness.WaitFor(t, 5*time.Second, "ready SERVING", func() bool { return check(IDServiceName) == healthpb.HealthCheckResponse_SERVING })
	b.setReady(false, "no leader")
	harness.WaitFor(t, 5*time.Second, "NOT_SERVING", func() bool { return check(IDServiceName) == healthpb.HealthCheckResponse_NOT_SERVING })
	if got := check(""); got != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf(`"" = %v while alive`, got)
	}
	b.setReady(true, "")
	harness.WaitFor(t, 5*time.Second, "SERVING again", func() bool { return check(IDServiceName) == healthpb.HealthCheckResponse_SERVING })

	ts.srv.Shutdown(time.Second)
	for _, svc := range []string{"", IDServiceName} {
		resp, err := ts.srv.health.Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Fatalf("after shutdown %q: %v %v", svc, resp, err)
		}
	}
}

func TestShutdownBoundedWithStuckCall(t *testing.T) {
	b := newFakeBackend(1)
	b.set(func(f *fakeBackend) { f.block = true })
	ts := startServer(t, b, ServerConfig{BatchSize: 10})
	callErr := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err := idgenv1.NewIDServiceClient(ts.conn).GetIDBatch(ctx, &idgenv1.GetIDBatchRequest{Count: 3})
		callErr <- err
	}()
	harness.WaitFor(t, 5*time.Second, "call in flight", func() bool { return b.blockedCalls(3) == 1 })
	start := time.Now()
	ts.srv.Shutdown(200 * time.Millisecond)
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("Shutdown took %s", d)
	}
	select {
	case err := <-callErr:
		if err == nil {
			t.Fatal("stuck call succeeded")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("stuck call did not end after forced stop")
	}
}

func TestClusterServiceHandlers(t *testing.T) {
	b := newFakeBackend(4)
	b.set(func(f *fakeBackend) { f.faultErr = cluster.ErrFaultInjectionDisabled })
	ts := startServer(t, b, ServerConfig{})
	admin := idgenv1.NewClusterServiceClient(ts.conn)

	st, err := admin.Status(ctxT(t), &idgenv1.StatusRequest{})
	if err != nil || st.GetSlot() != 4 || st.GetLayout() == "" || st.GetRaftState() != "Leader" {
		t.Fatalf("status = %v, %v", st, err)
	}
	_, err = admin.Remove(ctxT(t), &idgenv1.RemoveRequest{Node: "ghost"})
	wantCode(t, err, codes.NotFound, "ghost")
	rm, err := admin.Remove(ctxT(t), &idgenv1.RemoveRequest{Node: "n2"})
	if err != nil || rm.GetFreedSlot() != 3 {
		t.Fatalf("remove = %v, %v", rm, err)
	}
	_, err = admin.Remove(ctxT(t), &idgenv1.RemoveRequest{})
	wantCode(t, err, codes.InvalidArgument, "")
	_, err = admin.Join(ctxT(t), &idgenv1.JoinRequest{})
	wantCode(t, err, codes.InvalidArgument, "gossip address")
	_, err = admin.Join(ctxT(t), &idgenv1.JoinRequest{Addrs: []string{"127.0.0.1:1"}})
	wantCode(t, err, codes.Unavailable, "127.0.0.1:1")
	_, err = admin.Fault(ctxT(t), &idgenv1.FaultRequest{ClockOffsetMs: 1000})
	wantCode(t, err, codes.FailedPrecondition, "--enable-fault-injection")
	hist, err := admin.History(ctxT(t), &idgenv1.HistoryRequest{})
	if err != nil || len(hist.GetTenures()) != 1 || hist.GetTenures()[0].GetSlot() != 4 {
		t.Fatalf("history = %v, %v", hist, err)
	}

	select {
	case <-ts.srv.Left():
		t.Fatal("Left closed before Leave")
	default:
	}
	if _, err := admin.Leave(ctxT(t), &idgenv1.LeaveRequest{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ts.srv.Left():
	default:
		t.Fatal("Left not closed after Leave returned")
	}
	b.mu.Lock()
	left := b.left
	b.mu.Unlock()
	if !left {
		t.Fatal("Backend.Leave not called")
	}
}

func TestPeerForwarderRoundTrip(t *testing.T) {
	b := newFakeBackend(1)
	ts := startServer(t, b, ServerConfig{})
	fwd := NewPeerForwarder()
	defer fwd.Close()

	b.set(func(f *fakeBackend) {
		f.applyFn = func(_ context.Context, cmd []byte) ([]byte, error) {
			return append([]byte("ok:"), cmd...), nil
		}
	})
	// No deadline on ctx: the forwarder adds one, or the server would refuse.
	res, err := fwd.Forward(context.Background(), ts.addr, []byte("x"))
	if err != nil || string(res) != "ok:x" {
		t.Fatalf("forward = %q, %v", res, err)
	}

	for _, sentinel := range []error{cluster.ErrNotOwner, cluster.ErrClusterFull, cluster.ErrClockSkew, cluster.ErrLayoutMismatch, cluster.ErrNotLeader} {
		b.set(func(f *fakeBackend) {
			f.applyFn = func(context.Context, []byte) ([]byte, error) {
				return nil, errors.Join(errors.New("leader says"), sentinel)
			}
		})
		_, err := fwd.Forward(ctxT(t), ts.addr, []byte("x"))
		if !errors.Is(err, sentinel) {
			t.Fatalf("forwarded %v came back as %v", sentinel, err)
		}
	}

	fwd.Close()
	if _, err := fwd.Forward(ctxT(t), ts.addr, []byte("x")); !errors.Is(err, ErrForwarderClosed) {
		t.Fatalf("after Close: %v", err)
	}
}

func TestAdminHandler(t *testing.T) {
	b := newFakeBackend(1)
	ts := startServer(t, b, ServerConfig{BatchSize: 10})
	// Serve one batch so the labelled counters exist.
	if _, err := idgenv1.NewIDServiceClient(ts.conn).GetIDBatch(ctxT(t), &idgenv1.GetIDBatchRequest{}); err != nil {
		t.Fatal(err)
	}
	web := httptest.NewServer(NewAdminHandler(b, ts.reg))
	defer web.Close()
	get := func(path string) (int, string) {
		resp, err := http.Get(web.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if code, body := get("/healthz"); code != 200 || strings.TrimSpace(body) != "ok" {
		t.Fatalf("/healthz = %d %q", code, body)
	}
	if code, _ := get("/readyz"); code != 200 {
		t.Fatalf("/readyz ready = %d", code)
	}
	b.setReady(false, "no raft leader known")
	if code, body := get("/readyz"); code != 503 || !strings.Contains(body, "no raft leader known") {
		t.Fatalf("/readyz not ready = %d %q", code, body)
	}
	code, body := get("/metrics")
	if code != 200 {
		t.Fatalf("/metrics = %d", code)
	}
	for _, name := range []string{
		"idgen_ids_issued_total 10", "idgen_batches_served_total", "idgen_cluster_conflict 0",
		"idgen_cluster_slots_free 7", "idgen_cluster_standbys 0", "idgen_clock_skew_seconds 0",
		`grpc_server_handled_total{grpc_code="OK",grpc_method="GetIDBatch",grpc_service="idgen.v1.IDService",grpc_type="unary"} 1`,
		`grpc_server_handling_seconds_bucket{grpc_method="GetIDBatch"`, `grpc_server_handled_total{grpc_code="OK",grpc_method="Join"`,
		"idgen_buffer_depth", "idgen_granted_lead_seconds", `idgen_raft_state{state="leader"} 1`,
		`idgen_raft_state{state="follower"} 0`, "idgen_layout_seconds_remaining", "idgen_ready 0",
	} {
		if !strings.Contains(body, name) {
			t.Errorf("/metrics lacks %q", name)
		}
	}
}

func counterValue(t *testing.T, g prometheus.Gatherer, name, label, value string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if label == "" {
				return m.GetCounter().GetValue()
			}
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label && lp.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

func TestNewServerValidatesConfig(t *testing.T) {
	for _, cfg := range []ServerConfig{
		{},
		{Backend: newFakeBackend(0), BatchSize: -1},
		{Backend: newFakeBackend(0), BatchSize: 600, MaxCount: 500},
		{Backend: newFakeBackend(0), MaxCount: 1 << 30},
		{Backend: newFakeBackend(0), BufferDepth: -2},
	} {
		if _, err := NewServer(cfg); err == nil {
			t.Errorf("NewServer(%+v) accepted", cfg)
		}
	}
}

// TestWithdrawnBatchesAreNeverHandedOut: batches minted in a tenure that has
// ended since (after a fence, possibly another cluster's IDs) are dropped
// from the buffer, whether the node is ready (a new tenure) or not, and
// counted; none reaches a caller.
func TestWithdrawnBatchesAreNeverHandedOut(t *testing.T) {
	for _, ready := range []bool{true, false} {
		t.Run(fmt.Sprintf("ready=%v", ready), func(t *testing.T) {
			b := newFakeBackend(1)
			ts := startServer(t, b, ServerConfig{BatchSize: 10, BufferDepth: 3})
			harness.WaitFor(t, 5*time.Second, "buffer full", func() bool { return ts.srv.buf.Len() == 3 })
			b.mu.Lock()
			// Every ID minted so far, and the batch the producer may hold.
			limit, err := b.layout.Compose(1+(b.counter+10)/b.layout.SequencePerUnit(), b.slot, (b.counter+10)%b.layout.SequencePerUnit())
			if err != nil {
				b.mu.Unlock()
				t.Fatal(err)
			}
			b.withdrawnBelow = limit
			b.mu.Unlock()
			if !ready {
				b.setReady(false, "slot lost: tenure ended")
			}
			c := idgenv1.NewIDServiceClient(ts.conn)
			resp, err := c.GetIDBatch(ctxT(t), &idgenv1.GetIDBatchRequest{})
			if !ready {
				wantCode(t, err, codes.Unavailable, "tenure ended")
			} else if err != nil {
				t.Fatal(err)
			} else if ids := resp.GetIds(); len(ids) != 10 || ids[0] < limit {
				t.Fatalf("handed out %d IDs from %d, below the withdrawn limit %d", len(ids), ids[0], limit)
			}
			if got := counterValue(t, ts.reg, "idgen_ids_withdrawn_total", "", ""); got < 30 {
				t.Fatalf("%v IDs counted as withdrawn, want the 30 buffered", got)
			}
		})
	}
}
