// Command checklinks checks the relative links of the repository's Markdown
// files: every link to a file or directory must name one that exists in the
// repository, and every #anchor must name a heading of its target (GitHub's
// slugs: lower case, punctuation dropped except hyphens and underscores,
// spaces to hyphens, repeated headings numbered -1, -2, ...).
//
//	go run ./scripts/checklinks            # every *.md git tracks or would track
//	go run ./scripts/checklinks FILE.md... # only these
//
// Links with a scheme (https:, mailto:, ...) are not followed, and links in
// code (fenced or indented blocks, `inline code`) or HTML comments are not
// links. It prints one "file:line: broken link X (reason)" line per broken
// link and exits 1 if there is any; 2 if it cannot run.
package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode"
)

func main() {
	root := "."
	files := os.Args[1:]
	tracked, err := gitFiles(root)
	if err != nil {
		// Not a git work tree: every file on disk counts.
		tracked = nil
	}
	if len(files) == 0 {
		if tracked == nil {
			files, err = walkMarkdown(root)
			if err != nil {
				fmt.Fprintln(os.Stderr, "checklinks:", err)
				os.Exit(2)
			}
		} else {
			for _, f := range tracked {
				if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(f))); isMarkdown(f) && err == nil {
					files = append(files, f) // not one deleted in the work tree
				}
			}
		}
	}
	c := newChecker(root, tracked)
	problems, links := c.checkFiles(files)
	for _, p := range problems {
		fmt.Println(p)
	}
	if len(problems) > 0 {
		fmt.Fprintf(os.Stderr, "checklinks: %d broken of %d relative links in %d files\n", len(problems), links, len(files))
		os.Exit(1)
	}
	fmt.Printf("checklinks: %d relative links in %d Markdown files ok\n", links, len(files))
}

// gitFiles lists the files git tracks, and the untracked ones it does not
// ignore, relative to root.
func gitFiles(root string) ([]string, error) {
	cmd := exec.Command("git", "ls-files", "-z", "-co", "--exclude-standard")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return nil, err
	}
	var files []string
	for _, f := range bytes.Split(out, []byte{0}) {
		if len(f) > 0 {
			files = append(files, string(f))
		}
	}
	return files, nil
}

func walkMarkdown(root string) ([]string, error) {
	var files []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != root && strings.HasPrefix(d.Name(), ".") {
			return filepath.SkipDir
		}
		if !d.IsDir() && isMarkdown(p) {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	return files, err
}

func isMarkdown(name string) bool {
	switch strings.ToLower(path.Ext(name)) {
	case ".md", ".markdown":
		return true
	}
	return false
}

// checker holds what is known of the repository: which files are in it and
// the anchors of every Markdown file read so far.
type checker struct {
	root    string
	files   map[string]bool // repository-relative, slash-separated; nil: whatever is on disk
	dirs    map[string]bool
	anchors map[string]map[string]bool
}

func newChecker(root string, tracked []string) *checker {
	c := &checker{root: root, anchors: map[string]map[string]bool{}}
	if tracked != nil {
		c.files, c.dirs = map[string]bool{}, map[string]bool{".": true}
		for _, f := range tracked {
			c.files[f] = true
			for d := path.Dir(f); d != "."; d = path.Dir(d) {
				c.dirs[d] = true
			}
		}
	}
	return c
}

// checkFiles checks every relative link of files (repository-relative paths)
// and returns the problems, sorted, and how many relative links it saw.
func (c *checker) checkFiles(files []string) (problems []string, links int) {
	for _, f := range files {
		f = path.Clean(filepath.ToSlash(f))
		text, err := os.ReadFile(filepath.Join(c.root, filepath.FromSlash(f)))
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s:0: cannot read (%v)", f, err))
			continue
		}
		for _, l := range extractLinks(text) {
			if !isRelative(l.target) {
				continue
			}
			links++
			if reason := c.check(f, l.target); reason != "" {
				problems = append(problems, fmt.Sprintf("%s:%d: broken link %s (%s)", f, l.line, l.target, reason))
			}
		}
	}
	sort.SliceStable(problems, func(i, j int) bool { return lessProblem(problems[i], problems[j]) })
	return problems, links
}

