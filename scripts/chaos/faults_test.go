package chaos

import (
	"fmt"
	"math/rand"
	"os"
	"strings"
	"sync"
	"time"
)

// fault is one entry of the schedule: run injects it, waits for the cluster to
// recover and returns how many faults it injected. est is about how long it
// takes, recovery included, so the runner only starts what fits in the run.
type fault struct {
	name string
	est  time.Duration
	run  func() (int, error)
}

// faulter injects faults into a cluster and waits for it to recover.
type faulter struct {
	c   *cluster
	rng *rand.Rand

	reapAfter time.Duration // the nodes' --reap-after
	pause     time.Duration // SIGSTOP length: longer than the lead and the election timeout
	clockHold time.Duration // how long a clock offset stays
	recovery  time.Duration // deadline for recovery after a fault that frees no slot

	mu               sync.Mutex
	recoveryTimeouts int
	worstRecovery    time.Duration
}

func (f *faulter) schedule() []fault {
	return []fault{
		{"kill -9 of a random node, restart from its data dir", 15 * time.Second, f.killRandom},
		{"kill -9 of the leader, restart from its data dir", 15 * time.Second, f.killLeader},
		{"SIGSTOP of the leader, then SIGCONT", 15 * time.Second, f.pauseLeader},
		{"clock -60s then +60s on a node", 20 * time.Second, f.clockNode},
		{"slot handed to a standby while its old owner is paused past reap-after", f.reapAfter + 35*time.Second, f.standbyTakeover},
		{"kill -9 of two nodes at once", 15 * time.Second, f.killTwo},
		{"SIGSTOP of a slot owner, then SIGCONT", 15 * time.Second, f.pauseOwner},
		{"clock -60s then +60s on the leader", 20 * time.Second, f.clockLeader},
		{"clock +1h for 4s on the leader", 20 * time.Second, f.clockLeaderHour},
		{"data dir wiped: the node comes back as a new node", f.reapAfter + 30*time.Second, f.wipe},
		{"kill -9 of every node and a cold restart", 25 * time.Second, f.killAll},
		{"leave and re-join", 20 * time.Second, f.leaveRejoin},
	}
}

// settle waits for the cluster to be healthy again; a timeout is counted and
// logged, not fatal: safety is what the run proves, liveness is reported.
func (f *faulter) settle(what string, d time.Duration) {
	took, err := f.c.waitHealthy(d)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.worstRecovery = max(f.worstRecovery, took)
	if err != nil {
		f.recoveryTimeouts++
		f.c.logf("  RECOVERY TIMEOUT after %s: %v", what, err)
		return
	}
	f.c.logf("  healthy again %.1fs after %s", took.Seconds(), what)
}

// current polls until a leader is known (or 20 s pass) and returns the view.
func (f *faulter) current() (view, *node) {
	var v view
	var l *node
	waitFor(20*time.Second, func() bool {
		v = f.c.poll()
		l = v.leader()
		return l != nil
	})
	return v, l
}

func (f *faulter) pick(ns []*node) *node {
	if len(ns) == 0 {
		return nil
	}
	return ns[f.rng.Intn(len(ns))]
}

// nodesWhere lists the nodes in v that satisfy keep, in a stable order.
func (f *faulter) nodesWhere(v view, keep func(*node) bool) []*node {
	var out []*node
	for _, n := range f.c.nodes {
		if _, ok := v[n]; ok && keep(n) {
			out = append(out, n)
		}
	}
	return out
}

// owners are nodes other than the leader that hold a slot.
func (f *faulter) owners(v view, l *node) []*node {
	return f.nodesWhere(v, func(n *node) bool { return n != l && v[n].GetSlot() >= 0 })
}

func (f *faulter) killRestart(ns ...*node) (int, error) {
	names := make([]string, len(ns))
	var wg sync.WaitGroup
	errs := make([]error, len(ns))
	for i, n := range ns {
		names[i] = n.Name
		wg.Add(1)
		go func(i int, n *node) { defer wg.Done(); errs[i] = n.Crash() }(i, n)
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return 0, err
		}
	}
	f.c.logf("  killed %s", strings.Join(names, " "))
	time.Sleep(time.Second)
	for _, n := range ns {
		if err := n.Restart(); err != nil {
			return 1, err
		}
	}
	f.settle("restart of "+strings.Join(names, " "), f.recovery)
	return 1, nil
}

func (f *faulter) killRandom() (int, error) {
	v, _ := f.current()
	n := f.pick(f.nodesWhere(v, func(*node) bool { return true }))
	if n == nil {
		return 0, fmt.Errorf("no live node")
	}
	return f.killRestart(n)
}

func (f *faulter) killLeader() (int, error) {
	_, l := f.current()
	if l == nil {
		return 0, fmt.Errorf("no leader")
	}
	return f.killRestart(l)
}

