package main

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/idgen/idgen/rpc/idclient"
	"github.com/idgen/idgen/rpc/tlsconf"
)

// fleetConfig is the fleet part's flags.
type fleetConfig struct {
	clients  int           // --fleet-clients
	subset   int           // --fleet-subset: nodes each client dials, 0 = all
	ramp     time.Duration // --fleet-ramp: the clients' starts are spread over it
	duration time.Duration // --fleet-duration: each client draws for this long after its start
	seed     uint64        // --fleet-seed: the draws' intervals
	sources  int           // --fleet-sources: source addresses, 0 = one per client
	// nodeFlags are more idgend flags for the fleet's nodes
	// (--fleet-node-flags, space-separated).
	nodeFlags string
	// attackNice: the attacker runs at nice 19 (--fleet-attack-nice).
	attackNice bool
}

// fleetBaseline is the fleet every figure of the part is compared with, run
// first in the same run.
const fleetBaseline = 100

// fleetNodes is the fleet's cluster size.
const fleetNodes = 3

// The fleet's clients draw one ID every 100-500 ms, each draw bounded by
// fleetDrawTimeout, from a Pool of fleetBatch-ID batches: a pod drawing about
// 3 IDs a second asks for a few at a time, not the node's 1,000.
const (
	fleetMinGap, fleetMaxGap = 100 * time.Millisecond, 500 * time.Millisecond
	fleetDrawTimeout         = 5 * time.Second
	fleetBatch               = 16
)

// fleetNodeArgs found the fleet's clusters with the 10 ms layout: 5,000
// clients drawing every 300 ms on average ask about 16,700 IDs a second,
// 2.7 times three nodes' cap at the default layout, and the part measures
// the doors, not the cap.
var fleetNodeArgs = []string{"--layout", "35/2/1/11", "--layout-unit", "10ms"}

// fleet: N clients, each its own Dial, Pool and certificate identity, drawing
// from three TLS nodes, beside the same fleet of 100 clients; then the N
// clients again while an attacker holds every unauthenticated connection the
// nodes' doors allow.
func (b *bench) fleet() error {
	cfg := b.fleetCfg
	per := cfg.subset
	if per == 0 {
		per = fleetNodes
	}
	if err := raiseFileLimit(cfg.clients*per + 1024); err != nil {
		return err
	}
	certs, err := fleetCerts(max(cfg.clients, fleetBaseline))
	if err != nil {
		return err
	}
	keyFile := filepath.Join(b.root, "gossip.key")
	key := make([]byte, 32)
	rand.Read(key)
	if err := os.WriteFile(keyFile, []byte(base64.StdEncoding.EncodeToString(key)+"\n"), 0o600); err != nil {
		return err
	}
	b.nodeArgs = append(slices.Clone(fleetNodeArgs), "--tls-cert", tlsconf.CertFile(certs, "server"),
		"--tls-key", tlsconf.KeyFile(certs, "server"), "--tls-ca", tlsconf.CertFile(certs, "ca"), "--gossip-key-file", keyFile)
	b.nodeArgs = append(b.nodeArgs, strings.Fields(cfg.nodeFlags)...)
	defer func() { b.nodeArgs = nil }()
	probe, err := clientTLS(certs, "probe")
	if err != nil {
		return err
	}
	b.probeTLS = probe
	defer func() { b.probeTLS = nil }()

	fmt.Fprintf(b.log, "perf: fleet: %d clients (baseline %d), %s, %s, ramp %s, %s each, node flags %q; load average %s\n",
		cfg.clients, fleetBaseline, subsetNote(cfg.subset), sourcesNote(cfg.sources), cfg.ramp, cfg.duration, cfg.nodeFlags, loadAvg())
	cfgs := make([]*tls.Config, max(cfg.clients, fleetBaseline))
	for i := range cfgs {
		if cfgs[i], err = clientTLS(certs, clientName(i)); err != nil {
			return err
		}
	}
	base, err := b.fleetRun("fb", cfgs, fleetBaseline, false)
	if err != nil {
		return err
	}
	full, err := b.fleetRun("fc", cfgs, cfg.clients, false)
	if err != nil {
		return err
	}
	attacked, err := b.fleetRun("fa", cfgs, cfg.clients, true)
	if err != nil {
		return err
	}
	b.fleetRows(base, full, attacked)
	return nil
}

