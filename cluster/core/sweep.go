package core

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/idgen/idgen/generator"
)

// The leader's membership decisions (reconcile, leader.go), as functions of
// explicit inputs like the others in decide.go: a sweep gathers a
// memberView (Raft's configuration, gossip's members, the replica's nodes,
// the time), asks sweepProbes whom to probe, probes them, and carries out
// the memberActions sweepActions returns. Both read and update only the
// leader's bookkeeping (leaderState: since when a member is absent, a
// non-voter unproven, a probe backed off); nothing here reads a clock, Raft,
// gossip or the network.

// MemberView is what one reconcile sweep reads.
type MemberView struct {
	// Self is this leader's node ID, SelfRaftAddr the Raft address it
	// advertises now, Own its cluster. SelfSpeaksAs is the address its Raft
	// RPCs name (resolved), which its followers report as their leader's.
	Self, SelfRaftAddr, SelfSpeaksAs, Own string
	// LogHolds says whether this leader's log holds the entry a member
	// reports as its last applied command (logmatch.go); nil: not checked.
	LogHolds func(index, hash uint64) error
	// Servers is Raft's configuration.
	Servers []Server
	// Members is gossip's view, by node ID; Addable says of each whether
	// it may be added (addable: of this cluster, or fresh).
	Members map[string]GossipMember
	Addable map[string]bool
	// StateAddr is the gRPC address each node's own Claim recorded in the
	// replica; StateOnly the nodes (sorted) in the replica but not in Raft.
	StateAddr map[string]string
	StateOnly []string
	// LeaderApplied is this leader's applied index.
	LeaderApplied uint64
	Now           time.Time
	ReapAfter     time.Duration
	// Protocols is what every server of Raft's configuration speaks
	// (Node.clusterProtocol; zero: this build's range).
	Protocols ProtocolRange
	// Layout is the cluster's layout (nil before Init): a member that could
	// never claim under it is not added or promoted (canTakePart).
	Layout *generator.Layout
	// Holders are the nodes that hold a slot in the replica.
	Holders map[string]bool
	// RaftAnswered is when a server last answered this leader's
	// AppendEntries over the Raft transport (zero: never; nil: not known).
	RaftAnswered func(id string) time.Time
}

// raftAnsweredSince: server id answered this leader's Raft at or after t.
func (v *MemberView) raftAnsweredSince(id string, t time.Time) bool {
	return v.RaftAnswered != nil && !v.RaftAnswered(id).Before(t)
}

// protocols is the range a member must share with the servers to be added
// or promoted.
func (v *MemberView) protocols() ProtocolRange {
	if v.Protocols == (ProtocolRange{}) {
		return OwnProtocols
	}
	return v.Protocols
}

// memberActKind is what a memberAction does.
type memberActKind int

const (
	ActOwnAddr     memberActKind = iota // re-add this leader at Addr, keeping its suffrage (Voter)
	ActReap                             // remove ID from the state and Raft, for Why
	ActRefuse                           // log once why nothing is done for ID (Name, Why, Err)
	ActNote                             // log Why for ID at debug level: nothing is done
	ActWait                             // log Why for ID: nothing is done yet
	ActAddNonvoter                      // add ID (Name) at Raft address Addr as a non-voter
	ActMoveAddr                         // re-add ID at Addr, keeping its suffrage (Voter)
	ActPromote                          // make the non-voter ID at Addr a voter
)

func (k memberActKind) String() string {
	if int(k) < len(memberActNames) {
		return memberActNames[k]
	}
	return fmt.Sprintf("memberActKind(%d)", int(k))
}

var memberActNames = []string{"update own address", "reap", "refuse", "note", "wait", "add non-voter", "move", "promote"}

// MemberAction is one thing a sweep does, in the order sweepActions lists
// them: reaps first, then additions, moves and promotions.
type MemberAction struct {
	Kind           memberActKind
	ID, Name, Addr string
	Voter          bool
	// Why: the reason (reap, refuse, note, wait), or the address moved from
	// (own address, move).
	Why string
	Err error
}

// alive: gossip shows id alive.
func (v *MemberView) alive(id string) bool {
	m, seen := v.Members[id]
	return seen && m.State == MemberAlive
}

// addrsOf is where id may answer (probeAddrs).
func (v *MemberView) addrsOf(ls *LeaderState, id string) []string {
	m, seen := v.Members[id]
	return probeAddrs(id, ls.provenAddr[id], v.StateAddr[id], m, seen)
}

