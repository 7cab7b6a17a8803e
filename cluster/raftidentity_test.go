package cluster

import (
	"errors"
	"log/slog"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/idgen/idgen/cluster/door"
)

// TestRaftRPCsSpeakOnlyFromTheConfiguredAddress: a Raft RPC that names a
// server of the configuration is taken only from that server's configured
// address (a host name by its resolved IPs); one that names this node
// itself is refused whatever its address; an ID the configuration does not
// list, and any RPC before there is a configuration, is taken as Raft takes
// it. Each refusal is counted. (TestCopyOfALoneSeedMeetingThroughAThirdNode
// has the real copy whose traffic this refuses.)
func TestRaftRPCsSpeakOnlyFromTheConfiguredAddress(t *testing.T) {
	counts := door.NewCounts(boundRaftIdentity)
	tr := &identityTransport{self: "me", counts: counts, refusal: door.NewRateLog(slog.New(slog.DiscardHandler), 0)}
	rpc := func(id, addr string) raft.RPC {
		return raft.RPC{Command: &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ID: []byte(id), Addr: []byte(addr)}}}
	}
	if err := tr.check(rpc("b", "127.0.0.1:9")); err != nil {
		t.Fatalf("before any configuration: %v", err)
	}
	cfg := raft.Configuration{Servers: []raft.Server{
		{ID: "me", Address: "127.0.0.1:7000"},
		{ID: "b", Address: "127.0.0.1:7001"},
		{ID: "c", Address: "localhost:7002"},
		{ID: "d", Address: "no-such-host.invalid:7003"},
	}}
	f := func() raft.Configuration { return cfg }
	tr.config.Store(&f)
	for _, c := range []struct {
		id, addr string
		ok       bool
	}{
		{"b", "127.0.0.1:7001", true},
		{"b", "127.0.0.1:7009", false},    // another port: another process
		{"b", "127.0.0.2:7001", false},    // another host
		{"c", "127.0.0.1:7002", true},     // a host name, by its address
		{"c", "127.0.0.1:7012", false},    // a host name, another port
		{"d", "10.9.9.9:7003", true},      // does not resolve: nothing told
		{"me", "127.0.0.1:7000", false},   // this node's own ID
		{"stranger", "127.0.0.1:1", true}, // not configured: Raft decides
		{"", "127.0.0.1:1", true},         // an RPC that names nobody
		{"b", "not an address", false},    // unparseable
	} {
		err := tr.check(rpc(c.id, c.addr))
		if (err == nil) != c.ok || err != nil && !errors.Is(err, errRaftIdentity) {
			t.Errorf("RPC from %q at %q: %v, want taken %v", c.id, c.addr, err, c.ok)
		}
	}
	if got := counts.Snapshot()[boundRaftIdentity]; got != 5 {
		t.Errorf("%d refusals counted, want 5", got)
	}
	// Heartbeats take the transport's fast path: the same check.
	var passed []string
	heartbeat := tr.guard(func(r raft.RPC) { passed = append(passed, string(r.Command.(*raft.AppendEntriesRequest).ID)) })
	resp := make(chan raft.RPCResponse, 2)
	for _, id := range []string{"b", "me"} {
		r := rpc(id, "127.0.0.1:7001")
		r.RespChan = resp
		heartbeat(r)
	}
	if len(passed) != 1 || passed[0] != "b" {
		t.Fatalf("heartbeats handed to Raft: %q, want only b's", passed)
	}
	if r := <-resp; !errors.Is(r.Error, errRaftIdentity) {
		t.Fatalf("the refused heartbeat's answer: %v", r.Error)
	}
}
