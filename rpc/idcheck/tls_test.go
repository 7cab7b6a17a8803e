package idcheck

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/idgen/idgen/rpc/idclient"
	"github.com/idgen/idgen/rpc/tlsconf"
)

// TestFetchHistoryRefusesBadTLSFiles: a missing file, a partial set or a
// certificate of another CA fails FetchHistory with the reason, instead of
// silently asking the nodes in plaintext.
func TestFetchHistoryRefusesBadTLSFiles(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	for _, dir := range []string{a, b} {
		if err := tlsconf.CreateCA(dir, 0); err != nil {
			t.Fatal(err)
		}
		if err := tlsconf.CreateCert(dir, tlsconf.CertRequest{Role: tlsconf.RoleClient, Name: "c"}); err != nil {
			t.Fatal(err)
		}
	}
	cert, key := tlsconf.CertFile(a, "c"), tlsconf.KeyFile(a, "c")
	for _, tc := range []struct {
		opt  idclient.Option
		want string
	}{
		{idclient.WithTLS(cert, key, filepath.Join(a, "missing.pem")), "missing.pem"},
		{idclient.WithTLS(cert, "", ""), "all three"},
		{idclient.WithTLS(cert, key, filepath.Join(b, tlsconf.CAFile)), "not signed by the CA"},
	} {
		if _, err := FetchHistory(t.Context(), []string{"127.0.0.1:1"}, 0, tc.opt); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("FetchHistory: %v, want an error with %q", err, tc.want)
		}
	}
}
