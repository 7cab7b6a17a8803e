package main

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/idgen/idgen/generator"
	idgenv1 "github.com/idgen/idgen/proto/idgen/v1"
	"github.com/idgen/idgen/rpc/idcheck"
	"github.com/idgen/idgen/rpc/idclient"
	"github.com/idgen/idgen/scripts/harness"
)

type statusOut struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	Slot   int    `json:"slot"`
	Ready  bool   `json:"ready"`
	Reason string `json:"reason"`
	Floor  int64  `json:"floor"`
}

func nodeStatus(t *testing.T, n *node) statusOut {
	t.Helper()
	var st statusOut
	if err := json.Unmarshal([]byte(mustIdctl(t, "--target", n.grpc, "--json", "status")), &st); err != nil {
		t.Fatal(err)
	}
	return st
}

type membersOut struct {
	Members []struct {
		ID   string `json:"id"`
		Name string `json:"name"`
		Slot int    `json:"slot"`
	} `json:"members"`
}

// slotOwners maps slot -> member name, as a node's Members reports it.
func slotOwners(t *testing.T, n *node) map[int]string {
	t.Helper()
	out, _, code := idctl(t, "--target", n.grpc, "--json", "members")
	if code != 0 {
		return nil
	}
	var m membersOut
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatal(err)
	}
	owners := map[int]string{}
	for _, mm := range m.Members {
		if mm.Slot >= 0 {
			owners[mm.Slot] = mm.Name
		}
	}
	return owners
}