// memberIDs is gossip's members, sorted.
func (v *MemberView) memberIDs() []string { return slices.Sorted(maps.Keys(v.Members)) }

// candidate: gossip shows m alive with a Raft address, it is not this
// leader, and it may be added.
func (v *MemberView) candidate(id string, m GossipMember) bool {
	return m.State == MemberAlive && m.Parsed && m.Meta.RaftAddr != "" && id != v.Self && v.Addable[id]
}

func joinKey(m GossipMember) string { return m.Meta.GRPCAddr + " " + m.Meta.RaftAddr }

// SweepProbes decides whom a sweep asks who they are, and which servers and
// slot holders may be gone: shown left by gossip (true), or away from it for
// half of ReapAfter (false), so that they are asked on every sweep across the
// second half before sweepActions removes any. It keeps absentSince and
// unanswered current.
func (ls *LeaderState) SweepProbes(v *MemberView) (probes map[ProbeKey]bool, gone map[string]bool) {
	probes, gone = map[ProbeKey]bool{}, map[string]bool{}
	ask := func(id string) {
		for _, a := range v.addrsOf(ls, id) {
			probes[ProbeKey{id, a}] = true
		}
	}
	absent := func(id string) {
		if v.alive(id) {
			delete(ls.absentSince, id)
			return
		}
		m, seen := v.Members[id]
		if _, ok := ls.absentSince[id]; !ok {
			since := v.Now
			if seen && m.State == MemberDead && m.Since.Before(v.Now) {
				since = m.Since
			}
			ls.absentSince[id] = since
		}
		left := seen && m.State == MemberLeft
		if left || v.Now.Sub(ls.absentSince[id]) >= v.ReapAfter/2 {
			gone[id] = left
			ask(id)
		}
	}
	for _, s := range v.Servers {
		if id := s.ID; id != v.Self {
			absent(id)
		}
	}
	for _, id := range v.StateOnly {
		absent(id)
	}
	for id := range ls.unanswered {
		if _, ok := gone[id]; !ok {
			delete(ls.unanswered, id)
		}
	}
	inRaft := ServersByID(v.Servers)
	for _, id := range v.memberIDs() {
		m := v.Members[id]
		if !v.candidate(id, m) {
			continue
		}
		s, ok := inRaft[id]
		switch {
		case !ok && ls.backedOff(id, joinKey(m), v.Now):
		case !ok, s.Address != m.Meta.RaftAddr, !s.Voter:
			ask(id)
		}
	}
	return probes, gone
}

func ServersByID(servers []Server) map[string]Server {
	out := make(map[string]Server, len(servers))
	for _, s := range servers {
		out[s.ID] = s
	}
	return out
}

