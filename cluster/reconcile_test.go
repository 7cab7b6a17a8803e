package cluster

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/idgen/idgen/cluster/core"
)

// The leader's membership decisions (reconcile.go), as a pure function of a
// view and the probes' answers. The real-cluster tests (membership_test.go,
// gossipauth_test.go) run the same code through the shell.

var sweepT0 = time.Unix(1_800_000_000, 0)

const sweepReapAfter = 30 * time.Second

// sweepMember is an alive, parsed gossip member at gRPC address "g"+id and
// Raft address "r"+id, of cluster own.
func sweepMember(id string) core.GossipMember {
	return core.GossipMember{ID: id, State: MemberAlive, Parsed: true, Since: sweepT0.Add(-time.Hour),
		Meta: core.Meta{Name: id, GRPCAddr: "g" + id, RaftAddr: "r" + id, ClusterID: "own", Member: true}}
}

func sweepView(now time.Time, servers []raft.Server, members ...core.GossipMember) *core.MemberView {
	v := &core.MemberView{Self: "a", SelfRaftAddr: "ra", Own: "own", Servers: sweepServers(raft.Configuration{Servers: servers}), Members: map[string]core.GossipMember{},
		Addable: map[string]bool{}, StateAddr: map[string]string{}, LeaderApplied: 100, Now: now, ReapAfter: sweepReapAfter}
	for _, m := range append([]core.GossipMember{sweepMember("a")}, members...) {
		v.Members[m.ID] = m
		v.Addable[m.ID] = core.Addable(m, v.Own)
	}
	return v
}

func voter(id string) raft.Server {
	return raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(id), Address: raft.ServerAddress("r" + id)}
}

func nonvoter(id string) raft.Server {
	return raft.Server{Suffrage: raft.Nonvoter, ID: raft.ServerID(id), Address: raft.ServerAddress("r" + id)}
}

// answering: every probe of id at any address gets st (with its ID set),
// or err.
func answering(probes map[core.ProbeKey]bool, who map[string]core.ProbeAnswer) map[core.ProbeKey]core.ProbeAnswer {
	out := map[core.ProbeKey]core.ProbeAnswer{}
	for k := range probes {
		if a, ok := who[k.ID]; ok {
			out[k] = a
		} else {
			out[k] = core.ProbeAnswer{Err: errors.New("connection refused")}
		}
	}
	return out
}

func member(id string, applied uint64) core.ProbeAnswer {
	anyDC := -1 // (a node of this build says its datacenter: shownToTakePart)
	return core.ProbeAnswer{Status: Status{ID: id, RaftAddr: "r" + id, ClusterID: "own", AppliedIndex: applied, LastIndex: applied, Datacenter: &anyDC}}
}

func sweep(ls *core.LeaderState, v *core.MemberView, who map[string]core.ProbeAnswer) []core.MemberAction {
	probes, gone := ls.SweepProbes(v)
	return ls.SweepActions(v, gone, answering(probes, who))
}

func kinds(acts []core.MemberAction) string {
	var b []string
	for _, a := range acts {
		b = append(b, a.Kind.String()+" "+a.ID)
	}
	return strings.Join(b, ", ")
}

// TestSweepAddsAProvenMemberAndPromotesItASecondLater: a fresh member that
// answers as itself is added as a non-voter; once it follows the log it is
// promoted, but not before it has been a non-voter for a second.
func TestSweepAddsAProvenMemberAndPromotesItASecondLater(t *testing.T) {
	ls := core.NewLeaderState()
	fresh := sweepMember("b")
	fresh.Meta.ClusterID, fresh.Meta.Member = "", false
	v := sweepView(sweepT0, []raft.Server{voter("a")}, fresh)
	acts := sweep(&ls, v, map[string]core.ProbeAnswer{"b": {Status: Status{ID: "b", RaftAddr: "rb"}}})
	if got := kinds(acts); got != "add non-voter b" || acts[0].Addr != "rb" {
		t.Fatalf("fresh member: %s (%+v), want add non-voter b at rb", got, acts)
	}
	ls.Added("b", sweepT0)
	servers := []raft.Server{voter("a"), nonvoter("b")}
	b := sweepMember("b")
	if got := kinds(sweep(&ls, sweepView(sweepT0.Add(500*time.Millisecond), servers, b), map[string]core.ProbeAnswer{"b": member("b", 100)})); got != "" {
		t.Fatalf("half a second after it was added: %s, want nothing", got)
	}
	if got := kinds(sweep(&ls, sweepView(sweepT0.Add(time.Second), servers, b), map[string]core.ProbeAnswer{"b": member("b", 100-core.PromoteMaxLag-1)})); got != "refuse b" {
		t.Fatalf("a non-voter behind the log: %s, want refuse b", got)
	}
	if got := kinds(sweep(&ls, sweepView(sweepT0.Add(time.Second), servers, b), map[string]core.ProbeAnswer{"b": member("b", 90)})); got != "promote b" {
		t.Fatalf("a second later, following the log: %s, want promote b", got)
	}
}

