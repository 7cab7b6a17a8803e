package core

import "testing"

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
