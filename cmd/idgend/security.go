package main

import (
	"crypto/tls"
	"fmt"
	"log/slog"

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
// at every start what is left unprotected.
func loadSecurity(cfg Config, log *slog.Logger) (security, error) {
	if cfg.Insecure {
		log.Warn("--insecure: plaintext is allowed on non-loopback addresses; anyone who reaches the ports can take IDs, forge Raft entries and stop the cluster",
			"tls", cfg.TLS.Enabled(), "gossip_encrypted", len(cfg.GossipKeys) > 0)
	}
	if !cfg.TLS.Enabled() {
		return security{}, nil
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

// gossipLabel is the memberlist label of a deployment. It comes from the
// operator's --cluster-name, never from the random cluster ID, so that a wiped
// node of the same deployment still meets its old cluster and the conflict is seen.
func gossipLabel(clusterName string) string { return "idgen/" + clusterName }
