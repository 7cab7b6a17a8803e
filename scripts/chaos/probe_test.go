package chaos

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idgen/idgen/rpc/idclient"
	"github.com/idgen/idgen/scripts/harness"
)

// A probe draws through the client library for the whole run, as a
// shortener would, and keeps every call that failed or took long, so that
// each fault can be charged with what clients saw while it lasted: a Pool
// (NextID, what shorteners run) and plain GetIDBatch calls (hedged and
// retried by the client, but with no prefetching in front of them).
const (
	// slowCall: calls faster than this are not kept; a stall under it
	// is no stall.
	slowCall = time.Millisecond
	// stallGoal is what a Pool client may wait through a single-node fault.
	stallGoal = 100 * time.Millisecond
)

type sample struct {
	at     time.Time
	took   time.Duration
	failed bool
}

type probe struct {
	mu    sync.Mutex
	calls int64
	slow  []sample // calls that failed or took slowCall or more
}

func (p *probe) record(at time.Time, took time.Duration, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls++
	if err != nil || took >= slowCall {
		p.slow = append(p.slow, sample{at: at, took: took, failed: err != nil})
	}
}

// pace calls draw perSecond times a second until ctx ends (harness.Pace),
// each within 5 s, and records every call that did not end with ctx.
func (p *probe) pace(ctx context.Context, perSecond int, draw func(context.Context) error) {
	harness.Pace(ctx, perSecond, 5*time.Second, func(cctx context.Context) {
		t0 := time.Now()
		err := draw(cctx)
		if ctx.Err() != nil {
			return
		}
		p.record(t0, time.Since(t0), err)
	})
}

// probes are a Pool and a raw-call probe over every node of c.
type probes struct {
	pool, raw probe
	stop      func()
}

// startProbes draws poolRate IDs a second through a Pool and rawRate
// GetIDBatch calls of 16 IDs a second, through one client of all nodes.
func startProbes(c *cluster, poolRate, rawRate int) (*probes, error) {
	client, err := idclient.Dial(c.grpcTargets(), idclient.WithDialOptions(c.creds))
	if err != nil {
		return nil, err
	}
	pool, err := idclient.NewPool(client, idclient.PoolOptions{})
	if err != nil {
		client.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	ps := &probes{}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		ps.pool.pace(ctx, poolRate, func(ctx context.Context) error { _, err := pool.NextID(ctx); return err })
	}()
	go func() {
		defer wg.Done()
		ps.raw.pace(ctx, rawRate, func(ctx context.Context) error { _, err := client.GetIDBatch(ctx, 16); return err })
	}()
	var once sync.Once
	ps.stop = func() {
		once.Do(func() {
			cancel()
			wg.Wait()
			pool.Close()
			client.Close()
		})
	}
	return ps, nil
}

// span is one injected fault, from injection to recovery.
type span struct {
	name       string
	start, end time.Time
}

// faultClass: faults that stop every node, or several, are reported apart
// from single-node faults, which clients should not notice.
func faultClass(name string) string {
	switch {
	case strings.Contains(name, "every node"):
		return "all nodes"
	case strings.Contains(name, "two nodes"):
		return "two nodes"
	default:
		return "single node"
	}
}

// charge is what one probe saw during some faults.
type charge struct {
	runs   int
	failed int
	worst  time.Duration
}

func (ch *charge) add(s sample) {
	if s.failed {
		ch.failed++
	}
	ch.worst = max(ch.worst, s.took)
}

func (ch charge) String() string {
	return fmt.Sprintf("failed=%d worst_stall=%dms", ch.failed, ch.worst.Milliseconds())
}