func decode(t *testing.T, id int64) generator.Parts {
	t.Helper()
	p, err := generator.DefaultLayout().Decompose(id)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestThreeNodeCluster: a cluster formed with --bootstrap-expect 3 serves IDs
// from all three slots through a multi-endpoint target; tools work against
// it; bad input is refused and changes nothing; a client Pool sees no error
// when a node is killed with SIGKILL; the killed node restarts from its data
// dir with its slot and issues only above its old IDs.
func TestThreeNodeCluster(t *testing.T) {
	nodes := startCluster(t, 3)
	target := targetOf(nodes...)

	t.Run("ids from all three slots", func(t *testing.T) {
		slots := map[int]bool{}
		harness.WaitFor(t, 20*time.Second, "IDs from all three slots", func() bool {
			var ids []struct{ Slot int }
			out := mustIdctl(t, "--target", target, "--json", "ids", "-n", "12", "--batch", "1")
			if err := json.Unmarshal([]byte(out), &ids); err != nil || len(ids) != 12 {
				t.Fatalf("ids output %q: %v", out, err)
			}
			for _, id := range ids {
				slots[id.Slot] = true
			}
			return len(slots) == 3
		})
		codes := strings.Fields(mustIdctl(t, "--target", target, "ids", "-n", "3", "--base62"))
		if len(codes) != 3 {
			t.Fatalf("codes %v", codes)
		}
		for _, c := range codes {
			if _, err := generator.Decode(c); err != nil {
				t.Fatalf("code %q: %v", c, err)
			}
		}
	})

	t.Run("grpcurl and grpc-health-probe", func(t *testing.T) {
		grpcurl := tool(t, "grpcurl")
		probe := tool(t, "grpc-health-probe")
		out, errOut, code := runBin(t, grpcurl, "-plaintext", "-max-time", "5", nodes[0].grpc, "list")
		for _, svc := range []string{"idgen.v1.IDService", "idgen.v1.ClusterService", "grpc.health.v1.Health"} {
			if code != 0 || !strings.Contains(out, svc) {
				t.Fatalf("grpcurl list (exit %d) lacks %s:\n%s%s", code, svc, out, errOut)
			}
		}
		out, errOut, code = runBin(t, grpcurl, "-plaintext", "-max-time", "5", "-d", `{"count": 3}`,
			nodes[1].grpc, "idgen.v1.IDService/GetIDBatch")
		var resp struct {
			IDs []string `json:"ids"`
		}
		if code != 0 || json.Unmarshal([]byte(out), &resp) != nil || len(resp.IDs) != 3 {
			t.Fatalf("grpcurl GetIDBatch exit %d: %s%s", code, out, errOut)
		}
		out, errOut, code = runBin(t, grpcurl, "-plaintext", "-max-time", "5", nodes[2].grpc, "idgen.v1.ClusterService/Members")
		if code != 0 || strings.Count(out, `"grpcAddr"`) != 3 {
			t.Fatalf("grpcurl Members exit %d: %s%s", code, out, errOut)
		}
		// Without -max-time grpcurl sends no deadline: refused.
		_, errOut, code = runBin(t, grpcurl, "-plaintext", nodes[0].grpc, "idgen.v1.IDService/GetIDBatch")
		if code == 0 || !strings.Contains(errOut, "InvalidArgument") || !strings.Contains(errOut, "deadline") {
			t.Fatalf("grpcurl without a deadline: exit %d: %s", code, errOut)
		}
		for _, svc := range []string{"", "idgen.v1.IDService"} {
			out, errOut, code = runBin(t, probe, "-addr", nodes[0].grpc, "-service", svc)
			if code != 0 || !strings.Contains(out+errOut, "SERVING") {
				t.Fatalf("grpc-health-probe service %q: exit %d: %s%s", svc, code, out, errOut)
			}
		}
	})

	t.Run("bad input is refused and the node keeps serving", func(t *testing.T) {
		conn, err := grpc.NewClient(nodes[0].grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ids := idgenv1.NewIDServiceClient(conn)
		admin := idgenv1.NewClusterServiceClient(conn)

		// No deadline.
		_, err = ids.GetIDBatch(context.Background(), &idgenv1.GetIDBatchRequest{Count: 5})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "deadline") {
			t.Fatalf("call without deadline: %v", err)
		}
		// Count over the maximum.
		_, errOut, code := idctl(t, "--target", nodes[0].grpc, "ids", "-n", "20000", "--batch", "20000")
		if code != 1 || !strings.Contains(errOut, "InvalidArgument") || !strings.Contains(errOut, "over the maximum of 10000") {
			t.Fatalf("count over max: exit %d: %s", code, errOut)
		}
		// Unknown node in Remove.
		_, errOut, code = idctl(t, "--target", nodes[0].grpc, "remove", "no-such-node")
		if code != 1 || !strings.Contains(errOut, "NotFound") || !strings.Contains(errOut, "idctl members") {
			t.Fatalf("remove unknown: exit %d: %s", code, errOut)
		}
		// Join to an unreachable address.
		dead := addr(harness.NextPorts(t, 1)[0])
		_, errOut, code = idctl(t, "--target", nodes[0].grpc, "--timeout", "20s", "join", dead)
		if code != 1 || !strings.Contains(errOut, "Unavailable") || !strings.Contains(errOut, "--gossip-addr") {
			t.Fatalf("join unreachable: exit %d: %s", code, errOut)
		}
		// Usage errors exit 2 before any call.
		if _, _, code := idctl(t, "--target", nodes[0].grpc, "remove"); code != 2 {
			t.Fatalf("remove without a node: exit %d, want 2", code)
		}
		if _, _, code := idctl(t, "frobnicate"); code != 2 {
			t.Fatalf("unknown command: exit %d, want 2", code)
		}
		// Fault injection is off by default.
		_, errOut, code = idctl(t, "--target", nodes[0].grpc, "fault", "clock", "--offset", "-60s")
		if code != 1 || !strings.Contains(errOut, "FailedPrecondition") || !strings.Contains(errOut, "--enable-fault-injection") {
			t.Fatalf("fault without --enable-fault-injection: exit %d: %s", code, errOut)
		}
		// Nothing changed: still three members, the node still serves.
		ctx, cancel := context.WithTimeout(context.Background(), harness.Scale(5*time.Second))
		defer cancel()
		m, err := admin.Members(ctx, &idgenv1.MembersRequest{})
		if err != nil || len(m.GetMembers()) != 3 {
			t.Fatalf("members after bad input: %v %v", m, err)
		}
		got, err := ids.GetIDBatch(ctx, &idgenv1.GetIDBatchRequest{Count: 5})
		if err != nil || len(got.GetIds()) != 5 {
			t.Fatalf("node stopped serving after bad input: %v", err)
		}
		if !nodes[0].ready() {
			t.Fatal("node not ready after bad input")
		}
	})

	t.Run("pool sees no error when a node is killed; restart keeps slot", func(t *testing.T) {
		client, err := idclient.Dial(target)
		if err != nil {
			t.Fatal(err)
		}
		defer client.Close()
		pool, err := idclient.NewPool(client, idclient.PoolOptions{BatchSize: 100, Lookahead: 4})
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()

		var (
			mu       sync.Mutex
			drawn    []int64
			failures []error
			stop     atomic.Bool
		)
		var wg sync.WaitGroup
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for !stop.Load() {
					ctx, cancel := context.WithTimeout(context.Background(), harness.Scale(3*time.Second))
					id, err := pool.NextID(ctx)
					cancel()
					mu.Lock()
					if err != nil {
						failures = append(failures, err)
					} else {
						drawn = append(drawn, id)
					}
					mu.Unlock()
					time.Sleep(time.Millisecond) // about 1,000 IDs/s per drawer
				}
			}()
		}
		count := func() int { mu.Lock(); defer mu.Unlock(); return len(drawn) }
		harness.WaitFor(t, 10*time.Second, "the pool to draw IDs", func() bool { return count() > 500 })

		// Kill the leader: the harder case (an election on top of a lost node).
		victim := nodes[0]
		for _, n := range nodes {
			if strings.Contains(mustIdctl(t, "--target", n.grpc, "--json", "status"), `"raft_state": "Leader"`) {
				victim = n
			}
		}
		before := nodeStatus(t, victim)
		victim.kill()
		atKill := count()
		// Draw on through the election and well after it.
		harness.WaitFor(t, 20*time.Second, "a new leader among the survivors", func() bool {
			for _, n := range nodes {
				if n != victim && strings.Contains(mustIdctl(t, "--target", n.grpc, "--json", "status"), `"raft_state": "Leader"`) {
					return true
				}
			}
			return false
		})
		atLeader := count()
		harness.WaitFor(t, 20*time.Second, "2,000 more IDs after the new leader", func() bool { return count() > atLeader+2000 })
		stop.Store(true)
		wg.Wait()
		if len(failures) > 0 {
			t.Fatalf("%d NextID errors after killing %s, first: %v", len(failures), victim.name, failures[0])
		}
		seen := map[int64]bool{}
		maxTS := int64(-1) // the victim's slot's newest timestamp seen
		for _, id := range drawn {
			if seen[id] {
				t.Fatalf("duplicate ID %d", id)
			}
			seen[id] = true
			if p := decode(t, id); p.Slot == before.Slot {
				maxTS = max(maxTS, p.Timestamp)
			}
		}
		t.Logf("drew %d IDs, %d after killing %s (slot %d), 0 errors", len(drawn), len(drawn)-atKill, victim.name, before.Slot)

		victim.start()
		harness.WaitFor(t, 30*time.Second, victim.name+" ready again", victim.ready)
		after := nodeStatus(t, victim)
		if after.ID != before.ID || after.Slot != before.Slot {
			t.Fatalf("restart: id %s slot %d, want id %s slot %d", after.ID, after.Slot, before.ID, before.Slot)
		}
		if after.Floor < maxTS {
			t.Fatalf("restart floor %d is below timestamp %d already issued", after.Floor, maxTS)
		}
		var fresh []struct {
			ID   int64
			Slot int
		}
		if err := json.Unmarshal([]byte(mustIdctl(t, "--target", victim.grpc, "--json", "ids", "-n", "50")), &fresh); err != nil {
			t.Fatal(err)
		}
		for _, f := range fresh {
			p := decode(t, f.ID)
			if p.Slot != before.Slot || p.Timestamp <= maxTS || seen[f.ID] {
				t.Fatalf("after restart: id %d slot %d ts %d; want slot %d above ts %d", f.ID, p.Slot, p.Timestamp, before.Slot, maxTS)
			}
		}
	})

	t.Run("verify finds nothing", func(t *testing.T) {
		out, errOut, code := idctl(t, "--target", target, "--json", "verify", "--duration", "2s", "--rate", "3000")
		var r idcheck.Report
		if code != 0 || json.Unmarshal([]byte(out), &r) != nil || r.Acknowledged < 3000 || len(r.PerSlot) != 3 || !r.OK() {
			t.Fatalf("verify exit %d: %s%s", code, out, errOut)
		}
	})
}

