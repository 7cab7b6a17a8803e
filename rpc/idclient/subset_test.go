package idclient

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idgen/idgen/cluster"
	"github.com/idgen/idgen/rpc"
	"github.com/idgen/idgen/rpc/rpctest"
	"github.com/idgen/idgen/scripts/harness"
)

// fleetKeys are the keys of a fleet of n pods.
func fleetKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("shortener-%d", i)
	}
	return keys
}

var fleetAddrs = []string{"10.0.0.1:50051", "10.0.0.2:50051", "10.0.0.3:50051", "10.0.0.4:50051"}

// A fleet of 3,000 pods with subsets of 2 of 3 nodes puts each node in about
// 2/3 of the subsets, and a key always ranks the nodes the same way.
func TestSubsetSpreadsFleetEvenly(t *testing.T) {
	addrs := fleetAddrs[:3]
	count := map[string]int{}
	for _, k := range fleetKeys(3000) {
		order := rendezvousOrder(k, addrs)
		reversed := slices.Clone(addrs)
		slices.Reverse(reversed)
		if again := rendezvousOrder(k, reversed); !slices.Equal(order, again) {
			t.Fatalf("key %s: order %v, and %v for the list reversed", k, order, again)
		}
		for _, a := range subsetOf(order, 2, func(string) bool { return false }) {
			count[a]++
		}
	}
	for _, a := range addrs {
		if got := count[a]; got < 1900 || got > 2100 {
			t.Errorf("node %s in %d of 3000 subsets of 2, want 2000 ± 5%%: %v", a, got, count)
		}
	}
}

// The Python client ranks by the same hash (rpc/python checks these orders too).
func TestRendezvousOrderIsPinned(t *testing.T) {
	for key, want := range map[string][]string{
		"shortener-0": {"10.0.0.2:50051", "10.0.0.1:50051", "10.0.0.4:50051", "10.0.0.3:50051"},
		"shortener-1": {"10.0.0.4:50051", "10.0.0.2:50051", "10.0.0.1:50051", "10.0.0.3:50051"},
		"pod-a":       {"10.0.0.1:50051", "10.0.0.4:50051", "10.0.0.3:50051", "10.0.0.2:50051"},
	} {
		if got := rendezvousOrder(key, fleetAddrs); !slices.Equal(got, want) {
			t.Errorf("order for %q: %q, want %q", key, got, want)
		}
	}
}

// A node joining or leaving moves only the clients whose subset it enters
// or leaves, and each of them by that one node.
func TestSubsetChangeMovesFewClients(t *testing.T) {
	noneFailing := func(string) bool { return false }
	three, four := fleetAddrs[:3], fleetAddrs
	const size = 2
	moved := 0
	for _, k := range fleetKeys(3000) {
		before := subsetOf(rendezvousOrder(k, three), size, noneFailing)
		after := subsetOf(rendezvousOrder(k, four), size, noneFailing)
		if !slices.Contains(after, four[3]) {
			if !sameSet(before, after) {
				t.Fatalf("key %s moved from %v to %v, and the new node is not in its subset", k, before, after)
			}
			continue
		}
		moved++
		// Removing the node again is the other direction.
		if kept := slices.DeleteFunc(slices.Clone(after), func(a string) bool { return a == four[3] }); !isSubset(kept, before) {
			t.Fatalf("key %s moved from %v to %v: more than the new node changed", k, before, after)
		}
	}
	// Each of 4 nodes is in half the subsets of 2.
	if moved < 1400 || moved > 1600 {
		t.Errorf("%d of 3000 clients moved when a fourth node joined, want about 1500", moved)
	}
}

func sameSet(a, b []string) bool {
	return len(a) == len(b) && isSubset(a, b)
}

func isSubset(a, b []string) bool {
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return true
}

// Failing nodes stay in the subset, joined by the next ones in the order.
func TestSubsetKeepsFailingNodes(t *testing.T) {
	order := []string{"a", "b", "c", "d"}
	for _, c := range []struct {
		size    int
		failing string
		want    string
	}{
		{2, "", "a b"},
		{2, "b", "a b c"},
		{2, "a b", "a b c d"},
		{2, "a b c d", "a b c d"},
		{1, "a", "a b"},
		{1, "b", "a"},
		{0, "", "a b c d"},
		{4, "", "a b c d"},
		{9, "a", "a b c d"},
	} {
		failing := strings.Fields(c.failing)
		got := subsetOf(order, c.size, func(a string) bool { return slices.Contains(failing, a) })
		if strings.Join(got, " ") != c.want {
			t.Errorf("size %d, failing %q: %v, want %s", c.size, c.failing, got, c.want)
		}
	}
}

