package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idgen/idgen/scripts/harness"
)

// TestBuildsNameTheirRevisionWithoutVCSStamping: a build made the way the
// repository's scripts make it names its revision even where GOFLAGS turns
// the toolchain's VCS stamp off (common in CI images).
func TestBuildsNameTheirRevisionWithoutVCSStamping(t *testing.T) {
	if harness.Stamp() == "" {
		t.Skip("not a git checkout: nothing to stamp")
	}
	dir := t.TempDir()
	args := append(append([]string{"build", "-o", dir + string(os.PathSeparator)}, harness.StampArgs()...), "github.com/idgen/idgen/cmd/idgend")
	cmd := exec.Command("go", args...)
	cmd.Env = append(os.Environ(), "GOFLAGS=-buildvcs=false")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %v: %v\n%s", args, err, out)
	}
	out, _, code := runBin(t, filepath.Join(dir, "idgend"), "--version")
	rev, _ := exec.Command("git", "rev-parse", "HEAD").Output()
	if code != 0 || strings.Contains(out, "revision unknown") || !strings.Contains(out, strings.TrimSpace(string(rev))) {
		t.Fatalf("idgend --version of a -buildvcs=false build: exit %d, %q; want revision %s", code, out, rev)
	}
}

// TestRolloutView: idctl members shows each node's build and protocol range
// and the protocol the cluster runs, and idctl safe-to-stop says yes only
// while every other server is ready and a quorum of voters stays; a name it
// does not know is a usage error that changes nothing.
func TestRolloutView(t *testing.T) {
	nodes := startCluster(t, 3)
	target := targetOf(nodes...)
	var ms struct {
		ClusterProtocol int `json:"cluster_protocol"`
		Members         []struct {
			Name, Version, Revision, Protocols string
		} `json:"members"`
	}
	out := mustIdctl(t, "--target", target, "members", "--json")
	if err := json.Unmarshal([]byte(out), &ms); err != nil || len(ms.Members) != 3 {
		t.Fatalf("idctl members --json: %v\n%s", err, out)
	}
	if ms.ClusterProtocol != 2 {
		t.Errorf("cluster protocol %d, want 2 (three nodes of this build)", ms.ClusterProtocol)
	}
	ver, _, _ := runBin(t, bin("idgend"), "--version")
	for _, m := range ms.Members {
		if m.Protocols != "1..2" || m.Version == "" || m.Revision == "" || m.Revision == "unknown" || !strings.Contains(ver, m.Revision[:min(12, len(m.Revision))]) {
			t.Errorf("member %+v: want protocols 1..2 and the build's revision (idgend --version: %q)", m, ver)
		}
	}
	if table := mustIdctl(t, "--target", target, "members"); !strings.Contains(table, "PROTOCOLS") || !strings.Contains(table, "cluster protocol: 2") {
		t.Errorf("idctl members table lacks the protocol columns or the cluster's protocol:\n%s", table)
	}

	if out, errOut, code := idctl(t, "--target", target, "safe-to-stop", "n2"); code != 0 || !strings.Contains(out, "safe to stop n2") {
		t.Errorf("safe-to-stop n2 in a healthy cluster: exit %d\n%s\n%s", code, out, errOut)
	}
	if _, errOut, code := idctl(t, "--target", target, "safe-to-stop", "nobody"); code != 2 || !strings.Contains(errOut, "no member has ID or name") {
		t.Errorf("safe-to-stop of an unknown node: exit %d, want 2 (usage)\n%s", code, errOut)
	}
	nodes[2].kill()
	out, errOut, code := idctl(t, "--target", nodes[0].grpc, "--timeout", "2s", "safe-to-stop", "n2")
	if code != 1 || !strings.Contains(out, "NOT safe to stop n2") || !strings.Contains(out, "n3") {
		t.Errorf("safe-to-stop n2 with n3 down: exit %d, want 1 naming n3\n%s\n%s", code, out, errOut)
	}
	// --wait: safe again once n3 is back and ready, even with n3, down
	// meanwhile, the first address of the target.
	nodes[2].start()
	if out, errOut, code := idctl(t, "--target", targetOf(nodes[2], nodes[0], nodes[1]), "--timeout", "2s", "safe-to-stop", "n2", "--wait", harness.Scale(60*time.Second).String()); code != 0 {
		t.Errorf("safe-to-stop n2 --wait after n3's restart: exit %d\n%s\n%s", code, out, errOut)
	}
}