// TestSweepNeverReapsOnOneFailedProbe: a member is removed on silence only
// once gossip has shown it away for reap-after and its probes have failed
// for half of it; a "left" it does not confirm itself is no faster. (An
// attacker with the gossip key forged a "left" in a live voter's name and
// kept its gRPC port full: the leader's one probe failed and it removed the
// voter twice in 4 s.)
func TestSweepNeverReapsOnOneFailedProbe(t *testing.T) {
	servers := []raft.Server{voter("a"), voter("b"), voter("c")}
	c := sweepMember("c")
	run := func(t *testing.T, b core.GossipMember, who func(at time.Duration) map[string]core.ProbeAnswer) time.Duration {
		t.Helper()
		ls := core.NewLeaderState()
		for at := time.Duration(0); at <= 3*sweepReapAfter; at += sweepReapAfter / 10 {
			w := map[string]core.ProbeAnswer{"c": member("c", 100)}
			for id, a := range who(at) {
				w[id] = a
			}
			if got := kinds(sweep(&ls, sweepView(sweepT0.Add(at), servers, b, c), w)); got == "reap b" {
				return at
			} else if got != "" && got != "refuse b" {
				t.Fatalf("at %v: %s", at, got)
			}
		}
		return -1
	}
	silent := func(time.Duration) map[string]core.ProbeAnswer { return nil }
	dead := sweepMember("b")
	dead.State, dead.Since = MemberDead, sweepT0
	if at := run(t, dead, silent); at != sweepReapAfter {
		t.Errorf("dead and silent: reaped at %v, want at reap-after (%v), after the probes of its second half", at, sweepReapAfter)
	}
	left := sweepMember("b")
	left.State, left.Since = MemberLeft, sweepT0
	if at := run(t, left, silent); at != sweepReapAfter {
		t.Errorf("shown left, never confirmed, silent: reaped at %v, want at reap-after (%v)", at, sweepReapAfter)
	}
	leaving := func(time.Duration) map[string]core.ProbeAnswer {
		return map[string]core.ProbeAnswer{"b": {Status: Status{ID: "b", RaftAddr: "rb", ClusterID: "own", Leaving: true}}}
	}
	if at := run(t, left, leaving); at != 0 {
		t.Errorf("shown left and saying so itself: reaped at %v, want at once", at)
	}
	// One answer in the second half starts the run of failures again.
	once := func(at time.Duration) map[string]core.ProbeAnswer {
		if at == sweepReapAfter*9/10 {
			return map[string]core.ProbeAnswer{"b": member("b", 100)}
		}
		return nil
	}
	if at := run(t, dead, once); at < sweepReapAfter*9/10+sweepReapAfter/2 {
		t.Errorf("answered once at %v: reaped at %v, want half of reap-after of failures after that", sweepReapAfter*9/10, at)
	}
	// A probe that fails only now and then is never enough.
	if at := run(t, left, func(at time.Duration) map[string]core.ProbeAnswer {
		if (at/(sweepReapAfter/10))%3 != 0 {
			return map[string]core.ProbeAnswer{"b": member("b", 100)}
		}
		return nil
	}); at >= 0 {
		t.Errorf("a live member whose probe fails one sweep in three was reaped at %v", at)
	}
}

