package main

import (
	"encoding/json"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idgen/idgen/generator"
	"github.com/idgen/idgen/rpc/idcheck"
	"github.com/idgen/idgen/scripts/harness"
)

// TestClusterOfAnotherLayout: three nodes found a cluster with --layout
// 35/2/1/11 --layout-unit 10ms (about 11 years, 204,800 IDs a second per
// slot, codes of up to 9 characters). Every ID decodes under that layout,
// idctl verify finds no duplicate and no ID outside its window, codes have
// the length the layout gives IDs minted now, the metrics count down to
// the layout's end, a node joining with no --layout takes the cluster's,
// and a restart with another --layout is refused, naming both.
func TestClusterOfAnotherLayout(t *testing.T) {
	fast, err := generator.ParseSpec("35/2/1/11 unit=10ms")
	if err != nil {
		t.Fatal(err)
	}
	layoutArgs := []string{"--layout", "35/2/1/11", "--layout-unit", "10ms"}
	nodes := startCluster(t, 3, layoutArgs...)
	target := targetOf(nodes...)

	var st struct {
		Layout string `json:"layout"`
	}
	for _, n := range nodes {
		if err := json.Unmarshal([]byte(mustIdctl(t, "--target", n.grpc, "--json", "status")), &st); err != nil || st.Layout != fast.String() {
			t.Fatalf("%s reports layout %q (%v), want %s", n.name, st.Layout, err, fast)
		}
	}

	// Every ID decodes under the cluster's layout, to the slot that served
	// it and to now; more than a 1 s unit's 2048 per slot come at once.
	var ids []idJSON
	for _, n := range nodes {
		var got []idJSON
		if err := json.Unmarshal([]byte(mustIdctl(t, "--target", n.grpc, "--json", "ids", "-n", "4000", "--batch", "4000")), &got); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, got...)
	}
	slots := map[int]bool{}
	for _, d := range ids {
		p, err := fast.Decompose(d.ID)
		if err != nil || p.Slot != d.Slot || p.Time.Sub(time.Now()).Abs() > time.Minute {
			t.Fatalf("ID %d (slot %d): %+v, %v; want an ID of slot %d minted about now", d.ID, d.Slot, p, err, d.Slot)
		}
		if d.ID <= generator.DefaultLayout().MaxID() {
			t.Fatalf("ID %d fits the default layout: not minted under the 49-bit one", d.ID)
		}
		slots[d.Slot] = true
	}
	if len(slots) != 3 {
		t.Fatalf("IDs from slots %v, want three", slots)
	}

	t.Run("verify finds nothing", func(t *testing.T) {
		out, errOut, code := idctl(t, "--target", target, "--json", "verify", "--duration", "2s", "--rate", "20000", "--batch", "0,100")
		var r idcheck.Report
		if code != 0 || json.Unmarshal([]byte(out), &r) != nil || r.Acknowledged < 20000 || len(r.PerSlot) != 3 || !r.OK() {
			t.Fatalf("verify exit %d: %s%s", code, out, errOut)
		}
		if !strings.Contains(mustIdctl(t, "--target", target, "history"), "layout "+fast.String()) {
			t.Fatal("history does not name the cluster's layout")
		}
	})

	t.Run("codes have the layout's length", func(t *testing.T) {
		want := fast.CodeLenAt(time.Now()) // 8 until 2030, then 9
		keyPath := t.TempDir() + "/code.key"
		mustIdctl(t, "keygen", "--out", keyPath)
		codes := strings.Fields(mustIdctl(t, "--target", target, "ids", "-n", "300", "--base62", "--code-key-file", keyPath))
		plain := strings.Fields(mustIdctl(t, "--target", target, "ids", "-n", "300", "--base62"))
		for _, c := range append(codes, plain...) {
			if len(c) != want {
				t.Fatalf("code %q has %d characters; the layout gives IDs minted now %d", c, len(c), want)
			}
		}
		var decoded []struct {
			ID   int64 `json:"id"`
			Slot int   `json:"slot"`
		}
		out := mustIdctl(t, append([]string{"--target", target, "--json", "decode", "--code-key-file", keyPath}, codes[:20]...)...)
		if err := json.Unmarshal([]byte(out), &decoded); err != nil || len(decoded) != 20 {
			t.Fatalf("decode: %v %s", err, out)
		}
		for _, d := range decoded {
			if p, err := fast.Decompose(d.ID); err != nil || p.Slot != d.Slot {
				t.Fatalf("decoded %+v: %+v %v", d, p, err)
			}
		}
	})

	t.Run("metrics count down to the layout's end", func(t *testing.T) {
		_, body := harness.HTTPGet(nodes[0].http, "/metrics")
		m := regexp.MustCompile(`(?m)^idgen_layout_seconds_remaining (\S+)$`).FindStringSubmatch(body)
		if m == nil {
			t.Fatalf("no idgen_layout_seconds_remaining in /metrics")
		}
		got, _ := strconv.ParseFloat(m[1], 64)
		if want := time.Until(fast.ExhaustedAt()).Seconds(); got < want-60 || got > want+60 {
			t.Fatalf("idgen_layout_seconds_remaining %v, want about %v (the 10 ms layout's end, %s)", got, want, fast.ExhaustedAt())
		}
	})

	t.Run("a joining node takes the cluster's layout", func(t *testing.T) {
		n4 := newNode(t, nodeOpts{name: "n4", join: []string{nodes[0].gossip}})
		n4.start()
		harness.WaitFor(t, 30*time.Second, "n4 ready", func() bool {
			if !n4.running() {
				t.Fatal("n4 exited")
			}
			return n4.ready()
		})
		if err := json.Unmarshal([]byte(mustIdctl(t, "--target", n4.grpc, "--json", "status")), &st); err != nil || st.Layout != fast.String() {
			t.Fatalf("n4 reports layout %q (%v), want the cluster's %s", st.Layout, err, fast)
		}
		var got []idJSON
		if err := json.Unmarshal([]byte(mustIdctl(t, "--target", n4.grpc, "--json", "ids", "-n", "3000")), &got); err != nil {
			t.Fatal(err)
		}
		for _, d := range got {
			if p, err := fast.Decompose(d.ID); err != nil || p.Slot != d.Slot || slots[d.Slot] || d.ID <= generator.DefaultLayout().MaxID() {
				t.Fatalf("n4's ID %d (slot %d): %+v, %v; want one of a fourth slot under %s", d.ID, d.Slot, p, err, fast)
			}
		}
	})

	t.Run("a restart with another layout is refused", func(t *testing.T) {
		n := nodes[2]
		n.stop()
		other := generator.DefaultLayout()
		_, errOut, code := runBin(t, bin("idgend"), append(n.args(), "--layout", "28/2/1/11", "--layout-unit", "1s")...)
		if code != 1 || !strings.Contains(errOut, "layout mismatch") || !strings.Contains(errOut, fast.String()) || !strings.Contains(errOut, other.String()) ||
			!strings.Contains(errOut, "drop --layout, --layout-unit and --layout-epoch, or give --layout 35/2/1/11 --layout-unit 10ms") {
			t.Fatalf("restart with --layout 28/2/1/11: exit %d, stderr %q; want exit 1 naming both layouts and what to do", code, errOut)
		}
		// Without a layout it takes the cluster's, from its data dir.
		n.extra = slices.DeleteFunc(slices.Clone(n.extra), func(a string) bool { return slices.Contains(layoutArgs, a) })
		n.start()
		harness.WaitFor(t, 30*time.Second, n.name+" ready again", func() bool {
			if !n.running() {
				t.Fatalf("%s exited", n.name)
			}
			return n.ready()
		})
		var got []idJSON
		if err := json.Unmarshal([]byte(mustIdctl(t, "--target", n.grpc, "--json", "ids", "-n", "100")), &got); err != nil {
			t.Fatal(err)
		}
		if _, err := fast.Decompose(got[0].ID); err != nil || got[0].ID <= generator.DefaultLayout().MaxID() {
			t.Fatalf("after the restart: ID %d, %v", got[0].ID, err)
		}
	})
}

// idJSON is an ID as `idctl --json ids` prints it.
type idJSON struct {
	ID   int64  `json:"id"`
	Code string `json:"code"`
	Slot int    `json:"slot"`
}
