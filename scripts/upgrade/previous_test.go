package upgrade

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/idgen/idgen/scripts/harness"
)

// previousFile names the release this tree rolls from and back to.
const previousFile = "PREVIOUS"

var fullHash = regexp.MustCompile(`^[0-9a-f]{40}$`)

// parsePrevious reads PREVIOUS's text: comment lines start with '#', blank
// lines are ignored, and the one other line is a full commit hash.
func parsePrevious(text string) (string, error) {
	var hash string
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if hash != "" {
			return "", fmt.Errorf("%s line %d: a second commit line %q (want one, after %q)", previousFile, i+1, line, hash)
		}
		if !fullHash.MatchString(line) {
			return "", fmt.Errorf("%s line %d: %q is not a full commit hash (40 lower-case hex digits)", previousFile, i+1, line)
		}
		hash = line
	}
	if hash == "" {
		return "", fmt.Errorf("%s names no commit", previousFile)
	}
	return hash, nil
}

func readPrevious(t testing.TB) string {
	t.Helper()
	b, err := os.ReadFile(previousFile)
	if err != nil {
		t.Fatal(err)
	}
	hash, err := parsePrevious(string(b))
	if err != nil {
		t.Fatal(err)
	}
	return hash
}

// PREVIOUS is checked in the unit stage too (it needs no git history): a
// malformed file fails there, before the upgrade stage.
func TestPreviousNamesOneCommit(t *testing.T) {
	readPrevious(t)
	for _, bad := range []string{
		"", "# only a comment\n", "add9da0\n",
		"add9da08ef0d292671cbc2acab85f5ee30b43d87\nadd9da08ef0d292671cbc2acab85f5ee30b43d87\n",
	} {
		if h, err := parsePrevious(bad); err == nil {
			t.Errorf("parsePrevious(%q) = %q, want an error", bad, h)
		}
	}
}

// git runs git in dir and returns its trimmed stdout.
func git(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}

// buildPrevious builds idgend and idctl of commit hash from this clone's
// history. A clone without the commit (a shallow one) fails the test: the
// upgrade stage must not pass without having rolled from the release.
//
// The commit is checked out in a throwaway clone that shares this one's
// objects (git clone --shared: nothing is copied, and nothing is registered
// in this repository), not in a git worktree: a worktree's .git is a file,
// and the go command stamps a revision only where .git is a directory
// (cmd/go/internal/vcs), so a worktree build says "revision unknown" even
// with -buildvcs=true.
func buildPrevious(t testing.TB, hash string) harness.Binaries {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	root, err := git(wd, "rev-parse", "--show-toplevel")
	if err != nil {
		t.Fatalf("the rolling-upgrade test builds the previous release from git history, but %s is not in a git clone: %v", wd, err)
	}
	if _, err := git(root, "cat-file", "-e", hash+"^{commit}"); err != nil {
		shallow, _ := git(root, "rev-parse", "--is-shallow-repository")
		t.Fatalf("PREVIOUS RELEASE NOT IN HISTORY: commit %s (scripts/upgrade/%s) is not in this clone (shallow: %s), so the release users run cannot be built and the rolling upgrade cannot be tested.\n"+
			"Fetch the full history first: git fetch --unshallow (in CI: check out with full depth, e.g. fetch-depth: 0).\n%v",
			hash, previousFile, shallow, err)
	}
	src := filepath.Join(t.TempDir(), "previous")
	if _, err := git(root, "clone", "--quiet", "--shared", "--no-checkout", root, src); err != nil {
		t.Fatal(err)
	}
	if _, err := git(src, "checkout", "--quiet", "--detach", hash); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	// -buildvcs=true on the command line: a GOFLAGS=-buildvcs=false in the
	// environment (or in go env -w) must not drop the revision the
	// binaries report.
	args := []string{"build", "-buildvcs=true", "-o", dir + string(os.PathSeparator), "./cmd/idgend", "./cmd/idctl"}
	cmd := exec.Command("go", args...)
	cmd.Dir = src
	start := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the previous release %s: go %s: %v\n%s", hash, strings.Join(args, " "), err, out)
	}
	t.Logf("built the previous release %s in %.1fs", hash[:12], time.Since(start).Seconds())
	return harness.Binaries{Idgend: filepath.Join(dir, "idgend"), Idctl: filepath.Join(dir, "idctl")}
}

var revisionRE = regexp.MustCompile(`\(revision ([^,)\s]+)`)

// version is what `idgend --version` prints, and the revision in it; a
// binary that names no revision ("unknown") fails the test, since then
// nothing tells the builds apart.
func version(t testing.TB, bin string) (line, revision string) {
	t.Helper()
	out, errOut, code, err := harness.Exec(harness.Scale(10*time.Second), nil, bin, "--version")
	if err != nil || code != 0 {
		t.Fatalf("%s --version: exit %d, %v\n%s%s", bin, code, err, out, errOut)
	}
	line = strings.TrimSpace(out)
	m := revisionRE.FindStringSubmatch(line)
	if m == nil || m[1] == "unknown" {
		t.Fatalf("%s --version names no revision: %q (built without -buildvcs=true, or outside git?)", bin, line)
	}
	return line, m[1]
}
