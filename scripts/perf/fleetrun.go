package main

import (
	"bufio"
	"cmp"
	"crypto/tls"
	"fmt"
	"maps"
	mrand "math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/idgen/idgen/rpc"
	"github.com/idgen/idgen/scripts/harness"
)

// nodeFilesNeeded is what idgend's start check asks of its open-file limit
// at the default bounds (cmd/idgend/descriptors.go): the gRPC bounds, the
// Raft port's 256, gossip's 128 streams and the servers' 32, the admin
// port's 64 and 256 more.
var nodeFilesNeeded = rpc.DefaultBounds.Descriptors() + 256 + 128 + 32 + 64 + 256

// fleetStats is one fleet run: what its clients saw and what its nodes
// spent, per node where it says so.
type fleetStats struct {
	clients, served, noID, dialErrs int
	concurrent                      int // the most clients running at once
	firstDraws, firstFails          int
	laterDraws, laterFails          int
	laterCauses                     map[string]int
	ids, dups                       int
	first                           []time.Duration // each served client's first-ID latency, sorted
	conns, goroutines, files        []float64       // peaks per node: gRPC connections of clients and nodes, go_goroutines, process_open_fds
	rss, idleRSS                    []int64         // peak per node while the clients ran, and idle before
	cpu                             []float64       // share of one core per node while the clients ran
	selfCPU, machineCPU             float64         // this process's (the clients') share of one core, and the machine's busy cores
	refused                         map[string]float64
	held                            map[string]float64 // attacker's connections per node (mean over samples), by port kind
	attack                          *attackSummary
	load                            string
	elapsed                         time.Duration
}

// fleetRun starts a fresh three-node cluster with TLS and runs n clients on
// it, with the attacker when attack is set.
func (b *bench) fleetRun(prefix string, cfgs []*tls.Config, n int, attack bool) (*fleetStats, error) {
	cfg := b.fleetCfg
	nodes, _, err := b.cluster(prefix, fleetNodes)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, n := range nodes {
			n.Stop()
		}
	}()
	for _, nd := range nodes {
		lim, err := fileLimit(nd.Pid())
		if err != nil {
			return nil, err
		}
		if lim < uint64(nodeFilesNeeded) || strings.Contains(nd.Log(), "open-file limit is below") {
			return nil, fmt.Errorf("%s: open-file limit %d, below the %d its bounds need", nd.name, lim, nodeFilesNeeded)
		}
		fmt.Fprintf(b.log, "perf: %s: open-file limit %d (its bounds need %d)\n", nd.name, lim, nodeFilesNeeded)
	}
	var addrs []string
	ports := map[int]int{}
	for i, nd := range nodes {
		addrs = append(addrs, nd.grpc)
		ports[portOf(nd.grpc)] = i
	}
	st := &fleetStats{clients: n}
	_, st.idleRSS = usage(nodes, 2*time.Second)
	var attacker *proc
	if attack {
		if attacker, err = b.startAttack(nodes); err != nil {
			return nil, err
		}
	}
	smp := startSampler(nodes, attack)
	cpu0 := make([]time.Duration, len(nodes))
	for i, nd := range nodes {
		cpu0[i], _, _ = nd.cpuRSS()
	}
	self0, _, _ := pidCPURSS(os.Getpid())
	busy0, _ := machineBusy()
	t0 := time.Now()
	results := make([]clientResult, n)
	var wg sync.WaitGroup
	for i := range n {
		if w := time.Until(t0.Add(cfg.ramp * time.Duration(i) / time.Duration(n))); w > 0 {
			time.Sleep(w)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			results[i] = fleetClient(strings.Join(addrs, ","), cfg.subset, clientName(i), cfgs[i], clientSource(i, cfg.sources), cfg.duration, mrand.New(mrand.NewPCG(cfg.seed, uint64(i))))
			results[i].start, results[i].end = start, time.Now()
		}()
	}
	wg.Wait()
	st.elapsed = time.Since(t0)
	for i, nd := range nodes {
		c, _, _ := nd.cpuRSS()
		st.cpu = append(st.cpu, float64(c-cpu0[i])/float64(st.elapsed))
	}
	self1, _, _ := pidCPURSS(os.Getpid())
	busy1, _ := machineBusy()
	st.selfCPU, st.machineCPU = float64(self1-self0)/float64(st.elapsed), float64(busy1-busy0)/float64(st.elapsed)
	st.conns, st.goroutines, st.files, st.rss, st.held = smp.finish()
	st.refused = refusals(nodes)
	st.load = loadAvg()
	if attacker != nil {
		s, err := attackResult(attacker)
		if err != nil {
			return nil, err
		}
		st.attack = &s
	}
	var all []int64
	for _, r := range results {
		if r.err != nil {
			st.dialErrs++
		}
		if r.first > 0 {
			st.served++
			st.first = append(st.first, r.first)
		} else {
			st.noID++
		}
		st.firstDraws += r.firstDraws
		st.firstFails += r.firstFails
		st.laterDraws += r.laterDraws
		st.laterFails += r.laterFails
		for c, k := range r.laterCauses {
			if st.laterCauses == nil {
				st.laterCauses = map[string]int{}
			}
			st.laterCauses[c] += k
		}
		all = append(all, r.ids...)
	}
	st.concurrent = mostAtOnce(results)
	slices.Sort(st.first)
	slices.Sort(all)
	st.ids = len(all)
	for i := 1; i < len(all); i++ {
		if all[i] == all[i-1] {
			st.dups++
		}
	}
	fmt.Fprintf(b.log, "perf: fleet of %d%s (at most %d at once): %d served, %d without an ID (%d could not dial), draws failed %d of %d first and %d of %d after, %d IDs, %d duplicates, in %s; load average %s\n",
		n, map[bool]string{true: " under attack"}[attack], st.concurrent, st.served, st.noID, st.dialErrs, st.firstFails, st.firstDraws,
		st.laterFails, st.laterDraws, st.ids, st.dups, st.elapsed.Round(time.Millisecond), st.load)
	return st, nil
}

