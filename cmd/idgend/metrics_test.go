package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/idgen/idgen/cluster"
)

// TestClusterEventsOnTheMetricsPage: what the node counts through
// cluster.Config.Events is idgen_cluster_events_total{event,reason} on
// /metrics, and every series the node names in advance is there at 0.
func TestClusterEventsOnTheMetricsPage(t *testing.T) {
	reg := prometheus.NewRegistry()
	events, err := newClusterEvents(reg)
	if err != nil {
		t.Fatal(err)
	}
	var counter cluster.EventCounter = events
	counter.Count("refusal", "NOT_OWNER")
	counter.Count("refusal", "NOT_OWNER")
	counter.Count("revocation", "NOT_OWNER")
	counter.Count("handoff", "CLOCK_OFF")

	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	want := []string{
		"# TYPE idgen_cluster_events_total counter",
		`idgen_cluster_events_total{event="refusal",reason="NOT_OWNER"} 2`,
		`idgen_cluster_events_total{event="revocation",reason="NOT_OWNER"} 1`,
		`idgen_cluster_events_total{event="handoff",reason="CLOCK_OFF"} 1`,
		`idgen_cluster_events_total{event="refusal",reason="CLOCK_SKEW"} 0`,
		`idgen_cluster_events_total{event="refusal",reason="OTHER"} 0`,
		`idgen_cluster_events_total{event="fence",reason="OTHER_CLUSTER"} 0`,
		`idgen_cluster_events_total{event="revocation",reason="CLUSTER_CONFLICT"} 0`,
	}
	for _, w := range want {
		if !strings.Contains(page, w+"\n") {
			t.Errorf("/metrics lacks %s", w)
		}
	}
	for _, s := range cluster.EventSeries() {
		if !strings.Contains(page, `idgen_cluster_events_total{event="`+s[0]+`",reason="`+s[1]+`"}`) {
			t.Errorf("/metrics lacks the series of %s %s", s[0], s[1])
		}
	}
}
