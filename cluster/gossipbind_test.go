package cluster

import (
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/idgen/idgen/cluster/core"
)

// TestGossipRefusesHostNameBind: memberlist handed a name binds every
// interface, so the gossip layer takes only an IP (idgend resolves names).
func TestGossipRefusesHostNameBind(t *testing.T) {
	cfg := &Config{GossipAddr: "localhost:7946", GossipAdvertise: "127.0.0.1:7946"}
	g, err := openGossip(cfg, "node", core.Meta{}, nil, slog.New(slog.NewTextHandler(io.Discard, nil)), nil, nil)
	if err == nil {
		g.shutdown()
		t.Fatal("gossip opened on a host name")
	}
	if !strings.Contains(err.Error(), "not an IP") {
		t.Fatalf("error %q does not say the host is not an IP", err)
	}
}
