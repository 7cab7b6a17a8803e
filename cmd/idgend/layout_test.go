package main

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idgen/idgen/generator"
)

// --layout, --layout-unit and --layout-epoch build the layout of a cluster
// the node founds; none of them set leaves it to the cluster (zero).
func TestLayoutFlags(t *testing.T) {
	noEnv := func(string) string { return "" }
	c, err := parseConfig(nil, noEnv, io.Discard)
	if err != nil || c.Layout != (generator.Layout{}) || c.bootstrapLayout() != generator.DefaultLayout() {
		t.Fatalf("no layout flags: Layout %s, founds with %s, %v; want none and the default", c.Layout, c.bootstrapLayout(), err)
	}
	want, _ := generator.ParseSpec("35/2/1/11 unit=10ms")
	for _, args := range [][]string{
		{"--layout", "35/2/1/11", "--layout-unit", "10ms"},
		{"--layout", "35/2/1/11", "--layout-unit", "10ms", "--layout-epoch", "1777939200"},
		{"--layout", "35/2/1/11", "--layout-unit", "10ms", "--layout-epoch", "2026-05-05T00:00:00Z"},
	} {
		c, err := parseConfig(args, noEnv, io.Discard)
		if err != nil || c.Layout != want {
			t.Errorf("%v: %s, %v; want %s", args, c.Layout, err, want)
		}
	}
	env := map[string]string{"IDGEN_LAYOUT": "30/1/2/11", "IDGEN_LAYOUT_EPOCH": "2026-11-01"}
	c, err = parseConfig(nil, func(k string) string { return env[k] }, io.Discard)
	if want, _ := generator.ParseSpec("30/1/2/11 epoch=2026-11-01"); err != nil || c.Layout != want {
		t.Errorf("from the environment: %s, %v; want %s", c.Layout, err, want)
	}
}

// Every layout a cluster cannot be founded with is refused with the flags
// named, what is wrong and what to do.
func TestBadLayoutFlagsAreRefused(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--layout", "28/2/1"}, `--layout "28/2/1": "28/2/1": want timestamp/datacenter/machine/sequence bits, such as 28/2/1/11`},
		{[]string{"--layout", "28/2/one/11"}, `"one" is not a bit count`},
		{[]string{"--layout", "28/2/2/11"}, "2 datacenter and 2 machine bits make 16 slots; a cluster has exactly 8: give datacenter plus machine bits of 3"},
		{[]string{"--layout", "28/1/1/11"}, "make 4 slots; a cluster has exactly 8"},
		{[]string{"--layout", "41/2/1/20", "--layout-unit", "1ms"}, "64 bits in all, and an ID must fit 63 (a non-negative int64): take 1 bits off the timestamp or the sequence"},
		{[]string{"--layout", "35/2/1/11", "--layout-unit", "100us"}, "unit 100µs is not between 1ms and 1s"},
		{[]string{"--layout", "28/2/1/11", "--layout-unit", "2s"}, "unit 2s is not between 1ms and 1s"},
		{[]string{"--layout", "30/2/1/11", "--layout-epoch", "2099-01-01"}, "epoch 2099-01-01T00:00:00Z is in the future, and nothing can be minted before it: take a date in the past"},
		{[]string{"--layout", "30/2/1/11", "--layout-epoch", "someday"}, `--layout-epoch "someday": want Unix seconds, a date (2026-05-05) or an RFC 3339 time`},
		{[]string{"--layout", "25/2/1/11"}, "less than a year from now: add timestamp bits (each one doubles the lifetime), take a longer unit or a later epoch"},
		{[]string{"--layout", "28/2/1/11", "--layout-unit", "10ms"}, "less than a year from now"},
		{[]string{"--layout-unit", "10ms"}, "--layout-unit and --layout-epoch need --layout"},
		{[]string{"--layout-epoch", "2026-01-01"}, "need --layout"},
		{[]string{"--layout", "30/2/1/11", "--layout-unit", "soon"}, `invalid value "soon" for flag -layout-unit`},
		{[]string{"--layout", "30/3/0/11", "--datacenter", "8"}, "--datacenter 8 out of range -1..7 (layout 30/3/0/11"},
		{[]string{"--layout", "30/0/3/11", "--datacenter", "1"}, "--datacenter 1 out of range -1..0"},
		{[]string{"--layout", "35/2/1/11", "--layout-unit", "10ms", "--lead", "5ms"}, "--lead 5ms must be at least one layout unit (10ms)"},
	} {
		_, err := parseConfig(tc.args, func(string) string { return "" }, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v; want an error saying %q", tc.args, err, tc.want)
		}
	}
	// A 10 ms unit takes a lead of 10 ms, which the default's second does not.
	if _, err := parseConfig([]string{"--layout", "35/2/1/11", "--layout-unit", "10ms", "--lead", "10ms", "--max-ahead", "0"}, func(string) string { return "" }, io.Discard); err != nil {
		t.Errorf("--lead 10ms with a 10 ms unit: %v", err)
	}
}

// A layout within a year of its end cannot found a cluster, but the
// cluster that already has it (as its data dir records) keeps starting.
func TestLayoutNearItsEndRestartsItsCluster(t *testing.T) {
	end := time.Now().Add(200 * 24 * time.Hour)
	// 28 bits of seconds ending in 200 days.
	l := generator.Layout{Epoch: end.Unix() - 1<<28, Unit: time.Second, TimestampBits: 28, DatacenterBits: 2, MachineBits: 1, SequenceBits: 11}
	dir := t.TempDir()
	args := []string{"--data-dir", dir, "--layout", "28/2/1/11", "--layout-epoch", time.Unix(l.Epoch, 0).UTC().Format(time.RFC3339)}
	if _, err := parseConfig(args, func(string) string { return "" }, io.Discard); err == nil || !strings.Contains(err.Error(), "less than a year from now") {
		t.Fatalf("a new cluster of a layout ending in 200 days: %v; want refused", err)
	}
	b, _ := json.Marshal(l)
	if err := os.WriteFile(filepath.Join(dir, "layout.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if c, err := parseConfig(args, func(string) string { return "" }, io.Discard); err != nil || c.Layout != l {
		t.Fatalf("its own cluster's restart: %s, %v; want %s", c.Layout, err, l)
	}
}
