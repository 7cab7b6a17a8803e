package main

import (
	"fmt"
	"time"

	armonmetrics "github.com/armon/go-metrics"
	armonprom "github.com/armon/go-metrics/prometheus"
	hcmetrics "github.com/hashicorp/go-metrics"
	hcprom "github.com/hashicorp/go-metrics/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/idgen/idgen/cluster"
	"github.com/idgen/idgen/rpc/buildinfo"
)

// libraryMetricsExpiry: a Raft or gossip series not updated for this long
// leaves /metrics (a follower's leader-only timers, a departed peer's
// gauges), as in Consul.
const libraryMetricsExpiry = 2 * time.Minute

// newRegistry returns the node's registry with the process, Go runtime,
// build and library (Raft, memberlist, bolt) metrics in it, the clock skew
// limit the alerts compare idgen_clock_skew_seconds with, and the max-ahead
// they compare idgen_granted_lead_seconds with.
func newRegistry(maxSkew, maxAhead time.Duration) (*prometheus.Registry, error) {
	reg := prometheus.NewRegistry()
	bi := buildinfo.Read()
	buildInfo := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "idgen_build_info",
		Help:        "Always 1; the labels name the build this node runs.",
		ConstLabels: prometheus.Labels{"version": bi.Version, "revision": bi.Revision, "go_version": bi.GoVersion},
	})
	buildInfo.Set(1)
	skewLimit := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "idgen_clock_skew_limit_seconds",
		Help: "--max-skew: a node whose clock is further from the cluster's time is refused a window.",
	})
	skewLimit.Set(maxSkew.Seconds())
	aheadLimit := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "idgen_max_ahead_seconds",
		Help: "--max-ahead: how far past the cluster's time a window may end.",
	})
	aheadLimit.Set(maxAhead.Seconds())
	for _, c := range []prometheus.Collector{
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		buildInfo,
		skewLimit,
		aheadLimit,
	} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register metrics: %w", err)
		}
	}
	if err := routeLibraryMetrics(reg); err != nil {
		return nil, err
	}
	return reg, nil
}

// clusterEvents is idgen_cluster_events_total: the node's refusals,
// hand-offs, revocations and fences, by event and reason, as the node
// counts them (cluster.Config.Events). Every series the node can name in
// advance exists at 0 from the start, so a rate sees the first one.
type clusterEvents struct{ total *prometheus.CounterVec }

var _ cluster.EventCounter = clusterEvents{}

func newClusterEvents(reg prometheus.Registerer) (clusterEvents, error) {
	e := clusterEvents{prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "idgen_cluster_events_total",
		Help: "What the node's cluster layer did, by event and reason: refusal (this leader refused a claim, reserve, release or " +
			"removal, by the error's reason), handoff (this leader handed leadership on, by cause), revocation (this node's " +
			"generator stopped, by cause), fence (this leader closed off a window of another cluster or of a copy of a data dir).",
	}, []string{"event", "reason"})}
	for _, s := range cluster.EventSeries() {
		e.total.WithLabelValues(s[0], s[1])
	}
	if err := reg.Register(e.total); err != nil {
		return clusterEvents{}, fmt.Errorf("register metrics: %w", err)
	}
	return e, nil
}

func (e clusterEvents) Count(event, reason string) { e.total.WithLabelValues(event, reason).Inc() }

// routeLibraryMetrics points go-metrics, through which Raft, memberlist and
// raft-boltdb report (commit and apply times, leader contact, probe times,
// health score), at reg. go-metrics is process-global, which is why this
// lives here and not in the cluster package. The libraries reach it through
// hashicorp/go-metrics/compat, which is armon/go-metrics unless built with
// -tags hashicorpmetrics; both are routed so neither build loses them.
func routeLibraryMetrics(reg prometheus.Registerer) error {
	as, err := armonprom.NewPrometheusSinkFrom(armonprom.PrometheusOpts{
		Registerer: reg, Expiration: libraryMetricsExpiry, Name: "idgen_armon_metrics_sink",
	})
	if err != nil {
		return fmt.Errorf("raft metrics: %w", err)
	}
	acfg := armonmetrics.DefaultConfig("")
	acfg.EnableHostname, acfg.EnableRuntimeMetrics, acfg.EnableServiceLabel = false, false, false
	if _, err := armonmetrics.NewGlobal(acfg, as); err != nil {
		return fmt.Errorf("raft metrics: %w", err)
	}

	hs, err := hcprom.NewPrometheusSinkFrom(hcprom.PrometheusOpts{
		Registerer: reg, Expiration: libraryMetricsExpiry, Name: "idgen_hashicorp_metrics_sink",
	})
	if err != nil {
		return fmt.Errorf("raft metrics: %w", err)
	}
	hcfg := hcmetrics.DefaultConfig("")
	hcfg.EnableHostname, hcfg.EnableRuntimeMetrics, hcfg.EnableServiceLabel = false, false, false
	if _, err := hcmetrics.NewGlobal(hcfg, hs); err != nil {
		return fmt.Errorf("raft metrics: %w", err)
	}
	return nil
}