// check refuses flags the fleet cannot run with.
func (c fleetConfig) check() error {
	if c.clients < 1 || c.subset < 0 || c.subset > fleetNodes || c.ramp < 0 || c.duration <= 0 || c.sources < 0 || c.sources > maxSources {
		return fmt.Errorf("%w: --fleet-clients %d (at least 1), --fleet-subset %d (0..%d), --fleet-ramp %s, --fleet-duration %s (positive), --fleet-sources %d (0..%d)",
			errUsage, c.clients, c.subset, fleetNodes, c.ramp, c.duration, c.sources, maxSources)
	}
	if c.sources == 0 && max(c.clients, fleetBaseline) > maxSources {
		return fmt.Errorf("%w: --fleet-clients %d: one source address each goes to %d; give --fleet-sources", errUsage, c.clients, maxSources)
	}
	return nil
}

// maxSources: the clients' source addresses are 127.1.0.1 onwards, 2^16
// of them (the attacker's are 127.0.0.2-9).
const maxSources = 1 << 16

// clientSource is the loopback address client i dials from: 127.0.0.1 for
// one source, else one of 127.1.0.1 onwards, each a remote address of its
// own to the nodes' per-address bounds, as a pod's own IP is.
func clientSource(i, sources int) net.IP {
	if sources == 1 {
		return net.IPv4(127, 0, 0, 1)
	}
	if sources > 0 {
		i %= sources
	}
	n := i + 1
	return net.IPv4(127, 1, byte(n>>8), byte(n))
}

func sourcesNote(sources int) string {
	switch sources {
	case 0:
		return "each from its own address"
	case 1:
		return "all from 127.0.0.1"
	}
	return fmt.Sprintf("from %d addresses", sources)
}

func subsetNote(k int) string {
	if k == 0 {
		return fmt.Sprintf("every client dials all %d nodes", fleetNodes)
	}
	return fmt.Sprintf("every client dials %d of %d nodes (idclient.WithSubset)", k, fleetNodes)
}

// raiseFileLimit raises this process's open-file soft limit to the hard
// one, and says so when even that is below need. Setting it explicitly also
// makes the nodes this process starts inherit it (Go restores the limit it
// found for children unless the program sets it itself).
func raiseFileLimit(need int) error {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return err
	}
	l.Cur = l.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return err
	}
	if l.Cur < uint64(need) {
		return fmt.Errorf("fleet: the open-file limit is %d, and the clients need about %d: raise the hard limit (ulimit -Hn) or use --fleet-subset", l.Cur, need)
	}
	return nil
}

// fleetCerts makes the CA, the nodes' server certificate, a "probe" client
// and the client identities c0..c(n-1), or finds them from an earlier run:
// they are cached in the temp dir (ECDSA P-256, signed by the cache's CA,
// valid 30 days; the cache is made anew once its CA is 20 days old).
func fleetCerts(n int) (string, error) {
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("idgen-bench-fleet-certs-%d", os.Getuid()))
	if st, err := os.Stat(tlsconf.CertFile(dir, "ca")); err == nil && time.Since(st.ModTime()) > 20*24*time.Hour {
		os.RemoveAll(dir)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	if err := tlsconf.CreateCA(dir, 30); err != nil && !errors.Is(err, tlsconf.ErrExists) {
		return "", err
	}
	reqs := []tlsconf.CertRequest{{Role: tlsconf.RoleServer, Name: "server", Days: 30},
		{Role: tlsconf.RoleClient, Name: "probe", Days: 30}}
	for i := range n {
		reqs = append(reqs, tlsconf.CertRequest{Role: tlsconf.RoleClient, Name: clientName(i), Days: 30})
	}
	t0, made := time.Now(), 0
	for _, r := range reqs {
		if _, err := os.Stat(tlsconf.CertFile(dir, r.Name)); err == nil {
			continue
		}
		if err := tlsconf.CreateCert(dir, r); err != nil && !errors.Is(err, tlsconf.ErrExists) {
			return "", err
		}
		made++
	}
	fmt.Fprintf(os.Stderr, "perf: fleet: %d certificates in %s (%d made in %s)\n", len(reqs), dir, made, time.Since(t0).Round(time.Millisecond))
	return dir, nil
}

