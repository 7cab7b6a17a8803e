package main

import (
	"log/slog"

	"github.com/idgen/idgen/rpc"
)

// descriptorsNeeded is how many file descriptors the node's bounds let its
// ports hold at once, plus room for its files and outbound connections:
// the gRPC bounds, the Raft port's 256, gossip's 128 streams and 32 more
// of the cluster's servers, the admin port's connections and 256 more.
func descriptorsNeeded(b rpc.Bounds) uint64 {
	return uint64(b.Descriptors() + 256 + 128 + 32 + adminMaxConns + 256)
}

// checkDescriptors warns when the open-file limit is below what the
// bounds need: past it, accept fails and every door refuses, strangers'
// connections or not.
func checkDescriptors(b rpc.Bounds, limit uint64, known bool, log *slog.Logger) bool {
	need := descriptorsNeeded(b)
	if !known || limit >= need {
		return true
	}
	log.Warn("the open-file limit is below what the connection bounds need: raise it (ulimit -n, LimitNOFILE=, the container's nofile) or lower the --grpc-max-* bounds",
		"limit", limit, "needed", need, "grpc_max_client_conns", b.ClientConns, "grpc_max_handshakes", b.Handshakes, "grpc_max_peer_conns", b.PeerConns)
	return false
}
