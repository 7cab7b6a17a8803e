package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	idgenv1 "github.com/idgen/idgen/proto/idgen/v1"
)

// freePort is a loopback port free for TCP and UDP (gossip uses both).
func freePort() (int, error) {
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", port))
		l.Close()
		if err == nil {
			u.Close()
			return port, nil
		}
	}
	return 0, errNoPort
}

// proc is one process of the run: an idgend node (same data dir and ports
// across restarts) or a benchmark server.
type proc struct {
	name                     string
	grpc, raft, gossip, http string
	args                     []string
	bin                      string
	log                      string
	cmd                      *exec.Cmd
	done                     chan struct{}
	started                  time.Time
}

func addr(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }

// newNode prepares an idgend node under root.
func newNode(bin, root, name string, expect int) (*proc, error) {
	var ports [4]int
	for i := range ports {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		ports[i] = p
	}
	n := &proc{name: name, bin: bin, grpc: addr(ports[0]), raft: addr(ports[1]), gossip: addr(ports[2]), http: addr(ports[3]),
		log: filepath.Join(root, name+".log")}
	n.args = []string{"--name", name, "--data-dir", filepath.Join(root, name),
		"--grpc-addr", n.grpc, "--raft-addr", n.raft, "--gossip-addr", n.gossip, "--http-addr", n.http,
		"--bootstrap-expect", strconv.Itoa(expect), "--gossip-profile", "local", "--shutdown-timeout", "2s"}
	return n, nil
}

func (p *proc) start() error {
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(p.bin, p.args...)
	cmd.Stdout, cmd.Stderr = f, f
	p.started = time.Now()
	if err := cmd.Start(); err != nil {
		f.Close()
		return err
	}
	p.cmd, p.done = cmd, make(chan struct{})
	done := p.done
	go func() { cmd.Wait(); f.Close(); close(done) }()
	return nil
}

func (p *proc) running() bool {
	if p.done == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// signal sends sig and, for SIGKILL and SIGTERM, waits for the exit.
func (p *proc) signal(sig syscall.Signal) {
	if !p.running() {
		return
	}
	p.cmd.Process.Signal(sig)
	if sig == syscall.SIGKILL || sig == syscall.SIGTERM {
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			p.cmd.Process.Kill()
			<-p.done
		}
	}
}

func (p *proc) kill() { p.signal(syscall.SIGKILL) }
func (p *proc) stop() { p.signal(syscall.SIGTERM) }

func (p *proc) pid() int {
	if !p.running() {
		return 0
	}
	return p.cmd.Process.Pid
}

// ready is GET /readyz == 200.
func (p *proc) ready() bool {
	c := http.Client{Timeout: 500 * time.Millisecond}
	resp, err := c.Get("http://" + p.http + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// cpuRSS reads the process's CPU time so far and its resident set.
func (p *proc) cpuRSS() (time.Duration, int64, error) {
	pid := p.pid()
	if pid == 0 {
		return 0, 0, errNotRunning
	}
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
		if !n.running() {
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
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}
