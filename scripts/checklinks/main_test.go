package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// write makes the files of a small repository under a temp dir.
func write(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, text := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

const guide = "# The guide\n\n" +
	"## Ports, flags and commands\n\n" +
	"## Ports, flags and commands\n\n" +
	"## `idctl verify` -- what it *checks*\n\n" +
	"Setext heading\n--------------\n\n" +
	"```\n# not a heading\n```\n"

func TestGoodLinksPass(t *testing.T) {
	root := write(t, map[string]string{
		"README.md": "# idgen\n\n" +
			"See [the guide](docs/guide.md), [ports](docs/guide.md#ports-flags-and-commands),\n" +
			"[the second one](docs/guide.md#ports-flags-and-commands-1),\n" +
			"[verify](docs/guide.md#idctl-verify----what-it-checks), [setext](docs/guide.md#setext-heading),\n" +
			"[a dir](docs/), [code](main.go#L3), [here](#idgen), [web](https://example.com/x.md), [mail](mailto:a@b.c).\n\n" +
			"[ref]: docs/guide.md#the-guide\n",
		"docs/guide.md": guide + "\nBack to [the top](../README.md#idgen) and [a heading](#the-guide).\n",
		"main.go":       "package main\n",
	})
	problems, links := newChecker(root, nil).checkFiles([]string{"README.md", "docs/guide.md"})
	if len(problems) > 0 {
		t.Fatalf("good links reported broken:\n%s", strings.Join(problems, "\n"))
	}
	if links != 11 {
		t.Fatalf("saw %d relative links, want 11", links)
	}
}

func TestBrokenLinksFail(t *testing.T) {
	root := write(t, map[string]string{
		"README.md": "# idgen\n\n" +
			"[missing file](docs/missing.md)\n" +
			"[missing heading](docs/guide.md#no-such-heading)\n" +
			"[third duplicate](docs/guide.md#ports-flags-and-commands-2)\n" +
			"[heading in a fence](docs/guide.md#not-a-heading)\n" +
			"[outside](../elsewhere/NOTES.md)\n" +
			"[own anchor](#nowhere)\n" +
			"`[in code](nowhere.md)` and\n\n" +
			"```\n[in a fence](nowhere.md)\n```\n\n" +
			"    [indented code](nowhere.md)\n",
		"docs/guide.md": guide,
	})
	problems, _ := newChecker(root, nil).checkFiles([]string{"README.md"})
	want := []string{
		"README.md:3: broken link docs/missing.md (no such file or directory)",
		"README.md:4: broken link docs/guide.md#no-such-heading (no heading #no-such-heading in docs/guide.md)",
		"README.md:5: broken link docs/guide.md#ports-flags-and-commands-2 (no heading #ports-flags-and-commands-2 in docs/guide.md)",
		"README.md:6: broken link docs/guide.md#not-a-heading (no heading #not-a-heading in docs/guide.md)",
		"README.md:7: broken link ../elsewhere/NOTES.md (outside the repository)",
		"README.md:8: broken link #nowhere (no heading #nowhere in README.md)",
	}
	if strings.Join(problems, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got:\n%s\nwant:\n%s", strings.Join(problems, "\n"), strings.Join(want, "\n"))
	}
}

// A file on disk that git ignores is not in the repository.
func TestIgnoredFileIsNotInTheRepository(t *testing.T) {
	root := write(t, map[string]string{
		"README.md":  "[binary](bin/idctl) [kept](kept.md)\n",
		".gitignore": "/bin/\n",
		"bin/idctl":  "x",
		"kept.md":    "# kept\n",
	})
	tracked, err := gitFilesIn(t, root)
	if err != nil {
		t.Skip("no git:", err)
	}
	problems, _ := newChecker(root, tracked).checkFiles([]string{"README.md"})
	if len(problems) != 1 || !strings.Contains(problems[0], "bin/idctl (no such file") {
		t.Fatalf("got %q, want one problem for bin/idctl", problems)
	}
}

func gitFilesIn(t *testing.T, root string) ([]string, error) {
	t.Helper()
	if out, err := exec.Command("git", "-C", root, "init", "-q").CombinedOutput(); err != nil {
		return nil, &exec.Error{Name: string(out), Err: err}
	}
	return gitFiles(root)
}

// The command itself exits 1 and prints file:line lines on a broken link.
func TestCommandExitsOneOnABrokenLink(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the command")
	}
	bin := filepath.Join(t.TempDir(), "checklinks")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	root := write(t, map[string]string{"README.md": "# a\n\n[b](b.md)\n"})
	cmd := exec.Command(bin)
	cmd.Dir = root
	out, err := cmd.Output()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("exit: %v, want 1; output %q", err, out)
	}
	if got := string(out); got != "README.md:3: broken link b.md (no such file or directory)\n" {
		t.Fatalf("output %q", got)
	}

	if err := os.WriteFile(filepath.Join(root, "b.md"), []byte("# b\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd = exec.Command(bin)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("with b.md present: %v\n%s", err, out)
	}
}
