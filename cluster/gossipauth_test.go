package cluster

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/raft"

	"github.com/idgen/idgen/cluster/core"
	"github.com/idgen/idgen/scripts/harness"
)

// These tests take the attacker's side of issue 18, finding 2: a process
// that has the gossip key and label (a stolen key file) but no certificate.
// It can run memberlist with any name and any metadata; it cannot answer
// over the authenticated transport as a node of the cluster. Gossip may tell
// the leader that a node exists, never make it a voter or remove one.

// keyedGossip gives every node of a test cluster one gossip key and a label,
// as idgend runs with --gossip-key-file and --cluster-name.
func keyedGossip(key []byte) func(*Config) {
	return func(c *Config) {
		c.GossipKeys = [][]byte{key}
		c.GossipLabel = "idgen/attack-test"
	}
}

func randomBytes(t testing.TB, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// intruderDelegate advertises fixed metadata, in the JSON of gossip.go's meta.
type intruderDelegate struct{ meta []byte }

func (d *intruderDelegate) NodeMeta(int) []byte                        { return d.meta }
func (d *intruderDelegate) NotifyMsg([]byte)                           {}
func (d *intruderDelegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (d *intruderDelegate) LocalState(bool) []byte                     { return nil }
func (d *intruderDelegate) MergeRemoteState([]byte, bool)              {}

// startIntruder runs a bare memberlist with the cluster's gossip settings
// (like's key and label), named name, advertising md. advertise, when set, is
// the gossip address it claims (another node's, to speak in its name); it
// binds a port of its own either way.
func startIntruder(t *testing.T, like Config, name, advertise string, md core.Meta) *memberlist.Memberlist {
	t.Helper()
	b, err := json.Marshal(md)
	if err != nil {
		t.Fatal(err)
	}
	mc := memberlist.DefaultLocalConfig()
	mc.Name = name
	mc.BindAddr, mc.BindPort = "127.0.0.1", harness.NextPort(t)
	if advertise != "" {
		host, port, err := net.SplitHostPort(advertise)
		if err != nil {
			t.Fatal(err)
		}
		mc.AdvertiseAddr = host
		if mc.AdvertisePort, err = strconv.Atoi(port); err != nil {
			t.Fatal(err)
		}
	}
	mc.Delegate = &intruderDelegate{meta: b}
	if err := secureGossip(mc, &like); err != nil {
		t.Fatal(err)
	}
	mc.Logger = log.New(io.Discard, "", 0)
	list, err := memberlist.Create(mc)
	if err != nil {
		t.Fatalf("intruder memberlist: %v", err)
	}
	t.Cleanup(func() { list.Shutdown() })
	return list
}

// sweeps is how many reconcile sweeps the cluster's leaders have run (only
// a leader runs them, so the sum counts the leader's).
func (tc *testCluster) sweeps() uint64 {
	var n uint64
	for _, s := range tc.liveSpecs() {
		n += s.node.recon.sweeps.Load()
	}
	return n
}

// raftServers is n's latest Raft configuration.
func raftServers(t testing.TB, n *Node) []raft.Server {
	t.Helper()
	f := n.rs.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		t.Fatalf("%s: raft configuration: %v", n.Name(), err)
	}
	return f.Configuration().Servers
}

func leaderNode(t testing.TB, tc *testCluster, names ...string) *Node {
	t.Helper()
	var leader string
	harness.WaitFor(t, 20*time.Second, "a leader", func() bool { leader = leaderOf(tc, names...); return leader != "" })
	return tc.node(leader)
}

// duringSweeps calls check every few milliseconds until the cluster's
// leaders have run count more reconcile sweeps, failing the test at the
// first check that fails.
func duringSweeps(t *testing.T, tc *testCluster, count uint64, check func() error) {
	t.Helper()
	start := tc.sweeps()
	limit := harness.Scale(time.Duration(count) * 5 * time.Second)
	deadline := time.Now().Add(limit)
	for tc.sweeps() < start+count {
		if err := check(); err != nil {
			t.Fatalf("after %d of %d reconcile sweeps: %v", tc.sweeps()-start, count, err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d reconcile sweeps in %v%s", tc.sweeps()-start, count, limit, harness.SlowdownNote())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := check(); err != nil {
		t.Fatalf("after %d reconcile sweeps: %v", count, err)
	}
}

// TestGossipOnlyMemberIsNeverInRaft: members that have the gossip key but no
// certificate, advertising made-up Raft and gRPC addresses (one as a fresh
// node, one naming this cluster, one pointing at a real node's gRPC
// address), are never in Raft's configuration, as non-voters or voters.
func TestGossipOnlyMemberIsNeverInRaft(t *testing.T) {
	tc := startThree(t, keyedGossip(randomBytes(t, 32)))
	leader := leaderNode(t, tc, "a", "b", "c")
	own := leader.ident.ownCluster()
	var created int64
	if id := leader.ident.identity.Load(); id != nil {
		created = id.Created
	}
	fakeRaft := func() string { return fmt.Sprintf("127.0.0.1:%d", harness.NextPort(t)) }
	intruders := map[string]core.Meta{
		hex.EncodeToString(randomBytes(t, 16)): {Name: "intruder-fresh", GRPCAddr: "grpc-intruder-fresh:1", RaftAddr: fakeRaft(), Expect: 3},
		hex.EncodeToString(randomBytes(t, 16)): {Name: "intruder-member", GRPCAddr: "grpc-intruder-member:1", RaftAddr: fakeRaft(),
			Member: true, ClusterID: own, Created: created},
		hex.EncodeToString(randomBytes(t, 16)): {Name: "intruder-borrowed", GRPCAddr: tc.specs["b"].cfg.GRPCAddr, RaftAddr: fakeRaft(),
			Member: true, ClusterID: own, Created: created},
	}
	like := tc.specs["a"].cfg
	var seeds []string
	for _, name := range []string{"a", "b", "c"} {
		seeds = append(seeds, tc.specs[name].cfg.GossipAddr)
	}
	for id, md := range intruders {
		l := startIntruder(t, like, id, "", md)
		// Joining every node makes each learn of the intruder by push-pull
		// at once, rather than by broadcasts that may miss a node until
		// the next periodic push-pull.
		if n, err := l.Join(seeds); n != len(seeds) {
			t.Fatalf("intruder %s: joined %d of %d nodes: %v", md.Name, n, len(seeds), err)
		}
	}
	harness.WaitFor(t, 20*time.Second, "every node's gossip to show the intruders alive", func() bool {
		for _, s := range tc.liveSpecs() {
			snap := s.node.gossip.snapshot()
			for id := range intruders {
				if m, ok := snap[id]; !ok || m.State != MemberAlive {
					return false
				}
			}
		}
		return true
	})
	duringSweeps(t, tc, 8, func() error {
		for _, s := range tc.liveSpecs() {
			voters := 0
			for _, srv := range raftServers(t, s.node) {
				if md, bad := intruders[string(srv.ID)]; bad {
					return fmt.Errorf("%s's raft configuration holds intruder %s as a %v at %s", s.node.Name(), md.Name, srv.Suffrage, srv.Address)
				}
				if srv.Suffrage == raft.Voter {
					voters++
				}
			}
			if voters != 3 {
				return fmt.Errorf("%s's raft configuration has %d voters, want 3", s.node.Name(), voters)
			}
		}
		return nil
	})
}

// victimOf picks a voter that is not the leader, and the gossip metadata it
// advertises.
func victimOf(t *testing.T, tc *testCluster, leader *Node) (*nodeSpec, core.Meta) {
	t.Helper()
	for _, name := range []string{"a", "b", "c"} {
		s := tc.specs[name]
		if s.node == leader {
			continue
		}
		s.node.gossip.mu.Lock()
		md := s.node.gossip.local
		s.node.gossip.mu.Unlock()
		return s, md
	}
	t.Fatal("no voter besides the leader")
	return nil, core.Meta{}
}

// stillAVoter checks that id is a voter at raftAddr in n's configuration and
// still owns slot.
func stillAVoter(t testing.TB, n *Node, id, raftAddr string, slot int) error {
	found := false
	for _, s := range raftServers(t, n) {
		if string(s.ID) != id {
			continue
		}
		found = true
		if s.Suffrage != raft.Voter || string(s.Address) != raftAddr {
			return fmt.Errorf("%s's raft configuration holds the victim as a %v at %s, want a voter at %s", n.Name(), s.Suffrage, s.Address, raftAddr)
		}
	}
	if !found {
		return fmt.Errorf("%s's raft configuration no longer holds the victim %s", n.Name(), id)
	}
	var owner string
	n.fsm.view(func(s *core.State) {
		if slot >= 0 && slot < len(s.Slots) {
			owner = s.Slots[slot].Owner
		}
	})
	if owner != id {
		return fmt.Errorf("%s's state gives the victim's slot %d to %q", n.Name(), slot, owner)
	}
	return nil
}

// TestGossipCannotForgeAVotersLeave: memberlist lets a keyed member speak in
// another node's name when it claims that node's gossip address: with a
// higher incarnation it replaces the victim's metadata with a copy marked
// Leaving, then leaves, which tells everyone the victim left. The leader must not
// remove a voter on that news while the voter answers over the
// authenticated transport as itself.
func TestGossipCannotForgeAVotersLeave(t *testing.T) {
	tc := startThree(t, keyedGossip(randomBytes(t, 32)))
	leader := leaderNode(t, tc, "a", "b", "c")
	victim, forged := victimOf(t, tc, leader)
	id, raftAddr, slot := victim.node.ID(), victim.node.cfg.RaftAdvertise, victim.node.Status().Slot
	forged.Leaving = true
	var leaderCfg Config
	for _, s := range tc.liveSpecs() {
		if s.node == leader {
			leaderCfg = s.cfg
		}
	}

	// Watch the leader's gossip view of the victim for the forged states.
	var sawLeft, sawForgedMeta atomic.Int32
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		last := MemberUnknown
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			m := leader.gossip.snapshot()[id]
			if m.State == MemberLeft && last != MemberLeft {
				sawLeft.Add(1)
			}
			if m.State == MemberAlive && m.Meta.Leaving {
				sawForgedMeta.Store(1)
			}
			last = m.State
		}
	}()
	for round := 0; round < 2; round++ {
		l := startIntruder(t, leaderCfg, id, victim.cfg.GossipAddr, forged)
		// Before it knows anyone, each UpdateNode raises its incarnation
		// at once: well above the victim's own, so the leader takes the
		// forged metadata from the first push-pull without a refutation
		// race.
		for i := 0; i < 1000*(round+1); i++ {
			l.UpdateNode(0)
		}
		if _, err := l.Join([]string{leaderCfg.GossipAddr}); err != nil {
			t.Fatalf("round %d: intruder join: %v", round, err)
		}
		// Leaving marks "itself" left at that incarnation; a second
		// push-pull hands the leader that state over TCP at once, before
		// the victim hears of the forgery and refutes it.
		l.Leave(10 * time.Millisecond)
		if _, err := l.Join([]string{leaderCfg.GossipAddr}); err != nil {
			t.Logf("round %d: intruder push-pull after leave: %v", round, err)
		}
		l.Shutdown()
		// The leader gossips no more with a member it holds as left, so the
		// victim may learn of it (and refute) only at its next periodic
		// push-pull, up to 15 s away. Hold on until then, or until
		// ReapAfter and three more sweeps have passed with the victim
		// still a voter; then let the victim push-pull with the leader.
		t0, sweeps0 := time.Now(), tc.sweeps()
		reapAfter := victim.node.cfg.ReapAfter
		back := func() bool {
			m := leader.gossip.snapshot()[id]
			return m.State == MemberAlive && !m.Meta.Leaving
		}
		harness.WaitFor(t, reapAfter+30*time.Second, "the victim alive again, or ReapAfter passed", func() bool {
			if err := stillAVoter(t, leader, id, raftAddr, slot); err != nil {
				t.Fatalf("round %d, %v after the attack (leader saw the victim left %d times): %v", round,
					time.Since(t0).Round(time.Millisecond), sawLeft.Load(), err)
			}
			return back() || (time.Since(t0) > reapAfter && tc.sweeps() >= sweeps0+3)
		})
		if !back() {
			if _, err := victim.node.gossip.list.Join([]string{leaderCfg.GossipAddr}); err != nil {
				t.Logf("round %d: victim push-pull: %v", round, err)
			}
		}
		harness.WaitFor(t, 30*time.Second, "the victim alive again in the leader's gossip", back)
		t.Logf("round %d: the leader has seen the victim left %d times; it was back alive %v after the attack", round, sawLeft.Load(), time.Since(t0).Round(time.Millisecond))
		if err := stillAVoter(t, leader, id, raftAddr, slot); err != nil {
			close(stop)
			<-done
			t.Fatalf("round %d (leader saw the victim left %d times): %v", round, sawLeft.Load(), err)
		}
	}
	close(stop)
	<-done
	t.Logf("the leader saw the victim left %d times (forged metadata seen: %v)", sawLeft.Load(), sawForgedMeta.Load() == 1)
	if sawLeft.Load() == 0 {
		t.Fatal("the forged leave never reached the leader: the test proved nothing")
	}
	duringSweeps(t, tc, 6, func() error { return stillAVoter(t, leader, id, raftAddr, slot) })
	waitReady(t, victim.node)
}

// TestGossipCannotMoveAVotersRaftAddress: the same impersonation advertises
// the victim with a made-up Raft address (each join refutes the cluster's
// view of "itself" again). The leader must not move the voter there, which
// would cut it off as surely as removing it.
func TestGossipCannotMoveAVotersRaftAddress(t *testing.T) {
	tc := startThree(t, keyedGossip(randomBytes(t, 32)))
	leader := leaderNode(t, tc, "a", "b", "c")
	victim, forged := victimOf(t, tc, leader)
	id, raftAddr, slot := victim.node.ID(), victim.node.cfg.RaftAdvertise, victim.node.Status().Slot
	forged.RaftAddr = fmt.Sprintf("127.0.0.1:%d", harness.NextPort(t))
	var leaderCfg Config
	for _, s := range tc.liveSpecs() {
		if s.node == leader {
			leaderCfg = s.cfg
		}
	}
	var sawForged atomic.Int32
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		forgedNow := false
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			m := leader.gossip.snapshot()[id]
			if is := m.Meta.RaftAddr == forged.RaftAddr; is != forgedNow {
				forgedNow = is
				if is {
					sawForged.Add(1)
				}
			}
		}
	}()
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		<-done
	}()
	l := startIntruder(t, leaderCfg, id, victim.cfg.GossipAddr, forged)
	for round := 0; round < 20 && sawForged.Load() < 3; round++ {
		if _, err := l.Join([]string{leaderCfg.GossipAddr}); err != nil {
			t.Logf("round %d: intruder join: %v", round, err)
		}
		start := tc.sweeps()
		harness.WaitFor(t, 20*time.Second, "a reconcile sweep", func() bool {
			if err := stillAVoter(t, leader, id, raftAddr, slot); err != nil {
				t.Fatalf("round %d (the leader saw the forged address %d times): %v", round, sawForged.Load(), err)
			}
			return tc.sweeps() > start
		})
	}
	t.Logf("the leader saw the forged raft address %d times", sawForged.Load())
	if sawForged.Load() == 0 {
		t.Fatal("the forged raft address never reached the leader: the test proved nothing")
	}
	duringSweeps(t, tc, 6, func() error { return stillAVoter(t, leader, id, raftAddr, slot) })
	l.Shutdown()
	waitReady(t, victim.node)
}

