package main

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idgen/idgen/scripts/harness"
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
		args := append(append([]string{"build", "-o", dir + string(os.PathSeparator)}, harness.StampArgs()...),
			"github.com/idgen/idgen/cmd/idgend", "github.com/idgen/idgen/cmd/idctl")
		cmd := exec.Command("go", args...)
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

// node is one idgend process; scripts/harness runs the process.
type node struct {
	p       *harness.Proc // made on first use, so tests may build a node literal
	t       *testing.T
	name    string
	dataDir string
	grpc    string
	raft    string
	gossip  string
	http    string
	extra   []string
	logPath string
}

type nodeOpts struct {
	name   string
	expect int
	join   []string
	extra  []string
}

func newNode(t *testing.T, o nodeOpts) *node {
	t.Helper()
	p := harness.NextPorts(t, 4)
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
	n.proc().Run(bin("idgend"), n.args()...)
}

// proc is the node's process, run by scripts/harness.
func (n *node) proc() *harness.Proc {
	if n.p == nil {
		n.p = harness.NewProc(n.t, n.name, n.logPath)
	}
	return n.p
}

// The process lifecycle is harness.Proc's, under the names these tests use.
func (n *node) launch(cmd *exec.Cmd, f *os.File) { n.t.Helper(); n.proc().Launch(cmd, f) }
func (n *node) running() bool                    { return n.proc().Running() }
func (n *node) kill()                            { n.t.Helper(); n.proc().Kill() }
func (n *node) signal(sig os.Signal)             { n.proc().Signal(sig) }
func (n *node) wait(d time.Duration) int         { n.t.Helper(); return n.proc().Wait(d) }
func (n *node) stop()                            { n.proc().Stop() }
func (n *node) dumpLog()                         { n.proc().DumpLog(40) }
func (n *node) log() string                      { return n.proc().Log() }

// readyz returns the HTTP status and body of /readyz ("" when unreachable).
func (n *node) readyz() (int, string) { return harness.HTTPGet(n.http, "/readyz") }

func (n *node) ready() bool {
	code, _ := n.readyz()
	return code == http.StatusOK
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
		harness.WaitFor(t, 30*time.Second, nd.name+" ready", func() bool {
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

// runBinEnv is runBin with env added to this process's; a run that cannot
// start or outlives its minute (scaled by IDGEN_TEST_SLOWDOWN) fails the test.
func runBinEnv(t *testing.T, env []string, name string, args ...string) (string, string, int) {
	t.Helper()
	out, errOut, code, err := harness.Exec(harness.Scale(60*time.Second), env, name, args...)
	if err != nil {
		t.Fatalf("%s %v: %v", name, args, err)
	}
	return out, errOut, code
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
	return harness.Tool(t, name)
}
