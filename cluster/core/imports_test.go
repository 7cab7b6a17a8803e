package core

import (
	"go/build"
	"strings"
	"testing"
)

// TestCoreImportsOnlyGeneratorAndTheStandardLibrary: the core is the
// cluster's decisions over its replicated state, driven by a shell (the
// node, the simulator) that does all I/O; it reads no clock, lock, Raft or
// network of its own. So it imports the generator and the standard library,
// nothing else (cluster/DESIGN.md, "One driven core").
func TestCoreImportsOnlyGeneratorAndTheStandardLibrary(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range pkg.Imports {
		if imp == "github.com/idgen/idgen/generator" {
			continue
		}
		if first, _, _ := strings.Cut(imp, "/"); strings.Contains(first, ".") {
			t.Errorf("the core imports %s: only github.com/idgen/idgen/generator and the standard library may be imported", imp)
		}
	}
	if len(pkg.Imports) == 0 {
		t.Fatal("no imports read")
	}
}
