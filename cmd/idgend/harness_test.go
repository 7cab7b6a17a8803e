package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The process-level tests run the real binaries, built once in TestMain.
var binDir string

func TestMain(m *testing.M) {
	code := func() int {
		dir, err := os.MkdirTemp("", "idgen-bin-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		cmd := exec.Command("go", "build", "-o", dir+string(os.PathSeparator),
			"github.com/idgen/idgen/cmd/idgend", "github.com/idgen/idgen/cmd/idctl")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "building idgend and idctl:", err)
			return 1
		}
		binDir = dir
		return m.Run()
	}()
	os.Exit(code)
}

func bin(name string) string { return filepath.Join(binDir, name) }

// freePorts returns n ports free for TCP and UDP on 127.0.0.1 (gossip uses
// both). They are released before use; a clash with another process is
// possible but rare.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	var closers []io.Closer
	defer func() {
		for _, c := range closers {
			c.Close()
		}
	}()
	for len(ports) < n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		closers = append(closers, l)
		p := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		closers = append(closers, u)
		ports = append(ports, p)
	}
	return ports
}

// node is one idgend process.
type node struct {
	t       *testing.T
	name    string
	dataDir string
	grpc    string
	raft    string
	gossip  string
	http    string
	extra   []string
	logPath string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	err  error // Wait's result once done is closed
}

type nodeOpts struct {
	name   string
	expect int
	join   []string
	extra  []string
}

func newNode(t *testing.T, o nodeOpts) *node {
	t.Helper()
	p := freePorts(t, 4)
	dir := t.TempDir()
	n := &node{
		t: t, name: o.name, dataDir: filepath.Join(dir, "data"),
		grpc: addr(p[0]), raft: addr(p[1]), gossip: addr(p[2]), http: addr(p[3]),
		logPath: filepath.Join(dir, o.name+".log"),
	}
	n.extra = append([]string{
		"--bootstrap-expect", strconv.Itoa(max(o.expect, 1)),
		"--gossip-profile", "local",
		"--shutdown-timeout", "2s",
	}, o.extra...)
	if len(o.join) > 0 {
		n.extra = append(n.extra, "--join", strings.Join(o.join, ","))
	}
	t.Cleanup(func() {
		n.stop()
		if t.Failed() {
			n.dumpLog()
		}
	})
	return n
}

func addr(port int) string { return fmt.Sprintf("127.0.0.1:%d", port) }

func (n *node) args() []string {
	return append([]string{
		"--name", n.name, "--data-dir", n.dataDir,
		"--grpc-addr", n.grpc, "--raft-addr", n.raft, "--gossip-addr", n.gossip, "--http-addr", n.http,
	}, n.extra...)
}

// start runs the process (again, after a kill, from the same data dir).
func (n *node) start() {
	n.t.Helper()
	f, err := os.OpenFile(n.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		n.t.Fatal(err)
	}
	n.launch(exec.Command(bin("idgend"), n.args()...), f)
}

// launch starts cmd with its output in f and watches it.
func (n *node) launch(cmd *exec.Cmd, f *os.File) {
	n.t.Helper()
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		n.t.Fatal(err)
	}
	done := make(chan struct{})
	n.mu.Lock()
	n.cmd, n.done = cmd, done
	n.mu.Unlock()
	go func() {
		err := cmd.Wait()
		f.Close()
		n.mu.Lock()
		n.err = err
		n.mu.Unlock()
		close(done)
	}()
}

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

// kill sends SIGKILL and waits for the process to be gone.
func (n *node) kill() {
	n.t.Helper()
	n.signal(syscall.SIGKILL)
	n.wait(10 * time.Second)
}

func (n *node) signal(sig os.Signal) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd != nil && n.cmd.Process != nil {
		n.cmd.Process.Signal(sig)
	}
}

