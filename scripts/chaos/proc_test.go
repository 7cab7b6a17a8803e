package chaos

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	idgenv1 "github.com/idgen/idgen/proto/idgen/v1"
	"github.com/idgen/idgen/rpc/tlsconf"
)

// binaries are idgend and idctl built from this checkout.
type binaries struct{ idgend, idctl string }

// moduleRoot is the repository root, two levels above this package.
func moduleRoot(t testing.TB) string {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// buildBinaries builds idgend and idctl into a temp dir. Without the commands
// there is nothing to test: a skip on a developer's machine, a failure in CI.
func buildBinaries(t testing.TB) binaries {
	t.Helper()
	root := moduleRoot(t)
	for _, c := range []string{"idgend", "idctl"} {
		if m, _ := filepath.Glob(filepath.Join(root, "cmd", c, "*.go")); len(m) == 0 {
			if os.Getenv("CI") == "true" {
				t.Fatalf("cmd/%s has no Go files; the chaos run needs it", c)
			}
			t.Skipf("cmd/%s has no Go files yet", c)
		}
	}
	dir := t.TempDir()
	args := []string{"build", "-o", dir + string(os.PathSeparator)}
	if os.Getenv("IDGEN_CHAOS_RACE") == "1" {
		args = append(args, "-race") // catches data races in idgend under chaos
	}
	args = append(args, "./cmd/idgend", "./cmd/idctl")
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return binaries{idgend: filepath.Join(dir, "idgend"), idctl: filepath.Join(dir, "idctl")}
}

// portAllocator hands out loopback ports free for both TCP and UDP (gossip
// uses both on one port), never the same one twice in a run.
type portAllocator struct {
	mu   sync.Mutex
	used map[int]bool
}

func (p *portAllocator) next(t testing.TB) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.used == nil {
		p.used = map[int]bool{}
	}
	for i := 0; i < 100; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", port))
		l.Close()
		if err != nil {
			continue
		}
		u.Close()
		if !p.used[port] {
			p.used[port] = true
			return port
		}
	}
	t.Fatal("no free loopback port for TCP and UDP")
	return 0
}

// node is one idgend process: its addresses and data dir stay the same across
// restarts, so a restart is the same node unless its data dir was wiped.
type node struct {
	name       string
	dataDir    string
	logPath    string
	grpcAddr   string
	raftAddr   string
	gossipAddr string
	httpAddr   string
	args       []string

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{}
	waitErr error
	paused  bool
	starts  int

	connOnce sync.Once
	conn     *grpc.ClientConn
	creds    grpc.DialOption // the cluster's client credentials
}

// start runs the process; its output is appended to its log file.
func (n *node) start(bin string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.done != nil {
		select {
		case <-n.done:
		default:
			return fmt.Errorf("%s is already running", n.name)
		}
	}
	f, err := os.OpenFile(n.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(f, "=== chaos: start #%d at %s\n", n.starts+1, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(bin, n.args...)
	cmd.Stdout, cmd.Stderr = f, f
	// Own process group; SIGKILL if the test process dies first.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start %s: %w", n.name, err)
	}
	n.starts++
	n.cmd, n.paused, n.waitErr = cmd, false, nil
	done := make(chan struct{})
	n.done = done
	go func() {
		err := cmd.Wait()
		f.Close()
		n.mu.Lock()
		n.waitErr = err
		n.mu.Unlock()
		close(done)
	}()
	return nil
}

// running reports whether the process is alive (paused or not).
func (n *node) running() bool {
	n.mu.Lock()
	done := n.done
	n.mu.Unlock()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// live reports whether the process runs and is not paused.
func (n *node) live() bool {
	n.mu.Lock()
	paused := n.paused
	n.mu.Unlock()
	return n.running() && !paused
}

func (n *node) signal(sig syscall.Signal) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil || n.cmd.Process == nil {
		return fmt.Errorf("%s was never started", n.name)
	}
	if err := syscall.Kill(n.cmd.Process.Pid, sig); err != nil {
		return fmt.Errorf("signal %v to %s: %w", sig, n.name, err)
	}
	switch sig {
	case syscall.SIGSTOP:
		n.paused = true
	case syscall.SIGCONT:
		n.paused = false
	}
	return nil
}

// kill9 sends SIGKILL and waits for the process to be gone.
func (n *node) kill9() error {
	if !n.running() {
		return nil
	}
	if err := n.signal(syscall.SIGKILL); err != nil {
		return err
	}
	_, err := n.waitExit(10 * time.Second)
	return err
}

// waitExit waits up to d for the process to end. It returns the process's
// exit error (nil for exit 0) and an error only when it is still running.
func (n *node) waitExit(d time.Duration) (exitErr, err error) {
	n.mu.Lock()
	done := n.done
	n.mu.Unlock()
	if done == nil {
		return nil, nil
	}
	select {
	case <-done:
		n.mu.Lock()
		defer n.mu.Unlock()
		n.paused = false
		return n.waitErr, nil
	case <-time.After(d):
		return nil, fmt.Errorf("%s still running after %v", n.name, d)
	}
}

func (n *node) client() idgenv1.ClusterServiceClient {
	n.connOnce.Do(func() {
		// Short reconnect backoff: nodes restart on the same address all the time.
		c, err := grpc.NewClient(n.grpcAddr,
			n.creds,
			grpc.WithConnectParams(grpc.ConnectParams{
				Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 500 * time.Millisecond},
				MinConnectTimeout: time.Second,
			}))
		if err != nil {
			panic(err) // NewClient fails only on a malformed target
		}
		n.conn = c
	})
	return idgenv1.NewClusterServiceClient(n.conn)
}