// mostAtOnce is the most clients that ran at the same time.
func mostAtOnce(rs []clientResult) int {
	type edge struct {
		at time.Time
		d  int
	}
	var es []edge
	for _, r := range rs {
		es = append(es, edge{r.start, 1}, edge{r.end, -1})
	}
	slices.SortFunc(es, func(a, b edge) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.d - b.d // an end before a start at the same instant
	})
	most, n := 0, 0
	for _, e := range es {
		n += e.d
		most = max(most, n)
	}
	return most
}

// sampler reads, every second while a fleet runs, each node's RSS, its
// established gRPC connections (from /proc/net/tcp: the clients' and the
// other nodes', apart from the attacker's addresses) and
// its go_goroutines and process_open_fds, keeping the peaks; and the
// attacker's connections on each port kind, averaged.
type sampler struct {
	stop, done            chan struct{}
	conns, gor, files     []float64
	rss                   []int64
	heldSum               map[string]float64
	samples               int
	nodes                 []*proc
	grpc, raft, gossip    map[int]int
	attack                bool
	connErr, metricErrors int
}

func startSampler(nodes []*proc, attack bool) *sampler {
	s := &sampler{stop: make(chan struct{}), done: make(chan struct{}), nodes: nodes, attack: attack,
		conns: make([]float64, len(nodes)), gor: make([]float64, len(nodes)), files: make([]float64, len(nodes)),
		rss: make([]int64, len(nodes)), heldSum: map[string]float64{},
		grpc: map[int]int{}, raft: map[int]int{}, gossip: map[int]int{}}
	for i, n := range nodes {
		s.grpc[portOf(n.grpc)], s.raft[portOf(n.raft)], s.gossip[portOf(n.gossip)] = i, i, i
	}
	go s.run()
	return s
}

func (s *sampler) run() {
	defer close(s.done)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		s.sample()
		select {
		case <-s.stop:
			return
		case <-tick.C:
		}
	}
}

