package main

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idgen/idgen/scripts/harness"
)

// metricsText is a node's /metrics page ("" when unreachable).
func (n *node) metricsText() string {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + n.http + "/metrics")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// A cluster's /metrics carry Raft's and memberlist's own metrics, the
// standard gRPC server metrics and the build; its JSON logs keep Raft's
// key/value pairs as fields.
func TestMetricsAndLogs(t *testing.T) {
	nodes := startCluster(t, 2, "--log-format", "json")
	mustIdctl(t, "--target", targetOf(nodes...), "ids", "-n", "5")

	want := []string{
		"raft_commitTime", "raft_fsm_apply", "raft_leader_lastContact", "raft_state_leader",
		"memberlist_gossip", "memberlist_probeNode",
		`grpc_server_handled_total{grpc_code="OK",grpc_method="GetIDBatch",grpc_service="idgen.v1.IDService",grpc_type="unary"}`,
		"grpc_server_handling_seconds_bucket", `idgen_build_info{go_version="go`, "idgen_cluster_conflict 0",
		"idgen_clock_skew_limit_seconds 5", "idgen_cluster_slots_free 6", "idgen_clock_skew_seconds",
		`idgen_cluster_events_total{event="fence",reason="COPY"} 0`,
	}
	var missing []string
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		page := nodes[0].metricsText() + nodes[1].metricsText()
		missing = missing[:0]
		for _, w := range want {
			if !strings.Contains(page, w) {
				missing = append(missing, w)
			}
		}
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 20s /metrics still lacks %q", missing)
		}
	}
	// The other node forwards a removal of the leader to the leader, which
	// refuses it (a node cannot remove itself) and counts the refusal.
	const refusedSelf = `idgen_cluster_events_total{event="refusal",reason="REMOVE_SELF"} `
	harness.WaitFor(t, 20*time.Second, "the leader to count the removal of itself it refused", func() bool {
		for i, nd := range nodes {
			if page := nd.metricsText(); strings.Contains(page, `idgen_raft_state{state="leader"} 1`) {
				if _, _, code := idctl(t, "--target", nodes[1-i].grpc, "remove", nd.name); code == 0 {
					t.Fatalf("%s removed the leader %s", nodes[1-i].name, nd.name)
				}
				page = nd.metricsText()
				return strings.Contains(page, refusedSelf) && !strings.Contains(page, refusedSelf+"0\n")
			}
		}
		return false
	})

	if strings.Contains(nodes[0].metricsText(), "idgen_rpc_duration_seconds") {
		t.Error("the hand-made idgen_rpc_duration_seconds is still exported")
	}

	// idctl version: its own build and each node's, which is idgend --version's.
	ver, _, code := runBin(t, bin("idgend"), "--version")
	if code != 0 {
		t.Fatalf("idgend --version: exit %d", code)
	}
	out := mustIdctl(t, "--target", targetOf(nodes...), "version", "--json")
	var v struct {
		Client struct{ Version, Revision string } `json:"client"`
		Nodes  []struct {
			Name, Version, Revision, Error string
			GoVersion                      string `json:"go_version"`
		} `json:"nodes"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil || len(v.Nodes) != 2 || v.Client.Version == "" {
		t.Fatalf("idctl version --json: %v\n%s", err, out)
	}
	for _, n := range v.Nodes {
		if n.Error != "" || n.Name == "" || !strings.Contains(ver, n.Version+" (revision "+n.Revision+", "+n.GoVersion+")") {
			t.Errorf("node version %+v, idgend --version says %q", n, ver)
		}
	}
	// A node that does not answer is named, and the command fails.
	dead := addr(harness.NextPorts(t, 1)[0])
	out, errOut, code := idctl(t, "--target", nodes[0].grpc+","+dead, "--timeout", "2s", "version")
	if code != 1 || !strings.Contains(out, dead) || !strings.Contains(out, "unreachable") || !strings.Contains(errOut, "1 of 2 nodes did not answer") {
		t.Errorf("idctl version with a dead node: exit %d\n%s\n%s", code, out, errOut)
	}

	found := false
	for _, n := range nodes {
		for _, line := range strings.Split(n.log(), "\n") {
			var r map[string]any
			if json.Unmarshal([]byte(line), &r) != nil {
				continue
			}
			// Raft's state lines name the node as a field ("Node at ... [Leader]").
			who, _ := r["leader"].(string)
			if r["msg"] == "entering follower state" {
				who, _ = r["follower"].(string)
			}
			if r["component"] == "raft" && strings.HasPrefix(who, "Node at ") {
				found = true
			}
		}
	}
	if !found {
		t.Error("no Raft state line with its fields as JSON fields in either node's log")
	}
}