// status asks the node about itself, within d.
func (n *node) status(d time.Duration) (*idgenv1.StatusResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return n.client().Status(ctx, &idgenv1.StatusRequest{})
}

// cluster is a set of idgend processes on loopback plus the helpers the fault
// schedule needs.
type cluster struct {
	t     testing.TB
	bin   binaries
	root  string
	nodes []*node
	ports portAllocator
	start time.Time
	// extra flags for every node
	flags []string
	// env holds IDGEN_TLS_* for idctl (an admin certificate) when the
	// cluster runs with TLS; creds are the same certificate for gRPC calls.
	env   []string
	creds grpc.DialOption
}

func newCluster(t testing.TB, bin binaries, flags []string) *cluster {
	root := os.Getenv("IDGEN_CHAOS_LOGDIR")
	if root == "" {
		root = t.TempDir()
	} else {
		root = filepath.Join(root, fmt.Sprintf("%s-%d", strings.ReplaceAll(t.Name(), "/", "_"), time.Now().Unix()))
		if err := os.MkdirAll(root, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	c := &cluster{t: t, bin: bin, root: root, start: time.Now(), flags: flags,
		creds: grpc.WithTransportCredentials(insecure.NewCredentials())}
	if os.Getenv("IDGEN_CHAOS_INSECURE") != "1" {
		c.secure()
	}
	t.Cleanup(c.stopAll)
	return c
}

// secure makes a CA with a server and an admin certificate and a gossip key,
// so that the run proves uniqueness in the mode operators deploy: every node
// gets TLS and gossip encryption, every tool the admin certificate.
func (c *cluster) secure() {
	dir := filepath.Join(c.root, "tls")
	if err := tlsconf.CreateCA(dir, 1); err != nil {
		c.t.Fatal(err)
	}
	for _, r := range []tlsconf.Role{tlsconf.RoleServer, tlsconf.RoleAdmin} {
		if err := tlsconf.CreateCert(dir, tlsconf.CertRequest{Role: r, Name: string(r), Days: 1}); err != nil {
			c.t.Fatal(err)
		}
	}
	files := func(name string) tlsconf.Files {
		return tlsconf.Files{Cert: tlsconf.CertFile(dir, name), Key: tlsconf.KeyFile(dir, name), CA: filepath.Join(dir, tlsconf.CAFile)}
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		c.t.Fatal(err)
	}
	srv, adm := files("server"), files("admin")
	c.flags = append([]string{
		"--tls-cert=" + srv.Cert, "--tls-key=" + srv.Key, "--tls-ca=" + srv.CA,
		"--gossip-key=" + base64.StdEncoding.EncodeToString(key),
	}, c.flags...)
	c.env = []string{"IDGEN_TLS_CERT=" + adm.Cert, "IDGEN_TLS_KEY=" + adm.Key, "IDGEN_TLS_CA=" + adm.CA}
	m, err := tlsconf.Load(adm)
	if err != nil {
		c.t.Fatal(err)
	}
	c.creds = grpc.WithTransportCredentials(credentials.NewTLS(m.ClientConfig()))
}

func (c *cluster) logf(format string, args ...any) {
	c.t.Helper()
	c.t.Logf("[%6.1fs] %s", time.Since(c.start).Seconds(), fmt.Sprintf(format, args...))
}

// add defines a node; seeds are gossip addresses to join, expect its --bootstrap-expect.
func (c *cluster) add(name string, expect int, seeds []string, extra ...string) *node {
	p := func() string { return "127.0.0.1:" + strconv.Itoa(c.ports.next(c.t)) }
	n := &node{
		name:       name,
		dataDir:    filepath.Join(c.root, name, "data"),
		logPath:    filepath.Join(c.root, name+".log"),
		grpcAddr:   p(),
		raftAddr:   p(),
		gossipAddr: p(),
		httpAddr:   p(),
		creds:      c.creds,
	}
	n.args = []string{
		"--name=" + name,
		"--data-dir=" + n.dataDir,
		"--grpc-addr=" + n.grpcAddr,
		"--raft-addr=" + n.raftAddr,
		"--gossip-addr=" + n.gossipAddr,
		"--http-addr=" + n.httpAddr,
		"--advertise=127.0.0.1",
		"--bootstrap-expect=" + strconv.Itoa(expect),
		"--log-format=json",
	}
	if len(seeds) > 0 {
		n.args = append(n.args, "--join="+strings.Join(seeds, ","))
	}
	n.args = append(n.args, c.flags...)
	n.args = append(n.args, extra...)
	c.nodes = append(c.nodes, n)
	return n
}

func (c *cluster) startNode(n *node) {
	c.t.Helper()
	if err := n.start(c.bin.idgend); err != nil {
		c.t.Fatal(err)
	}
}

// stopAll ends every process this cluster started: resumed first so that a
// paused process takes its SIGKILL, then waited for.
func (c *cluster) stopAll() {
	for _, n := range c.nodes {
		if n.running() {
			_ = n.signal(syscall.SIGCONT)
			_ = n.signal(syscall.SIGKILL)
		}
	}
	for _, n := range c.nodes {
		if _, err := n.waitExit(10 * time.Second); err != nil {
			c.t.Errorf("cleanup: %v", err)
		}
		if n.conn != nil {
			n.conn.Close()
		}
	}
}

func (c *cluster) grpcTargets() string {
	addrs := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		addrs[i] = n.grpcAddr
	}
	return strings.Join(addrs, ",")
}

// view is one poll of every live node's status.
type view map[*node]*idgenv1.StatusResponse

func (c *cluster) poll() view {
	v := view{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, n := range c.nodes {
		if !n.live() {
			continue
		}
		wg.Add(1)
		go func(n *node) {
			defer wg.Done()
			if st, err := n.status(time.Second); err == nil {
				mu.Lock()
				v[n] = st
				mu.Unlock()
			}
		}(n)
	}
	wg.Wait()
	return v
}

func (v view) leader() *node {
	for n, st := range v {
		if strings.EqualFold(st.GetRaftState(), "leader") {
			return n
		}
	}
	return nil
}

func (v view) ready() int {
	k := 0
	for _, st := range v {
		if st.GetReady() {
			k++
		}
	}
	return k
}

// String is a one-line table of the view, for logs.
func (v view) String() string {
	var parts []string
	for n, st := range v {
		r := "-"
		if st.GetReady() {
			r = "R"
		} else if st.GetReason() != "" {
			r = "(" + st.GetReason() + ")"
		}
		parts = append(parts, fmt.Sprintf("%s:%s:slot=%d:%s", n.name, strings.ToLower(st.GetRaftState()), st.GetSlot(), r))
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

// healthy: every live process answers, all agree on one leader, and as many
// are ready as there are slots for them.
func (c *cluster) healthy(v view) bool {
	live := 0
	for _, n := range c.nodes {
		if n.live() {
			live++
		}
	}
	if len(v) != live || live == 0 {
		return false
	}
	leaders := map[string]bool{}
	for _, st := range v {
		leaders[st.GetLeaderId()] = true
	}
	if len(leaders) != 1 || leaders[""] {
		return false
	}
	// Each slot has one holder: a node that was fenced must have let go.
	held := map[int32]bool{}
	for _, st := range v {
		if s := st.GetSlot(); s >= 0 {
			if held[s] {
				return false
			}
			held[s] = true
		}
	}
	return v.ready() == min(live, 8)
}

// inRaft reports whether the leader's member list has every node of v as a
// Raft server (a node the leader dropped is not healthy, even if a slot-less
// node looks ready enough).
func (c *cluster) inRaft(v view) bool {
	l := v.leader()
	if l == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	resp, err := l.client().Members(ctx, &idgenv1.MembersRequest{})
	if err != nil {
		return false
	}
	roles := map[string]string{}
	for _, m := range resp.GetMembers() {
		roles[m.GetId()] = m.GetRaftRole()
	}
	for _, st := range v {
		switch roles[st.GetId()] {
		case "leader", "voter", "nonvoter":
		default:
			return false
		}
	}
	return true
}

// waitHealthy waits with a deadline until the cluster is healthy on two polls
// in a row (a view can look right for a moment while the leader is still
// reconciling) and returns how long it took.
func (c *cluster) waitHealthy(d time.Duration) (time.Duration, error) {
	start := time.Now()
	deadline := start.Add(d)
	var v view
	good := 0
	for {
		v = c.poll()
		if c.healthy(v) && c.inRaft(v) {
			good++
			if good == 2 {
				return time.Since(start), nil
			}
		} else {
			good = 0
		}
		if time.Now().After(deadline) {
			return time.Since(start), fmt.Errorf("not healthy after %v: %s", d, v)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// waitFor polls cond until it holds or d passes.
func waitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// idctl runs idctl with a deadline and returns its stdout, stderr and exit code.
func (c *cluster) idctl(d time.Duration, args ...string) (string, string, int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.bin.idctl, args...)
	cmd.Env = append(os.Environ(), c.env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return out.String(), errb.String(), ee.ExitCode(), nil
	}
	if err != nil {
		return out.String(), errb.String(), -1, err
	}
	return out.String(), errb.String(), 0, nil
}

// tailLogs logs the last lines of every node's log (on failure).
func (c *cluster) tailLogs(lines int) {
	for _, n := range c.nodes {
		b, err := os.ReadFile(n.logPath)
		if err != nil {
			continue
		}
		ls := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		if len(ls) > lines {
			ls = ls[len(ls)-lines:]
		}
		c.t.Logf("---- %s (%s)\n%s", n.name, n.logPath, strings.Join(ls, "\n"))
	}
}