// SweepActions decides what a sweep does with the answers to its probes:
// remove servers (and free the slots of nodes not in Raft) that are gone,
// unless they still answer as members of this cluster (then the gossip news
// is false: anyone with the gossip key can send it); add alive members that
// answer as themselves as non-voters; promote non-voters that follow this
// log, while voters < maxVoters; move servers whose address changed; and
// remove non-voters that never prove themselves, after ReapAfter. It never
// removes the leader itself. It keeps the leader's bookkeeping current, as
// if every action succeeds; the shell reports a reap, addition or promotion
// that failed by not calling reaped, added or promoted.
func (ls *LeaderState) SweepActions(v *MemberView, gone map[string]bool, answers map[ProbeKey]ProbeAnswer) []MemberAction {
	var out []MemberAction
	answer := func(id string) (Status, error) {
		st, addr, err := AnswerOf(id, v.addrsOf(ls, id), answers)
		if err == nil {
			ls.provenAddr[id] = addr
		}
		return st, err
	}
	inRaft := ServersByID(v.Servers)
	voters := 0
	for _, s := range v.Servers {
		if s.Voter {
			voters++
		}
	}

	// A leader that restarted on a new address still has its old one in the
	// configuration; other servers would dial that after it steps down.
	if s, ok := inRaft[v.Self]; ok && s.Address != v.SelfRaftAddr {
		out = append(out, MemberAction{Kind: ActOwnAddr, ID: v.Self, Addr: v.SelfRaftAddr, Voter: s.Voter, Why: s.Address})
	}

	// Gone servers first, in configuration order, then slot holders. What
	// gossip says of a member is not proof (anyone with the gossip key can
	// say it), and neither is one failed probe (a port kept full, a lost
	// packet): a member goes at once only on its own word that it is
	// leaving, or on an authenticated answer that it is not this cluster's
	// member, once gossip shows it left or away for ReapAfter; on silence,
	// only once it has been away for ReapAfter and its probes have failed
	// for half of it (at least two of them).
	reapGone := func(id, why string) {
		left, ok := gone[id]
		if !ok {
			return
		}
		away := v.Now.Sub(ls.absentSince[id])
		due := left || away >= v.ReapAfter
		st, err := answer(id)
		if errors.Is(err, ErrProbeOtherNode) { // an authenticated answer: another node is there now
			delete(ls.unanswered, id)
			if due {
				out = append(out, MemberAction{Kind: ActReap, ID: id, Why: fmt.Sprintf("%s; %v", why, err)})
			}
			return
		}
		if err != nil {
			u := ls.unanswered[id]
			if u.probes == 0 {
				u.since = v.Now
			}
			u.probes++
			ls.unanswered[id] = u
			if away < v.ReapAfter || u.probes < 2 || v.Now.Sub(u.since) < v.ReapAfter/2 {
				return
			}
			if v.raftAnsweredSince(id, v.Now.Add(-v.ReapAfter/2)) {
				// Its gRPC port is kept from the leader (full, or cut), and
				// gossip's news may be forged, but it answers Raft: it is here.
				out = append(out, MemberAction{Kind: ActRefuse, ID: id, Name: v.Members[id].Meta.Name, Why: "not removing a member whose probes fail",
					Err: fmt.Errorf("its probes fail, but it answered this leader's raft heartbeats at %s",
						v.RaftAnswered(id).UTC().Format(time.RFC3339))})
				return
			}
			news := "gone from gossip"
			if left {
				news = "shown left by gossip, which it never confirmed,"
			}
			out = append(out, MemberAction{Kind: ActReap, ID: id, Why: fmt.Sprintf("%s; %s for %v and %d probes over %v unanswered: %v",
				why, news, away.Round(time.Second), u.probes, v.Now.Sub(u.since).Round(time.Second), err)})
			return
		}
		delete(ls.unanswered, id)
		switch {
		case st.Leaving:
			out = append(out, MemberAction{Kind: ActReap, ID: id, Why: why + "; it says it is leaving"})
		case st.ClusterID == v.Own:
			news := "gone from gossip"
			if left {
				news = "left"
			}
			out = append(out, MemberAction{Kind: ActRefuse, ID: id, Name: v.Members[id].Meta.Name, Why: "not removing a member gossip shows as " + news,
				Err: errors.New("it answers over the authenticated transport as a member of this cluster")})
		case due:
			out = append(out, MemberAction{Kind: ActReap, ID: id, Why: fmt.Sprintf("%s; %v (it names cluster %q)", why, ErrProbeCluster, st.ClusterID)})
		}
	}
	for _, s := range v.Servers {
		if id := s.ID; id != v.Self {
			reapGone(id, "gone from gossip")
		}
	}
	for _, id := range v.StateOnly {
		reapGone(id, "not in raft and gone from gossip")
	}

	for _, id := range v.memberIDs() {
		m := v.Members[id]
		if m.State != MemberAlive || !m.Parsed || m.Meta.RaftAddr == "" || id == v.Self {
			continue
		}
		s, ok := inRaft[id]
		if !v.Addable[id] {
			if !ok {
				out = append(out, MemberAction{Kind: ActNote, ID: id, Why: "not adding a member of another or an unnamed cluster: " + m.Meta.ClusterID})
			}
			continue
		}
		switch {
		case !ok:
			out = ls.join(v, out, id, m, answer)
		case s.Address != m.Meta.RaftAddr:
			// The node restarted on a new address with its old state: adding
			// it again under the same ID updates the address, once the node
			// itself says that is its address.
			st, err := answer(id)
			if err == nil {
				err = memberProof(st, m.Meta.RaftAddr, v.Own)
			}
			if err == nil {
				// A copy of this server's data dir that leads its own log
				// answers as this server, at its own address.
				err = v.FollowsNoOther(st)
			}
			if err != nil {
				out = append(out, MemberAction{Kind: ActRefuse, ID: id, Name: m.Meta.Name, Why: "not moving a server to the raft address gossip shows", Err: err})
				continue
			}
			out = append(out, MemberAction{Kind: ActMoveAddr, ID: id, Addr: m.Meta.RaftAddr, Voter: s.Voter, Why: s.Address})
		case s.Voter:
			delete(ls.nonvoterSince, id)
			delete(ls.unprovenSince, id)
		default:
			var promote bool
			if out, promote = ls.promotion(v, out, id, m, s, voters, answer); promote {
				voters++
			}
		}
	}

	// Forget backoffs of members gossip no longer shows alive, and wake the
	// leader loop when the next backed-off probe is due (one already due
	// waits for the next sweep or event: it may not be asked again at all).
	ls.Wake = time.Time{}
	for id, b := range ls.backoff {
		if v.Members[id].State != MemberAlive {
			delete(ls.backoff, id)
			continue
		}
		if b.next.After(v.Now) && (ls.Wake.IsZero() || b.next.Before(ls.Wake)) {
			ls.Wake = b.next
		}
	}
	return out
}

