package python

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/idgen/idgen/rpc"
	"github.com/idgen/idgen/rpc/rpctest"
)

// subsetScript ranks the pinned addresses as idclient's
// TestRendezvousOrderIsPinned does, then draws through a pool with a subset
// of one over the nodes in argv, answering the test on stdout: "top ADDR"
// and "next ADDR" (its order), then "served ADDR" each time the batches of a
// few draws in a row came from that node alone and the pool had the nodes
// it should open; it reads a line from stdin before each next phase.
const subsetScript = `
import sys, time
sys.path.insert(0, ".")
from idgen_client import IDPool, rendezvous_order

pinned = ["10.0.0.%d:50051" % i for i in range(1, 5)]
for key, want in {
    "shortener-0": ["10.0.0.2:50051", "10.0.0.1:50051", "10.0.0.4:50051", "10.0.0.3:50051"],
    "shortener-1": ["10.0.0.4:50051", "10.0.0.2:50051", "10.0.0.1:50051", "10.0.0.3:50051"],
    "pod-a": ["10.0.0.1:50051", "10.0.0.4:50051", "10.0.0.3:50051", "10.0.0.2:50051"],
}.items():
    got = rendezvous_order(key, list(reversed(pinned)))
    assert got == want, (key, got, want)

key, addrs = sys.argv[1], sys.argv[2].split(",")
order = rendezvous_order(key, addrs)
print("top", order[0]); print("next", order[1]); sys.stdout.flush()
pool = IDPool(addrs, subset_size=1, subset_key=key, batch_size=2, min_batches=1, buffer_seconds=0)

def served_by(node, in_use):
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        before = pool.stats()["batches_by_node"]
        for _ in range(10):
            pool.next_id(timeout=5)
        after = pool.stats()
        nodes = {n for n, c in after["batches_by_node"].items() if c != before.get(n, 0)}
        if nodes == {node} and after["nodes_in_use"] == in_use:
            print("served", node); sys.stdout.flush()
            return
    raise SystemExit("never served by %s alone with %s open: %r" % (node, in_use, pool.stats()))

served_by(names[order[0]], order[:1]); sys.stdin.readline()
served_by(names[order[1]], order[:2]); sys.stdin.readline()
served_by(names[order[0]], order[:1])
pool.close()
`

// The Python pool ranks nodes by the same hash as idclient, connects to its
// subset of one alone, fails over to the next node in its order while that
// node is not ready (keeping it open), and returns to it once it is ready.
func TestPythonSubsetFailsOverAndBack(t *testing.T) {
	needPython(t)
	byAddr := map[string]*rpctest.Node{}
	var addrs, names []string
	for slot := range 3 {
		f := rpctest.NewNode(slot)
		name := fmt.Sprintf("node-%d", slot)
		_, addr := rpctest.Serve(t, rpc.ServerConfig{Backend: f, NodeName: name, BatchSize: 10})
		byAddr[addr] = f
		addrs = append(addrs, addr)
		names = append(names, fmt.Sprintf("%q: %q", addr, name))
	}
	script := "names = {" + strings.Join(names, ", ") + "}\n" + subsetScript
	cmd := exec.Command(python, "-c", script, "shortener-7", strings.Join(addrs, ","))
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := make(chan string)
	go func() {
		defer close(lines)
		for sc := bufio.NewScanner(stdout); sc.Scan(); {
			lines <- sc.Text()
		}
	}()
	next := func(want string) string {
		t.Helper()
		select {
		case l, ok := <-lines:
			if !ok || !strings.HasPrefix(l, want+" ") {
				t.Fatalf("python said %q (open: %v), want %s …", l, ok, want)
			}
			return strings.TrimPrefix(l, want+" ")
		case <-time.After(30 * time.Second):
			t.Fatalf("python said nothing for 30 s, want %s …", want)
		}
		return ""
	}
	top := byAddr[next("top")]
	next("next")
	next("served")
	top.SetReady(false, "no slot")
	fmt.Fprintln(stdin)
	next("served")
	top.SetReady(true, "")
	fmt.Fprintln(stdin)
	next("served")
	if err := cmd.Wait(); err != nil {
		t.Fatalf("python: %v", err)
	}
}
