package cluster

import "testing"

// The words are the wire and output form of a member's gossip state
// (MemberInfo.GossipState, the Members RPC, idctl members, the idclient's
// follower): they must not change.
func TestMemberStateWords(t *testing.T) {
	for s, want := range map[MemberState]string{
		MemberUnknown: "unknown", MemberAlive: "alive", MemberDead: "dead", MemberLeft: "left", MemberState(99): "unknown",
	} {
		if got := s.String(); got != want {
			t.Errorf("MemberState(%d).String() = %q, want %q", int(s), got, want)
		}
	}
}