// TestGossipDeadVoterThatAnswersIsKept: gossip news that a voter died waits
// for ReapAfter, and even then the voter is removed only if it cannot be
// reached over the authenticated transport. A voter whose gossip stopped
// (as a forged death would look, held long enough) but which answers as
// itself keeps its seat and its slot.
func TestGossipDeadVoterThatAnswersIsKept(t *testing.T) {
	tc := startThree(t, keyedGossip(randomBytes(t, 32)))
	leader := leaderNode(t, tc, "a", "b", "c")
	victim, _ := victimOf(t, tc, leader)
	id, raftAddr, slot := victim.node.ID(), victim.node.cfg.RaftAdvertise, victim.node.Status().Slot
	if err := victim.node.gossip.shutdown(); err != nil {
		t.Fatal(err)
	}
	var since time.Time
	harness.WaitFor(t, 30*time.Second, "the leader's gossip to show the victim dead", func() bool {
		m := leader.gossip.snapshot()[id]
		since = m.Since
		return m.State == MemberDead
	})
	// Past ReapAfter, then more sweeps.
	reapAfter := victim.cfg.ReapAfter
	harness.WaitFor(t, reapAfter+20*time.Second, "ReapAfter to pass", func() bool {
		if err := stillAVoter(t, leader, id, raftAddr, slot); err != nil {
			t.Fatalf("before ReapAfter had passed: %v", err)
		}
		return time.Since(since) > reapAfter
	})
	duringSweeps(t, tc, 6, func() error { return stillAVoter(t, leader, id, raftAddr, slot) })
}

