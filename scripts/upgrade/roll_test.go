package upgrade

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/idgen/idgen/generator"
	idgenv1 "github.com/idgen/idgen/proto/idgen/v1"
	"github.com/idgen/idgen/scripts/harness"
)

// Settings of the roll. Every limit is scaled by IDGEN_TEST_SLOWDOWN
// (harness.Scale).
const (
	// readyLimit is how long a restarted node may take, from its start, to
	// answer /readyz 200. The measured times are printed (ready_ms) so that
	// it can be tightened.
	readyLimit = 6 * time.Second
	// readyGiveUp: a node not ready by then stops the roll (it has already
	// failed readyLimit; waiting this long measures how late it was).
	readyGiveUp = 60 * time.Second
	// settleLimit: after a restarted node is ready, every node must be
	// ready, agree on one leader and list the node as a voter within this,
	// before the next node is restarted.
	settleLimit = 30 * time.Second
	formLimit   = 30 * time.Second
	defaultHold = 2 * time.Minute
	// leaderAttempts bounds the restarts of old-binary leaders that phase d
	// may need before the new-binary node leads.
	leaderAttempts = 6
)

// build is one of the two builds the cluster rolls between.
type build struct {
	name     string // "old" (the previous release) or "new" (this tree)
	bins     harness.Binaries
	version  string // what idgend --version printed
	revision string
}

// rnode is one idgend of the roll, with the build it runs (or will run on
// its next start) and a gRPC connection for Status and Members.
type rnode struct {
	*harness.Node
	on   *build
	id   string // its node ID, from its own Status
	conn *grpc.ClientConn
}

func (n *rnode) cluster() idgenv1.ClusterServiceClient {
	return idgenv1.NewClusterServiceClient(n.conn)
}

func (n *rnode) status(d time.Duration) (*idgenv1.StatusResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return n.cluster().Status(ctx, &idgenv1.StatusRequest{})
}

// restart is one restart of the roll, as measured.
type restart struct {
	phase, node string
	from, to    string
	wasLeader   bool
	exit        int
	stopped     time.Time     // SIGTERM sent
	settled     time.Time     // the cluster healthy again
	stopTook    time.Duration // SIGTERM to exit
	readyTook   time.Duration // start to /readyz 200
	settleTook  time.Duration // ready to the whole cluster healthy
	reasons     []string      // what /readyz said meanwhile, in order
	// leadAtReady and leadAtSettle are how far the node's granted window
	// reached past real time when it turned ready and when the cluster was
	// healthy again (the nodes' --lead is what a settled window keeps).
	leadAtReady, leadAtSettle string
}

// windowLead is how far st's granted window reaches past now, and the room
// left in it past the node's cursor (the timestamp of its last ID), as text.
// A restarted node issues from above its last window, so its cursor starts
// near the end of the new window: little room, however far the lead.
func windowLead(st *idgenv1.StatusResponse, now time.Time) string {
	l, err := generator.ParseLayout(st.GetLayout())
	if err != nil || st.GetSlot() < 0 {
		return "?"
	}
	end := time.Unix(l.Epoch, 0).Add(time.Duration(st.GetGranted()) * l.Unit)
	room := time.Duration(st.GetGranted()-st.GetCursor()) * l.Unit
	return fmt.Sprintf("%s, room %s", end.Sub(now).Round(100*time.Millisecond), room)
}

type roll struct {
	t        *testing.T
	start    time.Time
	previous string // the release's full hash
	old, new *build
	hold     time.Duration
	nodes    []*rnode
	load     *load
	restarts []restart
	notes    []string // what phase d did to get the new-binary node to lead
	holdSeen string   // the hold's outcome, for the summary
}

func (r *roll) logf(format string, args ...any) {
	r.t.Helper()
	r.t.Logf("[%6.1fs] %s", time.Since(r.start).Seconds(), fmt.Sprintf(format, args...))
}