// wait waits for the process to exit and returns its exit code.
func (n *node) wait(d time.Duration) int {
	n.t.Helper()
	n.mu.Lock()
	done := n.done
	n.mu.Unlock()
	select {
	case <-done:
	case <-time.After(d):
		n.t.Fatalf("%s did not exit within %s", n.name, d)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	var ee *exec.ExitError
	if errors.As(n.err, &ee) {
		return ee.ExitCode()
	}
	if n.err != nil {
		n.t.Fatalf("%s: %v", n.name, n.err)
	}
	return 0
}

// stop: SIGTERM, then SIGKILL after a bound.
func (n *node) stop() {
	if !n.running() {
		return
	}
	n.signal(syscall.SIGTERM)
	n.mu.Lock()
	done := n.done
	n.mu.Unlock()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		n.signal(syscall.SIGKILL)
		<-done
	}
}

func (n *node) dumpLog() {
	b, _ := os.ReadFile(n.logPath)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 40 {
		lines = lines[len(lines)-40:]
	}
	n.t.Logf("--- last log lines of %s ---\n%s", n.name, strings.Join(lines, "\n"))
}

func (n *node) log() string {
	b, _ := os.ReadFile(n.logPath)
	return string(b)
}

// readyz returns the HTTP status and body of /readyz ("" when unreachable).
func (n *node) readyz() (int, string) {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get("http://" + n.http + "/readyz")
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (n *node) ready() bool {
	code, _ := n.readyz()
	return code == http.StatusOK
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// startCluster starts n nodes whose first min(n,3) bootstrap together, and
// waits until every one of them is ready.
func startCluster(t *testing.T, n int, extra ...string) []*node {
	t.Helper()
	seeds := min(n, 3)
	nodes := make([]*node, n)
	var join []string
	for i := range nodes {
		expect := 1
		if i < seeds {
			expect = seeds
		}
		nodes[i] = newNode(t, nodeOpts{name: fmt.Sprintf("n%d", i+1), expect: expect, extra: extra})
		if i < seeds {
			join = append(join, nodes[i].gossip)
		}
	}
	for _, nd := range nodes {
		nd.extra = append(nd.extra, "--join", strings.Join(join, ","))
		nd.start()
	}
	for _, nd := range nodes {
		waitFor(t, 30*time.Second, nd.name+" ready", func() bool {
			if !nd.running() {
				t.Fatalf("%s exited", nd.name)
			}
			return nd.ready()
		})
	}
	return nodes
}

func targetOf(nodes ...*node) string {
	var a []string
	for _, n := range nodes {
		a = append(a, n.grpc)
	}
	return strings.Join(a, ",")
}

// runBin runs a binary with a bound and returns stdout, stderr and the exit code.
func runBin(t *testing.T, name string, args ...string) (string, string, int) {
	t.Helper()
	return runBinEnv(t, nil, name, args...)
}

func runBinEnv(t *testing.T, env []string, name string, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("%s %v: %v", name, args, err)
	}
	return out.String(), errb.String(), code
}

// idctl runs idctl and returns stdout, stderr and the exit code.
func idctl(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	return runBin(t, bin("idctl"), args...)
}

// mustIdctl runs idctl and fails the test unless it exits 0.
func mustIdctl(t *testing.T, args ...string) string {
	t.Helper()
	out, errOut, code := idctl(t, args...)
	if code != 0 {
		t.Fatalf("idctl %v: exit %d\nstdout: %s\nstderr: %s", args, code, out, errOut)
	}
	return out
}

// tool finds an external test tool on PATH or in $(go env GOPATH)/bin. It
// skips the test when missing, unless CI=true, where it fails.
func tool(t *testing.T, name string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		for _, dir := range filepath.SplitList(strings.TrimSpace(string(out))) {
			p := filepath.Join(dir, "bin", name)
			if _, err := os.Stat(p); err == nil {
				return p
			}
		}
	}
	msg := fmt.Sprintf("%s not found on PATH or in $(go env GOPATH)/bin; install it as .ci/run does", name)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}
