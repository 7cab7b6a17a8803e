package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestVersionFlag(t *testing.T) {
	out, errOut, code := runBin(t, bin("idgend"), "--version")
	if code != 0 || !strings.HasPrefix(out, "idgend ") || !strings.Contains(out, "(revision ") || !strings.Contains(out, "go1") {
		t.Fatalf("--version: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	// --version answers even beside a value that would not validate.
	if _, _, code := runBin(t, bin("idgend"), "--version", "--bootstrap-expect", "99"); code != 0 {
		t.Fatalf("--version with a bad --bootstrap-expect: exit %d", code)
	}
}

// --check validates everything a start would, then exits without binding a
// port or touching the data dir.
func TestCheckFlag(t *testing.T) {
	p := newPKI(t, "server", "client")
	dataDir := filepath.Join(t.TempDir(), "data")
	keyFile := filepath.Join(t.TempDir(), "gossip.key")
	key := strings.TrimSpace(mustIdctl(t, "keygen"))
	if err := os.WriteFile(keyFile, []byte(key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	good := append([]string{"--check", "--data-dir", dataDir, "--grpc-addr", "0.0.0.0:50051", "--raft-addr", "0.0.0.0:50052",
		"--gossip-addr", "0.0.0.0:7946", "--http-addr", "0.0.0.0:9090", "--gossip-key-file", keyFile}, p.flags("server")...)
	out, errOut, code := runBin(t, bin("idgend"), good...)
	if code != 0 || !strings.Contains(out, "configuration ok") || !strings.Contains(out, "--grpc-addr=0.0.0.0:50051\t(set)") ||
		!strings.Contains(out, "--lead=10s\t(default)") {
		t.Fatalf("--check on a valid config: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	if _, err := os.Stat(dataDir); !os.IsNotExist(err) {
		t.Fatalf("--check touched the data dir: %v", err)
	}

	// The key itself is never printed, from a flag or the environment.
	out, _, code = runBinEnv(t, []string{"IDGEN_GOSSIP_KEY=" + key}, bin("idgend"), "--check", "--data-dir", dataDir)
	if code != 0 || strings.Contains(out, key) || !strings.Contains(out, "--gossip-key=(set, not shown)") {
		t.Fatalf("--check with IDGEN_GOSSIP_KEY: exit %d, printed %q", code, out)
	}

	for _, tc := range []struct {
		name string
		args []string
		env  []string
		code int
		want string
	}{
		{"misspelled flag", []string{"--check", "--grpc-adr", ":1"}, nil, exitUsage, "flag provided but not defined: -grpc-adr"},
		{"bad env value", []string{"--check"}, []string{"IDGEN_LEAD=soon"}, exitUsage, "IDGEN_LEAD"},
		{"plaintext off loopback", []string{"--check", "--grpc-addr", "0.0.0.0:1"}, nil, exitUsage, "not a loopback address"},
		{"client certificate", append([]string{"--check", "--data-dir", dataDir}, p.flags("client")...), nil, exitFailure, "needs a server certificate"},
		{"missing key file", []string{"--check", "--gossip-key-file", filepath.Join(t.TempDir(), "none")}, nil, exitUsage, "--gossip-key-file"},
	} {
		_, errOut, code := runBinEnv(t, tc.env, bin("idgend"), tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("%s: exit %d (want %d), stderr %q (want %q)", tc.name, code, tc.code, errOut, tc.want)
		}
	}
	if _, err := os.Stat(dataDir); !os.IsNotExist(err) {
		t.Fatalf("a refused --check touched the data dir: %v", err)
	}
}

// IDGEN_CHECK and IDGEN_VERSION are ignored: a stray variable must not keep
// every node of a deployment from serving.
func TestOneShotFlagsIgnoreEnv(t *testing.T) {
	env := map[string]string{"IDGEN_CHECK": "true", "IDGEN_VERSION": "true"}
	c, err := parseConfig(nil, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.CheckOnly || c.ShowVersion {
		t.Fatalf("environment set a one-shot flag: check %v version %v", c.CheckOnly, c.ShowVersion)
	}
}