// FollowsNoOther: a member that follows another Raft leader, or whose last
// applied entry this leader's log does not hold, is of another log with this
// cluster's ID (a copy of a lone seed's data dir leads its own), and is
// never added, promoted or moved: the two logs must never exchange entries
// (logmatch.go). The other leader is told apart by the address it speaks
// from, since a copy has this leader's very ID.
func (v *MemberView) FollowsNoOther(st Status) error {
	if st.Stopped != nil && *st.Stopped {
		return errProbeStopped // a copy that stopped for good takes no part
	}
	if st.LeaderID != "" && (st.LeaderID != v.Self || v.SelfSpeaksAs != "" && st.LeaderAddr != v.SelfSpeaksAs) {
		return fmt.Errorf("%w (its leader is %s at %s)", ErrProbeOtherLeader, st.LeaderID, st.LeaderAddr)
	}
	if v.LogHolds != nil {
		return v.LogHolds(st.AppliedCommand, st.AppliedCommandHash)
	}
	return nil
}

// join decides on an alive member not in Raft: add it as a non-voter once it
// answers as itself at the Raft address gossip shows, as a fresh node or one
// of this cluster. A wiped data dir comes back as a new ID on the old
// address; Raft refuses two servers on one address, so the old one goes, but
// only once gossip no longer sees it alive: otherwise the two would take the
// address from each other on every sweep.
func (ls *LeaderState) join(v *MemberView, out []MemberAction, id string, m GossipMember, answer func(string) (Status, error)) []MemberAction {
	if ls.backedOff(id, joinKey(m), v.Now) {
		return out
	}
	st, err := answer(id)
	if err == nil {
		err = JoinProof(st, m.Meta.RaftAddr, v.Own)
	}
	if err == nil {
		err = v.FollowsNoOther(st)
	}
	if err == nil {
		err = JoinProtocol(st.Protocols, v.protocols())
	}
	if err == nil {
		err = CanTakePart(st, v.Layout)
	}
	if err != nil {
		ls.probeFailed(id, joinKey(m), v.Now)
		return append(out, MemberAction{Kind: ActRefuse, ID: id, Name: m.Meta.Name, Why: "not adding a gossip member to raft", Err: err})
	}
	delete(ls.backoff, id)
	taken := false
	for _, old := range v.Servers {
		if old.Address != m.Meta.RaftAddr || old.ID == id || old.ID == v.Self {
			continue
		}
		if v.alive(old.ID) {
			taken = true
			continue
		}
		out = append(out, MemberAction{Kind: ActReap, ID: old.ID, Why: "address taken over by " + id})
	}
	if taken {
		return append(out, MemberAction{Kind: ActWait, ID: id, Addr: m.Meta.RaftAddr,
			Why: "waiting for the old owner of a raft address to fail before adding its successor"})
	}
	return append(out, MemberAction{Kind: ActAddNonvoter, ID: id, Name: m.Meta.Name, Addr: m.Meta.RaftAddr})
}

