// Package docker tests the image scripts/docker/Dockerfile builds: it runs
// as a non-root user, its HEALTHCHECK turns healthy through idctl, and its
// labels carry the binaries' version and revision.
package docker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/idgen/idgen/scripts/harness"
)

// docker runs the docker CLI with a bound and returns its trimmed output.
func docker(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "docker", args...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// versionLine is idgend --version: "idgend VERSION (revision REV, GO)".
var versionLine = regexp.MustCompile(`^idgend (\S+) \(revision ([^,]+), (go\S+)\)$`)

func TestImage(t *testing.T) {
	if err := exec.Command("docker", "info").Run(); err != nil {
		// As scripts/chaos-docker: no engine, nothing to run the image on.
		t.Skip("no docker engine (docker info failed)")
	}
	ctxDir := t.TempDir()
	for _, d := range []string{"data", "tmp"} {
		if err := os.Mkdir(filepath.Join(ctxDir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	args := append(append([]string{"build", "-trimpath", "-o", ctxDir + string(os.PathSeparator)}, harness.StampArgs()...),
		"github.com/idgen/idgen/cmd/idgend", "github.com/idgen/idgen/cmd/idctl")
	build := exec.Command("go", args...)
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	df, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ctxDir, "Dockerfile"), df, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(filepath.Join(ctxDir, "idgend"), "--version").Output()
	m := versionLine.FindStringSubmatch(strings.TrimSpace(string(out)))
	if err != nil || m == nil {
		t.Fatalf("idgend --version: %v %q", err, out)
	}
	version, revision := m[1], m[2]

	var rnd [4]byte
	rand.Read(rnd[:])
	tag := "idgen-imagetest:" + hex.EncodeToString(rnd[:])
	if out, err := docker(t, "build", "-q", "--label", "org.idgen.test=1", "--build-arg", "VERSION="+version,
		"--build-arg", "REVISION="+revision, "-t", tag, ctxDir); err != nil {
		t.Fatalf("docker build: %v\n%s", err, out)
	}
	t.Cleanup(func() { docker(t, "rmi", "-f", tag) })

	raw, err := docker(t, "image", "inspect", "--format", "{{json .Config}}", tag)
	if err != nil {
		t.Fatalf("docker image inspect: %v %s", err, raw)
	}
	var cfg struct {
		User        string
		Labels      map[string]string
		Healthcheck struct{ Test []string }
	}
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.User == "" || strings.HasPrefix(cfg.User, "0") || strings.HasPrefix(cfg.User, "root") {
		t.Errorf("image user %q: want a non-root user", cfg.User)
	}
	if cfg.Labels["org.opencontainers.image.version"] != version || cfg.Labels["org.opencontainers.image.revision"] != revision {
		t.Errorf("labels %v: want version %s and revision %s", cfg.Labels, version, revision)
	}
	if !strings.Contains(strings.Join(cfg.Healthcheck.Test, " "), "/idctl health") {
		t.Errorf("healthcheck %v: want /idctl health", cfg.Healthcheck.Test)
	}

	// A single node on the image's defaults (loopback binds, /data), as the
	// unprivileged user: it must write its data dir and turn healthy.
	name := "idgen-imagetest-" + hex.EncodeToString(rnd[:])
	if out, err := docker(t, "run", "-d", "--label", "org.idgen.test=1", "--name", name, tag); err != nil {
		t.Fatalf("docker run: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := docker(t, "logs", "--tail", "30", name)
			t.Logf("--- container log ---\n%s", logs)
		}
		docker(t, "rm", "-f", name)
	})
	deadline := time.Now().Add(90 * time.Second)
	for {
		st, err := docker(t, "inspect", "--format", "{{.State.Health.Status}}", name)
		if err == nil && st == "healthy" {
			break
		}
		if err != nil || st == "unhealthy" || time.Now().After(deadline) {
			t.Fatalf("container health %q (%v)", st, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if uid, err := docker(t, "exec", name, "/idctl", "health", "--ready"); err != nil {
		t.Fatalf("idctl health --ready in the container: %v %s", err, uid)
	}
	out2, err := docker(t, "exec", name, "/idctl", "--target", "127.0.0.1:50051", "version", "--json")
	if err != nil || !strings.Contains(out2, `"version": "`+version+`"`) || !strings.Contains(out2, `"revision": "`+revision+`"`) {
		t.Fatalf("idctl version in the container: %v\n%s", err, out2)
	}
}
