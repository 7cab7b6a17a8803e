package cluster

import (
	"crypto/tls"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
)

func TestParseGossipKeys(t *testing.T) {
	k16 := base64.StdEncoding.EncodeToString(make([]byte, 16))
	k32 := base64.StdEncoding.EncodeToString(make([]byte, 32))
	keys, err := ParseGossipKeys(k32 + ", " + k16)
	if err != nil || len(keys) != 2 || len(keys[0]) != 32 || len(keys[1]) != 16 {
		t.Fatalf("two keys: %d keys, %v", len(keys), err)
	}
	for _, bad := range []string{"", " , ", "%%%", base64.StdEncoding.EncodeToString(make([]byte, 20)), k32 + ",short"} {
		if _, err := ParseGossipKeys(bad); !errors.Is(err, ErrGossipKey) {
			t.Errorf("ParseGossipKeys(%q) = %v, want ErrGossipKey", bad, err)
		}
	}
}

// TestRaftTLSRefusesUnverifiedConfig: a TLS config that would let any peer
// talk Raft is refused before a port is opened.
func TestRaftTLSRefusesUnverifiedConfig(t *testing.T) {
	cert := tls.Certificate{Certificate: [][]byte{{1}}}
	for name, cfg := range map[string]*tls.Config{
		"no verification":    {Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequireAnyClientCert},
		"no client cert ask": {Certificates: []tls.Certificate{cert}, VerifyConnection: func(tls.ConnectionState) error { return nil }},
		"no certificate":     {ClientAuth: tls.RequireAnyClientCert, VerifyConnection: func(tls.ConnectionState) error { return nil }},
	} {
		_, err := newTLSStreamLayer("127.0.0.1:0", nil, cfg)
		if !errors.Is(err, ErrRaftTLSConfig) || !strings.Contains(err.Error(), "verify peers") {
			t.Errorf("%s: %v, want ErrRaftTLSConfig", name, err)
		}
	}
}