// TestNinthNodeLeaveRemove: with eight nodes holding every slot, a ninth
// waits as a standby (not ready, /readyz says why); `idctl leave` frees a slot,
// the node exits 0 and the standby takes the slot; `idctl remove` of a killed
// node frees its slot.
func TestNinthNodeLeaveRemove(t *testing.T) {
	nodes := startCluster(t, 8, "--reap-after", "10m")
	ninth := newNode(t, nodeOpts{name: "n9", join: []string{nodes[0].gossip}})
	ninth.start()
	harness.WaitFor(t, 30*time.Second, "the ninth node to report standby", func() bool {
		code, body := ninth.readyz()
		return code == 503 && strings.Contains(body, "standby") && strings.Contains(body, "every slot is owned")
	})
	probe := tool(t, "grpc-health-probe")
	out, errOut, code := runBin(t, probe, "-addr", ninth.grpc, "-service", "idgen.v1.IDService")
	if code == 0 || !strings.Contains(out+errOut, "NOT_SERVING") {
		t.Fatalf("health probe of the standby: exit %d: %s%s", code, out, errOut)
	}
	if _, _, code := idctl(t, "--target", ninth.grpc, "ids", "-n", "1"); code != 1 {
		t.Fatalf("ids from the standby: exit %d, want 1", code)
	}

	// Leave: the node releases its slot and exits 0; the standby claims it.
	leaver := nodes[7]
	freed := nodeStatus(t, leaver).Slot
	out = mustIdctl(t, "--target", leaver.grpc, "leave")
	if !strings.Contains(out, "left the cluster") {
		t.Fatalf("leave output %q", out)
	}
	if code := leaver.wait(15 * time.Second); code != 0 {
		t.Fatalf("%s exited %d after leave, want 0", leaver.name, code)
	}
	harness.WaitFor(t, 30*time.Second, "the standby to take the freed slot", func() bool {
		return ninth.ready() && slotOwners(t, nodes[0])[freed] == "n9"
	})

	// Remove: a killed node's slot is freed by the operator (reap-after is long).
	victim := nodes[6]
	victimSlot := nodeStatus(t, victim).Slot
	victim.kill()
	var rm struct {
		ID        string `json:"id"`
		FreedSlot int    `json:"freed_slot"`
	}
	harness.WaitFor(t, 30*time.Second, "remove of the killed node", func() bool {
		out, _, code := idctl(t, "--target", nodes[0].grpc, "--json", "remove", victim.name)
		return code == 0 && json.Unmarshal([]byte(out), &rm) == nil
	})
	if rm.FreedSlot != victimSlot {
		t.Fatalf("remove freed slot %d, want %d", rm.FreedSlot, victimSlot)
	}
	harness.WaitFor(t, 10*time.Second, "the slot to show as free", func() bool {
		_, held := slotOwners(t, nodes[0])[victimSlot]
		return !held
	})
	hist := mustIdctl(t, "--target", targetOf(nodes[:6]...), "--json", "history")
	if !strings.Contains(hist, `"overlaps": []`) {
		t.Fatalf("history shows overlaps: %s", hist)
	}
}

