package cluster

import (
	"bufio"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
)

// fileCalls type-checks this package's non-test files and returns, for each
// file, the other files whose functions and methods it calls (or takes as
// values).
func fileCalls(t *testing.T) map[string]map[string]bool {
	t.Helper()
	out, err := exec.Command("go", "list", "-export", "-deps", "-f", "{{.ImportPath}}\t{{.Export}}", ".").Output()
	if err != nil {
		t.Skipf("go list -export: %v", err)
	}
	exports := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		if path, file, ok := strings.Cut(sc.Text(), "\t"); ok && file != "" {
			exports[path] = file
		}
	}
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) { return os.Open(exports[path]) })
	names, _ := filepath.Glob("*.go")
	var files []*ast.File
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}}
	pkg, err := (&types.Config{Importer: imp}).Check("github.com/idgen/idgen/cluster", fset, files, info)
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]map[string]bool{}
	for id, obj := range info.Uses {
		fn, ok := obj.(*types.Func)
		if !ok || fn.Pkg() != pkg {
			continue
		}
		from, to := fset.Position(id.Pos()).Filename, fset.Position(fn.Pos()).Filename
		if from == to {
			continue
		}
		if calls[from] == nil {
			calls[from] = map[string]bool{}
		}
		calls[from][to] = true
		if os.Getenv("LAYERING_WHY") != "" {
			println(from, "->", to, fn.FullName())
		}
	}
	return calls
}

// TestNoFileCallsBackIntoItsCaller: the package's files call each other one
// way (the roles, roles.go): a file never calls into a file that calls it,
// directly or through others. (LAYERING_WHY=1 prints every call between
// files.)
func TestNoFileCallsBackIntoItsCaller(t *testing.T) {
	calls := fileCalls(t)
	var from []string
	for a := range calls {
		from = append(from, a)
	}
	sort.Strings(from)
	// A depth-first search: a file met again while still on the path closes
	// a cycle.
	const (
		unseen = iota
		onPath
		done
	)
	mark := map[string]int{}
	var path []string
	var visit func(a string)
	visit = func(a string) {
		mark[a] = onPath
		path = append(path, a)
		var tos []string
		for b := range calls[a] {
			tos = append(tos, b)
		}
		sort.Strings(tos)
		for _, b := range tos {
			switch mark[b] {
			case onPath:
				i := slices.Index(path, b)
				t.Errorf("files call back into their callers: %s -> %s", strings.Join(path[i:], " -> "), b)
			case unseen:
				visit(b)
			}
		}
		path = path[:len(path)-1]
		mark[a] = done
	}
	for _, a := range from {
		if mark[a] == unseen {
			visit(a)
		}
	}
}

// maxMethods is the most methods a type of the package may have: a type
// with more is doing more than one thing.
const maxMethods = 20

// TestNoTypeHasMoreThanMaxMethods counts the methods declared on each type in
// cluster/ and the packages below it, test files (the simulator) included.
func TestNoTypeHasMoreThanMaxMethods(t *testing.T) {
	count := map[string]int{}
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") {
			return err
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Recv == nil || len(fn.Recv.List) == 0 {
				continue
			}
			typ := fn.Recv.List[0].Type
			if star, ok := typ.(*ast.StarExpr); ok {
				typ = star.X
			}
			if idx, ok := typ.(*ast.IndexExpr); ok {
				typ = idx.X
			}
			if id, ok := typ.(*ast.Ident); ok {
				count[filepath.Join("cluster", filepath.Dir(path))+"."+id.Name]++
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for typ, n := range count {
		if n > maxMethods {
			t.Errorf("%s has %d methods, more than %d", typ, n, maxMethods)
		}
	}
}

// TestEveryRoleKnowsItsNode: Open gives every role (a field of Node whose
// type reaches the node through a field n) its node.
func TestEveryRoleKnowsItsNode(t *testing.T) {
	tc := newTestCluster(t)
	tc.add("a", 1)
	n := tc.start("a")
	v := reflect.ValueOf(n).Elem()
	roles := 0
	for i := range v.NumField() {
		f := v.Field(i)
		if f.Kind() != reflect.Struct {
			continue
		}
		back := f.FieldByName("n")
		if !back.IsValid() || back.Type() != reflect.TypeOf(n) {
			continue
		}
		roles++
		if back.Pointer() != reflect.ValueOf(n).Pointer() {
			t.Errorf("role %s (%s) does not know its node", v.Type().Field(i).Name, f.Type())
		}
	}
	if roles < 10 {
		t.Fatalf("found %d roles in Node; the test no longer sees them", roles)
	}
}
