package idclient

import (
	"context"
	"testing"

	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/balancer/base"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/status"
)

// These tests drive the ejecting picker builder directly, the way the base
// balancer does: Build on every change of the ready set, Pick and Done per
// call. A SubConn here is only an identity for the picker's bookkeeping.
type testSubConn struct {
	balancer.SubConn
	addr string
}

func readySet(scs ...*testSubConn) base.PickerBuildInfo {
	m := map[balancer.SubConn]base.SubConnInfo{}
	for _, sc := range scs {
		m[sc] = base.SubConnInfo{Address: resolver.Address{Addr: sc.addr}}
	}
	return base.PickerBuildInfo{ReadySCs: m}
}

var errNodeDown = status.Error(codes.Unavailable, "node down")

// pickUntil picks from p until sc is chosen and returns that pick's Done.
func pickUntil(t *testing.T, p balancer.Picker, sc *testSubConn) func(balancer.DoneInfo) {
	t.Helper()
	for range 20 {
		r, err := p.Pick(balancer.PickInfo{Ctx: context.Background()})
		if err != nil {
			t.Fatal(err)
		}
		if r.SubConn == balancer.SubConn(sc) {
			return r.Done
		}
		r.Done(balancer.DoneInfo{})
	}
	t.Fatalf("%s never picked", sc.addr)
	return nil
}

// eject fails ejectAfterFailures calls to sc through p.
func eject(t *testing.T, p balancer.Picker, sc *testSubConn) {
	t.Helper()
	for range ejectAfterFailures {
		pickUntil(t, p, sc)(balancer.DoneInfo{Err: errNodeDown})
	}
}

// picked lists the addresses of n picks.
func picked(t *testing.T, p balancer.Picker, n int) map[string]int {
	t.Helper()
	out := map[string]int{}
	for range n {
		r, err := p.Pick(balancer.PickInfo{Ctx: context.Background()})
		if err != nil {
			t.Fatal(err)
		}
		out[r.SubConn.(*testSubConn).addr]++
	}
	return out
}

func newTestPickerBuilder() *ejectingPickerBuilder {
	return &ejectingPickerBuilder{ej: newEjector()}
}

// Failures reported for picks made under an older, larger picker are judged
// against the nodes ready now: of two nodes, at most one is ejected.
func TestEjectionCapCountsCurrentNodes(t *testing.T) {
	a, b, c, d := &testSubConn{addr: "a"}, &testSubConn{addr: "b"}, &testSubConn{addr: "c"}, &testSubConn{addr: "d"}
	pb := newTestPickerBuilder()
	p4 := pb.Build(readySet(a, b, c, d))
	eject(t, p4, a)
	var inFlight []func(balancer.DoneInfo)
	for range ejectAfterFailures {
		inFlight = append(inFlight, pickUntil(t, p4, b))
	}
	p2 := pb.Build(readySet(a, b)) // c and d went away
	for _, done := range inFlight {
		done(balancer.DoneInfo{Err: errNodeDown})
	}
	if got := picked(t, p2, 10); got["b"] != 10 {
		t.Fatalf("picks over a (ejected) and b: %v; b must stay in, or both of two nodes are ejected", got)
	}
}

// An ejection outlives the node's health flapping (or its connection being
// rebuilt): it is kept by address, not by the SubConn's ready spell.
func TestEjectionSurvivesHealthFlap(t *testing.T) {
	a, b, c := &testSubConn{addr: "a"}, &testSubConn{addr: "b"}, &testSubConn{addr: "c"}
	pb := newTestPickerBuilder()
	eject(t, pb.Build(readySet(a, b, c)), a)
	pb.Build(readySet(b, c))          // a's health check says NOT_SERVING
	a2 := &testSubConn{addr: "a"}     // and its connection is rebuilt
	p := pb.Build(readySet(a2, b, c)) // back, SERVING
	if got := picked(t, p, 9); got["a"] != 0 {
		t.Fatalf("picks after a's health flapped: %v; a is still ejected", got)
	}
}
