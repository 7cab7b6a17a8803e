package harness

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// listenEnv makes the test binary a stand-in node: it binds TCP and UDP on
// 127.0.0.1 at each of the listed ports, says "listening" and serves until
// it is killed; a port it cannot bind is "bind failed: ..." and exit 3.
// holdEnv makes it hand out that many ports with FreePort, print them and
// wait to be killed.
const (
	listenEnv = "HARNESS_TEST_LISTEN"
	holdEnv   = "HARNESS_TEST_HOLD_PORTS"
)

func TestMain(m *testing.M) {
	switch {
	case os.Getenv(listenEnv) != "":
		standInNode(os.Getenv(listenEnv))
	case os.Getenv(holdEnv) != "":
		holdPorts(os.Getenv(holdEnv))
	}
	os.Exit(m.Run())
}

func standInNode(list string) {
	for _, p := range strings.Split(list, ",") {
		addr := "127.0.0.1:" + p
		l, err := net.Listen("tcp", addr)
		if err != nil {
			fmt.Println("bind failed:", err)
			os.Exit(3)
		}
		u, err := net.ListenPacket("udp", addr)
		if err != nil {
			fmt.Println("bind failed:", err)
			os.Exit(3)
		}
		defer u.Close()
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				// The client closes first (with a reset), so no TIME_WAIT
				// is left here.
				go func() { io.Copy(io.Discard, c); c.Close() }()
			}
		}()
	}
	fmt.Println("listening")
	select {}
}

func holdPorts(n string) {
	count, _ := strconv.Atoi(n)
	var got []string
	for range count {
		p, err := FreePort()
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(3)
		}
		got = append(got, strconv.Itoa(p))
	}
	fmt.Println("ports", strings.Join(got, ","))
	select {}
}

func TestParsePortRange(t *testing.T) {
	for in, want := range map[string][2]int{
		"32768\t60999\n": {32768, 60999},
		"1024 65535":     {1024, 65535},
		"":               {0, 0},
		"32768":          {0, 0},
		"a b":            {0, 0},
		"60999 32768":    {0, 0},
		"0 100":          {0, 0},
		"1000 70000":     {0, 0},
	} {
		low, high, ok := parsePortRange(in)
		if ok != (want != [2]int{}) || low != want[0] || high != want[1] {
			t.Errorf("parsePortRange(%q) = %d, %d, %v; want %v", in, low, high, ok, want)
		}
	}
	for low, want := range map[int][2]int{
		32768: {16384, 32768},
		49152: {24576, 49152},
		1500:  {1024, 1500},
		1024:  {1024, 1024}, // empty: no unprivileged port below the range
		100:   {1024, 1024},
	} {
		if lo, hi := bandBelow(low); lo != want[0] || hi != want[1] {
			t.Errorf("bandBelow(%d) = [%d, %d), want %v", low, lo, hi, want)
		}
	}
}

