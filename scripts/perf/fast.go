package main

import (
	"fmt"
	"time"

	"github.com/idgen/idgen/cluster"
	"github.com/idgen/idgen/generator"
)

// fastSpec is the fast layout: 35 bits of 10 ms, 204,800 IDs a second per
// slot, about 11 years.
const fastSpec = "35/2/1/11 unit=10ms"

// fastCount is what each flat-out caller asks for at the fast layout: a
// unit's worth (2048), so two callers per node make about 200 calls a
// second at the cap, not 4,000 of 50.
const fastCount = 2000

// fast measures a cluster founded with the 10 ms layout: the sustained rate
// of 1, 3 and 8 nodes against the layout's cap and against what the same
// draws get from a bare gRPC server, CPU per node at the cap, and a Pool's
// NextID latency at 80% of three nodes' cap.
func (b *bench) fast() error {
	l, err := generator.ParseSpec(fastSpec)
	if err != nil {
		return err
	}
	b.nodeArgs = []string{"--layout", "35/2/1/11", "--layout-unit", "10ms"}
	defer func() { b.nodeArgs = nil }()
	perSlot := l.IDsPerSecond()

	bare, err := b.bareFlatOut()
	if err != nil {
		return err
	}
	sustained := func(nodes []*proc) {
		rate, _ := flatOut(nodes, 20*time.Second, 40*time.Second, fastCount, l, cluster.DefaultLead+cluster.DefaultMaxSkew)
		limit := perSlot * float64(len(nodes))
		b.add(fmt.Sprintf("10 ms layout: sustained IDs/s, %d node(s), flat out", len(nodes)), fmt.Sprintf("%.0f", rate),
			fmt.Sprintf("layout cap %.0f; bare gRPC server, same draws %.0f", limit, bare), fmt.Sprintf("%.1f%% of the cap", 100*rate/limit))
	}

	solo, err := b.node("fast-solo", 1)
	if err != nil {
		return err
	}
	if err := solo.start(); err != nil {
		return err
	}
	if _, ok := firstID(solo, time.Now(), startLimit); !ok {
		return fmt.Errorf("fast solo: %w", errNotReady)
	}
	sustained([]*proc{solo})
	solo.Stop()

	nodes, _, err := b.cluster("f", 3)
	if err != nil {
		return err
	}
	var cpu []float64
	done := make(chan struct{})
	go func() { cpu, _ = usage(nodes, 8*time.Second); close(done) }()
	sustained(nodes)
	<-done
	cpuBase, cpuRatio := "default layout: not measured in this run", ""
	if b.defaultCPU > 0 {
		cpuBase, cpuRatio = fmt.Sprintf("default layout at its cap %.1f%%", 100*b.defaultCPU), ratio(mean(cpu), b.defaultCPU)
	}
	b.add("10 ms layout: CPU per node at the cap (share of one core, mean of 3)", fmt.Sprintf("%.1f%%", 100*mean(cpu)), cpuBase, cpuRatio)

	rate := int(0.8 * 3 * perSlot)
	lat, failed, err := poolRun(target(nodes), rate, 10*time.Second, 2*time.Second, 0, nil)
	if err != nil {
		return err
	}
	what := fmt.Sprintf("10 ms layout: Pool NextID at %d IDs/s (80%% of 3 nodes' cap)", rate)
	for _, q := range quantiles {
		base := "goal 1000 us"
		r := ""
		if b.defaultPool != nil {
			base = fmt.Sprintf("default layout at 80%% of its cap %s", us(quantile(b.defaultPool, q.q)))
			r = ratio(float64(quantile(lat, q.q)), float64(max(quantile(b.defaultPool, q.q), 1)))
		}
		b.add(fmt.Sprintf("%s, %s", what, q.name), us(quantile(lat, q.q)), base, r)
	}
	b.add(what+", failed NextID", fmt.Sprint(failed), "", "goal 0")
	for _, n := range nodes {
		n.Stop()
	}

	eight, _, err := b.cluster("g", 8)
	if err != nil {
		return err
	}
	sustained(eight)
	for _, n := range eight {
		n.Stop()
	}
	return nil
}

// bareFlatOut is the rate the fast layout's flat-out draws get from a bare
// gRPC server (no generator, no cap): what the load and loopback allow.
func (b *bench) bareFlatOut() (float64, error) {
	p, err := b.server("bare", "")
	if err != nil {
		return 0, err
	}
	defer p.Stop()
	rate, _ := flatOut([]*proc{p}, 4*time.Second, 0, fastCount, generator.Layout{}, 0)
	return rate, nil
}
