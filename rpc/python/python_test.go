// Package python holds no Go: this test drives the Python client beside it
// (idgen_client.py, example.py) against a real three-node cluster.
package python

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	idgenv1 "github.com/idgen/idgen/proto/idgen/v1"
	"github.com/idgen/idgen/rpc/tlsconf"
	"github.com/idgen/idgen/scripts/harness"
)

// Debian's Python, which has python3-grpcio and python3-protobuf (.ci/run
// installs them); the python3 first on PATH may be another build without.
const python = "/usr/bin/python3"

// summary is example.py's JSON line.
type summary struct {
	Draws      int            `json:"draws"`
	IDs        int            `json:"ids"`
	Errors     int            `json:"errors"`
	ErrorKinds map[string]int `json:"error_kinds"`
	Duplicates int            `json:"duplicates"`
	Seconds    float64        `json:"seconds"`
	Rate       float64        `json:"rate"`
	LatencyUS  struct {
		P50  int64 `json:"p50"`
		P99  int64 `json:"p99"`
		P999 int64 `json:"p999"`
		Max  int64 `json:"max"`
	} `json:"latency_us"`
	FirstDrawUS  int64   `json:"first_draw_us"` // waits for the connections; not in Draws or LatencyUS
	SlowerThanMS float64 `json:"slower_than_ms"`
	SlowDraws    int     `json:"slow_draws"`
	Pool         struct {
		Fetches       int            `json:"fetches"`
		Retries       int            `json:"retries"`
		FailedFetches int            `json:"failed_fetches"`
		AttemptErrors map[string]int `json:"attempt_errors"`
		BatchesByNode map[string]int `json:"batches_by_node"`
	} `json:"pool"`
}

