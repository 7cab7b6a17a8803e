package main

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/idgen/idgen/rpc"
)

// TestDescriptorLimitBelowTheBoundsIsSaid: a node whose open-file limit
// cannot hold what its bounds admit says so at start, with the limit, what
// it needs and what to change; one with room says nothing.
func TestDescriptorLimitBelowTheBoundsIsSaid(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	b := rpc.DefaultBounds
	need := descriptorsNeeded(b)
	if need < uint64(b.ClientConns+b.PeerConns+b.Handshakes) {
		t.Fatalf("descriptorsNeeded %d is below the gRPC bounds alone", need)
	}
	if checkDescriptors(b, 1024, true, log) {
		t.Fatal("a limit of 1024 passed for the default bounds")
	}
	for _, want := range []string{"limit=1024", "ulimit -n", "--grpc-max-*"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("the warning %q does not say %q", buf.String(), want)
		}
	}
	buf.Reset()
	if !checkDescriptors(b, need, true, log) || !checkDescriptors(b, 0, false, log) || buf.Len() != 0 {
		t.Errorf("a limit that covers the bounds (or an unknown one) was warned about: %q", buf.String())
	}
}
