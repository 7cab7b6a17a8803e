// Package harness starts real idgend processes for tests, the chaos run and
// the benchmark command: it builds the binaries from this checkout, hands
// out loopback ports, runs nodes with their output in a log file, pauses,
// kills and restarts them, and waits on conditions with deadlines. Nothing
// in the product imports it.
package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
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

// Binaries are idgend and idctl built from this checkout.
type Binaries struct{ Idgend, Idctl string }

// Build builds idgend and idctl into a directory removed when t ends, with
// the checkout's revision stamped (Stamp). extra go build flags (such as
// -race) go before the packages.
func Build(t testing.TB, extra ...string) Binaries {
	t.Helper()
	dir := t.TempDir()
	args := append(append(append([]string{"build", "-o", dir + string(os.PathSeparator)}, StampArgs()...), extra...),
		"github.com/idgen/idgen/cmd/idgend", "github.com/idgen/idgen/cmd/idctl")
	if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return Binaries{Idgend: filepath.Join(dir, "idgend"), Idctl: filepath.Join(dir, "idctl")}
}

// Ports hands out loopback ports as FreePort does: below the ephemeral
// range, free for both TCP and UDP (gossip uses both on one port), never
// the same one twice in the process (every Ports draws from one
// allocator). The zero value is ready.
type Ports struct{}

// Next returns a port that was free a moment ago (NextPort).
func (p *Ports) Next(t testing.TB) int {
	t.Helper()
	return NextPort(t)
}

// Free is Next without a test, for commands (FreePort: ErrNoPort when
// none is left).
func (p *Ports) Free() (int, error) { return FreePort() }

// Errors of a Proc used the wrong way round, and of Ports.
var (
	ErrNoPort       = errors.New("no free loopback port for TCP and UDP below the ephemeral range")
	ErrNotStarted   = errors.New("never started")
	ErrRunning      = errors.New("already running")
	ErrStillRunning = errors.New("still running")
)

// Proc is one process of a test, its output appended to a log file. It can
// be started again after it exits, and paused and resumed meanwhile.
type Proc struct {
	t       testing.TB
	name    string
	logPath string

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{}
	err    error // Wait's result once done is closed
	paused bool
	starts int
}

// NewProc returns a process named name (for messages) that logs to logPath.
// t may be nil outside a test (the benchmark command): then only the
// methods that return errors, and Stop, may be used.
func NewProc(t testing.TB, name, logPath string) *Proc {
	return &Proc{t: t, name: name, logPath: logPath}
}

// Run starts bin with args, appending its output to the log file.
func (p *Proc) Run(bin string, args ...string) {
	p.t.Helper()
	if err := p.Spawn(bin, args...); err != nil {
		p.t.Fatal(err)
	}
}

// Spawn is Run without failing the test, for goroutines other than the
// test's: it returns ErrRunning while the process runs.
func (p *Proc) Spawn(bin string, args ...string) error {
	f, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	return p.launch(exec.Command(bin, args...), f)
}

// Launch starts cmd with its output in f (closed when cmd exits) and
// watches it.
func (p *Proc) Launch(cmd *exec.Cmd, f *os.File) {
	p.t.Helper()
	if err := p.launch(cmd, f); err != nil {
		p.t.Fatal(err)
	}
}

