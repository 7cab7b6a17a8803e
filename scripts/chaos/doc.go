// Package chaos holds the process-level chaos runner: its tests build idgend
// and idctl, start real processes on 127.0.0.1 and kill, pause, restart, wipe
// and skew them while `idctl verify` draws IDs, then fail on any duplicate or
// any ID outside a window that Raft granted to its slot's owner.
//
// `go test ./scripts/chaos` runs the short run (about two and a half minutes);
// `go test -short` skips it. scripts/chaos-process wraps it with a duration:
//
//	IDGEN_CHAOS_DURATION=30m IDGEN_CHAOS_RATE=6000 scripts/chaos-process
//
// The package has no code of its own outside its tests.
package chaos
