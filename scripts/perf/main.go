// Command perf is what scripts/bench runs: it starts idgend processes and
// benchmark servers on 127.0.0.1, measures what users of a cluster wait on,
// and prints one table in which each figure stands beside a baseline
// measured in the same run.
//
//	perf --bin DIR [--only PART] [--keep] [--fleet-* ...]   (DIR holds idgend; scripts/bench builds it)
//	perf serve KIND ADDR [TLSDIR]   (internal: a benchmark server process)
//	perf attack KIND=ADDR:COUNT ...   (internal: the fleet's attacker process)
package main

import (
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/idgen/idgen/rpc/tlsconf"
	"github.com/idgen/idgen/scripts/harness"
)

var (
	errUsage      = errors.New("usage")
	errNotRunning = errors.New("process not running")
	errNotHere    = errors.New("perf: not supported by the benchmark server")
	errNotReady   = errors.New("did not become ready in time")
)

func main() {
	err := run(os.Args[1:], os.Stdout, os.Stderr)
	if errors.Is(err, errUsage) {
		fmt.Fprintln(os.Stderr, "perf:", err)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "perf:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "serve" {
		if len(args) < 3 || len(args) > 4 {
			return fmt.Errorf("%w: perf serve bare|stack ADDR [TLSDIR]", errUsage)
		}
		tlsDir := ""
		if len(args) == 4 {
			tlsDir = args[3]
		}
		return serve(args[1], args[2], tlsDir)
	}
	if len(args) > 0 && args[0] == "attack" {
		return attack(args[1:], stdout)
	}
	fs := flag.NewFlagSet("perf", flag.ContinueOnError)
	fs.SetOutput(stderr)
	bin := fs.String("bin", "", "directory holding the idgend binary to measure")
	only := fs.String("only", "", "run one part: calls, lone, three, eight, fast or fleet (default: all)")
	keep := fs.Bool("keep", false, "keep the nodes' data and logs (printed at the end)")
	var fc fleetConfig
	fs.IntVar(&fc.clients, "fleet-clients", 1000, "fleet: clients, each its own Dial, Pool and certificate identity")
	fs.IntVar(&fc.subset, "fleet-subset", 0, "fleet: nodes each client dials (0 = all 3)")
	fs.DurationVar(&fc.ramp, "fleet-ramp", 10*time.Second, "fleet: the clients' starts are spread over this")
	fs.DurationVar(&fc.duration, "fleet-duration", 20*time.Second, "fleet: each client draws for this long after its start")
	fs.Uint64Var(&fc.seed, "fleet-seed", 1, "fleet: seed of the draws' intervals")
	fs.StringVar(&fc.nodeFlags, "fleet-node-flags", "", "fleet: more idgend flags for the fleet's nodes, space-separated (e.g. \"--grpc-max-client-conns 8192\")")
	fs.BoolVar(&fc.attackNice, "fleet-attack-nice", false, "fleet: run the attacker at the lowest CPU priority (nice 19), as an attacker dialling from machines of its own would cost this one only the nodes' side of each connection")
	fs.IntVar(&fc.sources, "fleet-sources", 0, "fleet: loopback source addresses the clients dial from (0 = one per client, as pods; 1 = all from 127.0.0.1, as behind one NAT)")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected arguments %q", errUsage, fs.Args())
	}
	if *bin == "" {
		return fmt.Errorf("%w: --bin DIR is required (the directory holding idgend)", errUsage)
	}
	if !slices.Contains([]string{"", "calls", "lone", "three", "eight", "fast", "fleet"}, *only) {
		return fmt.Errorf("%w: --only %q: want calls, lone, three, eight, fast or fleet", errUsage, *only)
	}
	if err := fc.check(); err != nil {
		return err
	}
	idgend := filepath.Join(*bin, "idgend")
	if st, err := os.Stat(idgend); err != nil || st.IsDir() {
		return fmt.Errorf("%w: no idgend binary in --bin %s", errUsage, *bin)
	}
	root, err := os.MkdirTemp("", "idgen-bench-")
	if err != nil {
		return err
	}
	b := &bench{idgend: idgend, root: root, log: stderr, only: *only, fleetCfg: fc}
	defer b.cleanup()
	if err := b.all(); err != nil {
		fmt.Fprintf(stderr, "perf: logs kept in %s\n", root)
		b.keep = true
		return err
	}
	b.print(stdout)
	if *keep {
		b.keep = true
		fmt.Fprintf(stderr, "perf: logs kept in %s\n", root)
	}
	return nil
}

// row is one line of the table.
type row struct{ what, value, baseline, ratio string }

type bench struct {
	idgend, root string
	log          io.Writer
	procs        []*proc
	ports        harness.Ports
	rows         []row
	keep         bool
	bareRSS      int64         // a bare gRPC server's resident set after its benchmark
	bareStart    time.Duration // a bare gRPC server's start to its first answer
	only         string        // --only: the one part to run
	// nodeArgs are added to every idgend started (the fast layout's flags).
	nodeArgs []string
	// defaultPool and defaultCPU are the default layout's Pool latencies
	// (no fault) and CPU per node at its cap, the fast layout's baselines.
	defaultPool []time.Duration
	defaultCPU  float64
	// probeTLS is the client certificate every node started gets probed
	// with (the fleet's nodes run with TLS); nil: plaintext.
	probeTLS *tls.Config
	fleetCfg fleetConfig // the fleet part's flags
}

