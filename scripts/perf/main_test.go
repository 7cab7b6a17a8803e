package main

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// Bad invocations are refused as usage errors before anything starts.
func TestRunRefusesBadArguments(t *testing.T) {
	dir := t.TempDir()
	notBin := filepath.Join(dir, "idgend")
	if err := os.Mkdir(notBin, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, args := range map[string][]string{
		"no --bin":             {},
		"unknown flag":         {"--bin", dir, "--fast"},
		"extra argument":       {"--bin", dir, "now"},
		"--bin without idgend": {"--bin", t.TempDir()},
		"idgend a directory":   {"--bin", dir},
		"serve too short":      {"serve", "bare"},
		"serve unknown kind":   {"serve", "fancy", "127.0.0.1:0"},
		"unknown part":         {"--bin", dir, "--only", "nine"},
		"no fleet clients":     {"--bin", dir, "--fleet-clients", "0"},
		"fleet subset past 3":  {"--bin", dir, "--fleet-subset", "4"},
		"attack without ports": {"attack"},
		"attack bad target":    {"attack", "grpc=127.0.0.1"},
	} {
		if err := run(args, io.Discard, io.Discard); !errors.Is(err, errUsage) {
			t.Errorf("%s: %v, want a usage error", name, err)
		}
	}
}