func (f *faulter) killTwo() (int, error) {
	v, _ := f.current()
	ns := f.nodesWhere(v, func(*node) bool { return true })
	f.rng.Shuffle(len(ns), func(i, j int) { ns[i], ns[j] = ns[j], ns[i] })
	if len(ns) < 2 {
		return 0, fmt.Errorf("fewer than two live nodes")
	}
	return f.killRestart(ns[0], ns[1])
}

func (f *faulter) killAll() (int, error) {
	var ns []*node
	for _, n := range f.c.nodes {
		if n.Running() {
			ns = append(ns, n)
		}
	}
	return f.killRestart(ns...)
}

func (f *faulter) pauseNode(n *node) (int, error) {
	if err := n.Pause(); err != nil {
		return 0, err
	}
	f.c.logf("  paused %s for %v", n.Name, f.pause)
	time.Sleep(f.pause)
	if err := n.Resume(); err != nil {
		return 1, err
	}
	f.settle("SIGCONT of "+n.Name, f.recovery)
	return 1, nil
}

func (f *faulter) pauseLeader() (int, error) {
	_, l := f.current()
	if l == nil {
		return 0, fmt.Errorf("no leader")
	}
	return f.pauseNode(l)
}

func (f *faulter) pauseOwner() (int, error) {
	v, l := f.current()
	n := f.pick(f.owners(v, l))
	if n == nil {
		return 0, fmt.Errorf("no slot owner other than the leader")
	}
	return f.pauseNode(n)
}

// maxAhead is idgend's default --max-ahead for our --lead: lead + max-skew (5 s).
const maxAhead = lead + 5*time.Second

// nowUnits is the wall clock in the default layout's units (seconds since
// 2026-05-05T00:00:00Z), as Status reports cursor and granted.
func nowUnits() int64 { return time.Now().Unix() - 1777939200 }

// clockFault moves n's clock by each offset in turn, holding each for hold,
// then resets it, and waits up to recovery for the cluster to be healthy
// again. Grants are bounded by the cluster's time, not by one clock, so even a
// leader's wrong clock lends nothing ahead and recovery takes seconds.
func (f *faulter) clockFault(n *node, hold, recovery time.Duration, offsets ...string) (int, error) {
	injected := 0
	for _, off := range append(offsets, "0s") {
		out, errOut, code, err := f.c.idctl(10*time.Second, "fault", "clock", "--offset", off, "--target", n.GRPC)
		if err != nil || code != 0 {
			return injected, fmt.Errorf("idctl fault clock --offset %s on %s: exit %d %v: %s%s", off, n.Name, code, err, out, errOut)
		}
		if off == "0s" {
			break
		}
		injected++
		f.c.logf("  clock of %s moved %s for %v", n.Name, off, hold)
		time.Sleep(hold)
	}
	f.settle("clock reset on "+n.Name, recovery)
	// A node that ran fast may still have a little room left, and looks
	// healthy until that is used up; wait until its IDs are back near real
	// time, so a stall it still owes is not blamed on the next fault.
	start := time.Now()
	back := waitFor(recovery, func() bool {
		st, err := n.status(time.Second)
		return err == nil && st.GetReady() && st.GetCursor()-nowUnits() <= int64(maxAhead/time.Second)+1
	})
	st, _ := n.status(time.Second)
	f.c.logf("  %s issuing near real time again after %.1fs: %v (cursor %+ds from now)", n.Name, time.Since(start).Seconds(), back, st.GetCursor()-nowUnits())
	return injected, nil
}

func (f *faulter) clockNode() (int, error) {
	v, l := f.current()
	n := f.pick(f.owners(v, l))
	if n == nil {
		return 0, fmt.Errorf("no slot owner other than the leader")
	}
	return f.clockFault(n, f.clockHold, f.recovery, "-60s", "60s")
}

func (f *faulter) clockLeader() (int, error) {
	_, l := f.current()
	if l == nil {
		return 0, fmt.Errorf("no leader")
	}
	return f.clockFault(l, f.clockHold, f.recovery, "-60s", "60s")
}

// clockLeaderHour is the NTP step or stale VM clock of the cluster-time
// issue: the leader an hour ahead for a few seconds. Bounded by its own
// clock, it granted its slot an hour past real time and that node stayed out
// for the hour.
func (f *faulter) clockLeaderHour() (int, error) {
	_, l := f.current()
	if l == nil {
		return 0, fmt.Errorf("no leader")
	}
	return f.clockFault(l, 4*time.Second, f.recovery, "1h")
}

