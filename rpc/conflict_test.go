package rpc

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/idgen/idgen/cluster"
	idgenv1 "github.com/idgen/idgen/proto/idgen/v1"
	"github.com/idgen/idgen/scripts/harness"
)

// conflictErr is what cluster.Node.Conflict reports after meeting an older
// cluster.
var conflictErr = fmt.Errorf("%w: met cluster 0f0f (older, 3 members) on this network", cluster.ErrClusterConflict)

// wantConflict checks err is the refusal the real path gives a node in
// conflict: Unavailable (the client retries another node) with the
// CLUSTER_CONFLICT reason and the node's message.
func wantConflict(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: served IDs from a node in conflict", what)
	}
	wantCode(t, err, codes.Unavailable, conflictErr.Error())
	reason := ""
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == ErrorDomain {
			reason = info.GetReason()
		}
	}
	if reason != "CLUSTER_CONFLICT" {
		t.Fatalf("%s: reason %q, want CLUSTER_CONFLICT (%v)", what, reason, err)
	}
	if !errors.Is(ErrorFromStatus(err), cluster.ErrClusterConflict) {
		t.Fatalf("%s: %v does not come back as cluster.ErrClusterConflict", what, err)
	}
}

// conflictRefusesEverything serves b, lets the producer fill the buffer,
// sets a conflict on fake (which b serves, maybe wrapped) and checks that no
// batch is served or minted from then on.
func conflictRefusesEverything(t *testing.T, b Backend, fake *fakeBackend) {
	const depth = 2
	ts := startServer(t, b, ServerConfig{BatchSize: 10, BufferDepth: depth})
	// The buffer full and one more batch held by the producer: nothing mints
	// until a batch is taken.
	harness.WaitFor(t, 5*time.Second, "buffer full", func() bool { return ts.srv.buf.Len() == depth && fake.mintCount() == depth+1 })

	fake.set(func(f *fakeBackend) { f.conflict = conflictErr })
	minted := fake.mintCount()
	c := idgenv1.NewIDServiceClient(ts.conn)
	// Buffered IDs were minted before the conflict was known; they may
	// collide with the older cluster's all the same.
	_, err := c.GetIDBatch(ctxT(t), &idgenv1.GetIDBatchRequest{})
	wantConflict(t, "buffered batch", err)
	_, err = c.GetIDBatch(ctxT(t), &idgenv1.GetIDBatchRequest{Count: 7})
	wantConflict(t, "direct batch", err)
	// The drained buffer made room: the producer's held batch goes in and it
	// tries to mint again, and is refused (its backoff starts at 10 ms).
	time.Sleep(harness.Scale(100 * time.Millisecond))
	_, err = c.GetIDBatch(ctxT(t), &idgenv1.GetIDBatchRequest{})
	wantConflict(t, "buffered batch after the producer ran", err)
	if got := fake.mintCount(); got != minted {
		t.Fatalf("%d batches minted after the conflict, want none", got-minted)
	}
	// Health takes the node out of balancers though its Ready says yes.
	harness.WaitFor(t, 5*time.Second, "health NOT_SERVING", func() bool {
		r, err := healthpb.NewHealthClient(ts.conn).Check(ctxT(t), &healthpb.HealthCheckRequest{Service: IDServiceName})
		return err == nil && r.GetStatus() == healthpb.HealthCheckResponse_NOT_SERVING
	})
}

// TestConflictRefusesEveryBatch: a node that met an older cluster hands out
// nothing, neither buffered nor fresh IDs, and mints nothing more, even when
// its Ready and NextBatch (as in this fake) do not look at the conflict.
func TestConflictRefusesEveryBatch(t *testing.T) {
	f := newFakeBackend(2)
	conflictRefusesEverything(t, f, f)
}

// countingBackend is a decorator as one would write it for metrics or
// tracing: it wraps NextBatch and forwards the rest.
type countingBackend struct {
	Backend
	calls atomic.Int64
}

func (c *countingBackend) NextBatch(ctx context.Context, n int) ([]int64, int, error) {
	c.calls.Add(1)
	return c.Backend.NextBatch(ctx, n)
}

// TestConflictSurvivesADecorator: the conflict check is part of Backend, so
// a decorator forwards it like every other method and the node still
// refuses.
func TestConflictSurvivesADecorator(t *testing.T) {
	f := newFakeBackend(2)
	d := &countingBackend{Backend: f}
	conflictRefusesEverything(t, d, f)
	if d.calls.Load() == 0 {
		t.Fatal("the decorator was never called")
	}
}

// noConflict has every serving method but Conflict.
type noConflict struct{}

func (noConflict) NextBatch(context.Context, int) ([]int64, int, error) { return nil, -1, nil }
func (noConflict) Ready() (bool, string)                                { return true, "" }
func (noConflict) Status() cluster.Status                               { return cluster.Status{} }

// TestConflictIsRequired: a serving backend without Conflict does not
// compile as an Issuer or a Backend, so no wrapper can drop the check.
func TestConflictIsRequired(t *testing.T) {
	issuer := reflect.TypeFor[Issuer]()
	if _, ok := issuer.MethodByName("Conflict"); !ok {
		t.Fatal("Issuer does not declare Conflict")
	}
	if reflect.TypeFor[noConflict]().Implements(issuer) {
		t.Fatal("a type without Conflict implements Issuer")
	}
	if !reflect.TypeFor[Backend]().Implements(issuer) {
		t.Fatal("Backend does not include Issuer")
	}
}
