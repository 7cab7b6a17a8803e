package main

import (
	"context"
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	idgenv1 "github.com/idgen/idgen/proto/idgen/v1"
	"github.com/idgen/idgen/scripts/harness"
)

// drawIDs takes n IDs from target through idctl, in batches of batch.
func drawIDs(t *testing.T, target string, n, batch int) []int64 {
	t.Helper()
	var got []struct{ ID int64 }
	out, errOut, code := idctl(t, "--target", target, "--timeout", "30s", "--json", "ids", "-n", itoa(n), "--batch", itoa(batch))
	if code != 0 {
		t.Fatalf("idctl ids -n %d --batch %d: exit %d: %s", n, batch, code, errOut)
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil || len(got) != n {
		t.Fatalf("ids output (%d bytes): %v, %d IDs", len(out), err, len(got))
	}
	ids := make([]int64, len(got))
	for i, g := range got {
		ids[i] = g.ID
	}
	return ids
}

// TestWipedLoneNodeNeverRepeatsItsBurst: a lone node that borrowed seconds
// ahead of real time in a burst is killed, its data dir removed and it is
// started again at once with the same command. The new cluster starts above
// anything the old life could have stamped, so nothing comes out twice
// (before, 8,856 of 20,000 IDs did).
func TestWipedLoneNodeNeverRepeatsItsBurst(t *testing.T) {
	n := newNode(t, nodeOpts{name: "lone"})
	n.start()
	harness.WaitFor(t, 30*time.Second, "lone node ready", n.ready)
	first := drawIDs(t, n.grpc, 20000, 5000)
	seen := make(map[int64]bool, len(first))
	var lastTS int64
	for _, id := range first {
		if seen[id] {
			t.Fatalf("first life repeated %d", id)
		}
		seen[id] = true
		lastTS = max(lastTS, decode(t, id).Timestamp)
	}
	n.kill()
	if err := os.RemoveAll(n.dataDir); err != nil {
		t.Fatal(err)
	}
	n.start()
	harness.WaitFor(t, 30*time.Second, "wiped lone node ready", n.ready)
	again := drawIDs(t, n.grpc, 5000, 1000)
	repeats := 0
	for _, id := range again {
		if seen[id] {
			repeats++
		}
	}
	if repeats > 0 {
		t.Fatalf("the wiped node issued %d of its first life's IDs again (first life up to timestamp %d, second from %d)",
			repeats, lastTS, decode(t, again[0]).Timestamp)
	}
	if ts := decode(t, again[0]).Timestamp; ts <= lastTS {
		t.Fatalf("second life starts at timestamp %d, not above the first life's %d", ts, lastTS)
	}
}

// TestWipedSeedStopsAndIsNeverAdded: a seed started alone that others joined
// is wiped and restarted with the same command. It bootstraps a cluster of
// its own; the old cluster never adds it, and it stops issuing with a reason
// that names the older cluster.
func TestWipedSeedStopsAndIsNeverAdded(t *testing.T) {
	seed := newNode(t, nodeOpts{name: "seed"})
	seed.start()
	harness.WaitFor(t, 30*time.Second, "seed ready", seed.ready)
	others := []*node{
		newNode(t, nodeOpts{name: "n2", join: []string{seed.gossip}}),
		newNode(t, nodeOpts{name: "n3", join: []string{seed.gossip}}),
	}
	for _, o := range others {
		o.start()
	}
	for _, o := range others {
		harness.WaitFor(t, 30*time.Second, o.name+" ready", o.ready)
	}
	var old struct {
		ClusterID string `json:"cluster_id"`
	}
	if err := json.Unmarshal([]byte(mustIdctl(t, "--target", others[0].grpc, "--json", "status")), &old); err != nil || old.ClusterID == "" {
		t.Fatalf("status has no cluster_id: %v", err)
	}
	// Both joiners must be voters, or the old cluster has no quorum without the seed.
	harness.WaitFor(t, 30*time.Second, "three voters", func() bool {
		voters := 0
		for _, n := range append([]*node{seed}, others...) {
			if r := raftRoleOf(t, others[0], nodeStatus(t, n).ID); r == "voter" || r == "leader" {
				voters++
			}
		}
		return voters == 3
	})
	oldSeedID := nodeStatus(t, seed).ID
	seed.kill()
	if err := os.RemoveAll(seed.dataDir); err != nil {
		t.Fatal(err)
	}
	seed.start()
	var reason string
	harness.WaitFor(t, 30*time.Second, "the wiped seed to report the conflict", func() bool {
		_, reason = seed.readyz()
		return strings.Contains(reason, "cluster conflict") && strings.Contains(reason, old.ClusterID)
	})
	// Asked directly (no client health check in the way), for a fresh batch
	// and for one from its prefetch buffer.
	conn, err := grpc.NewClient(seed.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, count := range []uint32{0, 7} {
		ctx, cancel := context.WithTimeout(context.Background(), harness.Scale(5*time.Second))
		_, err := idgenv1.NewIDServiceClient(conn).GetIDBatch(ctx, &idgenv1.GetIDBatchRequest{Count: count})
		cancel()
		if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "cluster conflict") {
			t.Fatalf("GetIDBatch(count %d) on the wiped seed: %v; want Unavailable naming the cluster conflict", count, err)
		}
	}
	newID := nodeStatus(t, seed).ID
	if newID == oldSeedID {
		t.Fatal("wiped seed kept its node ID")
	}
	// The old cluster serves on, reports the conflict, and never adds the wiped seed.
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		var m membersOut
		if err := json.Unmarshal([]byte(mustIdctl(t, "--target", others[0].grpc, "--json", "members")), &m); err != nil {
			t.Fatal(err)
		}
		for _, mm := range m.Members {
			if mm.ID == newID && mm.Slot >= 0 {
				t.Fatalf("the old cluster gave the wiped seed slot %d", mm.Slot)
			}
		}
		if role := raftRoleOf(t, others[0], newID); role != "none" && role != "" {
			t.Fatalf("the old cluster added the wiped seed to Raft as %s", role)
		}
		time.Sleep(250 * time.Millisecond)
	}
	drawIDs(t, targetOf(others...), 100, 10)
}

// raftRoleOf is a member's Raft role as node n reports it ("" when unknown).
func raftRoleOf(t *testing.T, n *node, id string) string {
	t.Helper()
	var m struct {
		Members []struct {
			ID       string `json:"id"`
			RaftRole string `json:"raft_role"`
		} `json:"members"`
	}
	if err := json.Unmarshal([]byte(mustIdctl(t, "--target", n.grpc, "--json", "members")), &m); err != nil {
		t.Fatal(err)
	}
	for _, mm := range m.Members {
		if mm.ID == id {
			return mm.RaftRole
		}
	}
	return ""
}

func itoa(n int) string { return strconv.Itoa(n) }
