package main

import (
	"encoding/json"
	"testing"

	"github.com/idgen/idgen/rpc/rpctest"
)

// verifyJSON runs idctl verify --json against target and returns its report
// and exit code.
func verifyJSON(t *testing.T, target, batch string) (map[string]any, int) {
	t.Helper()
	out, errOut, code := runCapture(t, target, "--json", "verify",
		"--duration", "600ms", "--rate", "3000", "--batch", batch)
	var rep map[string]any
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("exit %d, no JSON report: %v\n%s\n%s", code, err, out, errOut)
	}
	return rep, code
}

// Two nodes that own their slots: a clean run exits 0, also when every call
// asks for count 0 (each node's buffered default batch).
func TestVerifyCleanClusterExits0(t *testing.T) {
	view := (&rpctest.View{}).Member("a", 1, 0, 1<<20, 1).Member("b", 2, 0, 1<<20, 2)
	_, a := rpctest.Planted(t, view, "a", 1, 1)
	_, b := rpctest.Planted(t, view, "b", 2, 1)
	for _, batch := range []string{"0", "50,0"} {
		rep, code := verifyJSON(t, a+","+b, batch)
		if code != exitOK || rep["acknowledged"].(float64) == 0 {
			t.Fatalf("--batch %s: exit %d, report %v", batch, code, rep)
		}
	}
}

// Planted faults a healthy cluster never shows make verify exit 3.
func TestVerifyPlantedFaultsExit3(t *testing.T) {
	t.Run("a node serves another slot's ID", func(t *testing.T) {
		view := (&rpctest.View{}).Member("a", 1, 0, 1<<20, 1).Member("b", 2, 0, 1<<20, 2)
		_, a := rpctest.Planted(t, view, "a", 1, 1)
		fb, b := rpctest.Planted(t, view, "b", 2, 1)
		fb.SetTamper(rpctest.OtherSlotLast)
		rep, code := verifyJSON(t, a+","+b, "50,0")
		if code != exitViolated || rep["bad_batches"].(float64) == 0 || rep["duplicates"].(float64) != 0 {
			t.Fatalf("exit %d (want %d), report %v", code, exitViolated, rep)
		}
	})
	t.Run("an old owner stamps into the next owner's window", func(t *testing.T) {
		view := (&rpctest.View{}).Member("a", 3, 0, 100, 1).Member("b", 3, 100, 1<<20, 2)
		view.Tenures[0].ReleasedIndex = 2
		_, a := rpctest.Planted(t, view, "a", 3, 301) // a's window ended at 100
		_, b := rpctest.Planted(t, view, "b", 3, 102)
		rep, code := verifyJSON(t, a+","+b, "50,0")
		if code != exitViolated || rep["owner_violations"].(float64) == 0 || rep["duplicates"].(float64) != 0 {
			t.Fatalf("exit %d (want %d), report %v", code, exitViolated, rep)
		}
	})
}