func (s *sampler) sample() {
	for i, n := range s.nodes {
		if _, r, err := n.cpuRSS(); err == nil {
			s.rss[i] = max(s.rss[i], r)
		}
		code, body := harness.HTTPGet(n.http, "/metrics")
		if code != 200 {
			s.metricErrors++
			continue
		}
		s.gor[i] = max(s.gor[i], metricSum(body, "go_goroutines"))
		s.files[i] = max(s.files[i], metricSum(body, "process_open_fds"))
	}
	local, att, err := tcpEstablished(s.grpc, len(s.nodes))
	if err != nil {
		s.connErr++
		return
	}
	for i := range local {
		s.conns[i] = max(s.conns[i], float64(local[i]))
	}
	s.samples++
	if !s.attack {
		return
	}
	s.heldSum["grpc"] += mean(att)
	for kind, ports := range map[string]map[int]int{"raft": s.raft, "gossip": s.gossip} {
		if _, a, err := tcpEstablished(ports, len(s.nodes)); err == nil {
			s.heldSum[kind] += mean(a)
		}
	}
}

func (s *sampler) finish() (conns, gor, files []float64, rss []int64, held map[string]float64) {
	close(s.stop)
	<-s.done
	if s.connErr > 0 || s.metricErrors > 0 {
		fmt.Fprintf(os.Stderr, "perf: sampler: %d reads of /proc/net/tcp and %d scrapes of /metrics failed\n", s.connErr, s.metricErrors)
	}
	held = map[string]float64{}
	for k, v := range s.heldSum {
		held[k] = v / float64(max(s.samples, 1))
	}
	return s.conns, s.gor, s.files, s.rss, held
}

// tcpEstablished counts the established TCP connections whose local port
// is one of ports (port -> node index), by the remote address: the
// attacker's 127.0.0.2-9, and every other (clients and nodes).
func tcpEstablished(ports map[int]int, n int) (local, attacker []int, err error) {
	f, err := os.Open("/proc/net/tcp")
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	local, attacker = make([]int, n), make([]int, n)
	sc := bufio.NewScanner(f)
	sc.Scan() // the header
	for sc.Scan() {
		idx, ip, ok := parseTCPLine(sc.Text(), ports)
		if !ok {
			continue
		}
		if last := ip >> 24; ip&0xffffff == 0x7f && last >= 2 && last < 2+attackSources {
			attacker[idx]++
		} else {
			local[idx]++
		}
	}
	return local, attacker, sc.Err()
}

// parseTCPLine reads one line of /proc/net/tcp: the node index of its local
// port and its remote IPv4 address (as the kernel prints it, in host byte
// order: 127.0.0.1 is 0x0100007F), when it is established (state 01) on one
// of ports.
func parseTCPLine(l string, ports map[int]int) (int, uint32, bool) {
	f := strings.Fields(l)
	if len(f) < 4 || f[3] != "01" {
		return 0, 0, false
	}
	_, lp, ok1 := strings.Cut(f[1], ":")
	rip, _, ok2 := strings.Cut(f[2], ":")
	port, err1 := strconv.ParseUint(lp, 16, 16)
	ip, err2 := strconv.ParseUint(rip, 16, 32)
	if !ok1 || !ok2 || err1 != nil || err2 != nil {
		return 0, 0, false
	}
	idx, ok := ports[int(port)]
	return idx, uint32(ip), ok
}

// metricSum adds up every sample of the metric name (any labels) in a
// Prometheus text exposition.
func metricSum(body, name string) float64 {
	var sum float64
	for _, v := range metricSamples(body, name) {
		sum += v
	}
	return sum
}

// metricSamples is every sample of the metric name, by its labels ("" for
// none).
func metricSamples(body, name string) map[string]float64 {
	out := map[string]float64{}
	for _, l := range strings.Split(body, "\n") {
		rest, ok := strings.CutPrefix(l, name)
		if !ok || rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		labels := ""
		if rest[0] == '{' {
			end := strings.IndexByte(rest, '}')
			if end < 0 {
				continue
			}
			labels, rest = rest[1:end], rest[end+1:]
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		if v, err := strconv.ParseFloat(f[0], 64); err == nil {
			out[labels] = v
		}
	}
	return out
}

// refusals sums idgen_door_refused_total over the nodes, by bound, the
// bounds that refused anything only.
func refusals(nodes []*proc) map[string]float64 {
	out := map[string]float64{}
	for _, n := range nodes {
		_, body := harness.HTTPGet(n.http, "/metrics")
		for labels, v := range metricSamples(body, "idgen_door_refused_total") {
			if v > 0 {
				out[strings.TrimSuffix(strings.TrimPrefix(labels, `bound="`), `"`)] += v
			}
		}
	}
	return out
}

func refusalNote(m map[string]float64) string {
	if len(m) == 0 {
		return "none"
	}
	var s []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		s = append(s, fmt.Sprintf("%s %.0f", k, m[k]))
	}
	return strings.Join(s, ", ")
}

