package cluster

import (
	"container/list"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"

	"github.com/hashicorp/memberlist"

	"github.com/idgen/idgen/cluster/door"
)

// gossipMaxStreams caps the gossip port's TCP streams open at once
// (cmd/idgend/README.md, "Securing a cluster"). memberlist gives each accepted stream a
// goroutine and a deadline of its TCPTimeout (10 s, 1 s with the local
// profile), but no cap: a flood of silent connections would cost a
// goroutine each for that long. Streams are push/pull exchanges and
// fallbacks of failed UDP probes, a few per node at a time.
const gossipMaxStreams = 128

// gossipMaxStreamsPerAddr caps the streams one remote address may hold
// open at once, so that one stranger cannot take every slot from the
// node's peers (it could, redialling each one the deadline closes). A peer
// holds one or two at a time (a push/pull, a fallback probe); 16 leaves
// room for several nodes behind one address.
const gossipMaxStreamsPerAddr = 16

// gossipServerStreams is how many more streams the hosts of the log's
// members may hold open: a room a stranger flooding the shared streams
// from any number of addresses cannot take (door.Room's rule on the other
// ports). The per-address cap does not apply in it.
const gossipServerStreams = 32

// gossipStreamBudget is how many bytes one inbound gossip stream may send.
// memberlist reads a stream's whole message before it decrypts it (and
// takes up to 20 MiB for a push/pull), so without a budget anyone who can
// reach the port, key or not, makes the node buffer 20 MiB per stream. A
// stream carries one message: a push/pull of the whole member list (about
// 700 bytes a member, with this node's metadata), a ping or a user
// message, so 256 KiB is room for hundreds of members. Past it the stream
// is closed, and the most the streams can hold is the cap times this.
const gossipStreamBudget = 256 << 10

// errStreamBudget: an inbound gossip stream sent more than its budget.
var errStreamBudget = fmt.Errorf("gossip stream sent more than its budget of %d bytes", gossipStreamBudget)

// cappedTransport is memberlist's own NetTransport with a cap on inbound
// TCP streams: one past it is closed before memberlist sees it.
type cappedTransport struct {
	*memberlist.NetTransport
	streams chan net.Conn
	slots   chan struct{}
	servers func(host string) bool
	room    chan struct{} // the servers' streams (gossipServerStreams)
	done    chan struct{} // closed by Shutdown: streams still arriving are closed
	stopped chan struct{} // closed once the NetTransport is shut down
	once    sync.Once
	wg      sync.WaitGroup
	refused *door.RateLog
	counts  *door.Counts
	mu      sync.Mutex
	byPeer  map[string]int // open shared streams per remote address (door.Peer)
	shared  *list.List     // of *slotConn, the shared streams, oldest first
}

// The gossip port's bounds, as idgen_door_refused_total names them.
const (
	boundGossipStreams        = "gossip_streams"
	boundGossipStreamsPerAddr = "gossip_streams_per_address"
	boundGossipBudget         = "gossip_stream_budget"
	boundGossipStreamsShare   = "gossip_streams_share"
)

// capGossipStreams makes mc use a NetTransport on mc's bind address with
// the stream cap. memberlist.Create would build the same transport itself;
// the caller shuts it down if Create fails.
func capGossipStreams(mc *memberlist.Config, max int, servers func(host string) bool, refusals *door.RateLog, counts *door.Counts) (*cappedTransport, error) {
	if servers == nil {
		servers = func(string) bool { return false }
	}
	nc := &memberlist.NetTransportConfig{BindAddrs: []string{mc.BindAddr}, BindPort: mc.BindPort, Logger: mc.Logger, MetricLabels: mc.MetricLabels}
	nt, err := memberlist.NewNetTransport(nc)
	// With port 0 the UDP port may be taken after TCP picked it; memberlist
	// retries such binds, so do the same.
	for try := 1; err != nil && mc.BindPort == 0 && try < 10 && strings.Contains(err.Error(), "address already in use"); try++ {
		nt, err = memberlist.NewNetTransport(nc)
	}
	if err != nil {
		return nil, fmt.Errorf("could not set up network transport: %w", err)
	}
	if mc.BindPort == 0 { // as memberlist.Create does for its own transport
		mc.BindPort = nt.GetAutoBindPort()
		if mc.AdvertisePort == 0 {
			mc.AdvertisePort = mc.BindPort
		}
	}
	t := &cappedTransport{
		NetTransport: nt,
		streams:      make(chan net.Conn),
		slots:        make(chan struct{}, max),
		servers:      servers,
		room:         make(chan struct{}, gossipServerStreams),
		done:         make(chan struct{}),
		stopped:      make(chan struct{}),
		refused:      refusals,
		counts:       counts,
		byPeer:       map[string]int{},
		shared:       list.New(),
	}
	t.wg.Add(1)
	go t.relay()
	mc.Transport = t
	return t, nil
}

// StreamCh is where memberlist takes inbound streams from.
func (t *cappedTransport) StreamCh() <-chan net.Conn { return t.streams }