func (b *bench) add(what, value, baseline, ratio string) {
	b.rows = append(b.rows, row{what, value, baseline, ratio})
	fmt.Fprintf(b.log, "perf: %s: %s (baseline %s) %s\n", what, value, baseline, ratio)
}

func (b *bench) cleanup() {
	for _, p := range b.procs {
		p.Stop()
	}
	if !b.keep {
		os.RemoveAll(b.root)
	}
}

func (b *bench) print(w io.Writer) {
	fmt.Fprintln(w, "| measure | value | baseline (same run) | ratio |")
	fmt.Fprintln(w, "|---|---:|---|---:|")
	for _, r := range b.rows {
		fmt.Fprintf(w, "| %s | %s | %s | %s |\n", r.what, r.value, r.baseline, r.ratio)
	}
}

func ms(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond)) }
func us(d time.Duration) string { return fmt.Sprintf("%.1f us", float64(d)/float64(time.Microsecond)) }
func ratio(a, b float64) string { return fmt.Sprintf("%.2fx", a/b) }

func (b *bench) all() error {
	steps := []struct {
		name string
		run  func() error
	}{{"calls", b.calls}, {"lone", b.lone}, {"three", b.three}, {"eight", b.eight}, {"fast", b.fast}, {"fleet", b.fleet}}
	for _, s := range steps {
		if b.only != "" && s.name != b.only {
			continue
		}
		if err := s.run(); err != nil {
			return err
		}
	}
	return nil
}

// server starts a benchmark server process of this binary.
func (b *bench) server(kind, tlsDir string) (*proc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	port, err := b.ports.Free()
	if err != nil {
		return nil, err
	}
	p := newProc(self, b.root, kind)
	p.grpc, p.args = addr(port), []string{"serve", kind, addr(port)}
	if tlsDir != "" {
		p.args = append(p.args, tlsDir)
	}
	if err := p.start(); err != nil {
		return nil, err
	}
	b.procs = append(b.procs, p)
	if !waitUntil(10*time.Second, func() bool {
		c, err := net.Dial("tcp", p.grpc)
		if err == nil {
			c.Close()
		}
		return err == nil
	}) {
		return nil, fmt.Errorf("%s server on %s: %w", kind, p.grpc, errNotReady)
	}
	return p, nil
}

// tlsMaterial makes a CA, a server and a client certificate.
func (b *bench) tlsMaterial() (string, *tls.Config, error) {
	dir := filepath.Join(b.root, "tls")
	if err := tlsconf.CreateCA(dir, 1); err != nil {
		return "", nil, err
	}
	for _, req := range []tlsconf.CertRequest{{Role: tlsconf.RoleServer, Name: "server", Days: 1},
		{Role: tlsconf.RoleClient, Name: "client", Days: 1}} {
		if err := tlsconf.CreateCert(dir, req); err != nil {
			return "", nil, err
		}
	}
	m, err := tlsconf.Load(tlsconf.Files{Cert: tlsconf.CertFile(dir, "client"), Key: tlsconf.KeyFile(dir, "client"),
		CA: tlsconf.CertFile(dir, "ca")})
	if err != nil {
		return "", nil, err
	}
	cfg := m.ClientConfig()
	cfg.ServerName = "127.0.0.1"
	return dir, cfg, nil
}

// calls: GetIDBatch through idgend's server stack against a bare gRPC
// server, each in its own process, plaintext and TLS; medians of 3 rounds
// taken in turn.
func (b *bench) calls() error {
	tlsDir, tcfg, err := b.tlsMaterial()
	if err != nil {
		return err
	}
	for _, mode := range []string{"plaintext", "TLS"} {
		dir, cfg := "", (*tls.Config)(nil)
		if mode == "TLS" {
			dir, cfg = tlsDir, tcfg
		}
		stack, err := b.server("stack", dir)
		if err != nil {
			return err
		}
		bare, err := b.server("bare", dir)
		if err != nil {
			return err
		}
		for _, count := range []uint32{16, 1000} {
			var s, r []time.Duration
			for range 3 {
				ds, err := perCall(stack.grpc, cfg, count, 700*time.Millisecond)
				if err != nil {
					return fmt.Errorf("stack server, %s: %w", mode, err)
				}
				dr, err := perCall(bare.grpc, cfg, count, 700*time.Millisecond)
				if err != nil {
					return fmt.Errorf("bare server, %s: %w", mode, err)
				}
				s, r = append(s, ds), append(r, dr)
			}
			slices.Sort(s)
			slices.Sort(r)
			b.add(fmt.Sprintf("GetIDBatch %d IDs, %s, per call", count, mode), us(s[1]),
				"bare gRPC server "+us(r[1]), ratio(float64(s[1]), float64(r[1])))
		}
		if mode == "plaintext" {
			_, rss, err := bare.cpuRSS()
			if err == nil {
				b.bareRSS = rss
			}
		}
		stack.Stop()
		bare.Stop()
	}
	return nil
}