// fileLimit is the process's soft limit on open files (/proc/PID/limits).
func fileLimit(pid int) (uint64, error) {
	if pid == 0 {
		return 0, errNotRunning
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, "Max open files"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				return strconv.ParseUint(f[0], 10, 64)
			}
		}
	}
	return 0, fmt.Errorf("/proc/%d/limits: no open-file limit", pid)
}

// machineBusy is the CPU time every process of the machine has spent so
// far, all cores together (/proc/stat: everything but idle and iowait).
func machineBusy() (time.Duration, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	l, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(l)
	if len(f) < 8 || f[0] != "cpu" {
		return 0, fmt.Errorf("/proc/stat: %q", l)
	}
	var ticks int64
	for i, v := range f[1:8] {
		n, _ := strconv.ParseInt(v, 10, 64)
		if i != 3 && i != 4 { // idle, iowait
			ticks += n
		}
	}
	const hz = 100 // USER_HZ on Linux
	return time.Duration(ticks) * time.Second / hz, nil
}

// loadAvg is the machine's load average over 1, 5 and 15 minutes.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// fleetRows adds the part's rows: the fleet of N beside the fleet of 100,
// then the fleet of N under attack beside it without, then what the
// attacker held.
func (b *bench) fleetRows(base, full, att *fleetStats) {
	sub := "all 3 nodes each"
	if k := b.fleetCfg.subset; k > 0 {
		sub = fmt.Sprintf("subsets of %d", k)
	}
	sub += ", " + sourcesNote(b.fleetCfg.sources)
	b.fleetCompare(fmt.Sprintf("fleet of %d (%s)", full.clients, sub), full, base, fmt.Sprintf("%d clients", base.clients), true)
	b.fleetCompare(fmt.Sprintf("fleet of %d (%s) under attack", att.clients, sub), att, full, "no attack", false)
	door := map[string]string{"grpc": "the door admits 256 unfinished handshakes (32 per address)",
		"raft": "the door admits 64 unfinished handshakes", "gossip": "the port admits 128 streams"}
	for _, a := range attackPerNode {
		b.add(fmt.Sprintf("attacker: silent connections held per node, %s port (mean over the run)", a.kind),
			fmt.Sprintf("%.0f", att.held[a.kind]), door[a.kind], fmt.Sprintf("%.0f%%", 100*att.held[a.kind]/float64(a.count)))
	}
	if att.attack != nil {
		closed, dialErrs := map[string]int64{}, int64(0)
		for _, t := range att.attack.Targets {
			closed[t.Kind] += t.Closed
			dialErrs += t.DialErrors
		}
		var parts []string
		for _, a := range attackPerNode {
			parts = append(parts, fmt.Sprintf("%s %d (%.0f/s)", a.kind, closed[a.kind], float64(closed[a.kind])/att.attack.Seconds))
		}
		label := "attacker: connections the nodes closed, each redialled at once (3 nodes)"
		if b.fleetCfg.attackNice {
			label = "attacker, at nice 19: connections the nodes closed, each redialled at once (3 nodes)"
		}
		b.add(label, strings.Join(parts, ", "),
			fmt.Sprintf("over %.0f s; %d dials failed; the attacker's process used %.0f%% of a core", att.attack.Seconds, dialErrs,
				100*att.attack.CPU.Seconds()/att.attack.Seconds), "")
	}
}

