package rpc

import (
	"fmt"
	"strings"
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/idgen/idgen/generator"
)

const metricsNamespace = "idgen"

// raftStates are the values idgen_raft_state always reports, so a state that
// is not current shows as 0 rather than vanishing.
var raftStates = []string{"follower", "candidate", "leader", "shutdown"}

type metrics struct {
	idsIssued     prometheus.Counter
	batchesServed *prometheus.CounterVec
	withdrawn     prometheus.Counter
	// grpc is go-grpc-middleware's standard server metrics
	// (grpc_server_handled_total, grpc_server_handling_seconds, ...): the
	// names every gRPC dashboard and alert already knows.
	grpc *grpcprom.ServerMetrics
}

func newMetrics(reg prometheus.Registerer, backend Backend, buf *generator.Buffer) (*metrics, error) {
	m := &metrics{
		idsIssued: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metricsNamespace, Name: "ids_issued_total",
			Help: "IDs handed out by GetIDBatch.",
		}),
		batchesServed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metricsNamespace, Name: "batches_served_total",
			Help: "GetIDBatch calls answered with IDs, by source (buffer or direct).",
		}, []string{"source"}),
		withdrawn: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: metricsNamespace, Name: "ids_withdrawn_total",
			Help: "Buffered IDs dropped, never handed out, because the tenure that minted them ended (a fence, a removal, a release).",
		}),
		grpc: grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram(
			grpcprom.WithHistogramBuckets([]float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}),
		)),
	}
	bufferDepth := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: metricsNamespace, Name: "buffer_depth",
		Help: "Batches ready in the prefetch buffer.",
	}, func() float64 { return float64(buf.Len()) })
	bufferCap := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: metricsNamespace, Name: "buffer_capacity",
		Help: "Batches the prefetch buffer holds when full.",
	}, func() float64 { return float64(buf.Cap()) })
	for _, c := range []prometheus.Collector{m.idsIssued, m.batchesServed, m.withdrawn, m.grpc, bufferDepth, bufferCap, newStatusCollector(backend)} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("rpc: register metrics: %w", err)
		}
	}
	return m, nil
}

// statusCollector reads Backend.Status, Ready and Members once per scrape,
// so the gauges never go stale and cost nothing between scrapes.
type statusCollector struct {
	backend        Backend
	ready          *prometheus.Desc
	slot           *prometheus.Desc
	grantedLead    *prometheus.Desc
	raftState      *prometheus.Desc
	layoutLeft     *prometheus.Desc
	idsIssuedTotal *prometheus.Desc
	conflict       *prometheus.Desc
	stopped        *prometheus.Desc
	clockSkew      *prometheus.Desc
	slotsFree      *prometheus.Desc
	standbys       *prometheus.Desc
}

func newStatusCollector(b Backend) *statusCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(metricsNamespace, "", name), help, labels, nil)
	}
	return &statusCollector{
		backend:        b,
		ready:          d("ready", "1 while the node is ready to issue IDs (slot held, room, leader known, clock within skew)."),
		slot:           d("slot", "Slot held by the node, -1 for none."),
		grantedLead:    d("granted_lead_seconds", "How far the granted high-water mark is ahead of this node's clock; negative when behind."),
		raftState:      d("raft_state", "1 for the node's current Raft state.", "state"),
		layoutLeft:     d("layout_seconds_remaining", "Seconds until the layout's timestamp field runs out."),
		idsIssuedTotal: d("node_ids_minted_total", "IDs minted by this node's generator since start, as the node reports."),
		conflict:       d("cluster_conflict", "Other clusters (by cluster ID) this node met through gossip; above 0 two clusters share a network and a name."),
		stopped:        d("stopped", "1 once the node stopped issuing for good: it met an older cluster, or a copy of its data dir outranks it (the reason is its not-ready reason)."),
		clockSkew:      d("clock_skew_seconds", "This node's clock minus the cluster's time, as its last answer gave it."),
		slotsFree:      d("cluster_slots_free", "Slots no member holds, in this node's view of the cluster."),
		standbys:       d("cluster_standbys", "Live members that hold no slot and wait for one, in this node's view."),
	}
}

func (c *statusCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.ready, c.slot, c.grantedLead, c.raftState, c.layoutLeft, c.idsIssuedTotal, c.conflict, c.stopped, c.clockSkew, c.slotsFree, c.standbys} {
		ch <- d
	}
}

func (c *statusCollector) Collect(ch chan<- prometheus.Metric) {
	ok, _ := ready(c.backend)
	st := c.backend.Status()
	now := time.Now()
	ch <- prometheus.MustNewConstMetric(c.ready, prometheus.GaugeValue, boolFloat(ok))
	ch <- prometheus.MustNewConstMetric(c.slot, prometheus.GaugeValue, float64(st.Slot))
	ch <- prometheus.MustNewConstMetric(c.idsIssuedTotal, prometheus.CounterValue, float64(st.IDsIssued))
	ch <- prometheus.MustNewConstMetric(c.conflict, prometheus.GaugeValue, float64(len(st.ConflictingClusters)))
	ch <- prometheus.MustNewConstMetric(c.stopped, prometheus.GaugeValue, boolFloat(st.Stopped != nil && *st.Stopped))

	current := strings.ToLower(st.RaftState)
	known := false
	for _, s := range raftStates {
		known = known || s == current
		ch <- prometheus.MustNewConstMetric(c.raftState, prometheus.GaugeValue, boolFloat(s == current), s)
	}
	if !known && current != "" {
		ch <- prometheus.MustNewConstMetric(c.raftState, prometheus.GaugeValue, 1, current)
	}

	if st.Layout.Validate() != nil {
		return // no cluster layout yet
	}
	members, _ := c.backend.Members()
	held, standbys := 0, 0
	for _, m := range members {
		if m.ID == st.ID {
			ch <- prometheus.MustNewConstMetric(c.clockSkew, prometheus.GaugeValue, m.ClockSkew.Seconds())
		}
		switch {
		case m.Slot >= 0:
			held++
		case m.GossipState == "alive":
			standbys++
		}
	}
	ch <- prometheus.MustNewConstMetric(c.slotsFree, prometheus.GaugeValue, float64(st.Layout.Slots()-held))
	ch <- prometheus.MustNewConstMetric(c.standbys, prometheus.GaugeValue, float64(standbys))
	ch <- prometheus.MustNewConstMetric(c.layoutLeft, prometheus.GaugeValue, st.Layout.ExhaustedAt().Sub(now).Seconds())
	lead := 0.0
	if st.Slot >= 0 {
		// Granted is the last unit the node may stamp; its window ends where
		// the next unit begins.
		lead = st.Layout.Time(st.Granted + 1).Sub(now).Seconds()
	}
	ch <- prometheus.MustNewConstMetric(c.grantedLead, prometheus.GaugeValue, lead)
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
