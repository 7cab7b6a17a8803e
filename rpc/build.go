package rpc

import (
	"runtime"
	"runtime/debug"
)

// BuildInfo names a binary: its module version, VCS revision and Go version.
type BuildInfo struct {
	Version   string
	Revision  string
	GoVersion string
}

// String is the one-line form --version and idctl version print.
func (b BuildInfo) String() string {
	return b.Version + " (revision " + b.Revision + ", " + b.GoVersion + ")"
}

// ReadBuildInfo reads what the Go toolchain stamps into every binary, so
// no -ldflags are needed: the module version ("dev" for a build from a
// work tree), the VCS revision ("-dirty" with uncommitted changes) and the
// Go version.
func ReadBuildInfo() BuildInfo {
	b := BuildInfo{Version: "dev", Revision: "unknown", GoVersion: runtime.Version()}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
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