// needPython skips without Debian's grpcio outside CI, and fails in CI.
func needPython(t *testing.T) {
	t.Helper()
	out, err := exec.Command(python, "-c", "import grpc, google.protobuf").CombinedOutput()
	if err == nil {
		return
	}
	msg := fmt.Sprintf("%s cannot import grpc (%v: %s): apt-get install -y python3-grpcio python3-protobuf, as .ci/run does",
		python, err, strings.TrimSpace(string(out)))
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// pki is a CA made for the run with a server certificate for the nodes and
// a client certificate for example.py and the test's own calls (mutual TLS:
// a node takes no call without a certificate from its CA).
type pki struct {
	server, client tlsconf.Files
	creds          grpc.DialOption // the client certificate, for Go calls
}

// newPKI writes the CA and both certificates (keys mode 0600, as idgend
// wants) to a temporary directory. The server certificate carries
// localhost, 127.0.0.1 and ::1 (tlsconf adds them to every server
// certificate), so grpcio verifies every loopback address without
// grpc.ssl_target_name_override.
func newPKI(t *testing.T) pki {
	t.Helper()
	dir := t.TempDir()
	if err := tlsconf.CreateCA(dir, 1); err != nil {
		t.Fatal(err)
	}
	files := func(r tlsconf.Role) tlsconf.Files {
		if err := tlsconf.CreateCert(dir, tlsconf.CertRequest{Role: r, Name: string(r), Days: 1}); err != nil {
			t.Fatal(err)
		}
		return tlsconf.Files{Cert: tlsconf.CertFile(dir, string(r)), Key: tlsconf.KeyFile(dir, string(r)), CA: filepath.Join(dir, tlsconf.CAFile)}
	}
	p := pki{server: files(tlsconf.RoleServer), client: files(tlsconf.RoleClient)}
	m, err := tlsconf.Load(p.client)
	if err != nil {
		t.Fatal(err)
	}
	p.creds = grpc.WithTransportCredentials(credentials.NewTLS(m.ClientConfig()))
	return p
}

func raftState(t *testing.T, addr string, creds grpc.DialOption) string {
	t.Helper()
	conn, err := grpc.NewClient(addr, creds)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	st, err := idgenv1.NewClusterServiceClient(conn).Status(ctx, &idgenv1.StatusRequest{})
	if err != nil {
		return ""
	}
	return st.GetRaftState()
}

// TestPythonClientRidesThroughPauses starts three nodes with mutual TLS and
// draws about 3,000 IDs/s through the Python pool (with a client
// certificate) while a follower is paused (SIGSTOP) for 5 s and then the
// leader for 5 s, and fails on any error of next_id, any duplicate, any draw
// slower than 100 ms, or a pause the client never met.
func TestPythonClientRidesThroughPauses(t *testing.T) {
	needPython(t)
	example, err := filepath.Abs("example.py")
	if err != nil {
		t.Fatal(err)
	}
	p := newPKI(t)
	bin := harness.Build(t)
	var ports harness.Ports
	nodes := harness.StartCluster(t, bin, &ports, 3,
		"--tls-cert", p.server.Cert, "--tls-key", p.server.Key, "--tls-ca", p.server.CA)

	var leader, follower *harness.Node
	harness.WaitFor(t, 10*time.Second, "a leader", func() bool {
		leader, follower = nil, nil
		for _, n := range nodes {
			if raftState(t, n.GRPC, p.creds) == "Leader" {
				leader = n
			} else {
				follower = n
			}
		}
		return leader != nil && follower != nil
	})
	t.Logf("leader %s, paused first: follower %s", leader.Name, follower.Name)
	// The nodes run TLS indeed: a plaintext call is refused.
	if st := raftState(t, leader.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials())); st != "" {
		t.Fatalf("a plaintext Status call to %s answered %q: the nodes do not run TLS", leader.Name, st)
	}

	addrs := make([]string, len(nodes))
	for i, n := range nodes {
		addrs[i] = n.GRPC
	}
	const rate = 3000
	slowMS := float64(harness.Scale(100*time.Millisecond)) / float64(time.Millisecond)
	// Its stdout and stderr go to one log: progress, then the summary line.
	logPath := filepath.Join(t.TempDir(), "example.log")
	py := harness.NewProc(t, "example.py", logPath)
	cmd := exec.Command(python, example, "--nodes", strings.Join(addrs, ","),
		"--rate", fmt.Sprint(rate), "--duration", "45", "--slow-ms", fmt.Sprint(slowMS),
		"--ca", p.client.CA, "--cert", p.client.Cert, "--key", p.client.Key, "--server-name", "localhost")
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1") // no __pycache__ in the tree
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	py.Launch(cmd, f)
	t.Cleanup(func() {
		py.Stop()
		if t.Failed() {
			t.Logf("--- example.py output ---\n%s", py.Log())
		}
	})
	out := py.Log
	harness.WaitFor(t, 10*time.Second, "example.py to draw", func() bool {
		if !py.Running() {
			t.Fatalf("example.py exited early:\n%s", out())
		}
		return strings.Contains(out(), "drawing\n")
	})

	pause := func(n *harness.Node, what string) {
		time.Sleep(2 * time.Second) // draws between the pauses
		t.Logf("pause %s (%s) for 5 s", n.Name, what)
		if err := n.Pause(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Second)
		if err := n.Resume(); err != nil {
			t.Fatal(err)
		}
		harness.WaitFor(t, 20*time.Second, n.Name+" ready after its pause", n.Ready)
		for _, m := range nodes {
			harness.WaitFor(t, 20*time.Second, m.Name+" ready", m.Ready)
		}
	}
	pause(follower, "follower")
	pause(leader, "leader")
	time.Sleep(2 * time.Second)

	if err := py.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := py.Wait(20 * time.Second); code != 0 {
		t.Errorf("example.py exited %d", code)
	}
	var s summary
	var last string
	for _, l := range strings.Split(out(), "\n") {
		if strings.HasPrefix(l, `{"draws"`) {
			last = l
		}
	}
	if err := json.Unmarshal([]byte(last), &s); err != nil {
		t.Fatalf("example.py's last line is not its summary (%v): %q", err, last)
	}
	t.Logf("summary: %s", last)
	t.Logf("draws %d in %.1f s (%.0f/s), errors %d, duplicates %d, latency p50 %d us p99 %d us p99.9 %d us max %d us (first draw, connecting over TLS: %d us), fetches %d, retries %d, attempt errors %v, batches by node %v",
		s.Draws, s.Seconds, s.Rate, s.Errors, s.Duplicates, s.LatencyUS.P50, s.LatencyUS.P99, s.LatencyUS.P999, s.LatencyUS.Max, s.FirstDrawUS,
		s.Pool.Fetches, s.Pool.Retries, s.Pool.AttemptErrors, s.Pool.BatchesByNode)
	if s.Errors != 0 {
		t.Errorf("%d errors from next_id: %v", s.Errors, s.ErrorKinds)
	}
	if s.Duplicates != 0 {
		t.Errorf("%d duplicate IDs", s.Duplicates)
	}
	if s.SlowDraws != 0 {
		t.Errorf("%d draws slower than %g ms (worst %d us)", s.SlowDraws, s.SlowerThanMS, s.LatencyUS.Max)
	}
	// The load kept up (the pauses cost no draws), and the pauses were met:
	// a paused node stays SERVING, so round robin sent it calls that ran
	// into their deadline and were retried on the next node.
	if want := int(0.9 * rate * s.Seconds); s.Draws < want {
		t.Errorf("%d draws in %.1f s, want at least %d", s.Draws, s.Seconds, want)
	}
	if s.Pool.AttemptErrors["DEADLINE_EXCEEDED"] == 0 || s.Pool.Retries == 0 {
		t.Errorf("no attempt ran into its deadline and was retried: the pauses were never met (%+v)", s.Pool)
	}
	if len(s.Pool.BatchesByNode) != len(nodes) {
		t.Errorf("batches came from %d nodes, want all %d: %v", len(s.Pool.BatchesByNode), len(nodes), s.Pool.BatchesByNode)
	}
}
