package tlsconf

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"time"
)

// File names in a certificate directory.
const (
	CAFile    = "ca.pem"
	CAKeyFile = "ca-key.pem"
)

// Validity defaults, in days.
const (
	DefaultCADays   = 3650
	DefaultCertDays = 825 // the longest a browser-era CA/B rule allows; rotate before
	maxDays         = 36500
)

// nameRE bounds certificate names: they become file names.
var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// CertFile and KeyFile are where CreateCert writes a holder's files.
func CertFile(dir, name string) string { return filepath.Join(dir, name+".pem") }

// KeyFile is the private key's path for name in dir.
func KeyFile(dir, name string) string { return filepath.Join(dir, name+"-key.pem") }

// CreateCA writes a new CA certificate and key (mode 0600) to dir/ca.pem and
// dir/ca-key.pem. It never overwrites: an existing CA stays as it is.
func CreateCA(dir string, days int) error {
	if days == 0 {
		days = DefaultCADays
	}
	if days < 1 || days > maxDays {
		return fmt.Errorf("%w: --days %d out of range 1..%d", ErrBadInput, days, maxDays)
	}
	certPath, keyPath := filepath.Join(dir, CAFile), filepath.Join(dir, CAKeyFile)
	if err := notExisting(certPath, keyPath); err != nil {
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl, err := template("idgen CA", days)
	if err != nil {
		return err
	}
	tmpl.IsCA = true
	tmpl.BasicConstraintsValid = true
	tmpl.MaxPathLenZero = true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return fmt.Errorf("sign CA: %w", err)
	}
	return writePair(dir, certPath, keyPath, der, key)
}

// CertRequest describes one certificate for CreateCert.
type CertRequest struct {
	Role Role
	// Name is the common name and the file name (NAME.pem, NAME-key.pem).
	Name string
	// DNS and IPs are the names a server is dialed by. Server certificates
	// always also get localhost, 127.0.0.1 and ::1.
	DNS  []string
	IPs  []net.IP
	Days int
}

// CreateCert signs a certificate with the CA in dir and writes it with its
// key (mode 0600) to dir/NAME.pem and dir/NAME-key.pem. Server certificates
// serve and dial (server and client auth); client and admin ones only dial.
func CreateCert(dir string, req CertRequest) error {
	if _, err := ParseRole(string(req.Role)); err != nil {
		return err
	}
	if !nameRE.MatchString(req.Name) || req.Name == "ca" {
		return fmt.Errorf("%w: --name %q: want 1-63 letters, digits, dots, dashes or underscores (not \"ca\")", ErrBadInput, req.Name)
	}
	if req.Days == 0 {
		req.Days = DefaultCertDays
	}
	if req.Days < 1 || req.Days > maxDays {
		return fmt.Errorf("%w: --days %d out of range 1..%d", ErrBadInput, req.Days, maxDays)
	}
	caCert, caKey, err := loadCA(dir)
	if err != nil {
		return err
	}
	certPath, keyPath := CertFile(dir, req.Name), KeyFile(dir, req.Name)
	if err := notExisting(certPath, keyPath); err != nil {
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl, err := template(req.Name, req.Days)
	if err != nil {
		return err
	}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	tmpl.URIs = append(tmpl.URIs, req.Role.URI())
	tmpl.DNSNames = append(tmpl.DNSNames, req.DNS...)
	tmpl.IPAddresses = append(tmpl.IPAddresses, req.IPs...)
	if req.Role == RoleServer {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
		tmpl.DNSNames = append(tmpl.DNSNames, "localhost")
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.IPv4(127, 0, 0, 1), net.IPv6loopback)
	}
	// A certificate never outlives the CA that signed it.
	if tmpl.NotAfter.After(caCert.NotAfter) {
		tmpl.NotAfter = caCert.NotAfter
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, key.Public(), caKey)
	if err != nil {
		return fmt.Errorf("sign %s: %w", req.Name, err)
	}
	return writePair(dir, certPath, keyPath, der, key)
}

func template(cn string, days int) (*x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	now := time.Now()
	return &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn, Organization: []string{"idgen"}},
		NotBefore:    now.Add(-5 * time.Minute), // tolerate a little clock skew between hosts
		NotAfter:     now.Add(time.Duration(days) * 24 * time.Hour),
	}, nil
}

func loadCA(dir string) (*x509.Certificate, crypto.Signer, error) {
	certPEM, err := os.ReadFile(filepath.Join(dir, CAFile))
	if err != nil {
		return nil, nil, fmt.Errorf("read the CA (create one with idctl tls ca create --dir %s): %w", dir, err)
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, CAKeyFile))
	if err != nil {
		return nil, nil, fmt.Errorf("read the CA key: %w", err)
	}
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, nil, fmt.Errorf("%w: %s or %s is not PEM", ErrBadInput, CAFile, CAKeyFile)
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("parse %s: %w", CAFile, err)
	}
	k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("parse %s: %w", CAKeyFile, err)
	}
	signer, ok := k.(crypto.Signer)
	if !ok || !cert.IsCA {
		return nil, nil, fmt.Errorf("%w: %s is not a CA certificate with its key", ErrBadInput, dir)
	}
	return cert, signer, nil
}

func notExisting(paths ...string) error {
	for _, p := range paths {
		if _, err := os.Stat(p); err == nil {
			return fmt.Errorf("%s: %w", p, ErrExists)
		} else if !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

// writePair writes the certificate (0644) and the key (0600). The key file is
// created exclusively, so a concurrent writer cannot slip one in.
func writePair(dir, certPath, keyPath string, der []byte, key *ecdsa.PrivateKey) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	if err := writeExclusive(keyPath, 0o600, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb})); err != nil {
		return err
	}
	return writeExclusive(certPath, 0o644, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

func writeExclusive(path string, mode os.FileMode, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("%s: %w", path, ErrExists)
		}
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