// TestPortsHeldAcrossProcesses: ports another process handed out are not
// handed out here while it runs, however long its nodes are down, and are
// free to take once it is gone.
func TestPortsHeldAcrossProcesses(t *testing.T) {
	if _, err := FreePort(); err != nil {
		t.Fatal(err)
	}
	ports.mu.Lock()
	locking := ports.lock != nil
	ports.mu.Unlock()
	if !locking {
		t.Skipf("%s cannot be locked here: ports are only probed", portLockFile)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := newSleeper(t)
	launchHelper(t, p, exe, holdEnv+"=20")
	var held []int
	WaitFor(t, 10*time.Second, "the other process's ports", func() bool {
		for _, l := range strings.Split(p.Log(), "\n") {
			if rest, ok := strings.CutPrefix(l, "ports "); ok {
				for _, s := range strings.Split(rest, ",") {
					n, _ := strconv.Atoi(s)
					held = append(held, n)
				}
				return true
			}
		}
		if !p.Running() {
			t.Fatalf("holder exited:\n%s", p.Log())
		}
		return false
	})
	claim := func(port int) bool {
		ports.mu.Lock()
		defer ports.mu.Unlock()
		ok := ports.claim(port)
		if ok {
			ports.release(port)
		}
		return ok
	}
	for _, port := range held {
		if claim(port) {
			t.Errorf("port %d, held by another process, could be claimed here", port)
		}
	}
	p.Kill()
	for _, port := range held {
		if !claim(port) {
			t.Errorf("port %d still held after its process exited", port)
		}
	}
}

// TestRestartOnItsPortsUnderConnectionChurn: a node killed and restarted
// over and over while many outgoing connections are being opened (to it,
// as redials, and elsewhere) binds its ports again every time, since no
// outgoing connection takes a local port from below the ephemeral range.
func TestRestartOnItsPortsUnderConnectionChurn(t *testing.T) {
	const (
		rounds   = 15
		maxDials = 40000
		dialers  = 8
		// Each dialer keeps its last hold connections open, as clients
		// keep theirs: 1600 local ports in use at any moment. That is
		// not enough to make a port from port 0 clash here (Linux gives
		// connect() and bind(0) ports of opposite parity while the range
		// is far from full: ports from 127.0.0.1:0 came back on each of
		// 150 restarts among 650,000 dials), so what guards against the
		// clash is the check that the node's ports and no local port of
		// a connection share a range.
		hold = 200
	)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	low, high := EphemeralRange()
	var own []string
	mine := map[int]bool{}
	for range 4 {
		port := NextPort(t)
		if port >= low && port <= high {
			t.Fatalf("port %d handed out from the ephemeral range %d-%d", port, low, high)
		}
		mine[port] = true
		own = append(own, strconv.Itoa(port))
	}
	sink, err := net.Listen("tcp", "127.0.0.1:0") // never restarted: port 0 is fine
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	go func() {
		for {
			c, err := sink.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(io.Discard, c); c.Close() }()
		}
	}()
	targets := []string{sink.Addr().String()}
	for _, p := range own {
		targets = append(targets, "127.0.0.1:"+p)
	}

	ctx, cancel := context.WithCancel(context.Background())
	var (
		wg            sync.WaitGroup
		dials, served atomic.Int64
		mu            sync.Mutex
		badLocal      []int
	)
	for g := range dialers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := net.Dialer{Timeout: time.Second}
			open := make([]net.Conn, 0, hold)
			shut := func(c net.Conn) {
				// A reset, not a FIN: no TIME_WAIT left to hold ports.
				c.(*net.TCPConn).SetLinger(0)
				c.Close()
			}
			defer func() {
				for _, c := range open {
					shut(c)
				}
			}()
			for i := g; ctx.Err() == nil && dials.Add(1) <= maxDials; i++ {
				c, err := d.DialContext(ctx, "tcp", targets[i%len(targets)])
				if err != nil {
					continue // refused while the node is down
				}
				served.Add(1)
				if lp := c.LocalAddr().(*net.TCPAddr).Port; lp < low || lp > high || mine[lp] {
					mu.Lock()
					badLocal = append(badLocal, lp)
					mu.Unlock()
				}
				if len(open) == hold {
					shut(open[0])
					open = append(open[:0], open[1:]...)
				}
				open = append(open, c)
			}
		}()
	}
	defer func() { cancel(); wg.Wait() }()

	// Start, wait until it listens, kill, and again: every start after the
	// first is a restart on ports given up while the dialers kept going.
	p := newSleeper(t)
	deadline := time.Now().Add(Scale(60 * time.Second))
	starts := 0
	for starts < rounds && time.Now().Before(deadline) {
		launchHelper(t, p, exe, listenEnv+"="+strings.Join(own, ","))
		starts++
		WaitFor(t, 10*time.Second, fmt.Sprintf("start #%d listening on %s", starts, own), func() bool {
			if strings.Count(p.Log(), "\nlistening\n") >= starts {
				return true
			}
			if !p.Running() {
				t.Fatalf("start #%d exited: a port was taken meanwhile\n%s", starts, p.Log())
			}
			return false
		})
		p.Kill()
		time.Sleep(20 * time.Millisecond) // down for a moment; the dialers go on
	}
	cancel()
	wg.Wait()
	t.Logf("%d starts on ports %s; %d dials, %d connected", starts, own, min(dials.Load(), maxDials), served.Load())
	if starts < 2 {
		t.Errorf("only %d start(s) within the deadline: no restart tested", starts)
	}
	if served.Load() == 0 {
		t.Error("no outgoing connection was made: the churn did not run")
	}
	if len(badLocal) > 0 {
		t.Errorf("outgoing connections took local ports outside the ephemeral range %d-%d or handed out here: %v", low, high, badLocal[:min(len(badLocal), 10)])
	}
}

// launchHelper starts this test binary as p, a helper with env set that
// tests nothing itself, its output appended to p's log.
func launchHelper(t *testing.T, p *Proc, exe, env string) {
	t.Helper()
	f, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), env)
	p.Launch(cmd, f)
}