func (t *cappedTransport) relay() {
	defer t.wg.Done()
	in := t.NetTransport.StreamCh()
	for {
		var c net.Conn
		select {
		case c = <-in:
		case <-t.stopped:
			return
		}
		select {
		case <-t.done: // shutting down: the NetTransport must not block on us
			c.Close()
			continue
		default:
		}
		remote := c.RemoteAddr()
		peer := door.Peer(remote)
		if t.servers(door.Host(remote)) {
			select {
			case t.room <- struct{}{}:
				t.hand(t.budgeted(c, func() { <-t.room }))
				continue
			default: // the room is full: the shared streams, like anyone
			}
		}
		if !t.takePeer(peer) {
			c.Close()
			t.counts.Add(boundGossipStreamsPerAddr)
			t.refused.Log(slog.LevelWarn, "cap_per_address", peer, "refused a gossip stream: its address holds its cap of open streams",
				"remote", fmt.Sprint(remote), "cap", gossipMaxStreamsPerAddr)
			continue
		}
		if len(t.slots) == cap(t.slots) {
			if v := t.fairVictim(peer); v != nil {
				v.Close() // frees its slot at once
				t.counts.Add(boundGossipStreamsShare)
				t.refused.Log(slog.LevelWarn, "share", v.peer, "closed a gossip stream of an address past its share of the port's streams, for a newcomer",
					"remote", fmt.Sprint(v.RemoteAddr()), "newcomer", fmt.Sprint(remote))
			}
		}
		select {
		case t.slots <- struct{}{}:
		default:
			t.freePeer(peer)
			c.Close()
			t.counts.Add(boundGossipStreams)
			t.refused.Log(slog.LevelWarn, "cap", peer, "refused a gossip stream: the port holds its cap of open streams",
				"remote", fmt.Sprint(remote), "cap", cap(t.slots))
			continue
		}
		var sc *slotConn
		sc = t.budgeted(c, func() {
			t.mu.Lock()
			t.shared.Remove(sc.elem)
			t.mu.Unlock()
			<-t.slots
			t.freePeer(peer)
		})
		sc.peer = peer
		t.mu.Lock()
		sc.elem = t.shared.PushBack(sc)
		t.mu.Unlock()
		t.hand(sc)
	}
}

// fairVictim is the shared stream to close for a newcomer from peer
// (already counted in byPeer) when the port's streams are full, or nil:
// the oldest of the address holding the most, if that is past its share
// (the streams over the addresses holding any) and two more than the
// newcomer's address holds. A peer's push/pull takes milliseconds, so a
// stranger from a few addresses holding every stream until its deadline
// no longer keeps a node that is not yet a member (and so has no room)
// from joining; one with as many addresses as streams is not told apart.
func (t *cappedTransport) fairVictim(peer string) *slotConn {
	t.mu.Lock()
	defer t.mu.Unlock()
	mine := t.byPeer[peer] - 1
	share := max(1, cap(t.slots)/max(1, len(t.byPeer)))
	top, most := "", 0
	for p, n := range t.byPeer {
		if n > most {
			top, most = p, n
		}
	}
	if most <= share || most-mine < 2 {
		return nil
	}
	for e := t.shared.Front(); e != nil; e = e.Next() {
		if sc := e.Value.(*slotConn); sc.peer == top {
			return sc
		}
	}
	return nil
}

// budgeted is c read to its budget, calling free on its first Close.
func (t *cappedTransport) budgeted(c net.Conn, free func()) *slotConn {
	return &slotConn{Conn: c, free: free, budget: gossipStreamBudget, over: func() {
		t.counts.Add(boundGossipBudget)
		t.refused.Log(slog.LevelWarn, "budget", door.Peer(c.RemoteAddr()), "closed a gossip stream that sent more than its budget",
			"remote", fmt.Sprint(c.RemoteAddr()), "budget_bytes", gossipStreamBudget)
	}}
}

// hand gives memberlist an admitted stream.
func (t *cappedTransport) hand(sc *slotConn) {
	select {
	case t.streams <- sc:
	case <-t.done:
		sc.Close()
	}
}

// takePeer counts a new stream from peer, unless peer holds its cap.
func (t *cappedTransport) takePeer(peer string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.byPeer[peer] >= gossipMaxStreamsPerAddr {
		return false
	}
	t.byPeer[peer]++
	return true
}

// freePeer uncounts one of peer's streams.
func (t *cappedTransport) freePeer(peer string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.byPeer[peer]--; t.byPeer[peer] <= 0 {
		delete(t.byPeer, peer)
	}
}

// Shutdown stops the relay and the transport; it is safe to call twice.
func (t *cappedTransport) Shutdown() error {
	var err error
	t.once.Do(func() {
		close(t.done)
		err = t.NetTransport.Shutdown() // its accept loop ends; the relay drains it
		close(t.stopped)
		t.wg.Wait()
	})
	return err
}

// slotConn frees its stream slot on the first Close, and reads at most
// budget bytes: past them it reports over once and fails every read.
// memberlist reads a stream from one goroutine.
type slotConn struct {
	net.Conn
	peer   string        // shared streams: the remote address (door.Peer)
	elem   *list.Element // shared streams: in cappedTransport.shared
	once   sync.Once
	free   func()
	budget int
	over   func()
}

func (c *slotConn) Read(p []byte) (int, error) {
	if c.budget <= 0 {
		if c.budget == 0 {
			c.budget = -1
			c.over()
		}
		return 0, errStreamBudget
	}
	if len(p) > c.budget {
		p = p[:c.budget]
	}
	n, err := c.Conn.Read(p)
	c.budget -= n
	return n, err
}

func (c *slotConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.free)
	return err
}
