package idclient

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/idgen/idgen/rpc"
)

// pace draws rate IDs a second from p for d, in steps of a millisecond, and
// returns the longest single NextID after warmup and the first error.
func pace(p *Pool, rate int, d, warmup time.Duration) (time.Duration, error) {
	start := time.Now()
	var worst time.Duration
	for step := 0; time.Since(start) < d; step++ {
		due := start.Add(time.Duration(step) * time.Millisecond)
		if w := time.Until(due); w > 0 {
			time.Sleep(w)
		}
		for range rate / 1000 {
			t0 := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err := p.NextID(ctx)
			cancel()
			if err != nil {
				return worst, err
			}
			if time.Since(start) > warmup {
				worst = max(worst, time.Since(t0))
			}
		}
	}
	return worst, nil
}

// Draws at 5000 IDs a second in batches of 50 make the pool keep far more
// than its minimum lookahead of 1 ready.
func TestPoolLookaheadFollowsDrawRate(t *testing.T) {
	n := startNode(t, 0, rpc.ServerConfig{BatchSize: 50})
	p := newPool(t, n.addr, PoolOptions{BatchSize: 50, Lookahead: 1})
	most := make(chan int, 1)
	go func() {
		m := 0
		deadline := time.Now().Add(time.Second)
		for time.Now().Before(deadline) {
			m = max(m, readyBatches(p))
			time.Sleep(5 * time.Millisecond)
		}
		most <- m
	}()
	if _, err := pace(p, 5000, time.Second, 0); err != nil {
		t.Fatal(err)
	}
	if m := <-most; m < 10 {
		t.Fatalf("at most %d batches ready at 5000 IDs/s in batches of 50; want 10 or more", m)
	}
	if m := p.drawn.lookahead(time.Now(), 1, 50, time.Hour); m > maxLookahead {
		t.Fatalf("lookahead %d over its bound %d", m, maxLookahead)
	}
}

// A node that accepts calls and never answers does not stall a pool drawing
// steadily: its fetch is hedged to another node long before the pool runs dry.
func TestPoolDoesNotStallOnSilentNode(t *testing.T) {
	silent := startSilentNode(t)
	a := startNode(t, 0, rpc.ServerConfig{BatchSize: 100})
	b := startNode(t, 1, rpc.ServerConfig{BatchSize: 100})
	p := newPool(t, strings.Join([]string{a.addr, b.addr, silent.addr}, ","), PoolOptions{BatchSize: 100})
	worst, err := pace(p, 2000, 3*time.Second, 500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if silent.calls.Load() == 0 {
		t.Fatal("the silent node was never asked; the test proves nothing")
	}
	if worst > 100*time.Millisecond {
		t.Fatalf("a NextID waited %s with one silent node", worst)
	}
}