// wipe kills a follower, deletes its data dir and starts it again on the same
// addresses: a new node ID that must wait for the old one to be reaped.
func (f *faulter) wipe() (int, error) {
	v, l := f.current()
	n := f.pick(f.nodesWhere(v, func(n *node) bool { return n != l }))
	if n == nil {
		return 0, fmt.Errorf("no follower")
	}
	old := v[n].GetId()
	if err := n.Crash(); err != nil {
		return 0, err
	}
	if err := os.RemoveAll(n.DataDir); err != nil {
		return 1, err
	}
	if err := n.Restart(); err != nil {
		return 1, err
	}
	var id string
	waitFor(10*time.Second, func() bool {
		st, err := n.status(time.Second)
		if err == nil {
			id = st.GetId()
		}
		return id != ""
	})
	f.c.logf("  wiped %s: node ID %s -> %s", n.Name, old, id)
	if id == old {
		return 1, fmt.Errorf("%s kept node ID %s after its data dir was wiped", n.Name, old)
	}
	f.settle("wipe of "+n.Name, f.reapAfter+30*time.Second)
	return 1, nil
}

// standbyTakeover pauses a slot owner past --reap-after: the leader reaps it
// and the standby (the node without a slot) claims the freed slot while the
// old owner is only paused. After SIGCONT the old owner must not issue outside
// its windows; the verifier's containment check is what proves it.
func (f *faulter) standbyTakeover() (int, error) {
	var v view
	var l, sb *node
	waitFor(f.reapAfter+30*time.Second, func() bool {
		v, l = f.current()
		sb = f.pick(f.nodesWhere(v, func(n *node) bool { return v[n].GetSlot() < 0 }))
		return sb != nil
	})
	if sb == nil {
		return 0, fmt.Errorf("no standby (a live node without a slot): %s", v)
	}
	owner := f.pick(f.owners(v, l))
	if owner == nil {
		return 0, fmt.Errorf("no slot owner other than the leader")
	}
	slot := v[owner].GetSlot()
	if err := owner.Pause(); err != nil {
		return 0, err
	}
	f.c.logf("  paused %s (slot %d); standby %s waits for the slot", owner.Name, slot, sb.Name)
	start := time.Now()
	took := waitFor(f.reapAfter+40*time.Second, func() bool {
		st, err := sb.status(time.Second)
		return err == nil && st.GetSlot() == slot && st.GetReady()
	})
	if took {
		f.c.logf("  standby %s holds slot %d and is ready %.1fs after the pause", sb.Name, slot, time.Since(start).Seconds())
	} else {
		f.c.logf("  standby %s did not take slot %d within %v: %s", sb.Name, slot, f.reapAfter+40*time.Second, f.c.poll())
	}
	if err := owner.Resume(); err != nil {
		return 1, err
	}
	if st, err := owner.status(2 * time.Second); err == nil {
		f.c.logf("  resumed %s: slot=%d ready=%v reason=%q granted=%d cursor=%d", owner.Name, st.GetSlot(), st.GetReady(), st.GetReason(), st.GetGranted(), st.GetCursor())
	}
	f.settle("SIGCONT of the reaped "+owner.Name, f.reapAfter+30*time.Second)
	if !took {
		return 1, fmt.Errorf("standby %s never took slot %d of the paused %s", sb.Name, slot, owner.Name)
	}
	return 1, nil
}

// leaveRejoin makes a follower leave gracefully (it must exit 0), then starts
// it again from the same data dir with the same --join seeds.
func (f *faulter) leaveRejoin() (int, error) {
	v, l := f.current()
	n := f.pick(f.owners(v, l))
	if n == nil {
		return 0, fmt.Errorf("no slot owner other than the leader")
	}
	// Right after a restart the leader's gossip view may not yet show every
	// voter alive, and it refuses a leave that might break quorum (fails
	// closed); an operator would try again, so the harness does, for a while.
	var out, errOut string
	var code int
	var err error
	deadline := time.Now().Add(30 * time.Second)
	for tries := 1; ; tries++ {
		out, errOut, code, err = f.c.idctl(30*time.Second, "leave", "--target", n.GRPC)
		if err == nil && code == 0 {
			if tries > 1 {
				f.c.logf("  leave of %s accepted on try %d", n.Name, tries)
			}
			break
		}
		if !strings.Contains(errOut, "quorum") || time.Now().After(deadline) {
			return 0, fmt.Errorf("idctl leave on %s (try %d): exit %d %v: %s%s", n.Name, tries, code, err, out, errOut)
		}
		time.Sleep(time.Second)
	}
	if code, err := n.WaitExit(20 * time.Second); err != nil || code != 0 {
		return 1, fmt.Errorf("%s after leave: exit %d, %v", n.Name, code, err)
	}
	f.c.logf("  %s left (slot %d) and exited 0", n.Name, v[n].GetSlot())
	if err := n.Restart(); err != nil {
		return 1, err
	}
	f.settle("re-join of "+n.Name, f.reapAfter+30*time.Second)
	return 1, nil
}