// TestBadFlags: out-of-range flags and environment exit 2 with a message
// naming the flag, before anything is opened.
func TestBadFlags(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	for _, tc := range []struct {
		args []string
		env  []string
		want string
	}{
		{[]string{"--bootstrap-expect", "9"}, nil, "--bootstrap-expect 9 out of range 1..8"},
		{[]string{"--bootstrap-expect", "0"}, nil, "--bootstrap-expect 0 out of range"},
		{[]string{"--datacenter", "4"}, nil, "--datacenter 4 out of range -1..3"},
		{[]string{"--lead", "10ms"}, nil, "--lead 10ms must be at least one layout unit"},
		{[]string{"--max-ahead", "2s"}, nil, "--max-ahead 2s must be 0"},
		{[]string{"--max-count", "20000"}, nil, "--max-count 20000 out of range 1..10000"},
		{[]string{"--batch-size", "0"}, nil, "--batch-size 0 out of range"},
		{[]string{"--buffer-depth", "0"}, nil, "--buffer-depth 0 out of range"},
		{[]string{"--reap-after", "10ms"}, nil, "--reap-after 10ms must be at least 1s"},
		{[]string{"--grpc-max-client-conns", "0"}, nil, "--grpc-max-client-conns 0, want at least 1"},
		{nil, []string{"IDGEN_GRPC_MAX_HANDSHAKES=-1"}, "--grpc-max-handshakes -1, want at least 1"},
		{[]string{"--grpc-addr", "nonsense"}, nil, "--grpc-addr \"nonsense\""},
		{[]string{"--raft-addr", "127.0.0.1:0"}, nil, "port 0 is not allowed"},
		{[]string{"--gossip-profile", "wan"}, nil, "--gossip-profile \"wan\""},
		{[]string{"--log-format", "xml"}, nil, "--log-format \"xml\""},
		{[]string{"--log-level", "loud"}, nil, "--log-level \"loud\""},
		{[]string{"--no-such-flag"}, nil, "flag provided but not defined"},
		{[]string{"stray"}, nil, "unexpected arguments"},
		{nil, []string{"IDGEN_BOOTSTRAP_EXPECT=many"}, "IDGEN_BOOTSTRAP_EXPECT"},
		{nil, []string{"IDGEN_DATACENTER=7"}, "--datacenter 7 out of range"},
		{[]string{"--layout", "28/2/2/11"}, nil, "make 16 slots; a cluster has exactly 8"},
		{[]string{"--layout", "25/2/1/11"}, nil, "less than a year from now"},
		{[]string{"--layout-unit", "10ms"}, nil, "need --layout"},
		{nil, []string{"IDGEN_LAYOUT=35/2/1/11", "IDGEN_LAYOUT_UNIT=100us"}, "unit 100µs is not between 1ms and 1s"},
	} {
		args := append([]string{"--data-dir", data}, tc.args...)
		_, errOut, code := runBinEnv(t, tc.env, bin("idgend"), args...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("idgend %v %v: exit %d, stderr %q; want exit 2 with %q", tc.env, tc.args, code, errOut, tc.want)
		}
	}
	if _, err := os.Stat(data); !os.IsNotExist(err) {
		t.Fatalf("a refused start touched the data dir: %v", err)
	}
}

