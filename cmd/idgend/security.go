package main

import (
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/idgen/idgen/rpc/tlsconf"
)

// security is what the TLS flags make: the gRPC server's config, the
// node-to-node config for Raft, and the forwarder's dial options.
type security struct {
	grpc     *tls.Config
	raft     *tls.Config
	peerDial []grpc.DialOption
}

// loadSecurity loads the node's certificate (it must be a server's) and says
// at every start what is left unprotected. A key file that others can read
// is refused (checkSecretFile).
func loadSecurity(cfg Config, log *slog.Logger) (security, error) {
	if cfg.Insecure {
		log.Warn("--insecure: plaintext is allowed on non-loopback addresses; anyone who reaches the ports can take IDs, forge Raft entries and stop the cluster",
			"tls", cfg.TLS.Enabled(), "gossip_encrypted", len(cfg.GossipKeys) > 0)
	}
	if cfg.gossipKeyInArgs {
		log.Warn("--gossip-key on the command line shows the key in the process list (ps, /proc/PID/cmdline) to every user of this host; " +
			"use --gossip-key-file with a file of mode 0600 (idctl keygen --out FILE) or IDGEN_GOSSIP_KEY")
	}
	if !cfg.TLS.Enabled() {
		return security{}, nil
	}
	if err := checkSecretFile("--tls-key", cfg.TLS.Key); err != nil {
		return security{}, err
	}
	// idgend never uses the CA's key, but one left beside the CA certificate
	// where others can read it lets them mint any role: whatever its name.
	for _, key := range append([]string{filepath.Join(filepath.Dir(cfg.TLS.CA), tlsconf.CAKeyFile)}, caKeysBeside(cfg.TLS.CA)...) {
		if err := checkSecretFile("the CA key beside --tls-ca", key); err != nil {
			return security{}, err
		}
	}
	m, err := tlsconf.Load(cfg.TLS)
	if err != nil {
		return security{}, fmt.Errorf("--tls-cert/--tls-key/--tls-ca: %w", err)
	}
	if m.Role != tlsconf.RoleServer {
		return security{}, fmt.Errorf("--tls-cert %s has role %s; a node needs a server certificate (idctl tls cert create --role server)", cfg.TLS.Cert, m.Role)
	}
	peer := m.PeerConfig()
	return security{
		grpc:     m.ServerConfig(),
		raft:     peer,
		peerDial: []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(peer))},
	}, nil
}

// caKeysBeside lists the files in the directory of the CA certificate file
// ca that hold the private key of a CA certificate in it, whatever their
// names (at most 256 entries and 64 KiB a file are read; files this process
// cannot read are left out).
func caKeysBeside(ca string) []string {
	raw, err := os.ReadFile(ca)
	if err != nil {
		return nil
	}
	var pubs []crypto.PublicKey
	for block, rest := pem.Decode(raw); block != nil; block, rest = pem.Decode(rest) {
		if c, err := x509.ParseCertificate(block.Bytes); err == nil && block.Type == "CERTIFICATE" {
			pubs = append(pubs, c.PublicKey)
		}
	}
	dir := filepath.Dir(ca)
	entries, err := os.ReadDir(dir)
	if err != nil || len(pubs) == 0 {
		return nil
	}
	var out []string
	for i, e := range entries {
		if i >= 256 {
			break
		}
		path := filepath.Join(dir, e.Name())
		if !e.Type().IsRegular() || path == ca {
			continue
		}
		if fi, err := e.Info(); err != nil || fi.Size() > 64<<10 {
			continue
		}
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		for block, rest := pem.Decode(b); block != nil; block, rest = pem.Decode(rest) {
			if pub := publicOf(block); pub != nil && slices.ContainsFunc(pubs, func(p crypto.PublicKey) bool {
				eq, ok := p.(interface{ Equal(crypto.PublicKey) bool })
				return ok && eq.Equal(pub)
			}) {
				out = append(out, path)
				break
			}
		}
	}
	return out
}

// publicOf is the public half of a PEM private key block, nil for anything
// else.
func publicOf(block *pem.Block) crypto.PublicKey {
	if !strings.HasSuffix(block.Type, "PRIVATE KEY") {
		return nil
	}
	var key any
	var err error
	if key, err = x509.ParsePKCS8PrivateKey(block.Bytes); err != nil {
		if key, err = x509.ParseECPrivateKey(block.Bytes); err != nil {
			if key, err = x509.ParsePKCS1PrivateKey(block.Bytes); err != nil {
				return nil
			}
		}
	}
	if s, ok := key.(crypto.Signer); ok {
		return s.Public()
	}
	return nil
}

// gossipLabel is the memberlist label of a deployment. It comes from the
// operator's --cluster-name, never from the random cluster ID, so that a wiped
// node of the same deployment still meets its old cluster and the conflict is seen.
func gossipLabel(clusterName string) string { return "idgen/" + clusterName }

// checkSecretFile refuses a key file that anyone but its owner can read or
// write (secretModeProblem), naming the file and the chmod that fixes it. A
// file that does not exist or cannot be read is left to its loader to report.
func checkSecretFile(what, path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return nil
	}
	return secretFileProblem(what, path, fi)
}

// readSecretFile reads a key file after the same check, on the file opened.
func readSecretFile(what, path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", what, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("%s: %v", what, err)
	}
	if err := secretFileProblem(what, path, fi); err != nil {
		return nil, err
	}
	b, err := io.ReadAll(io.LimitReader(f, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("%s: %v", what, err)
	}
	return b, nil
}

func secretFileProblem(what, path string, fi fs.FileInfo) error {
	owner, ok := fileOwner(fi)
	if !ok { // no Unix owner and mode bits to judge (not a Unix system)
		return nil
	}
	if err := secretModeProblem(fi.Mode(), owner); err != nil {
		return fmt.Errorf("%s %s %v: run chmod 600 %s (a key file must be readable by its owner only; "+
			"a file owned by root may also be readable by its group, as Kubernetes mounts Secrets)", what, path, err, path)
	}
	return nil
}

// errSecretMode: a key file that others than its owner can read or write.
var errSecretMode = errors.New("is readable or writable by others than its owner")

// secretModeProblem judges a key file's mode and owner: no permission for
// group or others, except that a file owned by root may be readable by its
// group (as PostgreSQL allows for its key, and as a Kubernetes Secret volume
// with fsGroup gives a non-root pod its files: root, group fsGroup, 0440).
func secretModeProblem(mode fs.FileMode, owner int) error {
	allowed := fs.FileMode(0o700)
	if owner == 0 {
		allowed = 0o740
	}
	if extra := mode.Perm() &^ allowed; extra != 0 {
		return fmt.Errorf("%w (mode %04o)", errSecretMode, mode.Perm())
	}
	return nil
}
