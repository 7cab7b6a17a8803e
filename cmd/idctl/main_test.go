package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"io"
	"slices"
	"strings"
	"testing"
)

func runCapture(t *testing.T, envTarget string, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), args, env{stdout: &out, stderr: &errb, getenv: func(k string) string {
		if k == "IDGEN_TARGET" {
			return envTarget
		}
		return ""
	}})
	return out.String(), errb.String(), code
}

func TestDecodeSpecVector(t *testing.T) {
	// The README's example: 11157 = [2, 55, 59] = "2TX"; the same ID either way in.
	for _, in := range []string{"11157", "2TX"} {
		out, errOut, code := runCapture(t, "", "decode", in, "--json")
		var d decodedJSON
		if code != 0 || json.Unmarshal([]byte(out), &d) != nil {
			t.Fatalf("decode %s: exit %d %s %s", in, code, out, errOut)
		}
		if d.ID != 11157 || d.Code != "2TX" || d.Slot != 5 || d.Datacenter != 2 || d.Machine != 1 || d.Sequence != 917 || d.Time != "2026-05-05T00:00:00Z" {
			t.Fatalf("decode %s = %+v", in, d)
		}
	}
	// All digits read as base62 only when asked.
	out, _, code := runCapture(t, "", "--json", "decode", "--base62", "10")
	if code != 0 || !strings.Contains(out, `"id": 62`) {
		t.Fatalf("decode --base62 10: exit %d %s", code, out)
	}
	if _, errOut, code := runCapture(t, "", "decode", "no-such!"); code != 2 || !strings.Contains(errOut, "neither a decimal ID nor a base62 code") {
		t.Fatalf("bad code: exit %d %s", code, errOut)
	}
}

func TestFlagsBeforeAndAfterCommand(t *testing.T) {
	fs := newTestFlagSet()
	n := fs.Int("n", 1, "")
	var g globals
	addGlobalsKeep(fs, &g)
	pos, err := parseInterleaved(fs, []string{"a", "-n", "5", "b", "--json", "--", "-c"})
	if err != nil || *n != 5 || !g.json || !slices.Equal(pos, []string{"a", "b", "-c"}) {
		t.Fatalf("pos %v n %d json %v err %v", pos, *n, g.json, err)
	}
}

func TestUsageErrorsExit2(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"nope"},
		{"remove"},
		{"join"},
		{"ids", "-n", "0"},
		{"fault", "clock", "--offset", "later"},
		{"fault", "disk"},
		{"verify", "--rate", "0"},
		{"verify", "--batch", "-1"},
		{"verify", "--batch", "10001"},
		{"verify", "--batch", "100,x"},
		{"verify", "--batch", ""},
		{"verify", "--batch", "100,,0"},
		{"--timeout", "0s", "status"},
		{"--target", "", "status"},
	} {
		if _, _, code := runCapture(t, "", args...); code != exitUsage {
			t.Errorf("idctl %v: exit %d, want %d", args, code, exitUsage)
		}
	}
}

// --batch 0 asks for the node's default batch (the buffered path), alone or
// in a list taken in turn: not a usage error. Nothing listens on the target,
// so the run fails (exit 1) for want of IDs.
func TestVerifyBatchZeroAccepted(t *testing.T) {
	for _, batch := range []string{"0", "120,120,0"} {
		_, errOut, code := runCapture(t, "127.0.0.1:1", "--timeout", "1s", "verify",
			"--duration", "200ms", "--rate", "100", "--call-timeout", "100ms", "--batch", batch)
		if code != exitFailed {
			t.Errorf("verify --batch %s: exit %d, want %d: %s", batch, code, exitFailed, errOut)
		}
	}
}

func TestAdminTargetIsFirstAddress(t *testing.T) {
	for in, want := range map[string]string{
		"a:1,b:2":              "a:1",
		" a:1 ":                "a:1",
		"dns:///idgen.lan:123": "dns:///idgen.lan:123",
		"idgen:///s1:1,s2:2":   "s1:1",
	} {
		if got := adminTarget(in); got != want {
			t.Errorf("adminTarget(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestUnreachableTargetExit1(t *testing.T) {
	// Port 1 on loopback: nothing listens; the call fails with Unavailable.
	_, errOut, code := runCapture(t, "127.0.0.1:1", "--timeout", "2s", "status")
	if code != exitFailed || !strings.Contains(errOut, "Unavailable") {
		t.Fatalf("exit %d: %s", code, errOut)
	}
}

func newTestFlagSet() *flag.FlagSet {
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}