// TestStartErrors: a port in use, a data dir that cannot be written, and a
// data dir of a cluster of another layout than --layout each exit 1 with a
// message that says what is wrong; the port check comes before the data dir
// is touched.
func TestStartErrors(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()

	t.Run("port in use", func(t *testing.T) {
		n := newNode(t, nodeOpts{name: "busy"})
		n.grpc = busy.Addr().String()
		_, errOut, code := runBin(t, bin("idgend"), n.args()...)
		if code != 1 || !strings.Contains(errOut, "--grpc-addr "+n.grpc) || !strings.Contains(errOut, "address already in use") {
			t.Fatalf("exit %d, stderr %q", code, errOut)
		}
		if _, err := os.Stat(n.dataDir); !os.IsNotExist(err) {
			t.Fatalf("data dir touched although the port was busy: %v", err)
		}
		n2 := newNode(t, nodeOpts{name: "busy-raft"})
		n2.raft = busy.Addr().String()
		_, errOut, code = runBin(t, bin("idgend"), n2.args()...)
		if code != 1 || !strings.Contains(errOut, "--raft-addr "+n2.raft) {
			t.Fatalf("raft port: exit %d, stderr %q", code, errOut)
		}
	})

	t.Run("data dir not writable", func(t *testing.T) {
		n := newNode(t, nodeOpts{name: "ro"})
		// A path under a regular file cannot be created, even by root.
		file := filepath.Join(t.TempDir(), "file")
		if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		n.dataDir = filepath.Join(file, "data")
		_, errOut, code := runBin(t, bin("idgend"), n.args()...)
		if code != 1 || !strings.Contains(errOut, "data dir "+n.dataDir) || !strings.Contains(errOut, "not a directory") {
			t.Fatalf("exit %d, stderr %q", code, errOut)
		}
		if os.Geteuid() != 0 { // root writes anywhere; the permission case needs a user
			ro := filepath.Join(t.TempDir(), "ro")
			if err := os.Mkdir(ro, 0o500); err != nil {
				t.Fatal(err)
			}
			n.dataDir = ro
			_, errOut, code = runBin(t, bin("idgend"), n.args()...)
			if code != 1 || !strings.Contains(errOut, "is not writable") {
				t.Fatalf("read-only dir: exit %d, stderr %q", code, errOut)
			}
		}
	})

	t.Run("data dir of another layout", func(t *testing.T) {
		n := newNode(t, nodeOpts{name: "layout", extra: []string{"--layout", "28/2/1/11"}})
		if err := os.MkdirAll(n.dataDir, 0o755); err != nil {
			t.Fatal(err)
		}
		other, _ := generator.NewLayout(generator.DefaultEpoch, time.Second, 27, 2, 1, 12)
		b, _ := json.Marshal(other)
		if err := os.WriteFile(filepath.Join(n.dataDir, "layout.json"), b, 0o644); err != nil {
			t.Fatal(err)
		}
		_, errOut, code := runBin(t, bin("idgend"), n.args()...)
		if code != 1 || !strings.Contains(errOut, "layout mismatch") || !strings.Contains(errOut, other.String()) ||
			!strings.Contains(errOut, generator.DefaultLayout().String()) || !strings.Contains(errOut, "drop --layout") ||
			!strings.Contains(errOut, "--layout 27/2/1/12 --layout-unit 1s") {
			t.Fatalf("exit %d, stderr %q", code, errOut)
		}
	})
}

