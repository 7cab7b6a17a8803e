package core

import (
	"testing"

	"github.com/idgen/idgen/generator"
)

// TestSpeaksForIsTheTypesOwnField: a command speaks for the node its type
// names, never for one a field of another type carries.
func TestSpeaksForIsTheTypesOwnField(t *testing.T) {
	node := &NodeInfo{ID: "other"}
	for _, c := range []struct {
		c    Command
		want string
	}{
		{Command{Type: CmdClaim, Node: &NodeInfo{ID: "n1"}, NodeID: "other"}, "n1"},
		{Command{Type: CmdClaim, NodeID: "other"}, ""},
		{Command{Type: CmdReserve, NodeID: "n1", Node: node}, "n1"},
		{Command{Type: CmdRelease, NodeID: "n1", Node: node}, "n1"},
		{Command{Type: CmdRemove, NodeID: "n1", Node: node}, "n1"},
	} {
		if got := c.c.SpeaksFor(); got != c.want {
			t.Errorf("%s %+v speaks for %q, want %q", c.c.Type, c.c, got, c.want)
		}
	}
}

// TestCountsCommandClockOnlyFromLegacyVoters: a command's clock counts only
// from a member of the release before protocol 2 (its Status has no
// clock), a Claim, or a Reserve of the slot's holder.
func TestCountsCommandClockOnlyFromLegacyVoters(t *testing.T) {
	s := NewState()
	l := generator.DefaultLayout()
	s.ApplyEntry(1, mustEntry(t, Command{Type: CmdInit, Layout: &l, ClusterID: "c1", Start: 10}))
	s.ApplyEntry(2, mustEntry(t, Command{Type: CmdClaim, Node: &NodeInfo{ID: "n1", Datacenter: -1}, ClusterID: "c1"}))
	claim := Command{Type: CmdClaim, Node: &NodeInfo{ID: "n1"}}
	held := Command{Type: CmdReserve, NodeID: "n1", Slot: 0, Tenure: 2}
	other := Command{Type: CmdReserve, NodeID: "n1", Slot: 0, Tenure: 9}
	for _, c := range []struct {
		c              Command
		member, legacy bool
		want           bool
	}{
		{claim, true, true, true},
		{held, true, true, true},
		{other, true, true, false},
		{claim, true, false, false},
		{held, true, false, false},
		{claim, false, true, false},
		{Command{Type: CmdRelease, NodeID: "n1", Tenure: 2}, true, true, false},
	} {
		if got := CountsCommandClock(s, c.c, c.member, c.legacy); got != c.want {
			t.Errorf("%s of tenure %d, member %v, legacy %v: counts %v, want %v", c.c.Type, c.c.Tenure, c.member, c.legacy, got, c.want)
		}
	}
}

func mustEntry(t *testing.T, c Command) []byte {
	t.Helper()
	data, err := EncodeEntry(c, ProtocolMax)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
