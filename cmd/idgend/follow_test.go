package main

import (
	"context"
	"testing"
	"time"

	"github.com/idgen/idgen/rpc/idclient"
)

// drawNodes draws a few batches and returns the nodes that served them.
// Failed calls are skipped: a new cluster's nodes have room for one unit
// per second for their first seconds and flip to not ready meanwhile.
func drawNodes(c *idclient.Client) map[string]bool {
	seen := map[string]bool{}
	for range 9 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		b, err := c.FetchBatch(ctx, 2)
		cancel()
		if err == nil {
			seen[b.Node] = true
		}
	}
	return seen
}

// TestFollowedTargetUsesJoinedNode: a client dialled with idgen:/// and one
// seed draws from a node that joins the running cluster, without a restart,
// and keeps drawing without error, never from it, once it has left.
func TestFollowedTargetUsesJoinedNode(t *testing.T) {
	nodes := startCluster(t, 2)
	c, err := idclient.Dial(idclient.FollowPrefix+nodes[0].grpc, idclient.WithRefreshInterval(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitFor(t, 20*time.Second, "n1 and n2 serving the client", func() bool {
		s := drawNodes(c)
		return s["n1"] && s["n2"]
	})

	n3 := newNode(t, nodeOpts{name: "n3", join: []string{nodes[0].gossip}})
	n3.start()
	waitFor(t, 30*time.Second, "n3 ready", n3.ready)
	waitFor(t, 20*time.Second, "the joined n3 serving the client", func() bool { return drawNodes(c)["n3"] })

	mustIdctl(t, "--target", n3.grpc, "leave")
	if code := n3.wait(20 * time.Second); code != 0 {
		t.Fatalf("n3 exited %d after leave", code)
	}
	// The others keep serving the client, and n3 never again.
	served := map[string]bool{}
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		for n := range drawNodes(c) {
			served[n] = true
		}
	}
	if served["n3"] || !served["n1"] || !served["n2"] {
		t.Fatalf("after n3 left, batches came from %v; want n1 and n2 only", served)
	}
}