// TestDefaultsAndEnv: with no flags, the node keeps its data in ./data; the
// ports come from IDGEN_* here (the defaults may be taken on a shared
// machine) and a flag wins over its variable. SIGTERM stops it with exit 0.
func TestDefaultsAndEnv(t *testing.T) {
	p := harness.NextPorts(t, 4)
	cwd := t.TempDir()
	decoy := harness.NextPorts(t, 1)[0]
	n := &node{t: t, name: "env", logPath: filepath.Join(cwd, "env.log"), http: addr(p[3]), grpc: addr(p[0])}
	f, err := os.Create(n.logPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		n.stop()
		if t.Failed() {
			n.dumpLog()
		}
	})
	cmd := exec.Command(bin("idgend"), "--grpc-addr", n.grpc) // the flag wins over IDGEN_GRPC_ADDR
	cmd.Dir = cwd
	cmd.Env = append(os.Environ(),
		"IDGEN_GRPC_ADDR="+addr(decoy),
		"IDGEN_RAFT_ADDR="+addr(p[1]),
		"IDGEN_GOSSIP_ADDR="+addr(p[2]),
		"IDGEN_HTTP_ADDR="+n.http,
		"IDGEN_GOSSIP_PROFILE=local",
		"IDGEN_LOG_FORMAT=json",
	)
	n.launch(cmd, f)

	harness.WaitFor(t, 30*time.Second, "the node to be ready", func() bool {
		if !n.running() {
			t.Fatal("idgend exited")
		}
		return n.ready()
	})
	if ids := strings.Fields(mustIdctl(t, "--target", n.grpc, "ids", "-n", "3")); len(ids) != 3 {
		t.Fatalf("ids: %v", ids)
	}
	if _, err := os.Stat(filepath.Join(cwd, "data", "node-id")); err != nil {
		t.Fatalf("no node-id in ./data: %v", err)
	}
	if c, err := net.DialTimeout("tcp", addr(decoy), time.Second); err == nil {
		c.Close()
		t.Fatal("IDGEN_GRPC_ADDR won over --grpc-addr")
	}
	n.signal(os.Interrupt)
	if code := n.wait(15 * time.Second); code != 0 {
		t.Fatalf("exit %d after SIGINT, want 0", code)
	}
	logs := n.log()
	if !strings.Contains(logs, `"msg":"idgend stopped"`) {
		t.Fatalf("no JSON log line for the stop:\n%s", logs)
	}
}

// TestFaultClock: with --enable-fault-injection, idctl fault clock moves the
// node's clock and resets it.
func TestFaultClock(t *testing.T) {
	n := newNode(t, nodeOpts{name: "fault", extra: []string{"--enable-fault-injection"}})
	n.start()
	harness.WaitFor(t, 30*time.Second, "ready", n.ready)
	out := mustIdctl(t, "--target", n.grpc, "--json", "fault", "clock", "--offset", "-60s")
	if !strings.Contains(out, `"clock_offset_ms": -60000`) {
		t.Fatalf("fault output %q", out)
	}
	// Moved back 60 s, the node keeps issuing from its cursor, never below.
	var ids []struct{ ID int64 }
	if err := json.Unmarshal([]byte(mustIdctl(t, "--target", n.grpc, "--json", "ids", "-n", "5")), &ids); err != nil {
		t.Fatal(err)
	}
	mustIdctl(t, "--target", n.grpc, "fault", "clock", "--offset", "0")
	if _, _, code := idctl(t, "--target", n.grpc, "fault", "clock", "--offset", "soon"); code != 2 {
		t.Fatalf("bad offset: exit %d, want 2", code)
	}
	out = mustIdctl(t, "--target", n.grpc, "history")
	if !strings.Contains(out, "1 tenures from 1 of 1 nodes") {
		t.Fatalf("history: %s", out)
	}
}
