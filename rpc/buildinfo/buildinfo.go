// Package buildinfo names the running binary: its module version, VCS
// revision and Go version, as the Go toolchain stamps them. It imports only
// the standard library, so idctl can print its own build without linking the
// node (Raft, gossip, bolt) that the rpc package serves.
package buildinfo

import (
	"runtime"
	"runtime/debug"
)

// Info names a binary: its module version, VCS revision and Go version.
type Info struct {
	Version   string
	Revision  string
	GoVersion string
}

// String is the one-line form --version and idctl version print.
func (b Info) String() string {
	return b.Version + " (revision " + b.Revision + ", " + b.GoVersion + ")"
}

// stamped is the VCS revision a build stamped with -ldflags
// "-X github.com/idgen/idgen/rpc/buildinfo.stamped=REV" (scripts/stamp),
// for builds where the toolchain stamps none: GOFLAGS=-buildvcs=false, a
// source tree without .git, a test binary. The toolchain's own record wins
// when it has one.
var stamped string

// Read reads what the Go toolchain stamps into every binary: the module
// version ("dev" for a build from a work tree), the VCS revision ("-dirty"
// with uncommitted changes; the -ldflags stamp when the toolchain recorded
// none) and the Go version.
func Read() Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return fromBuild(nil)
	}
	return fromBuild(bi)
}

// fromBuild is Read on the toolchain's record bi (nil: none).
func fromBuild(bi *debug.BuildInfo) Info {
	b := Info{Version: "dev", Revision: "unknown", GoVersion: runtime.Version()}
	if stamped != "" {
		b.Revision = stamped
	}
	if bi == nil {
		return b
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		b.Version = v
	}
	modified := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Revision = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if modified {
		b.Revision += "-dirty"
	}
	return b
}
