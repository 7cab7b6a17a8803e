package main

import (
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/idgen/idgen/cluster/door"
)

// The HTTP admin port's bounds (cmd/idgend/README.md, "Securing a cluster"). The port
// serves probes and scrapers with plaintext, short requests and no body, so
// every bound can be tight: nothing a client sends is held for longer than
// it takes a probe to be answered.
const (
	// adminReadHeaderTimeout bounds a request's headers, from the first byte.
	adminReadHeaderTimeout = 5 * time.Second
	// adminReadTimeout bounds a whole request, body included.
	adminReadTimeout = 10 * time.Second
	// adminWriteTimeout bounds an answer, /metrics included (Prometheus's
	// own default scrape timeout is 10 s).
	adminWriteTimeout = 10 * time.Second
	// adminIdleTimeout closes a keep-alive connection left idle.
	adminIdleTimeout = 10 * time.Second
	// adminMaxHeaderBytes bounds a request's headers (the default is 1 MiB).
	adminMaxHeaderBytes = 16 << 10
	// adminMaxConns caps the port's open connections; one past it is
	// closed at once.
	adminMaxConns = 64
)

// newAdminServer is the HTTP admin server with the port's bounds.
func newAdminServer(h http.Handler, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: adminReadHeaderTimeout,
		ReadTimeout:       adminReadTimeout,
		WriteTimeout:      adminWriteTimeout,
		IdleTimeout:       adminIdleTimeout,
		MaxHeaderBytes:    adminMaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

// limitAdmin caps the admin listener's open connections; the ones refused
// are logged once a minute per peer, with a count.
func limitAdmin(l net.Listener, log *slog.Logger) net.Listener {
	refusals := door.NewRateLog(log.With("component", "http"), 0)
	return door.Limit(l, adminMaxConns, func(remote net.Addr, err error) {
		refusals.Log(slog.LevelWarn, "cap", door.Peer(remote), "refused an HTTP admin connection: the port holds its cap of open connections",
			"remote", remote.String(), "cap", adminMaxConns)
	})
}
