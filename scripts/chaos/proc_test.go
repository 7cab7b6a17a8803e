package chaos

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	idgenv1 "github.com/idgen/idgen/proto/idgen/v1"
	"github.com/idgen/idgen/rpc/tlsconf"
	"github.com/idgen/idgen/scripts/harness"
)

// buildBinaries builds idgend and idctl from this checkout;
// IDGEN_CHAOS_RACE=1 builds them with -race, to catch data races in idgend
// under chaos.
func buildBinaries(t testing.TB) harness.Binaries {
	t.Helper()
	if os.Getenv("IDGEN_CHAOS_RACE") == "1" {
		return harness.Build(t, "-race")
	}
	return harness.Build(t)
}

// node is one idgend process run by scripts/harness (its addresses and data
// dir stay the same across restarts, so a restart is the same node unless
// its data dir was wiped), with a gRPC client of its own.
type node struct {
	*harness.Node

	connOnce sync.Once
	conn     *grpc.ClientConn
	creds    grpc.DialOption // the cluster's client credentials
}

func (n *node) client() idgenv1.ClusterServiceClient {
	n.connOnce.Do(func() {
		// Short reconnect backoff: nodes restart on the same address all the time.
		c, err := grpc.NewClient(n.GRPC,
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
	bin   harness.Binaries
	root  string
	nodes []*node
	ports harness.Ports
	start time.Time
	// extra flags for every node
	flags []string
	// env holds IDGEN_TLS_* for idctl (an admin certificate) when the
	// cluster runs with TLS; creds are the same certificate for gRPC calls.
	env   []string
	creds grpc.DialOption
}

func newCluster(t testing.TB, bin harness.Binaries, flags []string) *cluster {
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
	args := []string{"--advertise=127.0.0.1", "--bootstrap-expect=" + strconv.Itoa(expect), "--log-format=json"}
	if len(seeds) > 0 {
		args = append(args, "--join="+strings.Join(seeds, ","))
	}
	args = append(append(args, c.flags...), extra...)
	n := &node{Node: harness.NewNodeIn(c.t, c.bin, &c.ports, c.root, name, args...), creds: c.creds}
	// Runs before the harness's own cleanup (a graceful stop, one node at
	// a time, then the log on failure): a chaos run's nodes need no grace.
	c.t.Cleanup(func() {
		if err := n.Crash(); err != nil {
			c.t.Errorf("cleanup: %v", err)
		}
		if n.conn != nil {
			n.conn.Close()
		}
	})
	c.nodes = append(c.nodes, n)
	return n
}

func (c *cluster) grpcTargets() string {
	addrs := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		addrs[i] = n.GRPC
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
		if !n.Live() {
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
		parts = append(parts, fmt.Sprintf("%s:%s:slot=%d:%s", n.Name, strings.ToLower(st.GetRaftState()), st.GetSlot(), r))
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

// healthy: every live process answers, all agree on one leader, and as many
// are ready as there are slots for them.
func (c *cluster) healthy(v view) bool {
	live := 0
	for _, n := range c.nodes {
		if n.Live() {
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
// d is scaled by IDGEN_TEST_SLOWDOWN (harness.Scale).
func (c *cluster) waitHealthy(d time.Duration) (time.Duration, error) {
	d = harness.Scale(d)
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

// waitFor is harness.Eventually at a fixed 250 ms: a chaos condition asks
// nine nodes over HTTP or idctl, and the run's timeouts are reported, not
// fatal (harness.WaitFor would fail the test).
func waitFor(d time.Duration, cond func() bool) bool {
	return harness.Poll(harness.Scale(d), 250*time.Millisecond, cond)
}

// idctl runs idctl as the cluster's admin with a deadline and returns its
// stdout, stderr and exit code.
func (c *cluster) idctl(d time.Duration, args ...string) (string, string, int, error) {
	return harness.Exec(d, c.env, c.bin.Idctl, args...)
}