// TestSweepKeepsAVoterThatAnswersRaft: a voter gossip shows dead (a forged
// "dead" at the highest incarnation, which its refutation cannot beat)
// whose every probe fails (its gRPC port kept full of a stranger's
// handshakes) but which answers the leader's Raft heartbeats is not
// removed; once its Raft answers stop too, it is, on the usual schedule
// from when they stopped. (Outside attack round 9 had the leader reap a
// live voter and free its slot with the gossip key and a full gRPC port.)
func TestSweepKeepsAVoterThatAnswersRaft(t *testing.T) {
	servers := []raft.Server{voter("a"), voter("b"), voter("c")}
	dead := sweepMember("b")
	dead.State, dead.Since = MemberDead, sweepT0
	ls := core.NewLeaderState()
	raftStops := 2 * sweepReapAfter
	for at := time.Duration(0); at <= 4*sweepReapAfter; at += sweepReapAfter / 10 {
		now := sweepT0.Add(at)
		v := sweepView(now, servers, dead, sweepMember("c"))
		v.RaftAnswered = func(id string) time.Time {
			if id == "b" && at <= raftStops {
				return now
			}
			return sweepT0.Add(raftStops)
		}
		got := kinds(sweep(&ls, v, map[string]core.ProbeAnswer{"c": member("c", 100)}))
		switch {
		case got == "reap b" && at <= raftStops:
			t.Fatalf("at %v: reaped b while it answers raft", at)
		case got == "reap b":
			if at < raftStops+sweepReapAfter/2 {
				t.Errorf("reaped at %v, %v after its raft answers stopped: want at least half of reap-after of failed probes after that", at, at-raftStops)
			}
			return
		case got != "" && got != "refuse b":
			t.Fatalf("at %v: %s", at, got)
		}
	}
	t.Fatalf("b was never reaped after its raft answers stopped at %v", raftStops)
}