func (p *Proc) launch(cmd *exec.Cmd, f *os.File) error {
	if p.Running() {
		f.Close()
		return fmt.Errorf("start %s: %w", p.name, ErrRunning)
	}
	p.mu.Lock()
	p.starts++
	n := p.starts
	p.mu.Unlock()
	// A restart shows in the log where it happened.
	fmt.Fprintf(f, "=== harness: start #%d at %s\n", n, time.Now().Format(time.RFC3339Nano))
	cmd.Stdout, cmd.Stderr = f, f
	if cmd.SysProcAttr == nil {
		// Own process group, and SIGKILL if the test process dies first.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	done := make(chan struct{})
	p.mu.Lock()
	p.cmd, p.done, p.err, p.paused = cmd, done, nil, false
	p.mu.Unlock()
	go func() {
		err := cmd.Wait()
		f.Close()
		p.mu.Lock()
		p.err, p.paused = err, false
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

// Running reports whether the process has been started and not exited
// (paused or not).
func (p *Proc) Running() bool {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
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

// Pid is the process's id while it runs, 0 otherwise.
func (p *Proc) Pid() int {
	if !p.Running() {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd.Process.Pid
}

// Live reports whether the process runs and is not paused.
func (p *Proc) Live() bool {
	return p.Running() && !p.Paused()
}

// Paused reports whether the process was paused and not resumed since.
func (p *Proc) Paused() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.paused
}

// Signal sends sig to the process: ErrNotStarted before its first start,
// os.ErrProcessDone once it has exited.
func (p *Proc) Signal(sig os.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return fmt.Errorf("signal %v to %s: %w", sig, p.name, ErrNotStarted)
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("signal %v to %s: %w", sig, p.name, err)
	}
	switch sig {
	case syscall.SIGSTOP:
		p.paused = true
	case syscall.SIGCONT:
		p.paused = false
	}
	return nil
}

// Pause stops the process with SIGSTOP, as a long GC pause or a frozen VM
// would: it holds its ports and answers nothing until Resume.
func (p *Proc) Pause() error { return p.Signal(syscall.SIGSTOP) }

// Resume continues a paused process with SIGCONT.
func (p *Proc) Resume() error { return p.Signal(syscall.SIGCONT) }

// Wait waits up to Scale(d) for the process to exit and returns its exit
// code.
func (p *Proc) Wait(d time.Duration) int {
	p.t.Helper()
	code, err := p.WaitExit(Scale(d))
	if err != nil {
		p.t.Fatal(err)
	}
	return code
}

// WaitExit is Wait without failing the test: the exit code, or
// ErrNotStarted, ErrStillRunning after d (as given: not scaled, since
// commands use it too), or why the wait failed.
func (p *Proc) WaitExit(d time.Duration) (int, error) {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if done == nil {
		return 0, fmt.Errorf("wait for %s: %w", p.name, ErrNotStarted)
	}
	select {
	case <-done:
	case <-time.After(d):
		return 0, fmt.Errorf("%s did not exit within %s: %w", p.name, d, ErrStillRunning)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		return ee.ExitCode(), nil
	}
	if p.err != nil {
		return 0, fmt.Errorf("%s: %w", p.name, p.err)
	}
	return 0, nil
}

// Kill sends SIGKILL and waits for the process to be gone.
func (p *Proc) Kill() {
	p.t.Helper()
	if err := p.Crash(); err != nil {
		p.t.Fatal(err)
	}
}

// Crash is Kill without failing the test: SIGKILL, paused or not, and a
// wait of up to Scale(10s). A process that is not running is left as is.
func (p *Proc) Crash() error {
	if !p.Running() {
		return nil
	}
	if err := p.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	_, err := p.WaitExit(Scale(10 * time.Second))
	return err
}

// Stop sends SIGTERM (resuming a paused process, which could not act on
// it), then SIGKILL after Scale(10s).
func (p *Proc) Stop() {
	if !p.Running() {
		return
	}
	p.Signal(syscall.SIGTERM)
	if p.Paused() {
		p.Resume()
	}
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	select {
	case <-done:
	case <-time.After(Scale(10 * time.Second)):
		p.Signal(syscall.SIGKILL)
		<-done
	}
}

// Log is everything the process wrote so far.
func (p *Proc) Log() string {
	b, _ := os.ReadFile(p.logPath)
	return string(b)
}

// DumpLog writes the last lines of the log to the test output.
func (p *Proc) DumpLog(lines int) {
	l := strings.Split(strings.TrimSpace(p.Log()), "\n")
	if len(l) > lines {
		l = l[len(l)-lines:]
	}
	p.t.Logf("--- last log lines of %s ---\n%s", p.name, strings.Join(l, "\n"))
}

// Node is one idgend process. Its addresses and data dir stay across
// restarts, so a restart is the same node.
type Node struct {
	*Proc
	bin     string
	Name    string
	DataDir string
	GRPC    string
	Raft    string
	Gossip  string
	HTTP    string
	// Extra flags follow the addresses on every start.
	Extra []string
}

// NewNode prepares a node on fresh ports with the local gossip profile and
// a short shutdown; it is stopped (and its log shown on failure) when t ends.
func NewNode(t testing.TB, bin Binaries, ports *Ports, name string, extra ...string) *Node {
	t.Helper()
	return NewNodeIn(t, bin, ports, t.TempDir(), name,
		append([]string{"--gossip-profile", "local", "--shutdown-timeout", "2s"}, extra...)...)
}

// NewNodeIn prepares a node on fresh ports with exactly the flags extra,
// its data in dir/name/data and its log in dir/name.log (dir may outlive
// the test, to keep logs). It is stopped (and its log shown on failure)
// when t ends.
func NewNodeIn(t testing.TB, bin Binaries, ports *Ports, dir, name string, extra ...string) *Node {
	t.Helper()
	addr := func() string { return "127.0.0.1:" + strconv.Itoa(ports.Next(t)) }
	n := &Node{
		Proc: NewProc(t, name, filepath.Join(dir, name+".log")),
		bin:  bin.Idgend, Name: name, DataDir: filepath.Join(dir, name, "data"),
		GRPC: addr(), Raft: addr(), Gossip: addr(), HTTP: addr(),
		Extra: extra,
	}
	t.Cleanup(func() {
		n.Stop()
		if t.Failed() {
			n.DumpLog(40)
		}
	})
	return n
}

// Args are the node's command line.
func (n *Node) Args() []string {
	return append([]string{
		"--name", n.Name, "--data-dir", n.DataDir,
		"--grpc-addr", n.GRPC, "--raft-addr", n.Raft, "--gossip-addr", n.Gossip, "--http-addr", n.HTTP,
	}, n.Extra...)
}

// Start runs the process (again, after a kill, from the same data dir).
func (n *Node) Start() {
	n.t.Helper()
	n.Run(n.bin, n.Args()...)
}

// UseBinary makes the node's next Start or Restart run the idgend at path,
// as a rolling upgrade (or a rollback) does: a running process is left as
// it is, and the name, addresses, data dir and flags stay the same. Call it
// between a stop and the next start, from the goroutine that starts the
// node.
func (n *Node) UseBinary(path string) { n.bin = path }

// Binary is the idgend the node's next Start or Restart runs.
func (n *Node) Binary() string { return n.bin }

// Restart is Start without failing the test, for fault injectors.
func (n *Node) Restart() error {
	return n.Spawn(n.bin, n.Args()...)
}

// Get fetches path from the node's HTTP admin port: the status code and
// body, 0 and "" when unreachable.
func (n *Node) Get(path string) (int, string) {
	return HTTPGet(n.HTTP, path)
}

// HTTPGet fetches path from an HTTP admin address: the status code and
// body, 0 and "" when unreachable.
func HTTPGet(addr, path string) (int, string) {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + addr + path)
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Ready reports whether /readyz answers 200.
func (n *Node) Ready() bool {
	code, _ := n.Get("/readyz")
	return code == http.StatusOK
}

// StartCluster starts count nodes named n1, n2, ...; the first
// min(count, 3) bootstrap together and every node joins them. It returns
// once every node is ready.
func StartCluster(t testing.TB, bin Binaries, ports *Ports, count int, extra ...string) []*Node {
	t.Helper()
	seeds := min(count, 3)
	nodes := make([]*Node, count)
	var join []string
	for i := range nodes {
		expect := 1
		if i < seeds {
			expect = seeds
		}
		nodes[i] = NewNode(t, bin, ports, fmt.Sprintf("n%d", i+1),
			append([]string{"--bootstrap-expect", strconv.Itoa(expect)}, extra...)...)
		if i < seeds {
			join = append(join, nodes[i].Gossip)
		}
	}
	for _, nd := range nodes {
		nd.Extra = append(nd.Extra, "--join", strings.Join(join, ","))
		nd.Start()
	}
	for _, nd := range nodes {
		WaitFor(t, 30*time.Second, nd.Name+" ready", func() bool {
			if !nd.Running() {
				t.Fatalf("%s exited", nd.Name)
			}
			return nd.Ready()
		})
	}
	return nodes
}

// WaitFor is the tests' one way to wait: Eventually, and on a timeout t
// fails naming what it waited for.
func WaitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Eventually(d, cond) {
		t.Fatalf("timed out after %s waiting for %s%s", Scale(d), what, SlowdownNote())
	}
}

// Eventually polls cond until it holds (true) or Scale(d) passes (false),
// for waits whose timeout is a finding to report rather than a failure
// (the chaos runs' recoveries). It polls every millisecond at first and
// backs off to every 50 ms, so a quick condition costs a quick test and a
// slow one does not spin.
func Eventually(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(Scale(d))
	for every := time.Millisecond; !cond(); every = min(2*every, 50*time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(every)
	}
	return true
}

// Poll calls cond every interval until it holds (true) or d passes (false).
// d is as given, not scaled, since commands use Poll too: a test scales
// its own (Scale(d)).
func Poll(d, every time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(every)
	}
	return true
}

// Exec runs bin with args and env (added to this process's) for at most
// d, and returns its stdout, stderr and exit code; err only when it could
// not run or was cut off at d.
func Exec(d time.Duration, env []string, bin string, args ...string) (stdout, stderr string, code int, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		return out.String(), errb.String(), -1, fmt.Errorf("%s %s: %w", filepath.Base(bin), strings.Join(args, " "), ctx.Err())
	case errors.As(err, &ee):
		return out.String(), errb.String(), ee.ExitCode(), nil
	case err != nil:
		return out.String(), errb.String(), -1, err
	}
	return out.String(), errb.String(), 0, nil
}

// Tool finds an external test tool on PATH or in $(go env GOPATH)/bin. It
// skips the test when missing, unless CI=true, where it fails: CI installs
// every tool (.ci/run).
func Tool(t testing.TB, name string) string {
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
