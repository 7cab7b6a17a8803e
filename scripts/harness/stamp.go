package harness

import (
	"os/exec"
	"strings"
)

// Stamp is the go build -ldflags value that stamps the checkout's VCS
// revision into idgend and idctl (rpc/buildinfo), as scripts/stamp prints
// it: every binary the tests build names its revision whatever GOFLAGS says
// about -buildvcs. Outside a git checkout it is "" (nothing to stamp).
func Stamp() string {
	rev, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		return ""
	}
	r := strings.TrimSpace(string(rev))
	if st, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(strings.TrimSpace(string(st))) > 0 {
		r += "-dirty"
	}
	return "-X github.com/idgen/idgen/rpc/buildinfo.stamped=" + r
}

// StampArgs are go build's arguments for Stamp: none outside a checkout.
func StampArgs() []string {
	if s := Stamp(); s != "" {
		return []string{"-ldflags", s}
	}
	return nil
}
