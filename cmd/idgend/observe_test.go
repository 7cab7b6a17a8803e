package main

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
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
	if strings.Contains(nodes[0].metricsText(), "idgen_rpc_duration_seconds") {
		t.Error("the hand-made idgen_rpc_duration_seconds is still exported")
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
