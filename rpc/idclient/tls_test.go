package idclient

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idgen/idgen/rpc/tlsconf"
)

// TestWithTLSRefusesBadFiles: a missing file, a partial set or a certificate
// of another CA fails Dial (and TransportCredentials, which idctl's admin
// calls and rpc/idcheck's FetchHistory dial with) with the reason, instead of
// silently dialing in plaintext.
func TestWithTLSRefusesBadFiles(t *testing.T) {
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
		opt  Option
		want string
	}{
		{WithTLS(cert, key, filepath.Join(a, "missing.pem")), "missing.pem"},
		{WithTLS(cert, "", ""), "all three"},
		{WithTLS(cert, key, filepath.Join(b, tlsconf.CAFile)), "not signed by the CA"},
	} {
		if _, err := Dial("127.0.0.1:1", tc.opt); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Dial: %v, want an error with %q", err, tc.want)
		}
		if _, err := TransportCredentials(tc.opt); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("TransportCredentials: %v, want an error with %q", err, tc.want)
		}
	}
	c, err := Dial("127.0.0.1:1", WithTLS(cert, key, filepath.Join(a, tlsconf.CAFile)))
	if err != nil {
		t.Fatalf("good files: %v", err)
	}
	c.Close()
	if _, err := Dial("127.0.0.1:1", WithTLS(cert, "", "")); !errors.Is(err, tlsconf.ErrIncomplete) {
		t.Fatalf("partial files: %v, want ErrIncomplete", err)
	}
}