// TestGossipOnlyMemberIsNotABootstrapPeer: nodes that bootstrap a new
// cluster together (--bootstrap-expect 3) count a keyed gossip member
// advertising the same expectation as a peer only if it answers as a node;
// otherwise it would be a voter of the first configuration.
func TestGossipOnlyMemberIsNotABootstrapPeer(t *testing.T) {
	tc := newTestCluster(t)
	keyed := keyedGossip(randomBytes(t, 32))
	for _, s := range []*nodeSpec{tc.add("a", 3), tc.add("b", 3, "a"), tc.add("c", 3, "a")} {
		keyed(&s.cfg)
	}
	tc.start("a")
	tc.start("b")
	like := tc.specs["a"].cfg
	intruder := hex.EncodeToString(randomBytes(t, 16))
	l := startIntruder(t, like, intruder, "", core.Meta{Name: "intruder", GRPCAddr: "grpc-intruder:1",
		RaftAddr: fmt.Sprintf("127.0.0.1:%d", harness.NextPort(t)), Expect: 3})
	seeds := []string{tc.specs["a"].cfg.GossipAddr, tc.specs["b"].cfg.GossipAddr}
	if n, err := l.Join(seeds); n != len(seeds) {
		t.Fatalf("intruder joined %d of %d nodes: %v", n, len(seeds), err)
	}
	// Once a and b see each other and the intruder, three fresh nodes with
	// --bootstrap-expect 3 are in their gossip: enough for gossip alone.
	harness.WaitFor(t, 20*time.Second, "a and b to see each other and the intruder", func() bool {
		for _, name := range []string{"a", "b"} {
			snap := tc.node(name).gossip.snapshot()
			for _, id := range []string{tc.node("a").ID(), tc.node("b").ID(), intruder} {
				if snap[id].State != MemberAlive {
					return false
				}
			}
		}
		return true
	})
	tc.start("c")
	for _, name := range []string{"a", "b", "c"} {
		waitReady(t, tc.node(name))
	}
	leader := leaderNode(t, tc, "a", "b", "c")
	for _, s := range raftServers(t, leader) {
		if string(s.ID) == intruder {
			t.Fatalf("the intruder is a %v of the new cluster at %s", s.Suffrage, s.Address)
		}
	}
	duringSweeps(t, tc, 4, func() error {
		voters := 0
		for _, s := range raftServers(t, leader) {
			if string(s.ID) == intruder {
				return fmt.Errorf("the intruder is a %v of the new cluster at %s", s.Suffrage, s.Address)
			}
			if s.Suffrage == raft.Voter {
				voters++
			}
		}
		if voters != 3 {
			return fmt.Errorf("%d voters, want a, b and c", voters)
		}
		return nil
	})
}

