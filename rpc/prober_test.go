package rpc

import (
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/idgen/idgen/cluster"
)

// probeBackend is a fake node that also names its own Raft address in
// Members, as a real node does.
type probeBackend struct{ *fakeBackend }

func (b probeBackend) Members() ([]cluster.MemberInfo, string) {
	ms, leader := b.fakeBackend.Members()
	for i := range ms {
		if ms[i].ID == "n1" {
			ms[i].RaftAddr = "127.0.0.1:7001"
		}
	}
	return ms, leader
}

// TestPeerProberNeedsAServerCertificate: the leader's probe, dialed with the
// node's node-to-node TLS settings, gets an answer only from a peer that
// shows a server certificate of the cluster's CA. A member of gossip that
// holds a client or admin certificate, one of another CA, or none at all
// (plaintext) is refused, so it can never prove itself and be added.
func TestPeerProberNeedsAServerCertificate(t *testing.T) {
	dir := testCA(t)
	other := testCA(t)
	leader := material(t, dir, "server")
	prober := NewPeerProber(grpc.WithTransportCredentials(credentials.NewTLS(leader.PeerConfig())))

	b := probeBackend{newFakeBackend(1)}
	good := startServer(t, b, ServerConfig{TLS: material(t, dir, "server").ServerConfig()})
	st, err := prober.Probe(ctxT(t), good.addr)
	if err != nil {
		t.Fatalf("probe of a node with a server certificate: %v", err)
	}
	if st.ID != "n1" || st.RaftAddr != "127.0.0.1:7001" || st.Leaving {
		t.Fatalf("probe answered %+v, want node n1 at raft 127.0.0.1:7001, not leaving", st)
	}
	b.setReady(false, cluster.ReasonLeaving)
	if st, err := prober.Probe(ctxT(t), good.addr); err != nil || !st.Leaving {
		t.Fatalf("probe of a leaving node: leaving %v, err %v", st.Leaving, err)
	}

	for name, cfg := range map[string]ServerConfig{
		"client certificate":             {TLS: material(t, dir, "client").ServerConfig()},
		"admin certificate":              {TLS: material(t, dir, "admin").ServerConfig()},
		"server certificate of other CA": {TLS: material(t, other, "server").ServerConfig()},
		"no certificate (plaintext)":     {},
	} {
		t.Run(name, func(t *testing.T) {
			ts := startServer(t, probeBackend{newFakeBackend(1)}, cfg)
			st, err := prober.Probe(ctxT(t), ts.addr)
			if err == nil {
				t.Fatalf("probe of a peer with a %s answered %+v; want it refused", name, st)
			}
			t.Logf("refused: %v", err)
		})
	}

	// The other way round: a prober without this CA's server certificate
	// gets nothing from a node either.
	t.Run("prober without a certificate", func(t *testing.T) {
		if st, err := NewPeerProber().Probe(ctxT(t), good.addr); err == nil {
			t.Fatalf("a plaintext probe answered %+v", st)
		} else if !strings.Contains(err.Error(), "probe") {
			t.Fatalf("error %v does not say it was a probe", err)
		}
	})
}
