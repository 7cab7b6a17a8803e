// Package upgrade holds the rolling-upgrade test: it builds idgend and idctl
// from the release users run now (the commit in PREVIOUS, checked out from
// git history in a throwaway clone) and from this checkout, starts a
// three-node cluster on 127.0.0.1 from the old binaries, and under a steady
// load of IDs restarts the nodes one at a time onto the new build, back onto
// the old one, onto the new one again leader first, and then holds a
// new-binary leader with two old-binary followers. It fails on a restarted
// node slow to become ready, any failed Pool draw, any duplicate ID and any
// node not ready during the hold (README.md).
//
// The test runs only with IDGEN_UPGRADE=1, which scripts/upgrade-roll sets:
//
//	scripts/upgrade-roll
//
// The package has no code of its own outside its tests.
package upgrade