// lessProblem orders "file:line: ..." by file, then by line number.
func lessProblem(a, b string) bool {
	fa, la := splitProblem(a)
	fb, lb := splitProblem(b)
	if fa != fb {
		return fa < fb
	}
	return la < lb
}

func splitProblem(p string) (string, int) {
	parts := strings.SplitN(p, ":", 3)
	if len(parts) < 3 {
		return p, 0
	}
	n, _ := strconv.Atoi(parts[1])
	return parts[0], n
}

var scheme = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)

func isRelative(target string) bool {
	return target != "" && !scheme.MatchString(target) && !strings.HasPrefix(target, "//")
}

// check returns why the link target, found in file from, is broken, or "".
func (c *checker) check(from, target string) string {
	p, frag, _ := strings.Cut(target, "#")
	if q := strings.IndexByte(p, '?'); q >= 0 {
		p = p[:q]
	}
	if u, err := url.PathUnescape(p); err == nil {
		p = u
	}
	if f, err := url.PathUnescape(frag); err == nil {
		frag = f
	}
	var dest string
	switch {
	case p == "":
		dest = from
	case strings.HasPrefix(p, "/"):
		dest = path.Clean(strings.TrimLeft(p, "/"))
	default:
		dest = path.Join(path.Dir(from), p)
	}
	if dest == ".." || strings.HasPrefix(dest, "../") {
		return "outside the repository"
	}
	isDir, ok := c.exists(dest)
	if !ok {
		return "no such file or directory"
	}
	if frag == "" {
		return ""
	}
	if isDir {
		readme := path.Join(dest, "README.md")
		if _, ok := c.exists(readme); !ok {
			return "anchor into a directory without README.md"
		}
		dest = readme
	}
	if !isMarkdown(dest) {
		if lineAnchor.MatchString(frag) {
			return ""
		}
		return "anchor #" + frag + " into a file that is not Markdown"
	}
	anchors, err := c.anchorsOf(dest)
	if err != nil {
		return err.Error()
	}
	if !anchors[frag] {
		return "no heading #" + frag + " in " + dest
	}
	return ""
}

// lineAnchor is GitHub's anchor for lines of a source file.
var lineAnchor = regexp.MustCompile(`^L\d+(-L\d+)?$`)

// exists reports whether the repository has dest (a clean, relative path)
// and whether it is a directory.
func (c *checker) exists(dest string) (isDir, ok bool) {
	if c.files != nil && !c.files[dest] && !c.dirs[dest] {
		return false, false // not in git's list: ignored, or not there
	}
	// On disk too: git still lists a tracked file deleted in the work tree.
	st, err := os.Stat(filepath.Join(c.root, filepath.FromSlash(dest)))
	if err != nil {
		return false, false
	}
	return st.IsDir(), true
}

func (c *checker) anchorsOf(file string) (map[string]bool, error) {
	if a, ok := c.anchors[file]; ok {
		return a, nil
	}
	text, err := os.ReadFile(filepath.Join(c.root, filepath.FromSlash(file)))
	if err != nil {
		return nil, fmt.Errorf("cannot read %s", file)
	}
	a := map[string]bool{}
	seen := map[string]int{}
	for _, h := range headings(text) {
		s := slug(h)
		if n, dup := seen[s]; dup {
			seen[s] = n + 1
			s = fmt.Sprintf("%s-%d", s, n+1)
		} else {
			seen[s] = 0
		}
		a[s] = true
	}
	for _, m := range htmlAnchor.FindAllSubmatch(text, -1) {
		a[string(m[2])] = true
	}
	c.anchors[file] = a
	return a, nil
}

// htmlAnchor is an explicit anchor: <a name="x"> or id="x".
var htmlAnchor = regexp.MustCompile(`<[A-Za-z][^>]*\s(name|id)="([^"]+)"`)

