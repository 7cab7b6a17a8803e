// Package monitoring tests the Prometheus rules and the Grafana dashboard
// beside it: promtool checks and unit-tests the rules, and a real
// Prometheus (Debian's prometheus package, on loopback) scrapes a real
// three-node cluster, sees the node-down alert after a kill and evaluates
// every dashboard query.
package monitoring

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idgen/idgen/scripts/harness"
)

const (
	rulesFile     = "idgen-rules.yml"
	rulesTestFile = "idgen-rules.test.yml"
	dashboardFile = "idgen-dashboard.json"
)

func TestRulesPromtool(t *testing.T) {
	promtool := harness.Tool(t, "promtool")
	for _, args := range [][]string{{"check", "rules", rulesFile}, {"test", "rules", rulesTestFile}} {
		out, err := run(t, promtool, args...)
		if err != nil || !strings.Contains(string(out), "SUCCESS") {
			t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// run runs a tool with a bound, so a hung tool fails the test with its output.
func run(t *testing.T, name string, args ...string) ([]byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return exec.CommandContext(ctx, name, args...).CombinedOutput()
}

// dashboardQueries returns every query of the dashboard, by panel title.
func dashboardQueries(t *testing.T) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	out := map[string][]string{}
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			if strings.TrimSpace(tg.Expr) == "" {
				t.Fatalf("panel %q has a target without a query", p.Title)
			}
			out[p.Title] = append(out[p.Title], tg.Expr)
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s has no queries", dashboardFile)
	}
	return out
}

// grafanaVars are the dashboard's Grafana variables, as Grafana would fill
// them for a 1s scrape interval.
var grafanaVars = strings.NewReplacer("$__rate_interval", "1m", "${__rate_interval}", "1m")

// metricName matches the metric names in a query: every selector in the
// dashboard and the rules carries a label matcher ({job="idgen"}).
var metricName = regexp.MustCompile(`\b((?:idgen|grpc|raft|memberlist|up)[a-zA-Z0-9_]*)\{`)

// sparse are metrics a healthy cluster may not have yet: memberlist sets
// its health score only when it changes.
var sparse = map[string]bool{"memberlist_health_score": true}

// prom is a Prometheus HTTP API client.
type prom struct {
	t    *testing.T
	base string
}

// get calls the API and decodes "data" into v; it returns the API error, if any.
func (p prom) get(path string, q url.Values, v any) error {
	p.t.Helper()
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(p.base + path + "?" + q.Encode())
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var r struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if r.Status != "success" {
		return fmt.Errorf("%s %s: %s", path, q.Encode(), r.Error)
	}
	if v == nil {
		return nil
	}
	return json.Unmarshal(r.Data, v)
}

// startPrometheus runs Prometheus on loopback, scraping targets every
// second and evaluating the rules every second.
func startPrometheus(t *testing.T, ports *harness.Ports, targets []string) prom {
	t.Helper()
	bin := harness.Tool(t, "prometheus")
	dir := t.TempDir()
	rules, err := filepath.Abs(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	quoted := make([]string, len(targets))
	for i, tg := range targets {
		quoted[i] = strconv.Quote(tg)
	}
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [%q]
scrape_configs:
  - job_name: idgen
    static_configs:
      - targets: [%s]
`, rules, strings.Join(quoted, ", "))
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", ports.Next(t))
	logPath := filepath.Join(dir, "prometheus.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "--config.file="+cfgPath, "--storage.tsdb.path="+filepath.Join(dir, "tsdb"),
		"--web.listen-address="+addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		cmd.Wait()
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("--- prometheus log ---\n%s", b)
		}
	})
	p := prom{t: t, base: "http://" + addr}
	harness.WaitFor(t, 20*time.Second, "prometheus ready", func() bool {
		return p.get("/api/v1/status/buildinfo", nil, nil) == nil
	})
	return p
}

// A real Prometheus scrapes a three-node cluster with the rules loaded:
// every target is up, every dashboard query evaluates and names metrics the
// nodes export, and after a node is killed IdgenNodeDown goes pending or
// firing for exactly that node.
func TestPrometheusScrapesClusterAndAlerts(t *testing.T) {
	harness.Tool(t, "prometheus") // skip before building when it is missing
	bin := harness.Build(t)
	var ports harness.Ports
	nodes := harness.StartCluster(t, bin, &ports, 3)
	var targets []string
	for _, n := range nodes {
		targets = append(targets, n.HTTP)
	}
	p := startPrometheus(t, &ports, targets)

	// Calls, so the gRPC series move.
	var grpcTargets []string
	for _, n := range nodes {
		grpcTargets = append(grpcTargets, n.GRPC)
	}
	if out, err := run(t, bin.Idctl, "--target", strings.Join(grpcTargets, ","), "ids", "-n", "50"); err != nil {
		t.Fatalf("idctl ids: %v\n%s", err, out)
	}

	type target struct {
		ScrapeURL string `json:"scrapeUrl"`
		Health    string `json:"health"`
		LastError string `json:"lastError"`
	}
	var last []target
	harness.WaitFor(t, 20*time.Second, "every target up", func() bool {
		var r struct {
			ActiveTargets []target `json:"activeTargets"`
		}
		if err := p.get("/api/v1/targets", nil, &r); err != nil {
			return false
		}
		last = r.ActiveTargets
		up := 0
		for _, tg := range r.ActiveTargets {
			if tg.Health == "up" {
				up++
			}
		}
		return up == len(nodes)
	})

	// Enough samples for rate() over the dashboard's 1m.
	harness.WaitFor(t, 20*time.Second, "gRPC rates", func() bool {
		var r struct {
			Result []json.RawMessage `json:"result"`
		}
		err := p.get("/api/v1/query", url.Values{"query": {`sum(rate(grpc_server_handled_total{job="idgen"}[1m])) > 0`}}, &r)
		return err == nil && len(r.Result) > 0
	})
	var names []string
	if err := p.get("/api/v1/label/__name__/values", nil, &names); err != nil {
		t.Fatal(err)
	}
	for title, exprs := range dashboardQueries(t) {
		for _, e := range exprs {
			q := grafanaVars.Replace(e)
			if err := p.get("/api/v1/query", url.Values{"query": {q}}, nil); err != nil {
				t.Errorf("panel %q: %v", title, err)
			}
			for _, m := range metricName.FindAllStringSubmatch(q, -1) {
				if !slices.Contains(names, m[1]) && !sparse[m[1]] {
					t.Errorf("panel %q queries %s, which no node exports", title, m[1])
				}
			}
		}
	}
	// The rules too name only metrics that exist.
	rules, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range metricName.FindAllStringSubmatch(string(rules), -1) {
		if !slices.Contains(names, m[1]) && !sparse[m[1]] {
			t.Errorf("%s uses %s, which no node exports", rulesFile, m[1])
		}
	}

	victim := nodes[2]
	victim.Kill()
	type alert struct {
		Labels map[string]string `json:"labels"`
		State  string            `json:"state"`
	}
	var seen []alert
	harness.WaitFor(t, 30*time.Second, "IdgenNodeDown pending or firing for "+victim.HTTP, func() bool {
		var r struct {
			Alerts []alert `json:"alerts"`
		}
		if err := p.get("/api/v1/alerts", nil, &r); err != nil {
			return false
		}
		seen = r.Alerts
		for _, a := range r.Alerts {
			if a.Labels["alertname"] == "IdgenNodeDown" && (a.State == "pending" || a.State == "firing") {
				if a.Labels["instance"] != victim.HTTP {
					t.Fatalf("IdgenNodeDown for %s, but %s was killed", a.Labels["instance"], victim.HTTP)
				}
				return true
			}
		}
		return false
	})
	if t.Failed() {
		t.Logf("targets %+v, alerts %+v", last, seen)
	}
}