func clientName(i int) string { return "c" + strconv.Itoa(i) }

// clientTLS loads a client identity's certificate from the cache.
func clientTLS(dir, name string) (*tls.Config, error) {
	m, err := tlsconf.Load(tlsconf.Files{Cert: tlsconf.CertFile(dir, name), Key: tlsconf.KeyFile(dir, name),
		CA: tlsconf.CertFile(dir, "ca")})
	if err != nil {
		return nil, err
	}
	return m.ClientConfig(), nil
}

// clientResult is what one client of the fleet saw.
type clientResult struct {
	ids                    []int64
	start, end             time.Time      // from before Dial to after Close (the caller's)
	first                  time.Duration  // start (before Dial) to its first ID; 0: none
	firstDraws, firstFails int            // draws until the first ID, and of them failed
	laterDraws, laterFails int            // draws after it
	laterCauses            map[string]int // failed draws after the first, by drawCause
	err                    error          // Dial or NewPool failed
}

// fleetClient runs client i from its start for d: Dial, NewPool, then one
// NextID every 100-500 ms.
// fleetClient is one client of the fleet: target lists every node, and
// subset (0: all) of them are dialled, picked by idclient.WithSubset from
// key.
func fleetClient(target string, subset int, key string, cfg *tls.Config, src net.IP, d time.Duration, rng *mrand.Rand) clientResult {
	var r clientResult
	t0 := time.Now()
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: src}}
	client, err := idclient.Dial(target, idclient.WithTLSConfig(cfg), idclient.WithSubset(subset), idclient.WithSubsetKey(key),
		idclient.WithDialOptions(grpc.WithContextDialer(
			func(ctx context.Context, addr string) (net.Conn, error) { return dialer.DialContext(ctx, "tcp", addr) })))
	if err != nil {
		r.err = err
		return r
	}
	defer client.Close()
	pool, err := idclient.NewPool(client, idclient.PoolOptions{BatchSize: fleetBatch})
	if err != nil {
		r.err = err
		return r
	}
	defer pool.Close()
	end := t0.Add(d)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), fleetDrawTimeout)
		id, err := pool.NextID(ctx)
		cancel()
		switch {
		case r.first == 0 && err != nil:
			r.firstDraws++
			r.firstFails++
		case r.first == 0:
			r.firstDraws++
			r.first = time.Since(t0)
		default:
			r.laterDraws++
			if err != nil {
				r.laterFails++
				if r.laterCauses == nil {
					r.laterCauses = map[string]int{}
				}
				r.laterCauses[drawCause(err)]++
			}
		}
		if err == nil {
			r.ids = append(r.ids, id)
		}
		gap := fleetMinGap + time.Duration(rng.Int64N(int64(fleetMaxGap-fleetMinGap)))
		if time.Until(end) < gap {
			return r
		}
		time.Sleep(gap)
	}
}

// drawCause names why a draw failed, coarsely enough to count: the gRPC
// status of the Pool's last fetch (code and the start of its message,
// digits blanked), or that none failed and the deadline passed.
func drawCause(err error) string {
	var se interface{ GRPCStatus() *status.Status }
	st := status.New(codes.Unknown, err.Error())
	switch {
	case errors.As(err, &se):
		st = se.GRPCStatus()
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline, no fetch failed"
	}
	msg := []rune(st.Message())
	for i, r := range msg {
		if r >= '0' && r <= '9' {
			msg[i] = '#'
		}
	}
	if len(msg) > 60 {
		msg = append(msg[:60], '…')
	}
	return st.Code().String() + ": " + string(msg)
}
