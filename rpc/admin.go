package rpc

import (
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// MaxScrapesInFlight is how many /metrics requests the admin port answers at
// once; one past it gets 503 without a gather.
const MaxScrapesInFlight = 2

// NewAdminHandler serves the HTTP admin port:
//
//	/healthz  200 "ok" while the process is alive (shallow)
//	/readyz   200 "ready" when Issuer.Ready (and no Issuer.Conflict), else
//	          503 with the reason (deep)
//	/metrics  Prometheus metrics gathered from g
func NewAdminHandler(backend Issuer, g prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		if ok, reason := ready(backend); !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "not ready: %s\n", reason)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	// At most two scrapes at once, the rest answered 503 at once: a
	// scrape holds its connection for the whole gather, and strangers
	// pipelining scrapes on every connection the port holds kept the
	// probes out (the admin door closes only connections not being
	// answered).
	mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{MaxRequestsInFlight: MaxScrapesInFlight}))
	return mux
}
