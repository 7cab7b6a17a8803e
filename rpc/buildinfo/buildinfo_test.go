package buildinfo

import (
	"runtime"
	"runtime/debug"
	"testing"
)

func TestFromBuild(t *testing.T) {
	for _, tc := range []struct {
		name string
		bi   *debug.BuildInfo
		want Info
	}{
		{"no record", nil, Info{"dev", "unknown", runtime.Version()}},
		{"work tree", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, Info{"dev", "unknown", runtime.Version()}},
		{"tagged, clean", &debug.BuildInfo{
			Main:     debug.Module{Version: "v1.2.3"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.modified", Value: "false"}},
		}, Info{"v1.2.3", "abc123", runtime.Version()}},
		{"dirty", &debug.BuildInfo{
			Settings: []debug.BuildSetting{{Key: "vcs.modified", Value: "true"}, {Key: "vcs.revision", Value: "abc123"}},
		}, Info{"dev", "abc123-dirty", runtime.Version()}},
	} {
		if got := fromBuild(tc.bi); got != tc.want {
			t.Errorf("%s: fromBuild = %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func TestString(t *testing.T) {
	got := Info{Version: "v1.2.3", Revision: "abc123", GoVersion: "go1.23.0"}.String()
	if want := "v1.2.3 (revision abc123, go1.23.0)"; got != want {
		t.Errorf("String = %q, want %q", got, want)
	}
}

func TestReadNamesTheGoVersion(t *testing.T) {
	if got := Read().GoVersion; got != runtime.Version() {
		t.Errorf("Read().GoVersion = %q, want %q", got, runtime.Version())
	}
}

// TestStampedRevision: a build the toolchain stamped no revision into
// (GOFLAGS=-buildvcs=false, no .git) names the one scripts/stamp passed in
// -ldflags; the toolchain's own record wins when there is one.
func TestStampedRevision(t *testing.T) {
	defer func(s string) { stamped = s }(stamped)
	stamped = "feedbeef"
	if got := fromBuild(&debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}); got.Revision != "feedbeef" {
		t.Errorf("no VCS record, stamped feedbeef: revision %q", got.Revision)
	}
	vcs := &debug.BuildInfo{Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}}}
	if got := fromBuild(vcs); got.Revision != "abc123" {
		t.Errorf("VCS record abc123, stamped feedbeef: revision %q", got.Revision)
	}
}
