// Package tlsconf makes and loads the certificates of an idgen cluster and
// builds the TLS configurations its links use: the gRPC server (every caller
// shows a certificate from the cluster CA), clients (idctl, idclient) and
// node-to-node links (Raft and forwarding, where both ends must be servers).
//
// A certificate's role is carried in one URI SAN, exactly idgen://role/<role>,
// with role server, client or admin. The CA signs it, so the role cannot be changed
// without the CA's key. Only the standard library's crypto is used.
package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/asn1"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
)

// Role is what a certificate's holder may do.
type Role string

// The roles, from least to most trusted for admin calls. A server may not make
// admin calls and an admin may not act as a server: each has its own job.
const (
	// RoleClient may take IDs and read cluster state.
	RoleClient Role = "client"
	// RoleAdmin may also change membership (join, leave, remove) and inject faults.
	RoleAdmin Role = "admin"
	// RoleServer is an idgend node: it serves, forwards commands to the leader
	// and talks Raft.
	RoleServer Role = "server"
)

// roleScheme and roleHost form the role URI: idgen://role/admin.
const (
	roleScheme = "idgen"
	roleHost   = "role"
)

// roleURIs are the only role claims a certificate may carry, byte for byte
// as CreateCert writes them.
var roleURIs = map[string]Role{
	RoleServer.URI().String(): RoleServer,
	RoleClient.URI().String(): RoleClient,
	RoleAdmin.URI().String():  RoleAdmin,
}

// oidSubjectAltName is the X.509 extension that carries URI SANs.
var oidSubjectAltName = asn1.ObjectIdentifier{2, 5, 29, 17}

// Errors of this package.
var (
	// ErrNoRole: a certificate carries no idgen role URI.
	ErrNoRole = errors.New("certificate carries no idgen role (a URI SAN idgen://role/server|client|admin)")
	// ErrBadRole: a role name or role URI that is not one of the three.
	ErrBadRole = errors.New("unknown role: want server, client or admin")
	// ErrWrongRole: the peer's certificate has another role than the link needs.
	ErrWrongRole = errors.New("peer certificate has the wrong role")
	// ErrIncomplete: some but not all of the three TLS files were given.
	ErrIncomplete = errors.New("TLS needs all three files: certificate, key and CA")
	// ErrExists: a file that would be written already exists.
	ErrExists = errors.New("file exists; remove it first or pick another name or directory")
	// ErrBadInput: a certificate request that cannot be made.
	ErrBadInput = errors.New("bad certificate request")
)

// ParseRole turns "server", "client" or "admin" into a Role.
func ParseRole(s string) (Role, error) {
	switch r := Role(s); r {
	case RoleServer, RoleClient, RoleAdmin:
		return r, nil
	}
	return "", fmt.Errorf("%w: %q", ErrBadRole, s)
}

// URI is the SAN that carries the role.
func (r Role) URI() *url.URL {
	return &url.URL{Scheme: roleScheme, Host: roleHost, Path: "/" + string(r)}
}

// RoleOf returns the role a certificate carries. Every URI SAN whose scheme
// is idgen, in any case, is a role claim, and it must be one of the three
// canonical URIs exactly (idgen://role/server, idgen://role/client,
// idgen://role/admin): a query, a fragment, user info, a port, an escape or
// another case is refused rather than read past, so a CA that issues by
// pattern cannot be talked into a role it did not mean. A certificate with
// more than one claim is refused: its holder's rights would be ambiguous.
// The claims are read from the certificate's own bytes, since Go's parsed
// URIs lower-case the scheme and unescape the path.
func RoleOf(cert *x509.Certificate) (Role, error) {
	uris, err := rawURIs(cert)
	if err != nil {
		return "", fmt.Errorf("certificate %q: %w", cert.Subject.CommonName, err)
	}
	var found []Role
	var claims []string
	for _, u := range uris {
		scheme, _, ok := strings.Cut(u, ":")
		if !ok || !strings.EqualFold(scheme, roleScheme) {
			continue
		}
		r, ok := roleURIs[u]
		if !ok {
			return "", fmt.Errorf("certificate %q: %w: role URI %q is not exactly idgen://role/server, idgen://role/client or idgen://role/admin",
				cert.Subject.CommonName, ErrBadRole, u)
		}
		found = append(found, r)
		claims = append(claims, u)
	}
	switch len(found) {
	case 0:
		return "", fmt.Errorf("certificate %q: %w", cert.Subject.CommonName, ErrNoRole)
	case 1:
		return found[0], nil
	}
	return "", fmt.Errorf("certificate %q: %w: it carries %d role URIs (%s), a certificate has exactly one",
		cert.Subject.CommonName, ErrBadRole, len(found), strings.Join(claims, ", "))
}