// link is one link target and the line it is on (1-based).
type link struct {
	target string
	line   int
}

var (
	// [text](target) and ![alt](target), with an optional title; the target
	// may be in <angle brackets>.
	inlineLink = regexp.MustCompile(`\]\(\s*(?:<([^>]*)>|([^()\s]*(?:\([^()\s]*\)[^()\s]*)*))(?:\s+(?:"[^"]*"|'[^']*'|\([^)]*\)))?\s*\)`)
	// [label]: target "title"
	refDef = regexp.MustCompile(`^ {0,3}\[[^\]]+\]:\s*<?([^\s>]+)>?`)
	// href="..." and src="..." in HTML.
	htmlLink = regexp.MustCompile(`\b(?:href|src)="([^"]*)"`)
	fence    = regexp.MustCompile("^ {0,3}(`{3,}|~{3,})")
	listItem = regexp.MustCompile(`^ {0,3}([-*+]|\d{1,9}[.)])(\s|$)`)
)

// extractLinks returns the links of a Markdown text outside code and HTML
// comments.
func extractLinks(text []byte) []link {
	var links []link
	for _, ln := range proseLines(text) {
		s := ln.text
		if m := refDef.FindStringSubmatch(s); m != nil {
			links = append(links, link{m[1], ln.n})
			continue
		}
		for _, m := range inlineLink.FindAllStringSubmatch(s, -1) {
			t := m[1]
			if t == "" {
				t = m[2]
			}
			if t != "" {
				links = append(links, link{t, ln.n})
			}
		}
		for _, m := range htmlLink.FindAllStringSubmatch(s, -1) {
			links = append(links, link{m[1], ln.n})
		}
	}
	return links
}

// numbered is a line of prose: code spans blanked out, line number kept.
type numbered struct {
	text string
	n    int
}

// proseLines returns the lines outside fenced and indented code blocks and
// HTML comments, with inline code spans replaced by spaces.
func proseLines(text []byte) []numbered {
	var out []numbered
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(make([]byte, 1024*1024), 16*1024*1024)
	var (
		n           int
		fenceMark   string // the fence that opened the current code block
		inComment   bool
		prevBlank   = true
		inList      bool
		inIndented  bool
		pendingSpan []numbered // a paragraph's lines, for code spans across lines
	)
	flush := func() {
		out = append(out, blankCodeSpans(pendingSpan)...)
		pendingSpan = nil
	}
	for sc.Scan() {
		n++
		line := strings.TrimRight(sc.Text(), "\r")
		if fenceMark != "" {
			if m := fence.FindStringSubmatch(line); m != nil && m[1][0] == fenceMark[0] && len(m[1]) >= len(fenceMark) && strings.TrimSpace(line[len(m[0]):]) == "" {
				fenceMark = ""
			}
			continue
		}
		blank := strings.TrimSpace(line) == ""
		if inIndented {
			if blank || indentedCode(line) {
				continue
			}
			inIndented = false
		}
		if m := fence.FindStringSubmatch(line); m != nil {
			flush()
			fenceMark = m[1]
			prevBlank = false
			continue
		}
		if prevBlank && !inList && indentedCode(line) {
			flush()
			inIndented = true
			continue
		}
		if blank {
			flush()
			prevBlank = true
			continue
		}
		if listItem.MatchString(line) {
			inList = true
		} else if prevBlank && !strings.HasPrefix(line, " ") && !strings.HasPrefix(line, "\t") {
			inList = false
		}
		prevBlank = false
		// HTML comments, possibly over several lines.
		var b strings.Builder
		rest := line
		for rest != "" {
			if inComment {
				i := strings.Index(rest, "-->")
				if i < 0 {
					rest = ""
					break
				}
				rest = rest[i+3:]
				inComment = false
				continue
			}
			i := strings.Index(rest, "<!--")
			if i < 0 {
				b.WriteString(rest)
				break
			}
			b.WriteString(rest[:i])
			rest = rest[i+4:]
			inComment = true
		}
		pendingSpan = append(pendingSpan, numbered{b.String(), n})
	}
	flush()
	return out
}

