//go:build !unix

package main

import "io/fs"

// fileOwner: no Unix owner (and no meaningful mode bits) here, so key file
// modes are not judged.
func fileOwner(fs.FileInfo) (int, bool) { return 0, false }

// openFileLimit: not known here.
func openFileLimit() (uint64, bool) { return 0, false }