// TestSweepReapsOnlyWhatDoesNotAnswerAsAMember: a server gossip shows dead
// for reap-after goes when it says it is leaving or an authenticated answer
// shows it is not there, and stays while it answers as a member (the gossip
// news may be forged); silence is TestSweepNeverReapsOnOneFailedProbe's.
func TestSweepReapsOnlyWhatDoesNotAnswerAsAMember(t *testing.T) {
	dead := sweepMember("b")
	dead.State, dead.Since = MemberDead, sweepT0
	servers := []raft.Server{voter("a"), voter("b"), voter("c")}
	c := sweepMember("c")
	for _, tc := range []struct {
		name  string
		after time.Duration
		who   map[string]core.ProbeAnswer
		want  string
	}{
		{"before reap-after", sweepReapAfter - time.Second, nil, ""},
		{"silent, asked once", sweepReapAfter, nil, ""},
		{"leaving", sweepReapAfter, map[string]core.ProbeAnswer{"b": {Status: Status{ID: "b", RaftAddr: "rb", ClusterID: "own", Leaving: true}}}, "reap b"},
		{"another cluster's", sweepReapAfter, map[string]core.ProbeAnswer{"b": {Status: Status{ID: "b", RaftAddr: "rb", ClusterID: "other"}}}, "reap b"},
		{"another node at its address", sweepReapAfter, map[string]core.ProbeAnswer{"b": {Status: Status{ID: "x", RaftAddr: "rb", ClusterID: "own"}}}, "reap b"},
		{"answers as a member", sweepReapAfter, map[string]core.ProbeAnswer{"b": member("b", 100)}, "refuse b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ls := core.NewLeaderState()
			who := map[string]core.ProbeAnswer{"c": member("c", 100)}
			for id, a := range tc.who {
				who[id] = a
			}
			if got := kinds(sweep(&ls, sweepView(sweepT0.Add(tc.after), servers, dead, c), who)); got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
	// The leader itself is never reaped, whatever gossip says of it.
	ls := core.NewLeaderState()
	v := sweepView(sweepT0.Add(time.Hour), servers, dead, c)
	self := v.Members["a"]
	self.State = MemberLeft
	v.Members["a"] = self
	for _, a := range sweep(&ls, v, nil) {
		if a.ID == "a" {
			t.Fatalf("an action on the leader itself: %+v", a)
		}
	}
}

// TestSweepWaitsForTheOldOwnerOfAnAddress: a wiped node comes back as a new
// ID at its old Raft address; the old ID goes only once gossip stops
// showing it alive, and the new one is added after it.
func TestSweepWaitsForTheOldOwnerOfAnAddress(t *testing.T) {
	old := sweepMember("b0")
	old.Meta.RaftAddr = "rb"
	wiped := sweepMember("b1")
	wiped.Meta.RaftAddr, wiped.Meta.ClusterID, wiped.Meta.Member = "rb", "", false
	servers := []raft.Server{voter("a"), {Suffrage: raft.Voter, ID: "b0", Address: "rb"}}
	who := map[string]core.ProbeAnswer{"b1": {Status: Status{ID: "b1", RaftAddr: "rb"}}, "b0": {Status: Status{ID: "b0", RaftAddr: "rb", ClusterID: "own"}}}
	ls := core.NewLeaderState()
	if got := kinds(sweep(&ls, sweepView(sweepT0, servers, old, wiped), who)); got != "wait b1" {
		t.Fatalf("old owner alive: %s, want wait b1", got)
	}
	old.State, old.Since = MemberDead, sweepT0
	delete(who, "b0")
	if got := kinds(sweep(&ls, sweepView(sweepT0.Add(time.Second), servers, old, wiped), who)); got != "reap b0, add non-voter b1" {
		t.Fatalf("old owner dead: %s, want reap b0, add non-voter b1", got)
	}
}

// TestSweepRefusesWhatGossipAloneClaims: a member that does not answer as
// itself is not added, is asked again only after a backoff, and a member of
// another cluster is never asked at all.
func TestSweepRefusesWhatGossipAloneClaims(t *testing.T) {
	liar := sweepMember("c")
	other := sweepMember("d")
	other.Meta.ClusterID = "other"
	ls := core.NewLeaderState()
	servers := []raft.Server{voter("a")}
	who := map[string]core.ProbeAnswer{"c": {Status: Status{ID: "someone-else", RaftAddr: "rc"}}, "d": member("d", 100)}
	acts := sweep(&ls, sweepView(sweepT0, servers, liar, other), who)
	if got := kinds(acts); got != "refuse c, note d" || !errors.Is(acts[0].Err, core.ErrProbeOtherNode) {
		t.Fatalf("got %s (%+v), want refuse c (another node answers), note d", got, acts)
	}
	probes, _ := ls.SweepProbes(sweepView(sweepT0.Add(core.ProbeBackoffMin/2), servers, liar, other))
	if len(probes) != 0 {
		t.Fatalf("within the backoff: probes %v, want none", probes)
	}
	if ls.Wake != sweepT0.Add(core.ProbeBackoffMin) {
		t.Fatalf("wake %v, want the backoff's end %v", ls.Wake, sweepT0.Add(core.ProbeBackoffMin))
	}
	probes, _ = ls.SweepProbes(sweepView(sweepT0.Add(core.ProbeBackoffMin), servers, liar, other))
	if !probes[core.ProbeKey{ID: "c", Addr: "gc"}] || len(probes) != 1 {
		t.Fatalf("after the backoff: probes %v, want c at gc only", probes)
	}
}

// TestSweepReapsANonvoterThatNeverProvesItself, and moves a server whose
// Raft address changed only when it says so itself.
func TestSweepReapsANonvoterThatNeverProvesItself(t *testing.T) {
	ls := core.NewLeaderState()
	servers := []raft.Server{voter("a"), nonvoter("b")}
	b := sweepMember("b")
	if got := kinds(sweep(&ls, sweepView(sweepT0, servers, b), nil)); got != "refuse b" {
		t.Fatalf("silent non-voter: %s, want refuse b", got)
	}
	if got := kinds(sweep(&ls, sweepView(sweepT0.Add(sweepReapAfter), servers, b), nil)); got != "reap b" {
		t.Fatalf("silent non-voter after reap-after: %s, want reap b", got)
	}

	moved := sweepMember("c")
	moved.Meta.RaftAddr = "rc2"
	servers = []raft.Server{voter("a"), voter("c")}
	if got := kinds(sweep(&ls, sweepView(sweepT0, servers, moved), map[string]core.ProbeAnswer{"c": member("c", 100)})); got != "refuse c" {
		t.Fatalf("gossip shows a new address the node does not: %s, want refuse c", got)
	}
	acts := sweep(&ls, sweepView(sweepT0, servers, moved), map[string]core.ProbeAnswer{"c": {Status: Status{ID: "c", RaftAddr: "rc2", ClusterID: "own"}}})
	if got := kinds(acts); got != "move c" || acts[0].Addr != "rc2" || !acts[0].Voter {
		t.Fatalf("the node says so too: %s (%+v), want move c to rc2 as a voter", got, acts)
	}
}
