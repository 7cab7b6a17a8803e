package main

import (
	"context"
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	idgenv1 "github.com/idgen/idgen/proto/idgen/v1"
	"github.com/idgen/idgen/scripts/harness"
)

// TestForwardedCommandOutsideTheLayout sends the leader, through the peer
// service a follower forwards with, commands whose fields lie outside the
// cluster's layout: a Claim whose node.datacenter is 2^62 (once committed,
// it panicked freeSlot on every replica on every replay of the log), a
// Reserve of slot 99 of 8, a Reserve past the layout's last timestamp, and a
// Claim entry that does not decode. Each is refused with InvalidArgument
// naming the field; the node keeps serving IDs, and restarts from its data
// twice without a panic.
func TestForwardedCommandOutsideTheLayout(t *testing.T) {
	n := newNode(t, nodeOpts{name: "n1"})
	n.start()
	waitReady := func(what string) {
		t.Helper()
		harness.WaitFor(t, 30*time.Second, "n1 ready "+what, func() bool {
			if !n.running() {
				t.Fatalf("n1 exited %s", what)
			}
			return n.ready()
		})
	}
	serves := func(what string) {
		t.Helper()
		if ids := strings.Fields(mustIdctl(t, "--target", n.grpc, "ids", "-n", "3")); len(ids) != 3 {
			t.Fatalf("%s: ids %v", what, ids)
		}
	}
	waitReady("at start")

	var st struct {
		ID        string `json:"id"`
		ClusterID string `json:"cluster_id"`
		Slot      int    `json:"slot"`
	}
	if err := json.Unmarshal([]byte(mustIdctl(t, "--target", n.grpc, "--json", "status")), &st); err != nil {
		t.Fatal(err)
	}
	if st.ClusterID == "" || st.ID == "" {
		t.Fatalf("status names no node or cluster ID: %+v", st)
	}

	conn, err := grpc.NewClient(n.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	peer := idgenv1.NewPeerServiceClient(conn)
	// A command is one type byte (2 claim, 3 reserve), then its JSON body.
	sentAt := time.Now().UnixNano()
	for _, tc := range []struct {
		name, want string
		command    []byte
	}{
		// The node's own ID passes the leader's "is a Raft server" check.
		{"claim with datacenter 2^62", "datacenter 4611686018427387904", append([]byte{0x02}, mustJSON(t, map[string]any{
			"node":       map[string]any{"id": st.ID, "name": "n1", "datacenter": int64(1) << 62},
			"cluster_id": st.ClusterID, "sent_at": sentAt,
		})...)},
		{"claim of a stranger with datacenter 2^62", "datacenter 4611686018427387904", append([]byte{0x02}, mustJSON(t, map[string]any{
			"node":       map[string]any{"id": "forged-node", "name": "forged", "datacenter": int64(1) << 62},
			"cluster_id": st.ClusterID, "sent_at": sentAt,
		})...)},
		{"reserve of slot 99", "slot 99", append([]byte{0x03}, mustJSON(t, map[string]any{
			"node_id": st.ID, "slot": 99, "tenure": 2, "up_to": 10, "cluster_id": st.ClusterID, "sent_at": sentAt,
		})...)},
		{"reserve past the layout", "up to 4611686018427387904", append([]byte{0x03}, mustJSON(t, map[string]any{
			"node_id": st.ID, "slot": st.Slot, "tenure": 2, "up_to": int64(1) << 62, "cluster_id": st.ClusterID, "sent_at": sentAt,
		})...)},
		{"claim that does not decode", "decode claim", []byte{0x02, '{', '"'}},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), harness.Scale(5*time.Second))
		_, err := peer.Apply(ctx, &idgenv1.ApplyRequest{Command: tc.command})
		cancel()
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%s: PeerService.Apply = %v, want InvalidArgument naming %q", tc.name, err, tc.want)
		}
		serves("after the " + tc.name)
	}
	if out := mustIdctl(t, "--target", n.grpc, "members"); strings.Contains(out, "forged") {
		t.Fatalf("the refused claim left its node in the state:\n%s", out)
	}
	var after struct {
		Slot   int    `json:"slot"`
		Reason string `json:"reason"`
	}
	if err := json.Unmarshal([]byte(mustIdctl(t, "--target", n.grpc, "--json", "status")), &after); err != nil {
		t.Fatal(err)
	}
	if after.Slot != st.Slot {
		t.Fatalf("the refused claim moved n1 from slot %d to %d (%s)", st.Slot, after.Slot, after.Reason)
	}

	for i := 1; i <= 2; i++ {
		what := []string{"", "after the first restart", "after the second restart"}[i]
		n.signal(syscall.SIGTERM)
		if code := n.wait(20 * time.Second); code != 0 {
			t.Fatalf("n1 exited %d on SIGTERM before restart %d", code, i)
		}
		n.start()
		waitReady(what)
		serves(what)
	}
	if log := n.log(); strings.Contains(log, "panic") || strings.Contains(log, "goroutine ") {
		t.Fatalf("n1 panicked:\n%s", log)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
