package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idgen/idgen/generator"
	"github.com/idgen/idgen/rpc/idclient"
	"github.com/idgen/idgen/scripts/harness"
)

// checkCodeRun checks twenty codes drawn in a row with a key: all 7
// characters, all different, in no visible order (not sorted, neighbours
// rarely share a first character), and ids, their decoding, strictly
// increase.
func checkCodeRun(t *testing.T, codes []string, ids []int64) {
	t.Helper()
	if len(codes) != 20 || len(ids) != 20 {
		t.Fatalf("%d codes, %d IDs; want 20 each", len(codes), len(ids))
	}
	sharedFirst := 0
	for i, c := range codes {
		if len(c) != generator.MinCodeLen {
			t.Errorf("code %d %q: %d characters, want %d", i, c, len(c), generator.MinCodeLen)
		}
		if i > 0 && c[0] == codes[i-1][0] {
			sharedFirst++
		}
		if i > 0 && ids[i] <= ids[i-1] {
			t.Errorf("code %d %q decodes to %d, not above %d", i, c, ids[i], ids[i-1])
		}
	}
	if slices.IsSorted(codes) || len(slices.Compact(slices.Sorted(slices.Values(codes)))) != len(codes) {
		t.Errorf("codes sorted or repeated: %v", codes)
	}
	// Unrelated neighbours share a first character 19/62 times in all on
	// average; plain base62 codes of these IDs share it 19 times.
	if sharedFirst > 5 {
		t.Errorf("%d of 19 neighbours share their first character: %v", sharedFirst, codes)
	}
}

// TestTwentyEncryptedCodesInARow: a real node; `idctl keygen` makes a key
// file; `idctl ids --base62 --code-key-file` prints twenty codes from one
// batch; `idctl decode --code-key-file` takes them apart into twenty
// increasing IDs of the node's slot. The same through the client library's
// Pool with a codec.
func TestTwentyEncryptedCodesInARow(t *testing.T) {
	n := newNode(t, nodeOpts{name: "codes"})
	n.start()
	harness.WaitFor(t, 30*time.Second, "ready", n.ready)
	target := n.grpc
	keyPath := filepath.Join(t.TempDir(), "code.key")
	mustIdctl(t, "keygen", "--out", keyPath)

	codes := strings.Fields(mustIdctl(t, "--target", target, "ids", "-n", "20", "--base62",
		"--code-key-file", keyPath, "--code-tweak", "process-test"))
	var decoded []struct {
		ID   int64  `json:"id"`
		Code string `json:"code"`
		Slot int    `json:"slot"`
	}
	out := mustIdctl(t, append([]string{"--json", "decode", "--code-key-file", keyPath, "--code-tweak", "process-test"}, codes...)...)
	if err := json.Unmarshal([]byte(out), &decoded); err != nil {
		t.Fatalf("decode output %q: %v", out, err)
	}
	var ids []int64
	for i, d := range decoded {
		ids = append(ids, d.ID)
		if d.Code != codes[i] || d.Slot != decode(t, d.ID).Slot {
			t.Errorf("decoded %+v for code %q", d, codes[i])
		}
	}
	checkCodeRun(t, codes, ids)
	t.Logf("codes %v\nIDs %v", codes, ids)

	// Without the tweak the codes do not decode to these IDs.
	out, _, code := idctl(t, append([]string{"--json", "decode", "--code-key-file", keyPath}, codes...)...)
	if code == 0 && strings.Contains(out, `"id": `+jsonID(ids[0])) {
		t.Errorf("codes decode without their tweak: %s", out)
	}

	key, err := idclient.ReadCodeKey(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	codec, err := generator.NewCodec(key, []byte("process-test"), generator.DefaultLayout())
	if err != nil {
		t.Fatal(err)
	}
	client, err := idclient.Dial(target)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	pool, err := idclient.NewPool(client, idclient.PoolOptions{Codec: codec})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	ctx, cancel := context.WithTimeout(context.Background(), harness.Scale(20*time.Second))
	defer cancel()
	codes, ids = nil, nil
	for range 20 {
		c, err := pool.NextCode(ctx)
		if err != nil {
			t.Fatal(err)
		}
		id, err := codec.Decode(c)
		if err != nil {
			t.Fatalf("Decode(%q): %v", c, err)
		}
		codes, ids = append(codes, c), append(ids, id)
	}
	checkCodeRun(t, codes, ids)
}

func jsonID(id int64) string { b, _ := json.Marshal(id); return string(b) }
