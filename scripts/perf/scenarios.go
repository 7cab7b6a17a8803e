package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/idgen/idgen/cluster"
	"github.com/idgen/idgen/generator"
)

// perSlot is the layout's cap: IDs a second one slot can issue.
var perSlot = float64(generator.DefaultLayout().SequencePerUnit())

// quantiles the Pool's latency is reported at.
var quantiles = []struct {
	name string
	q    float64
}{{"p50", 0.5}, {"p99", 0.99}, {"p99.9", 0.999}, {"max", 1}}

// startLimit bounds every wait for a start in this run.
const startLimit = 30 * time.Second

// bareStartup: a bare gRPC server's process start to its first answer, the
// floor any start-to-ready time stands on.
func (b *bench) bareStartup() error {
	t0 := time.Now()
	p, err := b.server("bare", "")
	if err != nil {
		return err
	}
	defer p.Stop()
	c, done, err := rawClient(p.grpc, nil)
	if err != nil {
		return err
	}
	defer done()
	if !waitUntil(startLimit, func() bool { _, err := getBatch(c, 1, 200*time.Millisecond); return err == nil }) {
		return fmt.Errorf("bare server: %w", errNotReady)
	}
	b.bareStart = time.Since(t0)
	return nil
}

func (b *bench) node(name string, expect int) (*proc, error) {
	n, err := newNode(&b.ports, b.idgend, b.root, name, expect)
	if err != nil {
		return nil, err
	}
	n.args = append(n.args, b.nodeArgs...)
	n.tls = b.probeTLS
	b.procs = append(b.procs, n)
	return n, nil
}

// startTimes reports start to ready (/readyz) and to the first ID.
func (b *bench) startTimes(what string, n *proc, since time.Time, goal time.Duration) error {
	var ready time.Duration
	if !waitUntil(startLimit, func() bool { ready = time.Since(since); return n.ready() }) {
		return fmt.Errorf("%s: %w", what, errNotReady)
	}
	first, ok := firstID(n, since, startLimit)
	if !ok {
		return fmt.Errorf("%s: no ID: %w", what, errNotReady)
	}
	base := "bare gRPC server start " + ms(b.bareStart)
	b.add(what+", start to ready", ms(ready), base, "goal "+ms(goal))
	b.add(what+", start to first ID", ms(first), base, "goal "+ms(goal))
	return nil
}

// sustained draws flat out until the nodes' bursts are spent, then for d,
// and reports IDs a second against the layout's cap for the nodes.
func (b *bench) sustained(nodes []*proc, d time.Duration) []int64 {
	rate, bursts := flatOut(nodes, d, 20*time.Second, 50, generator.DefaultLayout(), cluster.DefaultLead+cluster.DefaultMaxSkew)
	limit := perSlot * float64(len(nodes))
	b.add(fmt.Sprintf("sustained IDs/s, %d node(s), flat out", len(nodes)), fmt.Sprintf("%.0f", rate),
		fmt.Sprintf("layout cap %.0f", limit), fmt.Sprintf("%.1f%%", 100*rate/limit))
	return bursts
}

// lone: a fresh single node's start, its sustained rate, and its restart
// from its data after kill -9.
func (b *bench) lone() error {
	if err := b.bareStartup(); err != nil {
		return err
	}
	n, err := b.node("solo", 1)
	if err != nil {
		return err
	}
	t0 := time.Now()
	if err := n.start(); err != nil {
		return err
	}
	if err := b.startTimes("1 fresh node", n, t0, 2*time.Second); err != nil {
		return err
	}
	b.sustained([]*proc{n}, 8*time.Second)
	n.Crash()
	t0 = time.Now()
	if err := n.start(); err != nil {
		return err
	}
	if err := b.startTimes("1 node restarted from its data after kill -9", n, t0, time.Second); err != nil {
		return err
	}
	n.Stop()
	return nil
}

// cluster starts count fresh nodes, the first min(count,3) bootstrapping
// together and every one joining them, and returns when every node has
// served an ID, and how long after the first start that was.
func (b *bench) cluster(prefix string, count int) ([]*proc, time.Duration, error) {
	seeds := min(count, 3)
	var nodes []*proc
	var join []string
	for i := range count {
		expect := 1
		if i < seeds {
			expect = seeds
		}
		n, err := b.node(fmt.Sprintf("%s%d", prefix, i+1), expect)
		if err != nil {
			return nil, 0, err
		}
		nodes = append(nodes, n)
		if i < seeds {
			join = append(join, n.gossip)
		}
	}
	t0 := time.Now()
	for _, n := range nodes {
		n.args = append(n.args, "--join", strings.Join(join, ","))
		if err := n.start(); err != nil {
			return nil, 0, err
		}
	}
	d, ok := everyNodeServes(nodes, t0, 60*time.Second)
	if !ok {
		return nil, 0, fmt.Errorf("%d nodes: %w", count, errNotReady)
	}
	return nodes, d, nil
}

func target(nodes []*proc) string {
	var a []string
	for _, n := range nodes {
		a = append(a, n.grpc)
	}
	return strings.Join(a, ",")
}