func indentedCode(line string) bool {
	return strings.HasPrefix(line, "    ") || strings.HasPrefix(line, "\t")
}

// blankCodeSpans replaces code spans (one or more backticks around text) in a paragraph's
// lines with spaces; a span may run over several lines of the paragraph.
func blankCodeSpans(lines []numbered) []numbered {
	if len(lines) == 0 {
		return nil
	}
	var joined strings.Builder
	for i, l := range lines {
		if i > 0 {
			joined.WriteByte('\n')
		}
		joined.WriteString(l.text)
	}
	s := []byte(joined.String())
	for i := 0; i < len(s); {
		if s[i] != '`' {
			i++
			continue
		}
		j := i
		for j < len(s) && s[j] == '`' {
			j++
		}
		run := j - i
		// Find a closing run of exactly the same length.
		k := j
		closed := -1
		for k < len(s) {
			if s[k] != '`' {
				k++
				continue
			}
			e := k
			for e < len(s) && s[e] == '`' {
				e++
			}
			if e-k == run {
				closed = e
				break
			}
			k = e
		}
		if closed < 0 {
			i = j // an unmatched run is literal backticks
			continue
		}
		for x := i; x < closed; x++ {
			if s[x] != '\n' {
				s[x] = ' '
			}
		}
		i = closed
	}
	parts := strings.Split(string(s), "\n")
	out := make([]numbered, len(lines))
	for i := range lines {
		out[i] = numbered{parts[i], lines[i].n}
	}
	return out
}

var (
	atxHeading    = regexp.MustCompile(`^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$`)
	setextLine    = regexp.MustCompile(`^ {0,3}(=+|-+)[ \t]*$`)
	mdLinkText    = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	htmlTag       = regexp.MustCompile(`<[^>]+>`)
	emphUnderline = regexp.MustCompile(`(^|[^\p{L}\p{N}])_+([^_]+?)_+([^\p{L}\p{N}]|$)`)
)

// headings returns the text of every heading outside code blocks, in order.
func headings(text []byte) []string {
	var hs []string
	lines := strings.Split(string(text), "\n")
	fenceMark := ""
	prevProse := "" // the previous line, if it could be a setext heading's text
	prevBlank := true
	for _, line := range lines {
		line = strings.TrimRight(line, "\r")
		if fenceMark != "" {
			if m := fence.FindStringSubmatch(line); m != nil && m[1][0] == fenceMark[0] && len(m[1]) >= len(fenceMark) && strings.TrimSpace(line[len(m[0]):]) == "" {
				fenceMark = ""
			}
			continue
		}
		if m := fence.FindStringSubmatch(line); m != nil {
			fenceMark = m[1]
			prevProse, prevBlank = "", false
			continue
		}
		if strings.TrimSpace(line) == "" {
			prevProse, prevBlank = "", true
			continue
		}
		if prevBlank && indentedCode(line) {
			prevProse = ""
			continue
		}
		prevBlank = false
		if m := atxHeading.FindStringSubmatch(line); m != nil {
			hs = append(hs, m[2])
			prevProse = ""
			continue
		}
		if prevProse != "" && setextLine.MatchString(line) && !listItem.MatchString(prevProse) {
			hs = append(hs, strings.TrimSpace(prevProse))
			prevProse = ""
			continue
		}
		prevProse = line
	}
	return hs
}

// slug is GitHub's anchor for a heading's text.
func slug(h string) string {
	h = mdLinkText.ReplaceAllString(h, "$1")
	h = htmlTag.ReplaceAllString(h, "")
	h = strings.ReplaceAll(h, "`", "")
	h = strings.ReplaceAll(h, "*", "")
	for {
		next := emphUnderline.ReplaceAllString(h, "$1$2$3")
		if next == h {
			break
		}
		h = next
	}
	h = strings.TrimSpace(strings.ToLower(h))
	var b strings.Builder
	for _, r := range h {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r) || unicode.Is(unicode.Mn, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}