// fleetNode is a node on a port of its own from the harness, which can stop
// and start again on it, and counts the connections it accepts. It answers
// Members with its fleet's list.
type fleetNode struct {
	fake         *rpctest.Node
	list         *memberList
	name         string
	addr         string
	srv          *rpc.Server
	accepted     atomic.Int64
	open         atomic.Int64
	membersAsked atomic.Int64
}

// memberList is what a fleet's nodes answer Members with.
type memberList struct {
	mu      sync.Mutex
	members []cluster.MemberInfo
}

// set lists addrs as alive, and gone as left.
func (l *memberList) set(addrs []string, gone ...string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.members = nil
	for _, a := range addrs {
		l.members = append(l.members, cluster.MemberInfo{GRPCAddr: a, GossipState: "alive", Slot: -1})
	}
	for _, a := range gone {
		l.members = append(l.members, cluster.MemberInfo{GRPCAddr: a, GossipState: "left", Slot: -1})
	}
}

// listingNode is a fake node that answers Members from its fleet's list.
type listingNode struct {
	*rpctest.Node
	n *fleetNode
}

func (l listingNode) Members() ([]cluster.MemberInfo, string) {
	l.n.membersAsked.Add(1)
	l.n.list.mu.Lock()
	defer l.n.list.mu.Unlock()
	return slices.Clone(l.n.list.members), ""
}

func startFleetNode(t *testing.T, slot int, list *memberList) *fleetNode {
	t.Helper()
	n := &fleetNode{fake: rpctest.NewNode(slot), list: list, name: fmt.Sprintf("node-%d", slot),
		addr: fmt.Sprintf("127.0.0.1:%d", harness.NextPort(t))}
	n.start(t)
	t.Cleanup(n.stop)
	return n
}

func (n *fleetNode) start(t *testing.T) {
	t.Helper()
	srv, err := rpc.NewServer(rpc.ServerConfig{Backend: listingNode{Node: n.fake, n: n}, NodeName: n.name, BatchSize: 10,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), ReadyPollInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", n.addr)
	if err != nil {
		t.Fatal(err)
	}
	n.srv = srv
	go srv.Serve(countingListener{Listener: lis, n: n})
}

func (n *fleetNode) stop() { n.srv.Shutdown(time.Second) }

type countingListener struct {
	net.Listener
	n *fleetNode
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.n.accepted.Add(1)
	l.n.open.Add(1)
	return &countedConn{Conn: c, n: l.n}, nil
}

type countedConn struct {
	net.Conn
	n      *fleetNode
	closed atomic.Bool
}

func (c *countedConn) Close() error {
	if c.closed.CompareAndSwap(false, true) {
		c.n.open.Add(-1)
	}
	return c.Conn.Close()
}

// fleet starts three nodes and returns them in the rendezvous order of key;
// they answer Members with an empty list until it is set.
func fleet(t *testing.T, key string) []*fleetNode {
	t.Helper()
	byAddr := map[string]*fleetNode{}
	var addrs []string
	list := &memberList{}
	for slot := range 3 {
		n := startFleetNode(t, slot, list)
		byAddr[n.addr] = n
		addrs = append(addrs, n.addr)
	}
	var out []*fleetNode
	for _, a := range rendezvousOrder(key, addrs) {
		out = append(out, byAddr[a])
	}
	return out
}

func addrsOf(nodes []*fleetNode) string {
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.addr)
	}
	return strings.Join(addrs, ",")
}

// onlyServedBy waits until a run of calls is served by want alone; a call
// that fails fails the test.
func onlyServedBy(t *testing.T, c *Client, want *fleetNode, what string) {
	t.Helper()
	harness.WaitFor(t, 20*time.Second, what, func() bool {
		for range 10 {
			b, err := c.FetchBatch(context.Background(), 2)
			if err != nil {
				t.Fatalf("%s: FetchBatch: %v", what, err)
			}
			if b.Node != want.name {
				return false
			}
		}
		return true
	})
}