// perFault charges each slow or failed call to the fault during which it
// started, by fault name and by class. Calls outside every fault go to "".
func perFault(p *probe, spans []span) (byName, byClass map[string]*charge) {
	byName, byClass = map[string]*charge{}, map[string]*charge{}
	get := func(m map[string]*charge, k string) *charge {
		if m[k] == nil {
			m[k] = &charge{}
		}
		return m[k]
	}
	for _, s := range spans {
		get(byName, s.name).runs++
		get(byClass, faultClass(s.name)).runs++
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, smp := range p.slow {
		name := ""
		for _, s := range spans {
			if !smp.at.Before(s.start) && !smp.at.After(s.end) {
				name = s.name
				break
			}
		}
		get(byName, name).add(smp)
		class := ""
		if name != "" {
			class = faultClass(name)
		}
		get(byClass, class).add(smp)
	}
	return byName, byClass
}

// faultLines are the per-fault report: one line per fault name and one per
// class, for the Pool and for raw calls, and whether single-node faults met
// the goal.
func faultLines(prefix string, ps *probes, spans []span) []string {
	poolName, poolClass := perFault(&ps.pool, spans)
	rawName, rawClass := perFault(&ps.raw, spans)
	var names []string
	for n := range poolName {
		if n != "" {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	var out []string
	line := func(kind, key string, pool, raw *charge) {
		if pool == nil {
			pool = &charge{}
		}
		if raw == nil {
			raw = &charge{}
		}
		out = append(out, fmt.Sprintf("%s: %s=%q runs=%d pool_%s raw_%s", prefix, kind, key, pool.runs, pool, raw))
	}
	for _, n := range names {
		line("fault", n, poolName[n], rawName[n])
	}
	for _, cl := range []string{"single node", "two nodes", "all nodes", ""} {
		key := cl
		if cl == "" {
			key = "between faults"
		}
		line("class", key, poolClass[cl], rawClass[cl])
	}
	single := poolClass["single node"]
	if single == nil {
		single = &charge{}
	}
	verdict := "met"
	if single.failed > 0 || single.worst > stallGoal {
		verdict = "MISSED"
	}
	out = append(out, fmt.Sprintf("%s: pool through single-node faults: %s (goal: 0 failed NextID, worst stall <= %dms): %s; pool draws=%d raw calls=%d",
		prefix, single, stallGoal.Milliseconds(), verdict, ps.pool.calls, ps.raw.calls))
	return out
}

// Calls are charged to the fault they started in, faults to their class,
// and calls between faults to neither.
func TestPerFaultCharges(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	spans := []span{
		{name: "kill -9 of the leader", start: at(0), end: at(10)},
		{name: "kill -9 of every node and a cold restart", start: at(20), end: at(30)},
		{name: "kill -9 of the leader", start: at(40), end: at(50)},
	}
	ps := &probes{}
	p := &ps.pool
	p.record(at(1), 50*time.Millisecond, nil)
	p.record(at(41), 150*time.Millisecond, nil)
	p.record(at(42), 5*time.Millisecond, context.DeadlineExceeded)
	p.record(at(25), 3*time.Second, context.DeadlineExceeded)
	p.record(at(35), 2*time.Millisecond, nil)
	p.record(at(36), 10*time.Microsecond, nil) // fast: not kept
	byName, byClass := perFault(p, spans)
	leader := byName["kill -9 of the leader"]
	if leader.runs != 2 || leader.failed != 1 || leader.worst != 150*time.Millisecond {
		t.Errorf("leader kills: %+v", *leader)
	}
	if all := byClass["all nodes"]; all.runs != 1 || all.failed != 1 || all.worst != 3*time.Second {
		t.Errorf("all nodes: %+v", *all)
	}
	if single := byClass["single node"]; single.failed != 1 || single.worst != 150*time.Millisecond {
		t.Errorf("single node: %+v", *single)
	}
	if between := byClass[""]; between.failed != 0 || between.worst != 2*time.Millisecond {
		t.Errorf("between faults: %+v", *between)
	}
	if p.calls != 6 || len(p.slow) != 5 {
		t.Errorf("%d calls, %d kept; want 6 and 5", p.calls, len(p.slow))
	}
	lines := faultLines("x", ps, spans)
	if last := lines[len(lines)-1]; !strings.Contains(last, "MISSED") {
		t.Errorf("a failed NextID and a 150ms stall in a single-node fault, yet: %s", last)
	}
}
