package idclient

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idgen/idgen/generator"
	idgenv1 "github.com/idgen/idgen/proto/idgen/v1"
	"github.com/idgen/idgen/rpc"
	"github.com/idgen/idgen/rpc/rpctest"
	"github.com/idgen/idgen/scripts/harness"
)

// fastLayout is the process tests' 10 ms layout: 204,800 IDs a second per slot.
func fastLayout(t *testing.T) generator.Layout {
	t.Helper()
	l, err := generator.ParseSpec("35/2/1/11 unit=10ms")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// startLayoutNode serves slot of a cluster of layout l, minting from now.
func startLayoutNode(t *testing.T, slot int, l generator.Layout) string {
	t.Helper()
	f := rpctest.NewNode(slot)
	f.SetLayout(l)
	f.StartAt(l.Units(time.Now()))
	_, addr := rpctest.Serve(t, rpc.ServerConfig{Backend: f, NodeName: "node-" + l.String()[:2] + "-" + string(rune('0'+slot)), BatchSize: 100})
	return addr
}

// The client takes the layout the cluster serves and checks every batch
// against it: IDs of a 49-bit layout, which the default layout's check
// would refuse as out of the layout, are accepted and decode to their slot.
func TestClientLearnsTheClusterLayout(t *testing.T) {
	fast := fastLayout(t)
	c := dial(t, startLayoutNode(t, 1, fast)+","+startLayoutNode(t, 2, fast))
	if _, ok := c.Layout(); ok {
		t.Fatal("a client that has fetched nothing knows a layout")
	}
	seen := map[int]bool{}
	harness.WaitFor(t, 10*time.Second, "batches from both nodes", func() bool {
		b, err := c.FetchBatch(context.Background(), 50)
		if err != nil {
			t.Fatalf("FetchBatch: %v", err)
		}
		for _, id := range b.IDs {
			if p, err := fast.Decompose(id); err != nil || p.Slot != b.Slot || id <= generator.DefaultLayout().MaxID() {
				t.Fatalf("ID %d of slot %d: %+v, %v", id, b.Slot, p, err)
			}
		}
		seen[b.Slot] = true
		return len(seen) == 2
	})
	if l, ok := c.Layout(); !ok || l != fast {
		t.Fatalf("Layout() = %s, %v; want %s", l, ok, fast)
	}
}

// A node serving another layout than the one the client has is refused like
// a malformed batch, named with both layouts, and its IDs never reach the
// caller; the balancer then leaves it out.
func TestClientRefusesANodeOfAnotherLayout(t *testing.T) {
	fast := fastLayout(t)
	good, odd := startLayoutNode(t, 1, fast), startLayoutNode(t, 2, generator.DefaultLayout())
	c := dial(t, good+","+odd, WithLayout(fast))
	refused := 0
	for range 40 {
		b, err := c.FetchBatch(context.Background(), 10)
		switch {
		case errors.Is(err, ErrBadBatch):
			refused++
			if !strings.Contains(err.Error(), generator.DefaultLayout().String()) || !strings.Contains(err.Error(), fast.String()) ||
				!strings.Contains(err.Error(), "pinned by WithLayout") {
				t.Fatalf("refusal %v does not name both layouts", err)
			}
		case err != nil:
			t.Fatalf("FetchBatch: %v", err)
		case b.Slot != 1:
			t.Fatalf("a batch of slot %d, the odd node's, was accepted", b.Slot)
		}
	}
	if refused == 0 {
		t.Fatal("the odd node was never asked: the test proves nothing")
	}

	// Unpinned, the first node to answer decides; the other is refused.
	solo := dial(t, odd)
	if _, err := solo.FetchBatch(context.Background(), 10); err != nil {
		t.Fatal(err)
	}
	if l, _ := solo.Layout(); l != generator.DefaultLayout() {
		t.Fatalf("learnt %s, want the default", l)
	}
	// The same layouts, met in the other order by one client.
	var ls layouts
	if _, err := ls.of(&idgenv1.GetIDBatchResponse{Node: "a", Layout: fast.String()}); err != nil {
		t.Fatal(err)
	}
	_, err := ls.of(&idgenv1.GetIDBatchResponse{Node: "b"}) // no layout: an older node, of the default
	if !errors.Is(err, ErrBadBatch) || !strings.Contains(err.Error(), `first served by node "a"`) ||
		!strings.Contains(err.Error(), generator.DefaultLayout().String()) {
		t.Fatalf("a default-layout node after a 10 ms one: %v", err)
	}
	if _, err := (&layouts{}).of(&idgenv1.GetIDBatchResponse{Node: "c", Layout: "forty bits"}); !errors.Is(err, ErrBadBatch) {
		t.Fatalf("an unreadable layout: %v", err)
	}
	if _, err := Dial(good, WithLayout(generator.Layout{})); !errors.Is(err, ErrBadOption) {
		t.Fatalf("WithLayout of no layout: %v", err)
	}
}

// A pool given a code key makes its codec for the cluster's layout: codes
// have the length that layout predicts for IDs minted now (8 characters in
// the 10 ms layout, 9 from 2030) and decode back. A codec made for another
// layout is refused.
func TestPoolCodesFollowTheClusterLayout(t *testing.T) {
	fast := fastLayout(t)
	addr := startLayoutNode(t, 3, fast)
	key := make([]byte, generator.CodeKeySize)
	pool, err := NewPool(dial(t, addr), PoolOptions{CodeKey: key, CodeTweak: []byte("layout-test")})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	want := fast.CodeLenAt(time.Now())
	for range 100 {
		code, err := pool.NextCode(ctx)
		if err != nil {
			t.Fatal(err)
		}
		codec, err := pool.Codec()
		if err != nil || codec.Layout() != fast {
			t.Fatalf("Codec() = %v, %v; want one for %s", codec, err, fast)
		}
		id, err := codec.Decode(code)
		if err != nil || len(code) != want || len(code) != generator.CodeLen(id) {
			t.Fatalf("code %q (ID %d, %v): %d characters, want %d", code, id, err, len(code), want)
		}
	}

	other, err := generator.NewCodec(key, nil, generator.DefaultLayout())
	if err != nil {
		t.Fatal(err)
	}
	wrong, err := NewPool(dial(t, addr), PoolOptions{Codec: other})
	if err != nil {
		t.Fatal(err)
	}
	defer wrong.Close()
	if code, err := wrong.NextCode(ctx); !errors.Is(err, generator.ErrOutOfLayout) || !strings.Contains(err.Error(), fast.String()) {
		t.Fatalf("NextCode with a default-layout codec = %q, %v; want ErrOutOfLayout naming %s", code, err, fast)
	}
	if _, err := NewPool(dial(t, addr), PoolOptions{CodeKey: []byte("short")}); !errors.Is(err, ErrBadOption) {
		t.Fatalf("a short code key: %v", err)
	}
	if _, err := NewPool(dial(t, addr), PoolOptions{CodeKey: key, Codec: other}); !errors.Is(err, ErrBadOption) {
		t.Fatalf("both a key and a codec: %v", err)
	}
}
