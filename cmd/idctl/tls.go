package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"strings"

	"github.com/idgen/idgen/rpc/idclient"
	"github.com/idgen/idgen/rpc/tlsconf"
)

// bindTLS is `idctl tls ca create` and `idctl tls cert create`: the cluster's
// certificates without extra tools, as `consul tls` and `cockroach cert` do.
func bindTLS(fs *flag.FlagSet) runner {
	dir := fs.String("dir", "", "directory for ca.pem, ca-key.pem and NAME.pem, NAME-key.pem (required)")
	role := fs.String("role", "", "cert create: server (an idgend node), client (takes IDs, reads state) or admin (also join, leave, remove, fault)")
	name := fs.String("name", "", "cert create: common name and file name (NAME.pem, NAME-key.pem)")
	dns := fs.String("dns", "", "cert create: comma list of DNS names clients dial a server by (localhost is always added)")
	ips := fs.String("ip", "", "cert create: comma list of IPs clients dial a server by (127.0.0.1 and ::1 are always added)")
	days := fs.Int("days", 0, fmt.Sprintf("validity in days (default %d for the CA, %d for certificates)", tlsconf.DefaultCADays, tlsconf.DefaultCertDays))
	return func(_ context.Context, _ globals, args []string, e env) error {
		if *dir == "" {
			return usagef("--dir is required")
		}
		switch strings.Join(args, " ") {
		case "ca create":
			if err := tlsconf.CreateCA(*dir, *days); errors.Is(err, tlsconf.ErrBadInput) {
				return usagef("%v", err)
			} else if err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "wrote %s/%s and %s/%s (keep the key secret; it signs every certificate)\n",
				*dir, tlsconf.CAFile, *dir, tlsconf.CAKeyFile)
			return nil
		case "cert create":
		default:
			return usagef("want `tls ca create` or `tls cert create`, got `tls %s`", strings.Join(args, " "))
		}
		r, err := tlsconf.ParseRole(*role)
		if err != nil {
			return usagef("--role %q: want server, client or admin", *role)
		}
		req := tlsconf.CertRequest{Role: r, Name: *name, DNS: splitList(*dns), Days: *days}
		for _, s := range splitList(*ips) {
			ip := net.ParseIP(s)
			if ip == nil {
				return usagef("--ip %q is not an IP address", s)
			}
			req.IPs = append(req.IPs, ip)
		}
		if err := tlsconf.CreateCert(*dir, req); errors.Is(err, tlsconf.ErrBadInput) {
			return usagef("%v", err)
		} else if err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "wrote %s and %s (role %s)\n", tlsconf.CertFile(*dir, *name), tlsconf.KeyFile(*dir, *name), r)
		return nil
	}
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// TLS client files from the environment; flags override them.
func tlsFromEnv(e env) tlsconf.Files {
	return tlsconf.Files{Cert: e.getenv("IDGEN_TLS_CERT"), Key: e.getenv("IDGEN_TLS_KEY"), CA: e.getenv("IDGEN_TLS_CA")}
}

// addTLSFlags registers the client's TLS files with f's values as defaults.
func addTLSFlags(fs *flag.FlagSet, f *tlsconf.Files) {
	fs.StringVar(&f.Cert, "tls-cert", f.Cert, "client certificate (PEM) for nodes started with TLS (env IDGEN_TLS_CERT)")
	fs.StringVar(&f.Key, "tls-key", f.Key, "its private key (env IDGEN_TLS_KEY)")
	fs.StringVar(&f.CA, "tls-ca", f.CA, "the cluster CA that signed the nodes' certificates (env IDGEN_TLS_CA)")
}

// clientOptions are the idclient options every call to the nodes uses.
func (g globals) clientOptions() []idclient.Option {
	if !g.tls.Enabled() {
		return nil
	}
	return []idclient.Option{idclient.WithTLS(g.tls.Cert, g.tls.Key, g.tls.CA)}
}