// promotion decides on a non-voter: promote it once it has answered as a
// member following this log for a sweep and voters < maxVoters; remove it
// once it has not proved itself for ReapAfter. It reports whether it
// promotes.
func (ls *LeaderState) promotion(v *MemberView, out []MemberAction, id string, m GossipMember, s Server, voters int,
	answer func(string) (Status, error)) ([]MemberAction, bool) {
	st, err := answer(id)
	if err == nil {
		err = promoteProof(st, s.Address, v.Own, v.LeaderApplied)
	}
	if err == nil {
		err = v.FollowsNoOther(st)
	}
	if err == nil {
		err = JoinProtocol(st.Protocols, v.protocols())
	}
	if err == nil {
		err = CanTakePart(st, v.Layout)
	}
	if err != nil {
		if _, ok := ls.unprovenSince[id]; !ok {
			ls.unprovenSince[id] = v.Now
		}
		// (One that only goes unanswered while it answers Raft is not
		// removed: its gRPC port is kept from the leader, not gone.)
		kept := errors.Is(err, ErrProbeUnanswered) && v.raftAnsweredSince(id, v.Now.Add(-v.ReapAfter/2))
		if v.Now.Sub(ls.unprovenSince[id]) >= v.ReapAfter && !kept {
			delete(ls.unprovenSince, id)
			return append(out, MemberAction{Kind: ActReap, ID: id, Why: fmt.Sprintf("a non-voter that has not proved itself for reap-after: %v", err)}), false
		}
		return append(out, MemberAction{Kind: ActRefuse, ID: id, Name: m.Meta.Name, Why: "not promoting a non-voter", Err: err}), false
	}
	delete(ls.unprovenSince, id)
	if err := shownToTakePart(st, v.Holders[id]); err != nil {
		return append(out, MemberAction{Kind: ActRefuse, ID: id, Name: m.Meta.Name, Why: "not promoting a non-voter", Err: err}), false
	}
	delete(ls.Refused, id)
	since, ok := ls.nonvoterSince[id]
	if !ok {
		ls.nonvoterSince[id] = v.Now
		return out, false
	}
	if voters < maxVoters && v.Now.Sub(since) >= time.Second {
		return append(out, MemberAction{Kind: ActPromote, ID: id, Addr: s.Address}), true
	}
	return out, false
}

// Reaped, added, moved and promoted are the bookkeeping after an action of
// that kind succeeded.
func (ls *LeaderState) Reaped(id string) {
	delete(ls.absentSince, id)
	delete(ls.unanswered, id)
	delete(ls.unprovenSince, id)
	delete(ls.provenAddr, id)
	delete(ls.Refused, id)
}

func (ls *LeaderState) Added(id string, now time.Time) {
	ls.nonvoterSince[id] = now
	delete(ls.Refused, id)
}

func (ls *LeaderState) Moved(id string) { delete(ls.Refused, id) }

func (ls *LeaderState) Promoted(id string) { delete(ls.nonvoterSince, id) }

// LeaderState is what the leader loop remembers between sweeps.
type LeaderState struct {
	// absentSince: Raft servers that gossip does not show as alive, and since when.
	absentSince map[string]time.Time
	// nonvoterSince: when a server was first seen as a non-voter, to promote
	// only members that have been stable for a sweep.
	nonvoterSince map[string]time.Time
	// unprovenSince: non-voters gossip shows alive that have not proved
	// themselves over the authenticated transport (probe.go), since when;
	// one that never does is removed after ReapAfter.
	unprovenSince map[string]time.Time
	// provenAddr: the gRPC address each member last answered at as itself.
	provenAddr map[string]string
	// backoff: members not in Raft whose probe failed, and when to ask again;
	// wake is the earliest of those times (zero for none).
	backoff map[string]probeBackoff
	Wake    time.Time
	// Refused: the last reason logged for not acting on a member.
	Refused map[string]string
	// unanswered: servers and slot holders gossip shows away whose probes
	// have failed since they last answered (sweepActions).
	unanswered map[string]unansweredRun
}

func NewLeaderState() LeaderState {
	return LeaderState{
		absentSince: map[string]time.Time{}, nonvoterSince: map[string]time.Time{}, unprovenSince: map[string]time.Time{},
		provenAddr: map[string]string{}, backoff: map[string]probeBackoff{}, Refused: map[string]string{},
		unanswered: map[string]unansweredRun{},
	}
}

