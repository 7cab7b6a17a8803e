// Package idcheck is the uniqueness checker behind `idctl verify` and the
// chaos runs (scripts/chaos runs idctl verify while it injects faults; `idctl
// history` prints the grant history it checks against). It is a load driver
// that keeps every acknowledged ID (RunLoad into a Checker), and the two
// checks every such run ends with: no duplicate, and every ID inside a window
// the Raft log granted to the node that served it (FetchHistory,
// CheckContainment). Verify does both and returns a Report.
//
// The checker does not trust the nodes' word about uniqueness: it sorts the
// IDs it saw, and it compares them with the windows the Raft log granted, as
// ClusterService.History reports them (generator.Tenure). It draws IDs
// through the client library, rpc/idclient, and asks the nodes over gRPC
// only: like idctl, it imports nothing of the cluster (Raft, gossip, the
// store). A service that takes IDs needs rpc/idclient, not this package.
package idcheck