// TestRollingUpgrade rolls a three-node cluster from the previous release
// (PREVIOUS) to this tree's build and back, one node at a time, under load:
//
//	a. old -> new, followers first, leader last;
//	b. new -> old, followers first, leader last;
//	c. old -> new, leader first;
//	d. the two followers back to old: a new-binary leader with two
//	   old-binary followers, held for IDGEN_UPGRADE_HOLD (default 2m).
//
// It fails on a restarted node not ready within readyLimit of its start,
// any failed Pool draw, any duplicate ID, and any node not ready (or a
// window not extended) during the hold. It runs only with IDGEN_UPGRADE=1
// (scripts/upgrade-roll).
func TestRollingUpgrade(t *testing.T) {
	switch v := os.Getenv("IDGEN_UPGRADE"); v {
	case "1":
	case "":
		// Never in CI: there the wrapper sets it, and a set value runs (or fails).
		t.Skip("the rolling-upgrade test runs with IDGEN_UPGRADE=1 (scripts/upgrade-roll)")
	default:
		t.Fatalf("IDGEN_UPGRADE=%q: want 1 (run the rolling-upgrade test) or unset", v)
	}
	hold := defaultHold
	if s := os.Getenv("IDGEN_UPGRADE_HOLD"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			t.Fatalf("IDGEN_UPGRADE_HOLD=%q: want a positive duration such as 2m or 30s", s)
		}
		hold = d
	}
	r := &roll{t: t, start: time.Now(), hold: hold, previous: readPrevious(t)}

	r.old = &build{name: "old", bins: buildPrevious(t, r.previous)}
	t0 := time.Now()
	r.new = &build{name: "new", bins: harness.Build(t, "-buildvcs=true")}
	r.logf("built this tree in %.1fs", time.Since(t0).Seconds())
	for _, b := range []*build{r.old, r.new} {
		b.version, b.revision = version(t, b.bins.Idgend)
		r.logf("%s build: %s", b.name, b.version)
	}
	if r.old.revision != r.previous {
		t.Fatalf("the previous release's build names revision %q, want %s", r.old.revision, r.previous)
	}

	r.form()
	l, err := startLoad(r.targets())
	if err != nil {
		t.Fatal(err)
	}
	r.load = l
	defer r.finish()
	harness.WaitFor(t, 30*time.Second, "the load's first 1,000 IDs", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return len(l.ids) >= 1000
	})

	r.rollPhase("a", "old->new, followers first, leader last", r.old, r.new, false)
	r.rollPhase("b", "new->old, followers first, leader last", r.new, r.old, false)
	r.rollPhase("c", "old->new, leader first", r.old, r.new, true)
	r.mixed("d", "new-binary leader, old-binary followers")
	r.holdMixed()
}