// FounderCheck is establish's decision on the founding leader's clock now
// and the cluster's time ct (known: a quorum of the founding voters'
// clocks stands behind it): wait for a quorum, hand off when now is off ct
// by more than maxSkew or outside layout l, refuse when ct itself is.
func FounderCheck(l generator.Layout, now, ct time.Time, known bool, maxSkew time.Duration) error {
	inRange := func(t time.Time) bool { u := l.Units(t); return u >= 0 && u <= l.MaxTimestamp() }
	switch off := now.Sub(ct); {
	case !known:
		return ErrAwaitingClocks
	case off > maxSkew || off < -maxSkew:
		return fmt.Errorf("%w: it is %v off the founding voters' time (max skew %v)", ErrFounderClock, off.Round(time.Millisecond), maxSkew)
	case !inRange(ct):
		return fmt.Errorf("the founding voters' time %s is outside layout %s (its epoch %s): fix their time source; no cluster can be founded before",
			ct.UTC().Format(time.RFC3339), l, l.Time(0).UTC().Format(time.RFC3339))
	case !inRange(now):
		return fmt.Errorf("%w: it reads %s, outside layout %s", ErrFounderClock, now.UTC().Format(time.RFC3339), l)
	}
	return nil
}

// FenceCommands is fenceForeign's decision on one proven foreign window f
// over this leader's state s (only read): the entries that close it off.
// A current tenure whose floor lies below the window's end is ended (a
// Release in its holder's name) when the slot's highWater already reaches
// past it; a highWater below it is raised (a Fence, which ends a held
// tenure itself). A window outside the layout, or already below every
// current tenure and highWater, needs nothing. A pure function: the node
// carries its entries out in order.
func FenceCommands(s *State, f ForeignFence, own string) []Command {
	if s.Layout == nil || f.OtherLayout || f.Slot < 0 || f.Slot >= len(s.Slots) || f.UpTo < 0 || f.UpTo > s.Layout.MaxTimestamp() {
		return nil
	}
	sl := s.Slots[f.Slot]
	if sl.HighWater < f.UpTo {
		return []Command{{Type: CmdFence, Slot: f.Slot, UpTo: f.UpTo, Foreign: f.Foreign, ClusterID: own}}
	}
	if t := s.FindTenure(f.Slot, sl.Tenure); sl.Owner != "" && t != nil && t.Floor < f.UpTo {
		return []Command{{Type: CmdRelease, NodeID: sl.Owner, Tenure: sl.Tenure, ClusterID: own}}
	}
	return nil
}

// ForeignFence is the largest window proven on one slot by another
// cluster's members, in this cluster's layout units.
type ForeignFence struct {
	Slot    int
	UpTo    int64
	Foreign string
	// OtherLayout: the proof is of another layout than own (layout): not
	// comparable, nothing is fenced.
	OtherLayout bool
	Layout      generator.Layout
}

// ForeignFences picks, per slot, the largest window the proofs show, sorted
// by slot; a proof that names another layout than own becomes an
// otherLayout entry (a proof that names none, from a node that knows no
// layout yet, is taken as own's).
func ForeignFences(proofs []ForeignProof, own generator.Layout) []ForeignFence {
	want := map[int]ForeignFence{}
	var other []ForeignFence
	for _, p := range proofs {
		if p.Layout != (generator.Layout{}) && p.Layout != own {
			if p.Slot >= 0 || len(p.Windows) > 0 {
				other = append(other, ForeignFence{Slot: p.Slot, Foreign: p.Cluster, OtherLayout: true, Layout: p.Layout})
			}
			continue
		}
		add := func(slot int, upTo int64) {
			if f, ok := want[slot]; slot >= 0 && (!ok || upTo > f.UpTo) {
				want[slot] = ForeignFence{Slot: slot, UpTo: upTo, Foreign: p.Cluster}
			}
		}
		add(p.Slot, p.Granted)
		for slot, g := range p.Windows {
			add(slot, g)
		}
	}
	out := make([]ForeignFence, 0, len(want)+len(other))
	for _, f := range want {
		out = append(out, f)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Slot < out[j].Slot })
	return append(out, other...)
}

// unansweredRun is a run of failed probes of one member: since the first,
// and how many.
type unansweredRun struct {
	since  time.Time
	probes int
}

// Why establish wrote no Init yet.
var (
	// ErrAwaitingClocks: fewer than a quorum of the founding voters' clocks
	// are known; the leader's clock polls bring them within seconds.
	ErrAwaitingClocks = errors.New("waiting for a quorum of the founding voters' clocks")
	// ErrFounderClock: this leader's clock is off the cluster's time, or
	// outside the layout's range: another voter founds the cluster.
	ErrFounderClock = errors.New("this leader's clock cannot found the cluster")
)

// maxVoters: members beyond this many stay non-voters.
const maxVoters = 5

// Server is a Server of Raft's configuration, as a sweep reads it.
type Server struct {
	ID, Address string
	Voter       bool
}