// A client with a subset of one connects to the first node of its order
// alone. When that node stops, or is up but not ready (NOT_SERVING), its
// calls go on through the next node (and no other); when the node is back
// the client returns to it and drops the other. A node that is not ready
// stays connected meanwhile, so its recovery is seen.
func TestSubsetOfOneFailsOverAndBack(t *testing.T) {
	for name, c := range map[string]struct {
		fail, recover func(*testing.T, *fleetNode)
		keptConnected bool
	}{
		"stopped": {
			fail:    func(_ *testing.T, n *fleetNode) { n.stop() },
			recover: func(t *testing.T, n *fleetNode) { n.start(t) },
		},
		"not ready": {
			fail:          func(_ *testing.T, n *fleetNode) { n.fake.SetReady(false, "no slot") },
			recover:       func(_ *testing.T, n *fleetNode) { n.fake.SetReady(true, "") },
			keptConnected: true,
		},
	} {
		t.Run(name, func(t *testing.T) {
			key := "shortener-" + name
			nodes := fleet(t, key)
			client := dial(t, addrsOf(nodes), WithSubset(1), WithSubsetKey(key))
			onlyServedBy(t, client, nodes[0], "calls served by the subset's node")
			if a, b := nodes[1].accepted.Load(), nodes[2].accepted.Load(); a != 0 || b != 0 {
				t.Fatalf("nodes outside the subset accepted %d and %d connections", a, b)
			}
			if open := nodes[0].open.Load(); open != 1 {
				t.Fatalf("the subset's node holds %d connections of the client, want 1", open)
			}

			c.fail(t, nodes[0])
			onlyServedBy(t, client, nodes[1], "calls served by the next node while the first fails")
			if got := nodes[2].accepted.Load(); got != 0 {
				t.Fatalf("the third node accepted %d connections; one node failing should add one node", got)
			}
			if open := nodes[0].open.Load(); c.keptConnected && open != 1 {
				t.Fatalf("the failing node holds %d connections of the client, want 1 (kept to see it recover)", open)
			}

			c.recover(t, nodes[0])
			onlyServedBy(t, client, nodes[0], "calls back on the first node")
			harness.WaitFor(t, 10*time.Second, "the next node dropped again", func() bool { return nodes[1].open.Load() == 0 })
		})
	}
}

// Every node of a subset of two down: the client fails over to the rest.
func TestSubsetAllDownUsesTheRest(t *testing.T) {
	const key = "shortener-9"
	nodes := fleet(t, key)
	c := dial(t, addrsOf(nodes), WithSubset(2), WithSubsetKey(key))
	nodes[0].fake.SetReady(false, "no slot")
	nodes[1].fake.SetReady(false, "no slot")
	onlyServedBy(t, c, nodes[2], "calls served by the node outside the subset")
}

// An idgen:/// target with a subset asks for the members through its own
// connection: seeded with its first node, the client connects to that node
// alone (once), and when the node leaves it moves to the next one in its
// order, never touching the third.
func TestSubsetOfFollowedTarget(t *testing.T) {
	const key = "shortener-10"
	nodes := fleet(t, key)
	list := nodes[0].list
	list.set([]string{nodes[0].addr, nodes[1].addr, nodes[2].addr})
	c := dial(t, "idgen:///"+nodes[0].addr, WithRefreshInterval(time.Second), WithSubset(1), WithSubsetKey(key))
	onlyServedBy(t, c, nodes[0], "calls served by the first member in the order")
	harness.WaitFor(t, 10*time.Second, "a refresh through the subset", func() bool { return nodes[0].membersAsked.Load() >= 2 })
	if open := nodes[0].open.Load(); open != 1 {
		t.Fatalf("the subset's node holds %d connections of the client, want 1 (Members asked through it)", open)
	}

	list.set([]string{nodes[1].addr, nodes[2].addr}, nodes[0].addr)
	onlyServedBy(t, c, nodes[1], "calls served by the next member once the first left")
	if got := nodes[2].accepted.Load(); got != 0 {
		t.Fatalf("the third node accepted %d connections", got)
	}
}

// Without WithSubsetKey the key is the host name.
func TestSubsetKeyDefaultsToHostName(t *testing.T) {
	host, err := os.Hostname()
	if err != nil {
		t.Skipf("no host name: %v", err)
	}
	nodes := fleet(t, host)
	c := dial(t, addrsOf(nodes), WithSubset(1))
	onlyServedBy(t, c, nodes[0], "calls served by the first node in the host name's order")
	if a, b := nodes[1].accepted.Load(), nodes[2].accepted.Load(); a != 0 || b != 0 {
		t.Fatalf("nodes outside the subset accepted %d and %d connections", a, b)
	}
}
