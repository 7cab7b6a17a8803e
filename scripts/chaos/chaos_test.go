package chaos

import (
	"fmt"
	"math/rand"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Process-level settings. The lead, pauses and reap-after are short so that a
// two-and-a-half-minute run gets through the whole schedule.
const (
	lead      = 2 * time.Second
	reapAfter = 10 * time.Second
	// pauseFor is longer than the lead and than Raft's election timeout (1 s).
	pauseFor  = 5 * time.Second
	clockHold = 4 * time.Second
	// slotNodes hold the eight slots; one more process is the standby.
	slotNodes = 8
	// tail leaves the cluster time to settle before the verifier's last draw.
	settleTail = 15 * time.Second
)

// TestChaosProcess runs eight idgend processes and a standby on loopback and
// injects the fault schedule (faults_test.go) while `idctl verify` draws IDs
// through all of them. It fails on any duplicate, any ID outside a window Raft
// granted, a verifier that could not run, or a fault that could not be injected.
//
// Beside the verifier, a Pool and plain GetIDBatch calls (probe_test.go)
// report per fault kind the failed calls and the worst stall clients saw.
//
// IDGEN_CHAOS_DURATION (default 2m30s), IDGEN_CHAOS_RATE (IDs/s, default 3000),
// IDGEN_CHAOS_POOL_RATE (the Pool's IDs/s, default 2000), IDGEN_CHAOS_SEED,
// IDGEN_CHAOS_LOGDIR (keep node logs), IDGEN_CHAOS_RACE=1.
func TestChaosProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level chaos run skipped in -short mode")
	}
	dur, err := envDuration("IDGEN_CHAOS_DURATION", 150*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	rate, err := envInt("IDGEN_CHAOS_RATE", 3000)
	if err != nil {
		t.Fatal(err)
	}
	seed, err := envInt("IDGEN_CHAOS_SEED", time.Now().UnixNano())
	if err != nil {
		t.Fatal(err)
	}
	poolRate, err := envInt("IDGEN_CHAOS_POOL_RATE", 2000)
	if err != nil || poolRate < 1 {
		t.Fatalf("IDGEN_CHAOS_POOL_RATE: %v (want IDs a second, at least 1)", err)
	}
	bin := buildBinaries(t)
	c := newCluster(t, bin, []string{
		"--gossip-profile=local",
		"--enable-fault-injection",
		"--reap-after=" + reapAfter.String(),
		"--lead=" + lead.String(),
	})
	c.logf("seed %d, duration %v, rate %d IDs/s, logs in %s", seed, dur, rate, c.root)

	// n1..n3 form the cluster; the others join it; n9 is the standby.
	var seeds []string
	for i := 1; i <= slotNodes+1; i++ {
		expect := 1
		if i <= 3 {
			expect = 3
		}
		n := c.add("n"+strconv.Itoa(i), expect, nil)
		if i <= 3 {
			seeds = append(seeds, n.Gossip)
		}
	}
	for _, n := range c.nodes {
		n.Extra = append(n.Extra, "--join="+strings.Join(seeds, ","))
	}
	for _, n := range c.nodes[:slotNodes] {
		n.Start()
	}
	if took, err := c.waitHealthy(90 * time.Second); err != nil {
		t.Fatalf("cluster of %d did not form: %v", slotNodes, err)
	} else {
		c.logf("%d nodes ready in %.1fs", slotNodes, took.Seconds())
	}
	c.nodes[slotNodes].Start()
	if _, err := c.waitHealthy(60 * time.Second); err != nil {
		t.Fatalf("standby did not join: %v", err)
	}
	c.logf("standby joined: %s", c.poll())

	v, err := startVerify(c, dur, int(rate))
	if err != nil {
		t.Fatal(err)
	}
	defer v.stop()
	end := time.Now().Add(dur)
	ps, err := startProbes(c, int(poolRate), 20)
	if err != nil {
		t.Fatal(err)
	}
	defer ps.stop()

	f := &faulter{
		c: c, rng: rand.New(rand.NewSource(seed)),
		reapAfter: reapAfter, pause: pauseFor, clockHold: clockHold, recovery: 45 * time.Second,
	}
	faults, failed, spans := runSchedule(c, f, end)

	if _, err := c.waitHealthy(time.Until(end) + 30*time.Second); err != nil {
		c.logf("cluster not healthy at the end: %v", err)
	}
	rep, code, err := v.wait(time.Until(end) + 3*time.Minute)
	ps.stop()
	for _, l := range faultLines("chaos-fault", ps, spans) {
		fmt.Println(l)
		c.logf("%s", l)
	}
	line := summary("chaos-process", faults, rep)
	fmt.Println(line)
	c.logf("%s", line)
	c.logf("verify exit %d: attempted=%d failed=%d per_slot=%v duration_ms=%d errors=%q",
		code, rep.Attempted, rep.Failed, rep.PerSlot, rep.DurationMS, rep.Errors)
	c.logf("recovery: worst %.1fs, %d timeout(s)", f.worstRecovery.Seconds(), f.recoveryTimeouts)
	if err != nil {
		t.Fatalf("verifier: %v", err)
	}
	if rep.Duplicates != 0 || rep.ContainmentViolations != 0 || rep.BadBatches != 0 {
		t.Fatalf("SAFETY VIOLATION: %d duplicates, %d containment violations (%d per owner), %d malformed batches %q (logs in %s)",
			rep.Duplicates, rep.ContainmentViolations, rep.OwnerViolations, rep.BadBatches, rep.BadBatchExamples, c.root)
	}
	if code != 0 {
		t.Fatalf("idctl verify exited %d without a violation in its report", code)
	}
	if rep.Acknowledged == 0 {
		t.Fatal("no ID was acknowledged")
	}
	for _, e := range failed {
		t.Errorf("fault not injected: %s", e)
	}
}

// runSchedule injects the schedule in order, then again in random orders,
// while a fault still fits before end minus the tail. It returns how many
// faults were injected, the faults that could not be, and when each ran
// (injection to recovery).
func runSchedule(c *cluster, f *faulter, end time.Time) (int, []string, []span) {
	sched := f.schedule()
	injected, pass := 0, 0
	var failed []string
	var spans []span
	for {
		ran := 0
		for _, fl := range sched {
			if time.Until(end) < fl.est+settleTail {
				if pass == 0 {
					c.logf("skipped (no time left in this run): %s", fl.name)
				}
				continue
			}
			c.logf("fault %d: %s", injected+1, fl.name)
			t0 := time.Now()
			k, err := fl.run()
			spans = append(spans, span{name: fl.name, start: t0, end: time.Now()})
			injected += k
			ran++
			if err != nil {
				c.logf("  ERROR: %v", err)
				failed = append(failed, fmt.Sprintf("%s: %v", fl.name, err))
			}
		}
		if ran == 0 {
			return injected, failed, spans
		}
		pass++
		f.rng.Shuffle(len(sched), func(i, j int) { sched[i], sched[j] = sched[j], sched[i] })
	}
}
