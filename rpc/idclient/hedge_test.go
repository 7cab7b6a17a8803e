package idclient

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	idgenv1 "github.com/idgen/idgen/proto/idgen/v1"
	"github.com/idgen/idgen/rpc"
	"github.com/idgen/idgen/scripts/harness"
)

// silentNode is a real gRPC server that reports SERVING and accepts
// GetIDBatch but never answers it, as a paused or cut-off node whose
// connection is still open.
type silentNode struct {
	idgenv1.UnimplementedIDServiceServer
	calls atomic.Int64
	addr  string
}

func (s *silentNode) GetIDBatch(ctx context.Context, _ *idgenv1.GetIDBatchRequest) (*idgenv1.GetIDBatchResponse, error) {
	s.calls.Add(1)
	<-ctx.Done()
	return nil, ctx.Err()
}

func startSilentNode(t *testing.T) *silentNode {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &silentNode{addr: lis.Addr().String()}
	srv := grpc.NewServer()
	idgenv1.RegisterIDServiceServer(srv, s)
	hs := health.NewServer()
	hs.SetServingStatus(HealthService, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(srv, hs)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return s
}

// A node that never answers costs a call one hedge delay, not the call
// timeout, and is ejected after a few such calls.
func TestHedgedCallSkipsSilentNode(t *testing.T) {
	silent := startSilentNode(t)
	a := startNode(t, 0, rpc.ServerConfig{BatchSize: 10})
	b := startNode(t, 1, rpc.ServerConfig{BatchSize: 10})
	target := strings.Join([]string{silent.addr, a.addr, b.addr}, ",")
	c := dial(t, target, WithCallTimeout(5*time.Second), WithHedge(30*time.Millisecond, 3))
	harness.WaitFor(t, 10*time.Second, "the silent node picked", func() bool {
		if _, err := c.GetIDBatch(context.Background(), 3); err != nil {
			t.Fatalf("GetIDBatch: %v", err)
		}
		return silent.calls.Load() > 0
	})
	var worst time.Duration
	for range 60 {
		start := time.Now()
		ids, err := c.GetIDBatch(context.Background(), 3)
		if err != nil || len(ids) != 3 {
			t.Fatalf("GetIDBatch: %d IDs, %v", len(ids), err)
		}
		worst = max(worst, time.Since(start))
	}
	// Without hedging a call to the silent node waits the whole 5 s.
	if worst > time.Second {
		t.Fatalf("slowest call %s with a silent node and a 30ms hedge delay", worst)
	}
	// Ejected after ejectAfterFailures unanswered attempts (and a few racing ones).
	if n := silent.calls.Load(); n > ejectAfterFailures+3 {
		t.Fatalf("the silent node got %d attempts; want it ejected after %d", n, ejectAfterFailures)
	}
}

// With hedging off (one attempt), the same node holds the call for the
// whole timeout: the behaviour hedging replaces.
func TestUnhedgedCallWaitsForSilentNode(t *testing.T) {
	silent := startSilentNode(t)
	c := dial(t, silent.addr, WithCallTimeout(300*time.Millisecond), WithHedge(time.Second, 1))
	start := time.Now()
	if _, err := c.GetIDBatch(context.Background(), 3); err == nil {
		t.Fatal("a silent node answered")
	}
	if d := time.Since(start); d < 250*time.Millisecond {
		t.Fatalf("call returned after %s, before its timeout", d)
	}
}

// Options out of range are refused by Dial, before anything is dialled.
func TestDialRefusesBadHedgeAndRefresh(t *testing.T) {
	for name, opt := range map[string]Option{
		"zero delay":        WithHedge(0, 3),
		"negative delay":    WithHedge(-time.Second, 3),
		"no attempts":       WithHedge(time.Millisecond, 0),
		"too many attempts": WithHedge(time.Millisecond, maxHedgeAttempts+1),
		"refresh 0":         WithRefreshInterval(0),
		"refresh 10ms":      WithRefreshInterval(10 * time.Millisecond),
	} {
		if c, err := Dial("127.0.0.1:1", opt); !errors.Is(err, ErrBadOption) {
			if c != nil {
				c.Close()
			}
			t.Errorf("%s: Dial error %v, want ErrBadOption", name, err)
		}
	}
}

// hedge itself: a failed attempt starts the next at once, errors that
// another node cannot change are returned as they are, and every attempt
// failing returns the last error.
func TestHedgeRules(t *testing.T) {
	errRetry, errFinal := errors.New("retry"), errors.New("final")
	retry := func(err error) bool { return errors.Is(err, errRetry) }
	var n atomic.Int64
	v, err := hedge(context.Background(), 3, time.Hour, retry, func(context.Context) (int64, error) {
		if n.Add(1) < 3 {
			return 0, errRetry
		}
		return 7, nil
	})
	if v != 7 || err != nil || n.Load() != 3 {
		t.Fatalf("got %d, %v after %d attempts; want 7 after 3", v, err, n.Load())
	}
	n.Store(0)
	if _, err := hedge(context.Background(), 3, time.Hour, retry, func(context.Context) (int, error) {
		n.Add(1)
		return 0, errFinal
	}); !errors.Is(err, errFinal) || n.Load() != 1 {
		t.Fatalf("final error: %v after %d attempts; want errFinal after 1", err, n.Load())
	}
	n.Store(0)
	if _, err := hedge(context.Background(), 2, time.Hour, retry, func(context.Context) (int, error) {
		n.Add(1)
		return 0, errRetry
	}); !errors.Is(err, errRetry) || n.Load() != 2 {
		t.Fatalf("all failing: %v after %d attempts; want errRetry after 2", err, n.Load())
	}
	// A slow attempt loses to a later one and is cancelled as too slow.
	slowCause := make(chan error, 1)
	v, err = hedge(context.Background(), 2, 10*time.Millisecond, retry, func(ctx context.Context) (int64, error) {
		if n.Add(1) == 3 {
			<-ctx.Done()
			slowCause <- context.Cause(ctx)
			return 0, ctx.Err()
		}
		return 9, nil
	})
	if v != 9 || err != nil {
		t.Fatalf("hedged: %d, %v", v, err)
	}
	if cause := <-slowCause; !errors.Is(cause, errAttemptTooSlow) {
		t.Fatalf("the slow attempt was cancelled with %v, want errAttemptTooSlow", cause)
	}
}
