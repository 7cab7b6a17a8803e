package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idgen/idgen/rpc/tlsconf"
)

// TestTLSCommands: the CA and a certificate of each role are written with
// private keys, the role is in the certificate, and misuse exits 2 (or 1 for
// an existing file) without writing anything.
func TestTLSCommands(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tls")
	if out, errOut, code := runCapture(t, "", "tls", "ca", "create", "--dir", dir); code != 0 || !strings.Contains(out, "ca-key.pem") {
		t.Fatalf("ca create: exit %d %s %s", code, out, errOut)
	}
	for _, role := range []string{"server", "client", "admin"} {
		_, errOut, code := runCapture(t, "", "tls", "cert", "create", "--dir", dir, "--role", role, "--name", role+"1", "--ip", "10.0.0.1", "--dns", "n1.internal")
		if code != 0 {
			t.Fatalf("cert create %s: exit %d %s", role, code, errOut)
		}
		m, err := tlsconf.Load(tlsconf.Files{Cert: tlsconf.CertFile(dir, role+"1"), Key: tlsconf.KeyFile(dir, role+"1"), CA: filepath.Join(dir, "ca.pem")})
		if err != nil || string(m.Role) != role {
			t.Fatalf("%s certificate: role %v, %v", role, m, err)
		}
		if fi, _ := os.Stat(tlsconf.KeyFile(dir, role+"1")); fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s key mode %v", role, fi.Mode().Perm())
		}
	}
	entries, _ := os.ReadDir(dir)
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"tls", "cert", "create", "--dir", dir, "--role", "root", "--name", "x"}, 2, "--role"},
		{[]string{"tls", "cert", "create", "--dir", dir, "--role", "client", "--name", "../x"}, 2, "--name"},
		{[]string{"tls", "cert", "create", "--dir", dir, "--role", "client", "--name", "x", "--ip", "nope"}, 2, "--ip"},
		{[]string{"tls", "cert", "create", "--role", "client", "--name", "x"}, 2, "--dir"},
		{[]string{"tls", "ca", "delete", "--dir", dir}, 2, "tls ca create"},
		{[]string{"tls", "ca", "create", "--dir", dir}, 1, "file exists"},
		{[]string{"tls", "cert", "create", "--dir", dir, "--role", "admin", "--name", "client1"}, 1, "file exists"},
	} {
		_, errOut, code := runCapture(t, "", tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("idctl %v: exit %d %q; want exit %d with %q", tc.args, code, errOut, tc.code, tc.want)
		}
	}
	if after, _ := os.ReadDir(dir); len(after) != len(entries) {
		t.Fatalf("refused commands wrote files: %d entries, were %d", len(after), len(entries))
	}
	if _, errOut, code := runCapture(t, "", "--tls-cert", "a.pem", "status"); code != 2 || !strings.Contains(errOut, "--tls-key") {
		t.Fatalf("one TLS file of three: exit %d %s", code, errOut)
	}
}