// fleetCompare adds one fleet's rows, each beside the same figure of
// another fleet of the same run (w, named wName). perClient: the fleets
// differ in size, and the memory row is per 1,000 clients of the
// difference; otherwise it is the difference itself.
func (b *bench) fleetCompare(what string, v, w *fleetStats, wName string, perClient bool) {
	add := func(m, val, base, r string) { b.add(what+": "+m, val, wName+": "+base, r) }
	of := func(a, n int) string { return fmt.Sprintf("%d of %d", a, n) }
	add("clients served (got an ID)", of(v.served, v.clients), of(w.served, w.clients),
		fmt.Sprintf("%.2f%%", 100*float64(v.served)/float64(v.clients)))
	add("clients that got no ID", fmt.Sprint(v.noID), fmt.Sprint(w.noID), "goal 0")
	add("clients running at once (most)", fmt.Sprint(v.concurrent), fmt.Sprint(w.concurrent), "")
	add("failed draws, first draws", of(v.firstFails, v.firstDraws), of(w.firstFails, w.firstDraws), "goal 0")
	add("failed draws, after the first", of(v.laterFails, v.laterDraws), of(w.laterFails, w.laterDraws), "goal 0")
	add("failed draws after the first, by cause (the 3 most common)", causeNote(v.laterCauses), causeNote(w.laterCauses), "")
	add("duplicate IDs across all clients", fmt.Sprintf("%d of %d IDs", v.dups, v.ids), fmt.Sprintf("%d of %d IDs", w.dups, w.ids), "goal 0")
	for _, q := range []struct {
		name string
		q    float64
	}{{"p50", 0.5}, {"p99", 0.99}} {
		a, c := quantile(v.first, q.q), quantile(w.first, q.q)
		add("first-ID latency "+q.name, msf(a), msf(c), ratio(float64(a), float64(max(c, 1))))
	}
	flt := func(m string, a, c []float64) {
		add(m, fmt.Sprintf("%.0f", mean(a)), fmt.Sprintf("%.0f", mean(c)), ratio(mean(a), max(mean(c), 1)))
	}
	flt("gRPC connections per node, clients' and nodes' (peak, mean of 3)", v.conns, w.conns)
	flt("goroutines per node (peak, mean of 3)", v.goroutines, w.goroutines)
	flt("open files per node (peak, mean of 3)", v.files, w.files)
	add("node RSS (peak, mean of 3)", mib(mean(v.rss)), mib(mean(w.rss)), ratio(mean(v.rss), mean(w.rss)))
	if perClient {
		per := (mean(v.rss) - mean(w.rss)) / float64(max(v.concurrent-w.concurrent, 1)) * 1000
		add("node RSS per 1,000 clients running at once (beyond the smaller fleet's)", mib(per), "idle node before its clients "+mib(mean(v.idleRSS)), "")
	} else {
		add("node RSS beyond the fleet's without attack", mib(mean(v.rss)-mean(w.rss)), "idle node before its clients "+mib(mean(w.idleRSS)), "")
	}
	add("node CPU while the clients ran (share of one core, mean of 3)", fmt.Sprintf("%.1f%%", 100*mean(v.cpu)),
		fmt.Sprintf("%.1f%%", 100*mean(w.cpu)), ratio(mean(v.cpu), max(mean(w.cpu), 1e-9)))
	add("CPU of the clients' process, and of the whole machine (cores busy, of 2)",
		fmt.Sprintf("%.0f%%; %.2f", 100*v.selfCPU, v.machineCPU), fmt.Sprintf("%.0f%%; %.2f", 100*w.selfCPU, w.machineCPU), "")
	add("refusals by bound (idgen_door_refused_total, 3 nodes)", refusalNote(v.refused), refusalNote(w.refused), "")
	add("load average (1, 5, 15 min) at the end", v.load, w.load, "")
}

// causeNote lists the 3 most common causes of failed draws.
func causeNote(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	causes := slices.SortedFunc(maps.Keys(m), func(a, b string) int { return cmp.Or(m[b]-m[a], strings.Compare(a, b)) })
	var parts []string
	for _, c := range causes[:min(3, len(causes))] {
		parts = append(parts, fmt.Sprintf("%d %s", m[c], c))
	}
	return strings.Join(parts, "; ")
}

func msf(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }
