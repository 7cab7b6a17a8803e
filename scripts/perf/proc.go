package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	idgenv1 "github.com/idgen/idgen/proto/idgen/v1"
	"github.com/idgen/idgen/scripts/harness"
)

// proc is one process of the run, started and signalled by scripts/harness:
// an idgend node (same data dir and ports across restarts) or a benchmark
// server.
type proc struct {
	*harness.Proc
	name                     string
	grpc, raft, gossip, http string
	args                     []string
	bin                      string
	tls                      *tls.Config // a client's, for a node with TLS: its probes show it
}

func addr(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }

// newProc prepares a process of bin logging to root/name.log.
func newProc(bin, root, name string) *proc {
	return &proc{Proc: harness.NewProc(nil, name, filepath.Join(root, name+".log")), name: name, bin: bin}
}

// newNode prepares an idgend node under root on ports from ports.
func newNode(ports *harness.Ports, bin, root, name string, expect int) (*proc, error) {
	var a [4]string
	for i := range a {
		p, err := ports.Free()
		if err != nil {
			return nil, err
		}
		a[i] = addr(p)
	}
	n := newProc(bin, root, name)
	n.grpc, n.raft, n.gossip, n.http = a[0], a[1], a[2], a[3]
	n.args = []string{"--name", name, "--data-dir", filepath.Join(root, name),
		"--grpc-addr", n.grpc, "--raft-addr", n.raft, "--gossip-addr", n.gossip, "--http-addr", n.http,
		"--bootstrap-expect", strconv.Itoa(expect), "--gossip-profile", "local", "--shutdown-timeout", "2s"}
	return n, nil
}

func (p *proc) start() error { return p.Spawn(p.bin, p.args...) }

// ready is GET /readyz == 200.
func (p *proc) ready() bool {
	code, _ := harness.HTTPGet(p.http, "/readyz")
	return code == http.StatusOK
}

// cpuRSS reads the process's CPU time so far and its resident set.
func (p *proc) cpuRSS() (time.Duration, int64, error) {
	pid := p.Pid()
	if pid == 0 {
		return 0, 0, errNotRunning
	}
	return pidCPURSS(pid)
}

// pidCPURSS reads a process's CPU time so far and its resident set.
func pidCPURSS(pid int) (time.Duration, int64, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, err
	}
	// Fields after the command name, which is in parentheses.
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+2:]))
	if len(f) < 22 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	rssPages, _ := strconv.ParseInt(f[21], 10, 64)
	const hz = 100 // USER_HZ on Linux
	return time.Duration(ut+st) * time.Second / hz, rssPages * int64(os.Getpagesize()), nil
}

// leaderOf asks the nodes for the Raft leader's name.
func leaderOf(nodes []*proc) *proc {
	for _, n := range nodes {
		if !n.Running() {
			continue
		}
		conn, err := grpc.NewClient(n.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		resp, err := idgenv1.NewClusterServiceClient(conn).Members(ctx, &idgenv1.MembersRequest{})
		cancel()
		conn.Close()
		if err != nil || resp.GetLeaderId() == "" {
			continue
		}
		for _, m := range resp.GetMembers() {
			if m.GetId() == resp.GetLeaderId() {
				for _, p := range nodes {
					if p.name == m.GetName() {
						return p
					}
				}
			}
		}
	}
	return nil
}

// waitUntil polls cond every 10 ms until it holds or d passes.
func waitUntil(d time.Duration, cond func() bool) bool {
	return harness.Poll(d, 10*time.Millisecond, cond)
}