// form starts n1..n3 on the old build, bootstrapping together, and waits
// for every node to be ready under one leader. IDGEN_UPGRADE_LOGDIR keeps
// the nodes' logs and data there.
func (r *roll) form() {
	t := r.t
	root := t.TempDir()
	if d := os.Getenv("IDGEN_UPGRADE_LOGDIR"); d != "" {
		root = filepath.Join(d, fmt.Sprintf("upgrade-%d", time.Now().Unix()))
		if err := os.MkdirAll(root, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var ports harness.Ports
	for i := 1; i <= 3; i++ {
		hn := harness.NewNodeIn(t, r.old.bins, &ports, root, "n"+strconv.Itoa(i),
			"--gossip-profile", "local", "--shutdown-timeout", "2s", "--bootstrap-expect", "3")
		conn, err := grpc.NewClient(hn.GRPC,
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			// Short reconnect backoff: the nodes restart on the same address.
			grpc.WithConnectParams(grpc.ConnectParams{
				Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 500 * time.Millisecond},
				MinConnectTimeout: time.Second,
			}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		r.nodes = append(r.nodes, &rnode{Node: hn, on: r.old, conn: conn})
	}
	var seeds []string
	for _, n := range r.nodes {
		seeds = append(seeds, n.Gossip)
	}
	for _, n := range r.nodes {
		n.Extra = append(n.Extra, "--join", strings.Join(seeds, ","))
		n.Start()
	}
	t0 := time.Now()
	var v view
	if !harness.Eventually(formLimit, func() bool { v = r.poll(); return r.healthy(v) }) {
		t.Fatalf("the old build's cluster did not form within %s: %s%s", harness.Scale(formLimit), v, harness.SlowdownNote())
	}
	r.logf("cluster of 3 on the old build ready in %.1fs (data and logs in %s): %s", time.Since(t0).Seconds(), root, v)
}

func (r *roll) targets() string {
	var addrs []string
	for _, n := range r.nodes {
		addrs = append(addrs, n.GRPC)
	}
	return strings.Join(addrs, ",")
}

// view is one poll of every running node's Status.
type view map[*rnode]*idgenv1.StatusResponse

func (r *roll) poll() view {
	v := view{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, n := range r.nodes {
		if !n.Running() {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if st, err := n.status(time.Second); err == nil {
				mu.Lock()
				v[n] = st
				if st.GetId() != "" {
					n.id = st.GetId()
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return v
}

// leader is the node that says it leads, when every answer names it.
func (v view) leader() *rnode {
	var l *rnode
	for n, st := range v {
		if strings.EqualFold(st.GetRaftState(), "leader") {
			if l != nil {
				return nil
			}
			l = n
		}
	}
	if l == nil {
		return nil
	}
	for _, st := range v {
		if st.GetLeaderId() != v[l].GetId() {
			return nil
		}
	}
	return l
}

func (v view) String() string {
	var parts []string
	for n, st := range v {
		r := "R"
		if !st.GetReady() {
			r = "(" + st.GetReason() + ")"
		}
		parts = append(parts, fmt.Sprintf("%s[%s]:%s:slot=%d:%s", n.Name, n.on.name, strings.ToLower(st.GetRaftState()), st.GetSlot(), r))
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

// healthy: all three nodes answer and are ready, agree on one leader, and
// the leader lists each of them as a Raft voter.
func (r *roll) healthy(v view) bool {
	if len(v) != len(r.nodes) {
		return false
	}
	for _, st := range v {
		if !st.GetReady() {
			return false
		}
	}
	l := v.leader()
	if l == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	resp, err := l.cluster().Members(ctx, &idgenv1.MembersRequest{})
	if err != nil {
		return false
	}
	roles := map[string]string{}
	for _, m := range resp.GetMembers() {
		roles[m.GetId()] = strings.ToLower(m.GetRaftRole())
	}
	for _, st := range v {
		if role := roles[st.GetId()]; role != "leader" && role != "voter" {
			return false
		}
	}
	return true
}

// waitLeader waits for one agreed leader.
func (r *roll) waitLeader() (*rnode, view) {
	r.t.Helper()
	var v view
	var l *rnode
	if !harness.Eventually(settleLimit, func() bool { v = r.poll(); l = v.leader(); return l != nil }) {
		r.t.Fatalf("no agreed leader within %s: %s%s", harness.Scale(settleLimit), v, harness.SlowdownNote())
	}
	return l, v
}

// restartOn stops n gracefully (SIGTERM) and starts it on build to, then
// measures how long it takes to be ready and waits for the whole cluster
// to be healthy again, with n answering as the build it was started on.
func (r *roll) restartOn(phase string, n *rnode, to *build) {
	t := r.t
	t.Helper()
	l, _ := r.waitLeader()
	rec := restart{phase: phase, node: n.Name, from: n.on.name, to: to.name, wasLeader: l == n}
	t0 := time.Now()
	rec.stopped = t0
	n.Stop()
	code, err := n.WaitExit(time.Second)
	rec.exit, rec.stopTook = code, time.Since(t0)
	if err != nil || code != 0 {
		t.Errorf("%s: %s did not stop gracefully on SIGTERM: exit %d (%v) after %.1fs", phase, n.Name, code, err, rec.stopTook.Seconds())
	}
	n.UseBinary(to.bins.Idgend)
	n.on = to
	start := time.Now()
	n.Start()
	last := ""
	ready := harness.Eventually(readyGiveUp, func() bool {
		if !n.Running() {
			return true
		}
		code, body := n.Get("/readyz")
		if code == http.StatusOK {
			return true
		}
		why := "no answer (admin port not up yet)"
		if code != 0 {
			why = fmt.Sprintf("%d %s", code, strings.TrimPrefix(strings.TrimSpace(body), "not ready: "))
		}
		if why != last && len(rec.reasons) < 20 {
			rec.reasons = append(rec.reasons, fmt.Sprintf("+%dms %s", time.Since(start).Milliseconds(), why))
		}
		last = why
		return false
	})
	rec.readyTook = time.Since(start)
	if !n.Running() {
		code, _ := n.WaitExit(time.Second)
		t.Fatalf("%s: %s exited (%d) %.1fs after its start on the %s build; /readyz said: %s\n%s",
			phase, n.Name, code, rec.readyTook.Seconds(), to.name, strings.Join(rec.reasons, "; "), logSinceStart(n))
	}
	if !ready {
		t.Fatalf("%s: %s not ready %.1fs after its start on the %s build; /readyz said: %s\n%s",
			phase, n.Name, rec.readyTook.Seconds(), to.name, strings.Join(rec.reasons, "; "), logSinceStart(n))
	}
	if st, err := n.status(time.Second); err == nil {
		rec.leadAtReady = windowLead(st, time.Now())
	}
	if limit := harness.Scale(readyLimit); rec.readyTook > limit {
		t.Errorf("%s: %s took %.1fs to be ready after its start on the %s build (limit %s%s); /readyz said: %s\n%s",
			phase, n.Name, rec.readyTook.Seconds(), to.name, limit, harness.SlowdownNote(), strings.Join(rec.reasons, "; "), logSinceStart(n))
	}
	t1 := time.Now()
	good := 0
	var v view
	ok := harness.Eventually(settleLimit, func() bool {
		v = r.poll()
		st := v[n]
		if st == nil || st.GetRevision() != to.revision || !r.healthy(v) {
			good = 0
			return false
		}
		// Twice in a row: a view can look right while the leader reconciles.
		good++
		return good >= 2
	})
	rec.settled = time.Now()
	rec.settleTook = rec.settled.Sub(t1)
	if st := v[n]; st != nil {
		rec.leadAtSettle = windowLead(st, rec.settled)
	}
	if !ok {
		t.Fatalf("%s: the cluster was not healthy within %s of %s's restart on the %s build (revision %s): %s%s",
			phase, harness.Scale(settleLimit), n.Name, to.name, to.revision, v, harness.SlowdownNote())
	}
	r.restarts = append(r.restarts, rec)
	role := "follower"
	if rec.wasLeader {
		role = "leader"
	}
	r.logf("%s: %s (%s) %s->%s: SIGTERM at %s, stopped in %dms (exit %d), ready in %dms (window lead %s), cluster healthy %dms later (lead %s); /readyz meanwhile: %s",
		phase, n.Name, role, rec.from, rec.to, rec.stopped.Format("15:04:05.000"), rec.stopTook.Milliseconds(), rec.exit, rec.readyTook.Milliseconds(), rec.leadAtReady,
		rec.settleTook.Milliseconds(), rec.leadAtSettle, strings.Join(rec.reasons, "; "))
	r.logf("  now: %s", v)
}

// logSinceStart is the node's log from its latest start.
func logSinceStart(n *rnode) string {
	s := n.Log()
	if i := strings.LastIndex(s, "=== harness: start #"); i >= 0 {
		s = s[i:]
	}
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > 60 {
		lines = append([]string{fmt.Sprintf("... (%d lines before)", len(lines)-60)}, lines[len(lines)-60:]...)
	}
	return fmt.Sprintf("--- %s's log since its start ---\n%s", n.Name, strings.Join(lines, "\n"))
}

// rollPhase moves every node on from to to, one at a time: followers
// first and the leader last, or (leaderFirst) the current leader while it
// still runs from.
func (r *roll) rollPhase(phase, what string, from, to *build, leaderFirst bool) {
	r.load.phase(phase + ": " + what)
	r.logf("phase %s: %s", phase, what)
	for {
		var todo []*rnode
		for _, n := range r.nodes {
			if n.on == from {
				todo = append(todo, n)
			}
		}
		if len(todo) == 0 {
			break
		}
		l, _ := r.waitLeader()
		pick := l
		if !leaderFirst || l.on != from {
			for _, n := range todo {
				if n != l {
					pick = n
					break
				}
			}
		}
		if pick.on != from {
			r.t.Fatalf("phase %s: no node left on the %s build to restart", phase, from.name)
		}
		r.restartOn(phase, pick, to)
	}
	l, v := r.waitLeader()
	r.logf("phase %s done: leader %s on the %s build; %s", phase, l.Name, l.on.name, v)
}

// mixed puts the cluster, all on the new build, into a new-binary leader
// with two old-binary followers: the followers are restarted on the old
// build, and if leadership moves to an old-binary node, that node is
// restarted (on the old build) until the new-binary node wins an election.
// idctl has no leadership transfer.
func (r *roll) mixed(phase, what string) {
	r.load.phase(phase + ": " + what)
	r.logf("phase %s: %s", phase, what)
	l, _ := r.waitLeader()
	if l.on != r.new {
		r.t.Fatalf("phase %s: the leader %s runs the %s build; after phase c every node runs the new one", phase, l.Name, l.on.name)
	}
	lead := l
	for _, n := range r.nodes {
		if n != lead {
			r.restartOn(phase, n, r.old)
		}
	}
	for attempt := 1; ; attempt++ {
		l, v := r.waitLeader()
		if l == lead {
			r.logf("phase %s done: %s leads on the new build, the others run the old one: %s", phase, l.Name, v)
			return
		}
		if attempt > leaderAttempts {
			r.t.Fatalf("phase %s: after %d restarts of old-binary leaders the new-binary %s still does not lead: %s", phase, leaderAttempts, lead.Name, v)
		}
		note := fmt.Sprintf("leadership moved to the old-binary %s; restarted it on the old build (attempt %d) for the new-binary %s to win the election",
			l.Name, attempt, lead.Name)
		r.notes = append(r.notes, note)
		r.logf("phase %s: %s", phase, note)
		r.restartOn(phase, l, r.old)
	}
}

// holdMixed keeps the new-binary leader with two old-binary followers for
// r.hold under the load, checking every second that every node is ready
// and the leader has not changed, and at the end that the leader extended
// every node's window (its granted timestamp moved on) and that every node
// served raw calls.
func (r *roll) holdMixed() {
	t := r.t
	p := r.load.phase(fmt.Sprintf("hold: new-binary leader, old-binary followers, %s", r.hold))
	lead, v0 := r.waitLeader()
	granted0 := map[*rnode]int64{}
	for n, st := range v0 {
		granted0[n] = st.GetGranted()
	}
	r.logf("hold for %s: %s leads on the new build; %s", r.hold, lead.Name, v0)
	end := time.Now().Add(r.hold)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	checks, notReady, moved := 0, 0, 0
	for time.Now().Before(end) {
		<-tick.C
		checks++
		at := time.Since(p.start).Seconds()
		for _, n := range r.nodes {
			if code, body := n.Get("/readyz"); code != http.StatusOK {
				notReady++
				if notReady <= 10 {
					t.Errorf("hold +%.0fs: %s (%s build) not ready: %d %q", at, n.Name, n.on.name, code, strings.TrimSpace(body))
				}
			}
		}
		if v := r.poll(); v.leader() != lead {
			moved++
			if moved <= 3 {
				t.Errorf("hold +%.0fs: the new-binary %s no longer leads: %s", at, lead.Name, v)
			}
		}
	}
	v1 := r.poll()
	var advanced []string
	for _, n := range r.nodes {
		st := v1[n]
		if st == nil || st.GetGranted() <= granted0[n] {
			t.Errorf("hold: %s's window did not move on (granted %d at the start, %d at the end): the new-binary leader stopped granting to it",
				n.Name, granted0[n], st.GetGranted())
		}
		advanced = append(advanced, fmt.Sprintf("%s+%d(lead %s)", n.Name, st.GetGranted()-granted0[n], windowLead(st, time.Now())))
	}
	r.load.mu.Lock()
	var served []string
	for _, n := range r.nodes {
		k := p.raw.perNode[n.Name]
		served = append(served, fmt.Sprintf("%s=%d", n.Name, k))
		if k == 0 {
			t.Errorf("hold: %s (%s build) served none of the raw GetIDBatch calls", n.Name, n.on.name)
		}
	}
	r.load.mu.Unlock()
	r.holdSeen = fmt.Sprintf("checks=%d not_ready=%d leader_changes=%d granted_advance=%s raw_served=%s",
		checks, notReady, moved, strings.Join(advanced, ","), strings.Join(served, ","))
	r.logf("hold done: %s; %s", r.holdSeen, v1)
}

// finish stops the load, checks the IDs and prints one line per phase and
// the summary line (also when the roll stopped early: then it says so).
func (r *roll) finish() {
	t := r.t
	r.load.stop()
	l := r.load
	dups, examples := duplicates(l.ids)
	if dups > 0 {
		t.Errorf("DUPLICATE IDS: %d of %d drawn were drawn before (e.g. %v)", dups, len(l.ids), examples)
	}
	var worst time.Duration
	var failed, rawFailed int64
	for _, p := range l.phases {
		var rs []string
		for _, rec := range r.restarts {
			if strings.HasPrefix(p.name, rec.phase+": ") {
				role := ""
				if rec.wasLeader {
					role = "(leader)"
				}
				pw, rw := l.worstBetween(rec.stopped, rec.settled)
				rs = append(rs, fmt.Sprintf("%s%s:%s->%s:ready=%dms:pool_worst=%s:raw_worst=%s",
					rec.node, role, rec.from, rec.to, rec.readyTook.Milliseconds(), under(pw), under(rw)))
			}
		}
		line := fmt.Sprintf("upgrade-phase: %q took=%.0fs restarts=[%s] pool_%s raw_%s",
			p.name, phaseTook(l, p).Seconds(), strings.Join(rs, " "), &p.pool, &p.raw)
		fmt.Println(line)
		t.Log(line)
		for _, e := range p.pool.errs {
			t.Logf("  failed NextID: %s", e)
		}
		for _, e := range p.raw.errs {
			t.Logf("  failed GetIDBatch: %s", e)
		}
		for i, smp := range slowest(p.raw.slow, 5) {
			if i == 0 {
				t.Logf("  slowest GetIDBatch calls of %q (at: took, served by):", p.name)
			}
			t.Logf("    +%.1fs (%s): %dms %s", smp.at.Sub(p.start).Seconds(), smp.at.Format("15:04:05.000"), smp.took.Milliseconds(), smp.node)
		}
		if p.pool.failed > 0 {
			t.Errorf("%s: %d NextID draws failed (first: %s)", p.name, p.pool.failed, p.pool.errs[0])
		}
		if p.name != "warm-up" {
			worst = max(worst, p.pool.worst)
		}
		failed += p.pool.failed
		rawFailed += p.raw.failed
	}
	var readyMax time.Duration
	var each []string
	for _, rec := range r.restarts {
		readyMax = max(readyMax, rec.readyTook)
		each = append(each, fmt.Sprintf("%s:%s=%d", rec.phase, rec.node, rec.readyTook.Milliseconds()))
	}
	for _, b := range []*build{r.old, r.new} {
		fmt.Printf("upgrade-version: %s build: %s\n", b.name, b.version)
	}
	for _, n := range r.notes {
		fmt.Printf("upgrade-note: %s\n", n)
	}
	var names []string
	for _, p := range l.phases {
		if p.name != "warm-up" {
			name, _, _ := strings.Cut(p.name, ":")
			names = append(names, name)
		}
	}
	phases := strings.Join(names, ",")
	result := "ok"
	if t.Failed() {
		result = "FAIL"
	}
	if r.holdSeen == "" {
		r.holdSeen = "not reached"
		result = "FAIL (stopped before the end of the roll)"
	}
	line := fmt.Sprintf("upgrade-roll: previous=%s new=%s phases=%s hold=%s restarts=%d ready_max_ms=%d ready_ms=%s worst_nextid_ms=%.1f ids=%d duplicates=%d failed_draws=%d raw_failed=%d hold_seen=[%s] wall=%.0fs result=%s",
		shortRev(r.old.revision), shortRev(r.new.revision), phases, r.hold, len(r.restarts), readyMax.Milliseconds(), strings.Join(each, ","),
		ms(worst), len(l.ids), dups, failed, rawFailed, r.holdSeen, time.Since(r.start).Seconds(), result)
	fmt.Println(line)
	t.Log(line)
}

// under is a worst latency the slow samples saw: "<10ms" when none was kept.
func under(d time.Duration) string {
	if d == 0 {
		return "<" + slowDraw.String()
	}
	return fmt.Sprintf("%dms", d.Milliseconds())
}

// slowest are the k slowest of ss, slowest first.
func slowest(ss []sample, k int) []sample {
	s := slices.Clone(ss)
	slices.SortFunc(s, func(a, b sample) int { return cmp.Compare(b.took, a.took) })
	return s[:min(k, len(s))]
}

// phaseTook is how long phase p lasted (to the next one, or to now).
func phaseTook(l *load, p *phaseLoad) time.Duration {
	for i, q := range l.phases {
		if q == p && i+1 < len(l.phases) {
			return l.phases[i+1].start.Sub(p.start)
		}
	}
	return time.Since(p.start)
}

// shortRev is a revision's first 7 hex digits, with "-dirty" kept.
func shortRev(rev string) string {
	h, dirty, _ := strings.Cut(rev, "-")
	if len(h) > 7 {
		h = h[:7]
	}
	if dirty != "" {
		return h + "-" + dirty
	}
	return h
}
