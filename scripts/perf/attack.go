package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// The attacker's source addresses: all of 127.0.0.0/8 is loopback, so each
// is a remote address of its own to a node's per-address bounds, as eight
// hosts would be.
const attackSources = 8

func attackSource(j int) string { return fmt.Sprintf("127.0.0.%d", 2+j%attackSources) }

// What the attacker holds per node: as many unauthenticated connections as
// each door admits at once (cmd/idgend/README.md, "Every door is bounded").
// The gRPC door admits 256 unfinished TLS handshakes, 32 per remote address
// (8 addresses x 32); the Raft door 64; the gossip port 128 TCP streams.
var attackPerNode = []struct {
	kind  string
	count int
}{{"grpc", 256}, {"raft", 64}, {"gossip", 128}}

// attackSummaryPrefix starts the attacker's last line: its counts as JSON.
const attackSummaryPrefix = "attack summary: "

// attackTarget is one port the attacker holds connections to, and what
// became of them.
type attackTarget struct {
	Kind       string `json:"kind"`
	Addr       string `json:"addr"`
	Want       int    `json:"want"`
	Held       int64  `json:"held"`        // open now
	Closed     int64  `json:"closed"`      // closed by the node, each redialled
	DialErrors int64  `json:"dial_errors"` // dials that failed (retried after 20 ms)
}

type attackSummary struct {
	Seconds float64         `json:"seconds"`
	Targets []*attackTarget `json:"targets"`
	CPU     time.Duration   `json:"-"` // the attacker process's, as the bench read it before the stop
}

// attack is `perf attack KIND=ADDR:COUNT ...`: it opens COUNT TCP
// connections to each ADDR, spread over the source addresses, that never
// send a byte (so never finish a TLS handshake, a gossip stream or a Raft
// greeting), redials each one the node closes at once, and on SIGTERM
// prints its counts.
func attack(args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: perf attack KIND=ADDR:COUNT ...", errUsage)
	}
	var targets []*attackTarget
	for _, a := range args {
		kind, rest, ok1 := strings.Cut(a, "=")
		i := strings.LastIndexByte(rest, ':')
		n, err := strconv.Atoi(rest[i+1:])
		if !ok1 || i < 0 || err != nil || n < 1 {
			return fmt.Errorf("%w: attack target %q: want KIND=HOST:PORT:COUNT", errUsage, a)
		}
		targets = append(targets, &attackTarget{Kind: kind, Addr: rest[:i], Want: n})
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	var quit atomic.Bool
	var slots []*atomic.Pointer[net.Conn] // each slot's open connection, closed on exit
	t0 := time.Now()
	for _, t := range targets {
		for j := range t.Want {
			slot := new(atomic.Pointer[net.Conn])
			slots = append(slots, slot)
			go func() {
				d := net.Dialer{Timeout: 2 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(attackSource(j))}}
				buf := make([]byte, 512)
				for !quit.Load() {
					c, err := d.Dial("tcp", t.Addr)
					if err != nil {
						atomic.AddInt64(&t.DialErrors, 1)
						time.Sleep(20 * time.Millisecond)
						continue
					}
					slot.Store(&c)
					atomic.AddInt64(&t.Held, 1)
					for {
						if _, err := c.Read(buf); err != nil {
							break // closed by the node (or by us, on exit)
						}
					}
					c.Close()
					atomic.AddInt64(&t.Held, -1)
					if !quit.Load() {
						atomic.AddInt64(&t.Closed, 1)
					}
				}
			}()
		}
	}
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	line := func() string {
		var s []string
		for _, t := range targets {
			s = append(s, fmt.Sprintf("%s %s held %d/%d closed %d dial errors %d", t.Kind, t.Addr,
				atomic.LoadInt64(&t.Held), t.Want, atomic.LoadInt64(&t.Closed), atomic.LoadInt64(&t.DialErrors)))
		}
		return strings.Join(s, "; ")
	}
	for done := false; !done; {
		select {
		case <-tick.C:
			fmt.Fprintf(os.Stderr, "perf attack: %.0fs: %s\n", time.Since(t0).Seconds(), line())
		case <-stop:
			done = true
		}
	}
	sum := attackSummary{Seconds: time.Since(t0).Seconds(), Targets: targets}
	for _, t := range targets {
		t.Held, t.Closed, t.DialErrors = atomic.LoadInt64(&t.Held), atomic.LoadInt64(&t.Closed), atomic.LoadInt64(&t.DialErrors)
	}
	js, err := json.Marshal(sum)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "perf attack: stopping: %s\n", line())
	fmt.Fprintln(stdout, attackSummaryPrefix+string(js))
	quit.Store(true)
	for _, s := range slots {
		if c := s.Load(); c != nil {
			(*c).Close()
		}
	}
	return nil
}

// startAttack starts the attacker process against every node's gRPC, Raft
// and gossip ports and waits (up to 10 s) until it holds nine tenths of its
// gRPC connections, as the nodes see them. The attacker runs at the lowest
// CPU priority (nice 19) when b.attackNice is set: a real attacker dials
// from machines of its own, and here it shares the nodes' and the fleet's
// two cores; what each refusal costs a node is still spent, at the node's
// priority.
func (b *bench) startAttack(nodes []*proc) (*proc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	p := newProc(self, b.root, fmt.Sprintf("attack-%s", nodes[0].name))
	p.args = []string{"attack"}
	if b.fleetCfg.attackNice {
		nice, err := exec.LookPath("nice")
		if err != nil {
			return nil, fmt.Errorf("--fleet-attack-nice: %w", err)
		}
		p.bin, p.args = nice, []string{"-n", "19", self, "attack"}
	}
	ports := map[int]int{}
	want := 0
	for i, n := range nodes {
		for _, a := range attackPerNode {
			addr := map[string]string{"grpc": n.grpc, "raft": n.raft, "gossip": n.gossip}[a.kind]
			p.args = append(p.args, fmt.Sprintf("%s=%s:%d", a.kind, addr, a.count))
		}
		ports[portOf(n.grpc)] = i
		want += attackPerNode[0].count
	}
	if err := p.start(); err != nil {
		return nil, err
	}
	b.procs = append(b.procs, p)
	held := 0
	waitUntil(10*time.Second, func() bool {
		_, att, err := tcpEstablished(ports, len(nodes))
		held = 0
		for _, a := range att {
			held += a
		}
		return err == nil && 10*held >= 9*want
	})
	fmt.Fprintf(b.log, "perf: attacker holds %d of %d unfinished gRPC connections\n", held, want)
	return p, nil
}

// attackResult stops the attacker and reads its summary from its log.
func attackResult(p *proc) (attackSummary, error) {
	cpu, _, _ := p.cpuRSS()
	p.Stop()
	var s attackSummary
	for _, l := range strings.Split(p.Log(), "\n") {
		if js, ok := strings.CutPrefix(l, attackSummaryPrefix); ok {
			err := json.Unmarshal([]byte(js), &s)
			s.CPU = cpu
			return s, err
		}
	}
	return s, fmt.Errorf("attacker: no summary in its log")
}

func portOf(addr string) int {
	_, p, _ := net.SplitHostPort(addr)
	n, _ := strconv.Atoi(p)
	return n
}
