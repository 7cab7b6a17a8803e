package harness

import (
	"errors"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// Test ports come from below the kernel's ephemeral range, never from a
// bind to port 0. The ephemeral range is where the kernel picks the local
// port of every outgoing connection (gRPC redials, Raft, memberlist's TCP
// push/pull, the loaders): a port from it that a killed node gave up can be
// taken by such a connection meanwhile, and the node's restart then fails
// with "bind: address already in use". Nothing picks a port below the range
// unless asked for it by number, so a port handed out here stays free for
// its node across kills and restarts.

// ephemeralRangeFile is where Linux keeps its ephemeral range.
const ephemeralRangeFile = "/proc/sys/net/ipv4/ip_local_port_range"

// Linux's default ephemeral range, for a machine without the file.
const defaultEphemeralLow, defaultEphemeralHigh = 32768, 60999

// EphemeralRange is the kernel's range [low, high] for local ports of
// outgoing connections (and of binds to port 0), read from
// /proc/sys/net/ipv4/ip_local_port_range; Linux's default 32768-60999 when
// the file is missing or does not parse.
func EphemeralRange() (low, high int) {
	if b, err := os.ReadFile(ephemeralRangeFile); err == nil {
		if low, high, ok := parsePortRange(string(b)); ok {
			return low, high
		}
	}
	return defaultEphemeralLow, defaultEphemeralHigh
}

// parsePortRange parses the file's "low<TAB>high".
func parsePortRange(s string) (low, high int, ok bool) {
	f := strings.Fields(s)
	if len(f) != 2 {
		return 0, 0, false
	}
	low, err1 := strconv.Atoi(f[0])
	high, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil || low < 1 || high > 65535 || low > high {
		return 0, 0, false
	}
	return low, high, true
}

// PortBand is where ports are handed out from: [lo, hi), the upper half of
// the ports below the ephemeral range (16384-32767 here), and never a
// privileged port. It is empty when the range starts at 1025 or lower.
func PortBand() (lo, hi int) {
	low, _ := EphemeralRange()
	return bandBelow(low)
}

func bandBelow(low int) (lo, hi int) {
	return max(low/2, 1024), max(low, 1024)
}

// portLockFile is shared by every process of every user that hands out
// ports here: a process owns a port while it holds a write lock on the
// port's byte of this file (an fcntl record lock, dropped by the kernel
// when the process exits, however it exits).
var portLockFile = filepath.Join(os.TempDir(), "idgen-test-ports.lock")

// The process's one allocator: every Ports, NextPort and FreePort draws
// from it, so a port is never handed out twice in one process.
var ports portAllocator

type portAllocator struct {
	mu     sync.Mutex
	inited bool
	lo, hi int
	next   int      // the next candidate
	left   int      // candidates not tried yet; each is tried once
	lock   *os.File // nil when the lock file could not be used
}

// FreePort hands out a loopback port below the ephemeral range that was
// free for both TCP and UDP on 127.0.0.1 a moment ago (gossip uses both on
// one port), never the same one twice in this process, and never one that
// another process handing out ports here holds: the process keeps each
// port it handed out until it exits. It returns ErrNoPort when the band is
// used up. The port is released before use, so only a program that binds
// it by number (not one of this repository's tests) can take it meanwhile.
func FreePort() (int, error) { return ports.take() }

// NextPort is FreePort for a test: no port fails t.
func NextPort(t testing.TB) int {
	t.Helper()
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// NextPorts is n ports from NextPort.
func NextPorts(t testing.TB, n int) []int {
	t.Helper()
	ports := make([]int, n)
	for i := range ports {
		ports[i] = NextPort(t)
	}
	return ports
}

func (a *portAllocator) take() (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.inited {
		a.inited = true
		a.lo, a.hi = PortBand()
		a.left = a.hi - a.lo
		if a.left > 0 {
			// A random start per process: processes that hand out ports at
			// once mostly walk different stretches of the band.
			a.next = a.lo + rand.IntN(a.left)
		}
		if f, err := os.OpenFile(portLockFile, os.O_RDWR|os.O_CREATE, 0o666); err == nil {
			f.Chmod(0o666) // for other users, despite the umask; best effort
			a.lock = f
		}
	}
	for ; a.left > 0; a.left-- {
		port := a.next
		if a.next++; a.next == a.hi {
			a.next = a.lo
		}
		if !a.claim(port) {
			continue
		}
		if probePort(port) == nil {
			a.left--
			return port, nil
		}
		a.release(port)
	}
	return 0, ErrNoPort
}

// claim takes the port's byte lock: false when another process holds it.
// Without a usable lock file, probing alone decides.
func (a *portAllocator) claim(port int) bool {
	if a.lock == nil {
		return true
	}
	err := a.setLock(port, syscall.F_WRLCK)
	switch {
	case err == nil:
		return true
	case errors.Is(err, syscall.EAGAIN), errors.Is(err, syscall.EACCES):
		return false
	default:
		// Record locks unsupported here (ENOLCK, say): probe only.
		a.lock.Close()
		a.lock = nil
		return true
	}
}

func (a *portAllocator) release(port int) {
	if a.lock != nil {
		a.setLock(port, syscall.F_UNLCK)
	}
}

func (a *portAllocator) setLock(port int, typ int16) error {
	return syscall.FcntlFlock(a.lock.Fd(), syscall.F_SETLK, &syscall.Flock_t{
		Type: typ, Whence: 0, Start: int64(port), Len: 1,
	})
}

// probePort binds the port on 127.0.0.1 for TCP and for UDP, and lets go.
func probePort(port int) error {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	defer l.Close()
	u, err := net.ListenPacket("udp", addr)
	if err != nil {
		return err
	}
	return u.Close()
}
