// Package sim is a deterministic simulated world for the slot protocol
// (cluster/DESIGN.md, "The simulator"): seeded virtual nodes that run the
// cluster's core (cluster/core) as the node does, over a modelled Raft,
// network and gossip, with faults planted and every ID checked. It is all
// tests: go test ./cluster/sim -run TestSimulate (scripts/simulate runs it
// long).
package sim
