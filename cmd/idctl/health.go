package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
)

// defaultHTTPAddr is idgend's default --http-addr.
const defaultHTTPAddr = "127.0.0.1:9090"

// bindHealth is `idctl health`: a node's /healthz (or /readyz) over its HTTP
// admin port. It needs no certificate, so a container's HEALTHCHECK can
// run it against the idgend beside it; it reads IDGEN_HTTP_ADDR, the
// variable idgend itself reads, so both agree on the port.
func bindHealth(fs *flag.FlagSet) runner {
	addr := fs.String("http", "", "the node's --http-addr (env IDGEN_HTTP_ADDR, default "+defaultHTTPAddr+"); an unspecified host means this host")
	ready := fs.Bool("ready", false, "ask /readyz (ready to issue IDs) instead of /healthz (the process serves)")
	return func(ctx context.Context, g globals, args []string, e env) error {
		if err := noArgs(args); err != nil {
			return err
		}
		a := *addr
		if a == "" {
			a = strings.TrimSpace(e.getenv("IDGEN_HTTP_ADDR"))
		}
		if a == "" {
			a = defaultHTTPAddr
		}
		host, port, err := net.SplitHostPort(a)
		if err != nil {
			return usagef("--http %q: want host:port: %v", a, err)
		}
		if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
			host = "127.0.0.1" // idgend bound every interface; ask it here
		}
		path := "/healthz"
		if *ready {
			path = "/readyz"
		}
		ctx, cancel := context.WithTimeout(ctx, g.timeout)
		defer cancel()
		url := "http://" + net.JoinHostPort(host, port) + path
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return usagef("--http %q: %v", a, err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return fmt.Errorf("%s: %w", url, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		msg := strings.TrimSpace(string(body))
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s: %s", url, resp.Status, msg)
		}
		fmt.Fprintf(e.stdout, "%s: %s\n", url, msg)
		return nil
	}
}
