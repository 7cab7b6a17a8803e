package harness

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// state is the process state letter from /proc (T when stopped).
func state(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	return strings.Fields(s[strings.LastIndexByte(s, ')')+1:])[0]
}

func newSleeper(t *testing.T) *Proc {
	t.Helper()
	p := NewProc(t, "sleeper", filepath.Join(t.TempDir(), "sleeper.log"))
	t.Cleanup(p.Stop)
	return p
}

// TestPauseResumeCrash: a paused process is stopped for real (state T), not
// live but running; resumed it runs again; Crash ends it while paused.
func TestPauseResumeCrash(t *testing.T) {
	p := newSleeper(t)
	p.Run("sleep", "60")
	pid := p.Pid()
	if err := p.Pause(); err != nil {
		t.Fatal(err)
	}
	Poll(Scale(5*time.Second), 10*time.Millisecond, func() bool { return state(t, pid) == "T" })
	if st := state(t, pid); st != "T" || !p.Running() || p.Live() || !p.Paused() {
		t.Fatalf("after Pause: state %s running=%v live=%v paused=%v", st, p.Running(), p.Live(), p.Paused())
	}
	if err := p.Resume(); err != nil {
		t.Fatal(err)
	}
	Poll(Scale(5*time.Second), 10*time.Millisecond, func() bool { return state(t, pid) != "T" })
	if st := state(t, pid); st == "T" || !p.Live() {
		t.Fatalf("after Resume: state %s live=%v", st, p.Live())
	}
	if err := p.Pause(); err != nil {
		t.Fatal(err)
	}
	if err := p.Crash(); err != nil {
		t.Fatalf("Crash of a paused process: %v", err)
	}
	if p.Running() || p.Paused() || p.Pid() != 0 {
		t.Fatalf("after Crash: running=%v paused=%v pid=%d", p.Running(), p.Paused(), p.Pid())
	}
}

// TestMisuseIsRefused: signals and waits before a start, a second start
// while running, and a wait that runs out are refused with their errors,
// and the running process is left as it was.
func TestMisuseIsRefused(t *testing.T) {
	p := newSleeper(t)
	if err := p.Pause(); !errors.Is(err, ErrNotStarted) {
		t.Errorf("Pause before a start: %v, want ErrNotStarted", err)
	}
	if _, err := p.WaitExit(time.Millisecond); !errors.Is(err, ErrNotStarted) {
		t.Errorf("WaitExit before a start: %v, want ErrNotStarted", err)
	}
	if err := p.Crash(); err != nil {
		t.Errorf("Crash before a start: %v, want nothing done", err)
	}
	p.Run("sleep", "60")
	pid := p.Pid()
	if err := p.Spawn("sleep", "1"); !errors.Is(err, ErrRunning) {
		t.Errorf("Spawn while running: %v, want ErrRunning", err)
	}
	if _, err := p.WaitExit(50 * time.Millisecond); !errors.Is(err, ErrStillRunning) {
		t.Errorf("WaitExit of a sleeper: %v, want ErrStillRunning", err)
	}
	if p.Pid() != pid || !p.Live() {
		t.Fatalf("the refused calls changed the process: pid %d -> %d, live=%v", pid, p.Pid(), p.Live())
	}
	if n := strings.Count(p.Log(), "=== harness: start #"); n != 1 {
		t.Errorf("the refused Spawn wrote a start marker: %d markers\n%s", n, p.Log())
	}
	p.Kill()
	if err := p.Resume(); !errors.Is(err, os.ErrProcessDone) {
		t.Errorf("Resume after the exit: %v, want os.ErrProcessDone", err)
	}
}

// TestExpectedExitAndRestart: an exit the test expects is its code, not a
// failure; a restart appends to the same log, marked.
func TestExpectedExitAndRestart(t *testing.T) {
	p := newSleeper(t)
	for i, want := range []int{3, 0} {
		if err := p.Spawn("sh", "-c", fmt.Sprintf("echo run %d; exit %d", i+1, want)); err != nil {
			t.Fatal(err)
		}
		if code, err := p.WaitExit(Scale(10 * time.Second)); err != nil || code != want {
			t.Fatalf("run %d: exit %d, %v; want %d", i+1, code, err, want)
		}
	}
	log := p.Log()
	for _, s := range []string{"=== harness: start #1 ", "run 1", "=== harness: start #2 ", "run 2"} {
		if !strings.Contains(log, s) {
			t.Errorf("log lacks %q:\n%s", s, log)
		}
	}
}

// TestExec: stdout, stderr, exit code and env; a run cut off at its bound
// is an error, not an exit code.
func TestExec(t *testing.T) {
	out, errOut, code, err := Exec(Scale(10*time.Second), []string{"HARNESS_X=42"}, "sh", "-c", `echo "$HARNESS_X"; echo oops >&2; exit 7`)
	if err != nil || code != 7 || out != "42\n" || errOut != "oops\n" {
		t.Errorf("Exec: %q %q %d %v", out, errOut, code, err)
	}
	start := time.Now()
	_, _, code, err = Exec(100*time.Millisecond, nil, "sleep", "60")
	if !errors.Is(err, context.DeadlineExceeded) || code != -1 {
		t.Errorf("Exec past its bound: code %d, %v; want -1 and DeadlineExceeded", code, err)
	}
	if took := time.Since(start); took > Scale(10*time.Second) {
		t.Errorf("Exec past a 100ms bound took %v", took)
	}
}

// TestPortsNeverRepeat: ports handed out are never handed out again, by
// any Ports of the process or FreePort, lie below the ephemeral range (in
// PortBand), and each was free for TCP and UDP when handed out.
func TestPortsNeverRepeat(t *testing.T) {
	low, _ := EphemeralRange()
	lo, hi := PortBand()
	if lo < 1024 || hi > low || lo >= hi {
		t.Fatalf("band [%d, %d) is not below the ephemeral range starting at %d", lo, hi, low)
	}
	var p, q Ports
	seen := map[int]bool{}
	for i := range 300 {
		var port int
		var err error
		switch i % 3 {
		case 0:
			port, err = p.Free()
		case 1:
			port, err = q.Free()
		default:
			port, err = FreePort()
		}
		if err != nil {
			t.Fatal(err)
		}
		if seen[port] {
			t.Fatalf("port %d handed out twice", port)
		}
		seen[port] = true
		if port < lo || port >= hi || port >= low {
			t.Fatalf("port %d outside the band [%d, %d) below the ephemeral range from %d", port, lo, hi, low)
		}
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("port %d not free for TCP: %v", port, err)
		}
		u, err := net.ListenPacket("udp", addr)
		if err != nil {
			t.Fatalf("port %d not free for UDP: %v", port, err)
		}
		l.Close()
		u.Close()
	}
}
