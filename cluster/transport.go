package cluster

import (
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/raft"

	"github.com/idgen/idgen/cluster/door"
)

// Errors of the transport settings.
var (
	// ErrRaftTLSConfig: a Raft TLS configuration that would not authenticate peers.
	ErrRaftTLSConfig = errors.New("raft TLS configuration must verify peers on both ends (use tlsconf.Material.PeerConfig)")
	// ErrGossipKey: a gossip key that is not base64 of 16, 24 or 32 bytes.
	ErrGossipKey = errors.New("gossip key must be base64 of 16, 24 or 32 bytes (idctl keygen makes one)")
)

// tlsStreamLayer is the Raft wire over TLS: both ends show a certificate
// and cfg's VerifyConnection decides whether the peer may talk Raft
// (tlsconf requires a server certificate from the cluster CA, on accept and
// on dial). Without it anyone who reaches the port could append entries
// with a higher term. Its Accept returns raw TCP connections: the server
// side of the handshake (secure) runs in clusterStreamLayer's gate, under
// its deadline, before Raft sees the connection.
type tlsStreamLayer struct {
	net.Listener
	advertise net.Addr
	cfg       *tls.Config
}

var _ rawStream = (*tlsStreamLayer)(nil)

// newTLSStreamLayer listens on bind. cfg must ask for and check the peer's
// certificate: ClientAuth RequireAnyClientCert or stricter, and a
// VerifyConnection callback (the dialer's side skips host names).
func newTLSStreamLayer(bind string, advertise net.Addr, cfg *tls.Config) (*tlsStreamLayer, error) {
	if cfg.VerifyConnection == nil || cfg.ClientAuth < tls.RequireAnyClientCert || len(cfg.Certificates) == 0 {
		return nil, ErrRaftTLSConfig
	}
	l, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, err
	}
	return &tlsStreamLayer{Listener: l, advertise: advertise, cfg: cfg}, nil
}

// secure completes the server side of the TLS handshake on an accepted
// connection (cfg checks the peer's certificate).
func (s *tlsStreamLayer) secure(c net.Conn) (net.Conn, error) {
	tc := tls.Server(c, s.cfg)
	if err := tc.Handshake(); err != nil {
		return nil, err
	}
	return tc, nil
}

// Addr is the advertised address: Raft hands it to peers.
func (s *tlsStreamLayer) Addr() net.Addr {
	if s.advertise != nil {
		return s.advertise
	}
	return s.Listener.Addr()
}

// Dial completes the handshake within timeout, so a peer that is not a
// server is refused before Raft writes anything to it.
func (s *tlsStreamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: timeout}, Config: s.cfg}
	c, err := d.Dial("tcp", string(address))
	if err != nil {
		return nil, fmt.Errorf("raft TLS dial %s: %w", address, err)
	}
	return c, nil
}

// raftTransport is TCP, or TLS when the config has RaftTLS; either way every
// connection starts with the cluster greeting, and the handshake and the
// greeting are done, within their bounds, before Raft sees an accepted
// connection (raftstream.go).
func raftTransport(cfg *Config, advertise net.Addr, greeter raftGreeter, counts *door.Counts, logger hclog.Logger, slogger *slog.Logger) (*raft.NetworkTransport, error) {
	var (
		stream rawStream
		err    error
	)
	if cfg.RaftTLS == nil {
		stream, err = newTCPStreamLayer(cfg.RaftAddr, advertise)
	} else {
		stream, err = newTLSStreamLayer(cfg.RaftAddr, advertise, cfg.RaftTLS)
	}
	if err != nil {
		return nil, err
	}
	greeted := newClusterStreamLayer(stream, greeter, counts, slogger.With("component", "raft"))
	return raft.NewNetworkTransportWithLogger(greeted, 3, 10*time.Second, logger), nil
}

// ParseGossipKeys decodes a comma-separated list of base64 keys. The first
// encrypts; all of them decrypt, which is how a key is rotated.
func ParseGossipKeys(s string) ([][]byte, error) {
	var keys [][]byte
	for _, k := range strings.Split(s, ",") {
		if k = strings.TrimSpace(k); k == "" {
			continue
		}
		b, err := base64.StdEncoding.DecodeString(k)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrGossipKey, err)
		}
		if n := len(b); n != 16 && n != 24 && n != 32 {
			return nil, fmt.Errorf("%w: got %d bytes", ErrGossipKey, n)
		}
		keys = append(keys, b)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%w: empty", ErrGossipKey)
	}
	return keys, nil
}

// secureGossip sets memberlist's label and, with keys, its keyring with
// encryption required both ways: a node with another key or none is never
// heard, so it can never be added to Raft as a member.
func secureGossip(mc *memberlist.Config, cfg *Config) error {
	mc.Label = cfg.GossipLabel
	if len(cfg.GossipKeys) == 0 {
		return nil
	}
	ring, err := memberlist.NewKeyring(cfg.GossipKeys, cfg.GossipKeys[0])
	if err != nil {
		return fmt.Errorf("%w: %v", ErrGossipKey, err)
	}
	mc.Keyring = ring
	mc.GossipVerifyIncoming = true
	mc.GossipVerifyOutgoing = true
	return nil
}
