package idclient

import (
	"fmt"
	"testing"

	"github.com/idgen/idgen/rpc"
	"github.com/idgen/idgen/rpc/rpctest"
)

type node struct {
	fake *rpctest.Node
	srv  *rpc.Server
	addr string
}

// startNode runs a real rpc.Server for a fake node on 127.0.0.1:0.
func startNode(t testing.TB, slot int, cfg rpc.ServerConfig) *node {
	t.Helper()
	return startNodeReady(t, slot, cfg, true, "")
}

// startNodeReady starts a node whose readiness is set before it serves, so
// its prefetch buffer holds nothing minted while it was ready.
func startNodeReady(t testing.TB, slot int, cfg rpc.ServerConfig, ready bool, reason string) *node {
	t.Helper()
	f := rpctest.NewNode(slot)
	f.SetReady(ready, reason)
	cfg.Backend = f
	cfg.NodeName = fmt.Sprintf("node-%d", slot)
	srv, addr := rpctest.Serve(t, cfg)
	return &node{fake: f, srv: srv, addr: addr}
}
