package main

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestEveryCommandHasHelpWithExamples(t *testing.T) {
	for _, c := range commandList() {
		ex := commandExamples(c.name)
		if len(ex) == 0 {
			t.Errorf("%s has no examples", c.name)
			continue
		}
		_, errOut, code := runCapture(t, "", c.name, "--help")
		if code != 0 || !strings.Contains(errOut, "Usage: idctl "+c.name) || !strings.Contains(errOut, "Examples:\n  "+ex[0]) {
			t.Errorf("idctl %s --help: exit %d\n%s", c.name, code, errOut)
		}
		for _, e := range ex {
			if !strings.HasPrefix(e, "idctl ") && !strings.Contains(e, "idctl completion") {
				t.Errorf("%s example %q does not run idctl", c.name, e)
			}
		}
	}
}

// complete runs the bash completion function for a command line whose last
// word is being typed, and returns the candidates.
func complete(t *testing.T, script string, words ...string) []string {
	t.Helper()
	quoted := make([]string, len(words))
	for i, w := range words {
		quoted[i] = "'" + w + "'"
	}
	src := script + "\nCOMP_WORDS=(" + strings.Join(quoted, " ") + ")\nCOMP_CWORD=" +
		string(rune('0'+len(words)-1)) + "\n_idctl\nprintf '%s\\n' \"${COMPREPLY[@]}\"\n"
	out, err := exec.Command("bash", "-c", src).CombinedOutput()
	if err != nil {
		t.Fatalf("bash: %v\n%s", err, out)
	}
	return strings.Fields(string(out))
}

func TestBashCompletion(t *testing.T) {
	script, errOut, code := runCapture(t, "", "completion", "bash")
	if code != 0 {
		t.Fatalf("completion bash: exit %d %s", code, errOut)
	}
	if out, err := exec.Command("bash", "-n", "-c", script).CombinedOutput(); err != nil {
		t.Fatalf("bash -n: %v\n%s", err, out)
	}
	for _, tc := range []struct {
		words []string
		want  string
		not   string
	}{
		{[]string{"idctl", "me"}, "members", "status"},
		{[]string{"idctl", "--target", "a:1", "st"}, "status", "members"},
		{[]string{"idctl", "ids", "--ba"}, "--base62", "--ready"},
		{[]string{"idctl", "--timeout", "3s", "health", "--re"}, "--ready", "--base62"},
		{[]string{"idctl", "completion", "f"}, "fish", "bash"},
	} {
		got := complete(t, script, tc.words...)
		if !strings.Contains(strings.Join(got, " "), tc.want) || strings.Contains(strings.Join(got, " "), tc.not) {
			t.Errorf("%v: candidates %v, want %s and not %s", tc.words, got, tc.want, tc.not)
		}
	}
}

func TestZshAndFishCompletion(t *testing.T) {
	zsh, _, code := runCapture(t, "", "completion", "zsh")
	if code != 0 || !strings.HasPrefix(zsh, "#compdef idctl\n") || !strings.Contains(zsh, "complete -o default -F _idctl idctl") {
		t.Fatalf("completion zsh: exit %d\n%s", code, zsh)
	}
	fish, _, code := runCapture(t, "", "completion", "fish")
	if code != 0 {
		t.Fatalf("completion fish: exit %d", code)
	}
	for _, c := range commandList() {
		if !strings.Contains(fish, "-a "+c.name+" ") {
			t.Errorf("fish completion lacks %s", c.name)
		}
	}
	// The help texts hold quotes; fish would end the string early on a bare one.
	if !strings.Contains(fish, `'list the cluster\'s nodes`) {
		t.Errorf("fish completion does not escape quotes:\n%s", fish)
	}
	if p, err := exec.LookPath("fish"); err == nil {
		f := filepath.Join(t.TempDir(), "idctl.fish")
		os.WriteFile(f, []byte(fish), 0o644)
		if out, err := exec.Command(p, "--no-execute", f).CombinedOutput(); err != nil {
			t.Errorf("fish --no-execute: %v\n%s", err, out)
		}
	}
	for _, args := range [][]string{{"completion"}, {"completion", "powershell"}, {"completion", "bash", "zsh"}} {
		if _, errOut, code := runCapture(t, "", args...); code != 2 || !strings.Contains(errOut, "bash, zsh, fish") {
			t.Errorf("%v: exit %d %s", args, code, errOut)
		}
	}
}

func TestHealth(t *testing.T) {
	ready := true
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/healthz":
			w.Write([]byte("ok\n"))
		case r.URL.Path == "/readyz" && ready:
			w.Write([]byte("ready\n"))
		case r.URL.Path == "/readyz":
			http.Error(w, "not ready: no raft leader known", http.StatusServiceUnavailable)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	_, port, _ := net.SplitHostPort(addr)

	runEnv := func(envAddr string, args ...string) (string, string, int) {
		var out, errb bytes.Buffer
		code := run(context.Background(), args, env{stdout: &out, stderr: &errb, getenv: func(k string) string {
			if k == "IDGEN_HTTP_ADDR" {
				return envAddr
			}
			return ""
		}})
		return out.String(), errb.String(), code
	}
	if out, errOut, code := runEnv("", "health", "--http", addr); code != 0 || !strings.Contains(out, "/healthz: ok") {
		t.Fatalf("health: exit %d %q %q", code, out, errOut)
	}
	// idgend's own variable, with the unspecified host idgend binds in a container.
	if out, errOut, code := runEnv("0.0.0.0:"+port, "health", "--ready"); code != 0 || !strings.Contains(out, "127.0.0.1:"+port+"/readyz: ready") {
		t.Fatalf("health --ready from IDGEN_HTTP_ADDR: exit %d %q %q", code, out, errOut)
	}
	ready = false
	if _, errOut, code := runEnv("", "health", "--ready", "--http", addr); code != 1 || !strings.Contains(errOut, "no raft leader known") {
		t.Fatalf("health --ready on a node not ready: exit %d %q", code, errOut)
	}
	srv.Close()
	if _, errOut, code := runEnv("", "health", "--http", addr); code != 1 || !strings.Contains(errOut, "connection refused") {
		t.Fatalf("health on a stopped node: exit %d %q", code, errOut)
	}
	if _, errOut, code := runEnv("", "health", "--http", "no-port"); code != 2 || !strings.Contains(errOut, "want host:port") {
		t.Fatalf("health --http no-port: exit %d %q", code, errOut)
	}
}