// rawURIs returns the certificate's URI SANs as the bytes the CA signed. A
// certificate built in memory rather than parsed has no raw extensions; its
// URIs are taken as they print.
func rawURIs(cert *x509.Certificate) ([]string, error) {
	for _, ext := range cert.Extensions {
		if !ext.Id.Equal(oidSubjectAltName) {
			continue
		}
		var seq asn1.RawValue
		rest, err := asn1.Unmarshal(ext.Value, &seq)
		if err != nil || len(rest) > 0 || seq.Class != asn1.ClassUniversal || seq.Tag != asn1.TagSequence || !seq.IsCompound {
			return nil, fmt.Errorf("%w: malformed subject alternative names", ErrBadRole)
		}
		var uris []string
		for b := seq.Bytes; len(b) > 0; {
			var name asn1.RawValue
			if b, err = asn1.Unmarshal(b, &name); err != nil {
				return nil, fmt.Errorf("%w: malformed subject alternative name: %v", ErrBadRole, err)
			}
			if name.Class == asn1.ClassContextSpecific && name.Tag == 6 { // uniformResourceIdentifier
				uris = append(uris, string(name.Bytes))
			}
		}
		return uris, nil
	}
	uris := make([]string, 0, len(cert.URIs))
	for _, u := range cert.URIs {
		uris = append(uris, u.String())
	}
	return uris, nil
}

// Files are the three PEM files of one holder. All three or none.
type Files struct {
	Cert, Key, CA string
}

// Enabled reports whether any file is set.
func (f Files) Enabled() bool { return f.Cert != "" || f.Key != "" || f.CA != "" }

// Check reports a partial set.
func (f Files) Check() error {
	if f.Enabled() && (f.Cert == "" || f.Key == "" || f.CA == "") {
		return ErrIncomplete
	}
	return nil
}

// Material is a loaded certificate, its key, its role and the CA pool.
type Material struct {
	Cert tls.Certificate
	Leaf *x509.Certificate
	Role Role
	CAs  *x509.CertPool
}

// Load reads and checks the three files: the key matches the certificate, the
// certificate chains to the CA and carries a role.
func Load(f Files) (*Material, error) {
	if !f.Enabled() {
		return nil, fmt.Errorf("%w: none given", ErrIncomplete)
	}
	if err := f.Check(); err != nil {
		return nil, err
	}
	cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return nil, fmt.Errorf("load certificate %s and key %s: %w", f.Cert, f.Key, err)
	}
	caPEM, err := os.ReadFile(f.CA)
	if err != nil {
		return nil, fmt.Errorf("read CA %s: %w", f.CA, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("%w: CA file %s holds no PEM certificate", ErrBadInput, f.CA)
	}
	leaf := cert.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, fmt.Errorf("parse certificate %s: %w", f.Cert, err)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return nil, fmt.Errorf("certificate %s is not signed by the CA in %s: %w", f.Cert, f.CA, err)
	}
	role, err := RoleOf(leaf)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f.Cert, err)
	}
	return &Material{Cert: cert, Leaf: leaf, Role: role, CAs: pool}, nil
}

// ServerConfig is the gRPC server's side: every caller must show a
// certificate from the CA (any role; the server's interceptor checks the role
// per call).
func (m *Material) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{m.Cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    m.CAs,
	}
}

// ClientConfig is a caller's side (idctl, idclient, grpcurl-like use): the
// server's certificate must chain to the CA and name the host dialed.
func (m *Material) ClientConfig() *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{m.Cert},
		RootCAs:      m.CAs,
	}
}

// PeerConfig is for node-to-node links (Raft, forwarding to the leader). It
// works on both ends: the dialer and the acceptor each show their server
// certificate, and each refuses a peer whose certificate does not chain to the
// CA or is not a server's. Host names are not checked: nodes dial the
// addresses gossip advertised, and the CA-signed server role is the identity
// that matters (as Consul's verify_server_hostname checks a role name, not a host).
func (m *Material) PeerConfig() *tls.Config {
	verify := func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return fmt.Errorf("%w: the peer showed no certificate", ErrWrongRole)
		}
		opts := x509.VerifyOptions{
			Roots:         m.CAs,
			Intermediates: x509.NewCertPool(),
			KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageAny},
		}
		for _, c := range cs.PeerCertificates[1:] {
			opts.Intermediates.AddCert(c)
		}
		leaf := cs.PeerCertificates[0]
		if _, err := leaf.Verify(opts); err != nil {
			return fmt.Errorf("peer certificate: %w", err)
		}
		role, err := RoleOf(leaf)
		if err != nil {
			return err
		}
		if role != RoleServer {
			return fmt.Errorf("%w: %q is %s, a node link needs server", ErrWrongRole, leaf.Subject.CommonName, role)
		}
		return nil
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{m.Cert},
		// The acceptor asks for a certificate and VerifyConnection checks it;
		// the dialer skips Go's host name check and VerifyConnection checks
		// the chain and the role instead.
		ClientAuth:         tls.RequireAnyClientCert,
		InsecureSkipVerify: true,
		VerifyConnection:   verify,
	}
}
