package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/peer"

	idgenv1 "github.com/idgen/idgen/proto/idgen/v1"
	"github.com/idgen/idgen/rpc/idclient"
)

// rawClient is one gRPC connection to one address, with no balancer, health
// gate or retries between the caller and the server.
func rawClient(addr string, tcfg *tls.Config) (idgenv1.IDServiceClient, func(), error) {
	creds := grpc.WithTransportCredentials(insecure.NewCredentials())
	if tcfg != nil {
		creds = grpc.WithTransportCredentials(credentials.NewTLS(tcfg))
	}
	conn, err := grpc.NewClient("passthrough:///"+addr, creds)
	if err != nil {
		return nil, nil, err
	}
	return idgenv1.NewIDServiceClient(conn), func() { conn.Close() }, nil
}

func getBatch(c idgenv1.IDServiceClient, count uint32, d time.Duration) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	resp, err := c.GetIDBatch(ctx, &idgenv1.GetIDBatchRequest{Count: count})
	return len(resp.GetIds()), err
}

// firstID asks n for one ID every 10 ms until it answers and returns how
// long after since that was.
func firstID(n *proc, since time.Time, limit time.Duration) (time.Duration, bool) {
	c, done, err := rawClient(n.grpc, nil)
	if err != nil {
		return 0, false
	}
	defer done()
	ok := waitUntil(limit, func() bool {
		_, err := getBatch(c, 1, 200*time.Millisecond)
		return err == nil
	})
	return time.Since(since), ok
}

// everyNodeServes starts the nodes' first-ID probes together and returns
// when the last one has answered, measured from since.
func everyNodeServes(nodes []*proc, since time.Time, limit time.Duration) (time.Duration, bool) {
	var wg sync.WaitGroup
	var worst atomic.Int64
	var failed atomic.Bool
	for _, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, ok := firstID(n, since, limit)
			if !ok {
				failed.Store(true)
			}
			for {
				w := worst.Load()
				if int64(d) <= w || worst.CompareAndSwap(w, int64(d)) {
					break
				}
			}
		}()
	}
	wg.Wait()
	return time.Duration(worst.Load()), !failed.Load()
}

// perCall is the time one sequential GetIDBatch of count takes over one
// connection to addr, for d.
func perCall(addr string, tcfg *tls.Config, count uint32, d time.Duration) (time.Duration, error) {
	c, done, err := rawClient(addr, tcfg)
	if err != nil {
		return 0, err
	}
	defer done()
	for range 200 { // connection, handshake and warm-up
		if _, err := getBatch(c, count, 2*time.Second); err != nil {
			return 0, err
		}
	}
	calls, start := 0, time.Now()
	for time.Since(start) < d {
		if _, err := getBatch(c, count, 2*time.Second); err != nil {
			return 0, err
		}
		calls++
	}
	return time.Since(start) / time.Duration(calls), nil
}

// flatOut draws as fast as the nodes serve, two callers per node asking 50
// IDs at a time. It first draws until every node has made a call wait over
// 200 ms (its burst is spent) and for at least 8 s (at most limit), then
// counts the IDs received for d. It returns that rate and, per node, the IDs it served before its
// first wait.
func flatOut(nodes []*proc, d, limit time.Duration) (float64, []int64) {
	const count = 50
	var wg sync.WaitGroup
	var counting, stop atomic.Bool
	var total atomic.Int64
	bursts := make([]atomic.Int64, len(nodes))
	waited := make([]atomic.Bool, len(nodes))
	for i, n := range nodes {
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, done, err := rawClient(n.grpc, nil)
				if err != nil {
					return
				}
				defer done()
				for !stop.Load() {
					t0 := time.Now()
					got, err := getBatch(c, count, 3*time.Second)
					if err != nil {
						continue
					}
					// A node out of room holds a call until its next
					// unit (up to a second); 200 ms is no scheduling delay.
					if time.Since(t0) > 200*time.Millisecond {
						waited[i].Store(true)
					}
					if !waited[i].Load() {
						bursts[i].Add(int64(got))
					}
					if counting.Load() {
						total.Add(int64(got))
					}
				}
			}()
		}
	}
	// The nodes' prefetch buffers (5 batches of 1000) fill from the same
	// window in the first seconds; the rate is the one after that.
	begun := time.Now()
	waitUntil(limit, func() bool {
		if time.Since(begun) < 8*time.Second {
			return false
		}
		for i := range waited {
			if !waited[i].Load() {
				return false
			}
		}
		return true
	})
	counting.Store(true)
	t1 := time.Now()
	time.Sleep(d)
	counting.Store(false)
	rate := float64(total.Load()) / time.Since(t1).Seconds()
	stop.Store(true)
	wg.Wait()
	out := make([]int64, len(nodes))
	for i := range bursts {
		out[i] = bursts[i].Load()
	}
	return rate, out
}

// poolRun draws rate IDs a second from a Pool over target for d, one
// millisecond's worth at a time, and calls fault at faultAt (if set). It
// returns every NextID's latency after warm, and the failed calls.
func poolRun(target string, rate int, d, warm, faultAt time.Duration, fault func()) ([]time.Duration, int, error) {
	// Attempts over 20 ms are logged: they explain a stall.
	logSlow := grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any,
		cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		t0 := time.Now()
		var p peer.Peer
		err := invoker(ctx, method, req, reply, cc, append(opts, grpc.Peer(&p))...)
		if d := time.Since(t0); d > 20*time.Millisecond {
			fmt.Fprintf(os.Stderr, "perf: %s to %v took %s: %v\n", method, p.Addr, d.Round(time.Millisecond), err)
		}
		return err
	})
	client, err := idclient.Dial(target, idclient.WithDialOptions(logSlow))
	if err != nil {
		return nil, 0, err
	}
	defer client.Close()
	pool, err := idclient.NewPool(client, idclient.PoolOptions{})
	if err != nil {
		return nil, 0, err
	}
	defer pool.Close()
	var lat []time.Duration
	failed, faulted := 0, fault == nil
	start := time.Now()
	perStep := float64(rate) / 1000
	owed := 0.0
	for step := 0; time.Since(start) < d; step++ {
		if w := time.Until(start.Add(time.Duration(step) * time.Millisecond)); w > 0 {
			time.Sleep(w)
		}
		if !faulted && time.Since(start) >= faultAt {
			faulted = true
			go fault()
		}
		owed += perStep
		for ; owed >= 1; owed-- {
			t0 := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err := pool.NextID(ctx)
			cancel()
			if err != nil {
				failed++
				continue
			}
			if t0.Sub(start) > warm {
				l := time.Since(t0)
				lat = append(lat, l)
				if l > 10*time.Millisecond {
					fmt.Fprintf(os.Stderr, "perf: a NextID waited %s at %.2fs\n", l, t0.Sub(start).Seconds())
				}
			}
		}
	}
	slices.Sort(lat)
	return lat, failed, nil
}

// quantile of sorted durations.
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
}
