package main

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idgen/idgen/generator"
	"github.com/idgen/idgen/rpc"
	"github.com/idgen/idgen/rpc/rpctest"
)

// idctl layout prints what a proposed layout gives, and whether idgend
// would found a cluster with it.
func TestLayoutCommand(t *testing.T) {
	out, errOut, code := runCapture(t, "", "layout", "35/2/1/11", "--unit", "10ms", "--json")
	var d layoutJSON
	if code != 0 || json.Unmarshal([]byte(out), &d) != nil {
		t.Fatalf("layout 35/2/1/11 --unit 10ms: exit %d %s %s", code, out, errOut)
	}
	if d.Layout != "35/2/1/11 unit=10ms epoch=1777939200" || d.IDsPerSecondSlot != 204800 || d.IDsPerSecondTotal != 1638400 ||
		d.Ends != "2037-03-24T19:43:03Z" || d.MaxCodeLen != 9 ||
		d.CodeGrowth == nil || d.CodeGrowth.Length != 9 || !strings.HasPrefix(d.CodeGrowth.At, "2030-07-25") || d.Refused == nil || *d.Refused != "" ||
		d.IdgendFlags != "--layout 35/2/1/11 --layout-unit 10ms --layout-epoch 2026-05-05T00:00:00Z" {
		t.Errorf("layout 35/2/1/11 --unit 10ms: %+v", d)
	}
	if want := mustFast(t).CodeLenAt(time.Now()); d.CodeLenNow != want {
		t.Errorf("codes now %d characters, want %d", d.CodeLenNow, want)
	}

	// The table form, and the same layout written as idctl status prints it.
	out, _, code = runCapture(t, "", "layout", "35/2/1/11 unit=10ms epoch=1777939200")
	for _, want := range []string{"204,800 per slot, 1,638,400 for the cluster's 8 slots", "2037-03-24T19:43:03Z", "to 9 characters from 2030-07-25", "accepted by idgend --layout"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("layout table: exit %d, %q lacks %q", code, out, want)
		}
	}

	// No SPEC and no target: the default layout, with no verdict.
	out, _, code = runCapture(t, "", "layout", "--json")
	d = layoutJSON{}
	if code != 0 || json.Unmarshal([]byte(out), &d) != nil || d.Layout != generator.DefaultLayout().String() || d.Refused != nil ||
		d.IDsPerSecondSlot != 2048 || d.CodeGrowth == nil || d.CodeGrowth.Length != 8 || !strings.HasPrefix(d.CodeGrowth.At, "2033-02-24") {
		t.Errorf("layout: exit %d %+v", code, d)
	}

	// A layout idgend refuses: the facts, then why, and exit 1.
	out, errOut, code = runCapture(t, "", "layout", "28/2/2/11")
	if code != exitFailed || !strings.Contains(out, "refused by idgend --layout") || !strings.Contains(out, "make 16 slots; a cluster has exactly 8") ||
		!strings.Contains(errOut, "refuses it for a new cluster") {
		t.Errorf("layout 28/2/2/11: exit %d %s %s", code, out, errOut)
	}
	for _, args := range [][]string{{"layout", "28/2/1"}, {"layout", "28/2/1/11", "--unit", "soon"}, {"layout", "--unit", "10ms"}, {"layout", "28/2/1/11", "--epoch", "may"}} {
		if _, errOut, code := runCapture(t, "", args...); code != exitUsage || errOut == "" {
			t.Errorf("%v: exit %d %s; want a usage error", args, code, errOut)
		}
	}
}

func mustFast(t *testing.T) generator.Layout {
	t.Helper()
	l, err := generator.ParseSpec("35/2/1/11 unit=10ms")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// decode takes IDs apart under --layout, or under the layout of the
// cluster at --target; without either, under the default.
func TestDecodeFollowsTheLayout(t *testing.T) {
	fast := mustFast(t)
	ts := fast.Units(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	id, err := fast.Compose(ts, 6, 1500)
	if err != nil {
		t.Fatal(err)
	}
	in := strconv.FormatInt(id, 10)
	check := func(what, out, errOut string, code int) {
		t.Helper()
		var d decodedJSON
		if code != 0 || json.Unmarshal([]byte(out), &d) != nil {
			t.Fatalf("%s: exit %d %s %s", what, code, out, errOut)
		}
		if d.ID != id || d.Slot != 6 || d.Datacenter != 3 || d.Machine != 0 || d.Sequence != 1500 || d.Timestamp != ts || d.Time != "2026-12-01T12:00:00Z" {
			t.Fatalf("%s: %+v", what, d)
		}
	}
	out, errOut, code := runCapture(t, "", "decode", "--layout", "35/2/1/11", "--layout-unit", "10ms", "--json", in)
	check("--layout", out, errOut, code)

	f := rpctest.NewNode(2)
	f.SetLayout(fast)
	_, addr := rpctest.Serve(t, rpc.ServerConfig{Backend: f, NodeName: "fast"})
	out, errOut, code = runCapture(t, "", "--target", addr, "decode", "--json", in)
	check("--target of a 10 ms cluster", out, errOut, code)
	out, errOut, code = runCapture(t, addr, "decode", "--json", in)
	check("IDGEN_TARGET of a 10 ms cluster", out, errOut, code)

	if _, errOut, code := runCapture(t, "", "decode", in); code != exitUsage || !strings.Contains(errOut, "not in 0..4398046511103 for layout 28/2/1/11") {
		t.Errorf("the default layout: exit %d %s; want the ID refused as outside it", code, errOut)
	}
	if _, errOut, code := runCapture(t, "", "decode", "--layout-unit", "10ms", in); code != exitUsage || !strings.Contains(errOut, "need --layout") {
		t.Errorf("--layout-unit alone: exit %d %s", code, errOut)
	}
	if _, errOut, code := runCapture(t, "", "--target", "127.0.0.1:1", "decode", in); code != exitFailed || !strings.Contains(errOut, "cannot learn the cluster's layout from 127.0.0.1:1") ||
		!strings.Contains(errOut, "give --layout") {
		t.Errorf("an unreachable target: exit %d %s", code, errOut)
	}
}