// usage samples CPU (share of one core) and RSS (largest) per node over d.
func usage(nodes []*proc, d time.Duration) (cpu []float64, rss []int64) {
	before := make([]time.Duration, len(nodes))
	for i, n := range nodes {
		before[i], _, _ = n.cpuRSS()
	}
	rss = make([]int64, len(nodes))
	t0 := time.Now()
	for time.Since(t0) < d {
		for i, n := range nodes {
			if _, r, err := n.cpuRSS(); err == nil {
				rss[i] = max(rss[i], r)
			}
		}
		time.Sleep(250 * time.Millisecond)
	}
	el := time.Since(t0)
	for i, n := range nodes {
		c, _, _ := n.cpuRSS()
		cpu = append(cpu, float64(c-before[i])/float64(el))
	}
	return cpu, rss
}

func mean[T int | int64 | float64](xs []T) float64 {
	var s float64
	for _, x := range xs {
		s += float64(x)
	}
	return s / float64(max(len(xs), 1))
}

func mib(b float64) string { return fmt.Sprintf("%.0f MiB", b/(1<<20)) }

// three: a fresh three-node cluster's start, a Pool at 80% of the cap with
// and without a leader kill, bursts, the sustained rate with CPU and RSS,
// and a restart of the whole cluster.
func (b *bench) three() error {
	nodes, d, err := b.cluster("n", 3)
	if err != nil {
		return err
	}
	b.add("3 fresh nodes, start to every node's first ID", ms(d), "bare gRPC server start "+ms(b.bareStart), "goal 3000 ms")
	// A new cluster's slots start at the founders' time plus max-ahead
	// (15 s), so for its first 15 s each node issues exactly at the cap,
	// with no room for a burst; the Pool runs once that is over.
	idleCPU, idleRSS := usage(nodes, max(16*time.Second-d, 2*time.Second))

	rate := int(0.8 * 3 * perSlot)
	base, failed, err := poolRun(target(nodes), rate, 8*time.Second, time.Second, 0, nil)
	if err != nil {
		return err
	}
	var killed *proc
	lat, kfailed, err := poolRun(target(nodes), rate, 10*time.Second, time.Second, 3*time.Second, func() {
		if killed = leaderOf(nodes); killed != nil {
			fmt.Fprintf(b.log, "perf: kill -9 of the leader %s\n", killed.name)
			killed.Crash()
			time.Sleep(2 * time.Second)
			killed.start()
		}
	})
	if err != nil {
		return err
	}
	if killed == nil {
		return fmt.Errorf("no leader found to kill")
	}
	what := fmt.Sprintf("Pool NextID at %d IDs/s (80%% of 3 nodes' cap)", rate)
	b.defaultPool = base
	for _, q := range quantiles {
		b.add(fmt.Sprintf("%s through a leader kill, %s", what, q.name), us(quantile(lat, q.q)),
			"no fault "+us(quantile(base, q.q)), ratio(float64(quantile(lat, q.q)), float64(max(quantile(base, q.q), 1))))
	}
	b.add(what+", failed NextID", fmt.Sprintf("%d through a leader kill", kfailed), fmt.Sprintf("%d with no fault", failed), "goal 0")
	for _, n := range nodes {
		if !waitUntil(startLimit, n.ready) {
			return fmt.Errorf("%s after the leader kill: %w", n.name, errNotReady)
		}
	}

	time.Sleep(3 * time.Second) // idle: the windows fill up to the lead again
	var cpu []float64
	var rss []int64
	done := make(chan struct{})
	go func() { cpu, rss = usage(nodes, 8*time.Second); close(done) }()
	bursts := b.sustained(nodes, 8*time.Second)
	<-done
	// A node reserves again when less than half the lead (10 s) is left, so
	// an idle node holds 5 to 10 s of IDs.
	b.add("burst before the first wait, IDs per node (mean of 3)", fmt.Sprintf("%.0f", mean(bursts)),
		fmt.Sprintf("half the lead to the lead: %.0f..%.0f", 5*perSlot, 10*perSlot), ratio(mean(bursts), 10*perSlot))
	b.defaultCPU = mean(cpu)
	b.add("CPU per node at the cap (share of one core, mean of 3)", fmt.Sprintf("%.1f%%", 100*mean(cpu)),
		fmt.Sprintf("idle %.1f%%", 100*mean(idleCPU)), "")
	b.add("RSS per node at the cap (largest, mean of 3)", mib(mean(rss)),
		fmt.Sprintf("idle %s; bare gRPC server %s", mib(mean(idleRSS)), mib(float64(b.bareRSS))), ratio(mean(rss), float64(b.bareRSS)))

	for _, n := range nodes {
		n.Crash()
	}
	var last time.Time
	for _, n := range nodes {
		if err := n.start(); err != nil {
			return err
		}
		last = time.Now()
	}
	d, ok := everyNodeServes(nodes, last, 60*time.Second)
	if !ok {
		return fmt.Errorf("full restart: %w", errNotReady)
	}
	b.add("3 nodes killed (-9) and restarted, last start to every node's first ID", ms(d), "bare gRPC server start "+ms(b.bareStart), "goal 3000 ms")
	for _, n := range nodes {
		n.Stop()
	}
	return nil
}

// eight: the sustained rate of a full cluster.
func (b *bench) eight() error {
	nodes, _, err := b.cluster("e", 8)
	if err != nil {
		return err
	}
	b.sustained(nodes, 8*time.Second)
	for _, n := range nodes {
		n.Stop()
	}
	return nil
}