// TestFollowerDialsTheLeaderAtItsRecordedAddress: gossip can be made to show
// a slot holder at any gRPC address (anyone with the key can speak in its
// name); a follower dials the leader where the replicated state records it
// (the leader's own Claim), so a forged address in its gossip view changes
// nothing: its forwarded reserves go on. (Before, followers dialled
// whatever gossip showed, and one never answering stalled them for about
// 50 s.)
func TestFollowerDialsTheLeaderAtItsRecordedAddress(t *testing.T) {
	tc := startThree(t)
	lname := leaderOf(tc, "a", "b", "c")
	if lname == "" {
		t.Fatal("no leader")
	}
	l := tc.node(lname)
	var f *Node
	for _, name := range []string{"a", "b", "c"} {
		if name != lname {
			f = tc.node(name)
			break
		}
	}
	real := tc.specs[lname].cfg.GRPCAddr
	hole, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", harness.NextPort(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer hole.Close() // accepts nothing it answers
	f.gossip.mu.Lock()
	f.gossip.members[l.ID()].Meta.GRPCAddr = hole.Addr().String()
	f.gossip.mu.Unlock()
	if got := f.members.grpcAddrOf(l.ID()); got != real {
		t.Fatalf("the follower dials the leader at %s with its gossip view forged; want its recorded address %s", got, real)
	}
	// Its window is extended by forwarded reserves while gossip lies.
	before := f.Status().Granted
	harness.WaitFor(t, 10*time.Second, "the follower's window to be extended", func() bool {
		tc.issue(f, 50)
		return f.Status().Granted > before
	})
}
