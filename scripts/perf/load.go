package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/peer"

	"github.com/idgen/idgen/generator"
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

// getIDs is getBatch that returns the IDs.
func getIDs(c idgenv1.IDServiceClient, count uint32, d time.Duration) ([]int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	resp, err := c.GetIDBatch(ctx, &idgenv1.GetIDBatchRequest{Count: count})
	return resp.GetIds(), err
}

// firstID asks n for one ID every 10 ms until it answers and returns how
// long after since that was.
func firstID(n *proc, since time.Time, limit time.Duration) (time.Duration, bool) {
	c, done, err := rawClient(n.grpc, n.tls)
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

// flatOut draws as fast as the nodes serve, two callers per node asking
// count IDs at a time (50 for the default layout's 2048 a second). It first
// draws for at least 8 s (at most limit) and until every node's burst is
// spent: the IDs it serves are stamped at the front of what a node may
// stamp, max-ahead past now (a fresh cluster's are from its first ID; an
// idle node's window ends a lead past now). Then it counts the IDs
// received for d. It returns that rate and, per node, the IDs it served
// before its first call held over 200 ms (waiting for room). A zero layout
// (a bare server) skips the wait for the front.
func flatOut(nodes []*proc, d, limit time.Duration, count uint32, l generator.Layout, maxAhead time.Duration) (float64, []int64) {
	var wg sync.WaitGroup
	var counting, stop atomic.Bool
	var total atomic.Int64
	counted := make([]atomic.Int64, len(nodes))
	failed := make([]atomic.Int64, len(nodes))
	bursts := make([]atomic.Int64, len(nodes))
	waited := make([]atomic.Bool, len(nodes))
	front := make([]atomic.Int64, len(nodes)) // the latest ID's time, Unix ns
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
					ids, err := getIDs(c, count, 3*time.Second)
					if err != nil {
						// A node that cannot serve is not spun on.
						failed[i].Add(1)
						time.Sleep(10 * time.Millisecond)
						continue
					}
					got := len(ids)
					// A node out of room holds a call until its next
					// grant; 200 ms is no scheduling delay.
					if time.Since(t0) > 200*time.Millisecond {
						waited[i].Store(true)
					}
					if !waited[i].Load() {
						bursts[i].Add(int64(got))
					}
					if l.Unit > 0 && got > 0 {
						if p, err := l.Decompose(ids[got-1]); err == nil {
							front[i].Store(p.Time.UnixNano())
						}
					}
					if counting.Load() {
						total.Add(int64(got))
						counted[i].Add(int64(got))
					}
				}
			}()
		}
	}
	// The nodes' prefetch buffers fill from the same window in the first
	// seconds; the rate is the one after that.
	begun := time.Now()
	margin := time.Second + l.Unit
	spent := waitUntil(limit, func() bool {
		if time.Since(begun) < 8*time.Second {
			return false
		}
		for i := range front {
			if l.Unit > 0 && time.Unix(0, front[i].Load()).Before(time.Now().Add(maxAhead-margin)) {
				return false
			}
		}
		return true
	})
	// ahead is how far past now each node's latest ID is stamped; at the
	// cap its change over the count is the grants' lag, not lost IDs.
	ahead := func(i int, at time.Time) time.Duration { return time.Unix(0, front[i].Load()).Sub(at) }
	counting.Store(true)
	t1 := time.Now()
	ahead1 := make([]time.Duration, len(nodes))
	for i := range nodes {
		ahead1[i] = ahead(i, t1)
	}
	time.Sleep(d)
	counting.Store(false)
	t2 := time.Now()
	el := t2.Sub(t1).Seconds()
	rate := float64(total.Load()) / el
	stop.Store(true)
	per := make([]string, len(nodes))
	for i, n := range nodes {
		per[i] = fmt.Sprintf("%s %.0f (%d failed calls", n.name, float64(counted[i].Load())/el, failed[i].Load())
		if l.Unit > 0 {
			per[i] += fmt.Sprintf(", stamping %s ahead at the start, %s at the end", ahead1[i].Round(time.Millisecond), ahead(i, t2).Round(time.Millisecond))
		}
		per[i] += ")"
	}
	note := ""
	if !spent && l.Unit > 0 {
		note = " (a burst was not spent in time: the rate may count some of it)"
	}
	fmt.Fprintf(os.Stderr, "perf: flat out, counted from %.1fs%s: IDs/s per node: %s\n", t1.Sub(begun).Seconds(), note, strings.Join(per, ", "))
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
		// One bound for the step's draws: at hundreds of thousands a second
		// a context each would cost the load more than the draws.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		for ; owed >= 1; owed-- {
			t0 := time.Now()
			_, err := pool.NextID(ctx)
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
		cancel()
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
