package tlsconf

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeCertWithURIs writes a certificate signed by the CA in dir, whose only
// SANs are uris written byte for byte, and its key; it returns the files.
func writeCertWithURIs(t *testing.T, dir, name string, uris ...string) Files {
	t.Helper()
	caCert, caKey, err := loadCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []asn1.RawValue
	for _, u := range uris {
		names = append(names, asn1.RawValue{Class: asn1.ClassContextSpecific, Tag: 6, Bytes: []byte(u)})
	}
	san, err := asn1.Marshal(names)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:    big.NewInt(time.Now().UnixNano()),
		Subject:         pkix.Name{CommonName: name},
		NotBefore:       time.Now().Add(-time.Hour),
		NotAfter:        time.Now().Add(time.Hour),
		KeyUsage:        x509.KeyUsageDigitalSignature,
		ExtKeyUsage:     []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
		ExtraExtensions: []pkix.Extension{{Id: asn1.ObjectIdentifier{2, 5, 29, 17}, Value: san}},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	f := Files{Cert: filepath.Join(t.TempDir(), name+".pem"), CA: filepath.Join(dir, CAFile)}
	f.Key = strings.TrimSuffix(f.Cert, ".pem") + "-key.pem"
	if err := os.WriteFile(f.Cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f.Key, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestRoleURIsParsedExactly: a URI SAN whose scheme is idgen, in any case,
// is a role claim, and it must be one of the three canonical URIs byte for
// byte; anything else, or two claims, and the certificate does not load.
// URIs of other schemes are not claims.
func TestRoleURIsParsedExactly(t *testing.T) {
	dir := newCA(t)
	for _, uris := range [][]string{
		{"idgen://role/admin?x=1"},
		{"idgen://role/admin#client"},
		{"IDGEN://role/admin"},
		{"idgen://x@role/admin"},
		{"idgen://role/%61dmin"},
		{"idgen://role/root"},
		{"idgen:role/admin"},
		{"idgen://ROLE/client", "idgen://role/admin"},
		{"idgen://role/admin", "idgen://role/admin"},
	} {
		_, err := Load(writeCertWithURIs(t, dir, "odd", uris...))
		if !errors.Is(err, ErrBadRole) {
			t.Errorf("role URIs %q: Load %v, want ErrBadRole", uris, err)
			continue
		}
		// The message names the offending URI (or the count) and the canonical form.
		if want := uris[0]; len(uris) == 1 && (!strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "idgen://role/admin")) {
			t.Errorf("role URIs %q: message %q names neither the URI nor the canonical ones", uris, err)
		}
		if len(uris) > 1 && !strings.Contains(err.Error(), "2 role") && !strings.Contains(err.Error(), uris[0]) {
			t.Errorf("role URIs %q: message %q says neither that it carries two roles nor which is malformed", uris, err)
		}
	}
	for uri, want := range map[string]Role{"idgen://role/server": RoleServer, "idgen://role/client": RoleClient, "idgen://role/admin": RoleAdmin} {
		m, err := Load(writeCertWithURIs(t, dir, "ok", "spiffe://example.org/ns/idgen", "urn:idgen:role:admin", uri))
		if err != nil || m.Role != want {
			t.Errorf("canonical %s beside other schemes: %v, role %v", uri, err, m)
		}
	}
	if _, err := Load(writeCertWithURIs(t, dir, "none", "spiffe://example.org/role/admin")); !errors.Is(err, ErrNoRole) {
		t.Errorf("no idgen URI: %v, want ErrNoRole", err)
	}
}
