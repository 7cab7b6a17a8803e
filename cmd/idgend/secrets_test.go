package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idgen/idgen/rpc/tlsconf"
	"github.com/idgen/idgen/scripts/harness"
)

// TestKeyFilesReadableByOthersRefused: a TLS key, a gossip key file or a CA
// key next to --tls-ca that group or others can read keeps idgend from
// starting and fails --check, naming the file and the chmod to run; the same
// files at 0600 (as idctl writes them) pass. A gossip key on the command
// line, where every user of the host can read it, is warned about.
func TestKeyFilesReadableByOthersRefused(t *testing.T) {
	p := newPKI(t, "server")
	keyFile := filepath.Join(t.TempDir(), "gossip.key")
	mustIdctl(t, "keygen", "--out", keyFile)
	if fi, err := os.Stat(keyFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("idctl keygen --out wrote %v (%v), want mode 0600", fi.Mode(), err)
	}
	dataDir := filepath.Join(t.TempDir(), "data")
	base := append([]string{"--data-dir", dataDir, "--gossip-key-file", keyFile}, p.flags("server")...)
	check := func(extra ...string) (string, string, int) {
		t.Helper()
		return runBin(t, bin("idgend"), append(append([]string{"--check"}, base...), extra...)...)
	}
	if out, errOut, code := check(); code != 0 || !strings.Contains(out, "configuration ok") {
		t.Fatalf("--check with 0600 keys: exit %d\n%s%s", code, out, errOut)
	}

	tlsKey, caKey := tlsconf.KeyFile(p.dir, "server"), filepath.Join(p.dir, tlsconf.CAKeyFile)
	for _, tc := range []struct {
		file string
		mode os.FileMode
	}{{tlsKey, 0o644}, {keyFile, 0o644}, {caKey, 0o666}, {tlsKey, 0o604}, {keyFile, 0o660}} {
		if err := os.Chmod(tc.file, tc.mode); err != nil {
			t.Fatal(err)
		}
		_, errOut, code := check()
		if code == 0 || !strings.Contains(errOut, tc.file) || !strings.Contains(errOut, "chmod 600 "+tc.file) {
			t.Errorf("--check with %s at %04o: exit %d, stderr %q; want a refusal naming the file and chmod 600", tc.file, tc.mode, code, errOut)
		}
		if tc.file == tlsKey && tc.mode == 0o644 {
			// A real start is refused the same way, before the data dir is touched.
			ports := harness.NextPorts(t, 4)
			_, errOut, code := runBin(t, bin("idgend"), append(base, "--grpc-addr", addr(ports[0]), "--raft-addr", addr(ports[1]),
				"--gossip-addr", addr(ports[2]), "--http-addr", addr(ports[3]))...)
			if code == 0 || !strings.Contains(errOut, "chmod 600 "+tc.file) {
				t.Errorf("start with %s at 0644: exit %d, stderr %q", tc.file, code, errOut)
			}
			if _, err := os.Stat(dataDir); !os.IsNotExist(err) {
				t.Errorf("a start refused for its key mode touched the data dir: %v", err)
			}
		}
		if err := os.Chmod(tc.file, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if out, errOut, code := check(); code != 0 || !strings.Contains(out, "configuration ok") {
		t.Fatalf("--check with the keys back at 0600: exit %d\n%s%s", code, out, errOut)
	}
	// The CA's key under another name beside the CA certificate is found by
	// what it holds, not by its name.
	b, err := os.ReadFile(caKey)
	if err != nil {
		t.Fatal(err)
	}
	renamed := filepath.Join(p.dir, "backup-of-the-ca.key")
	if err := os.WriteFile(renamed, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := check(); code == 0 || !strings.Contains(errOut, "chmod 600 "+renamed) {
		t.Errorf("--check with the CA key copied to %s at 0644: exit %d, stderr %q; want a refusal naming it", renamed, code, errOut)
	}
	if err := os.Chmod(renamed, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := check(); code != 0 || !strings.Contains(out, "configuration ok") {
		t.Fatalf("--check with the CA key's copy at 0600: exit %d\n%s%s", code, out, errOut)
	}

	// --gossip-key on the command line shows in ps: warned. From the
	// environment or a file it does not.
	key := gossipKey(t)
	const warning = "process list"
	_, errOut, code := runBin(t, bin("idgend"), "--check", "--data-dir", dataDir, "--gossip-key", key)
	if code != 0 || !strings.Contains(errOut, warning) || !strings.Contains(errOut, "--gossip-key-file") || strings.Contains(errOut, key) {
		t.Errorf("--check --gossip-key KEY: exit %d, stderr %q; want a warning that it shows in the process list, naming --gossip-key-file and not the key", code, errOut)
	}
	_, errOut, code = runBinEnv(t, []string{"IDGEN_GOSSIP_KEY=" + key}, bin("idgend"), "--check", "--data-dir", dataDir)
	if code != 0 || strings.Contains(errOut, warning) {
		t.Errorf("--check with IDGEN_GOSSIP_KEY: exit %d, stderr %q; want no process-list warning", code, errOut)
	}
	if _, errOut, _ := check(); strings.Contains(errOut, warning) {
		t.Errorf("--check with --gossip-key-file warned: %q", errOut)
	}
}

// TestSecretModeRule: a key file may be read by its owner only; a file
// owned by root may also be read by its group (how Kubernetes mounts a
// Secret for a non-root pod with fsGroup, and what PostgreSQL allows).
// Anything more is refused.
func TestSecretModeRule(t *testing.T) {
	const user, other = 1000, 1001
	for _, tc := range []struct {
		mode  os.FileMode
		owner int
		ok    bool
	}{
		{0o600, user, true},
		{0o400, user, true},
		{0o700, user, true},
		{0o640, user, false},
		{0o604, user, false},
		{0o644, user, false},
		{0o620, user, false},
		{0o440, other, false},
		{0o440, 0, true}, // a Kubernetes Secret with defaultMode 0440 and fsGroup
		{0o640, 0, true},
		{0o600, 0, true},
		{0o660, 0, false},
		{0o644, 0, false},
		{0o444, 0, false},
		{0o650, 0, false},
	} {
		err := secretModeProblem(tc.mode, tc.owner)
		if (err == nil) != tc.ok {
			t.Errorf("mode %04o owned by uid %d: %v, want ok=%v", tc.mode, tc.owner, err, tc.ok)
		}
	}
}
