package python

import (
	"os/exec"
	"strings"
	"testing"
)

// The Python pool checks batches as the Go client does: against the layout
// the first node serves (or the one given), refusing a node that serves
// another and IDs outside it. No node is needed: the checks are fed
// responses built from the generated stubs.
func TestPythonClientLearnsTheLayout(t *testing.T) {
	needPython(t)
	script := `
import sys
sys.path.insert(0, ".")
from idgen_client import IDPool, BadBatch, DEFAULT_LAYOUT
from idgen.v1 import idgen_pb2

fast = "35/2/1/11 unit=10ms epoch=1777939200"
def resp(layout, slot, ids, node="a"):
    return idgen_pb2.GetIDBatchResponse(ids=ids, slot=slot, node=node, layout=layout)
def refused(pool, r, want):
    try:
        pool._check(r, list(r.ids))
    except BadBatch as e:
        assert want in str(e), (want, str(e))
        return
    raise AssertionError("accepted: %r" % (r,))

big = (3_000_000_000 << 14) | (5 << 11)  # a 10 ms layout ID of slot 5, above the default layout's 2^42
pool = IDPool(["127.0.0.1:1"])
assert pool.layout is None
pool._check(resp(fast, 5, [big, big + 1]), [big, big + 1])
assert pool.layout == fast, pool.layout
refused(pool, resp("", 5, [5 << 11], node="old"), "serves layout " + DEFAULT_LAYOUT)
refused(pool, resp(fast, 5, [1 << 49]), "not an ID of slot 5")
pool.close()

old = IDPool(["127.0.0.1:1"])
refused(old, resp("", 5, [big]), "not an ID of slot 5")  # an older node: the default layout
assert old.layout == DEFAULT_LAYOUT
old.close()

pinned = IDPool(["127.0.0.1:1"], layout=fast)
refused(pinned, resp(DEFAULT_LAYOUT, 5, [5 << 11], node="b"), "(pinned)")
pinned.close()
refused(IDPool(["127.0.0.1:1"]), resp("forty bits", 5, [1]), "want ts/dc/m/seq bits")
print("ok")
`
	cmd := exec.Command(python, "-c", script)
	cmd.Dir = "."
	out, err := cmd.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "ok" {
		t.Fatalf("python: %v\n%s", err, out)
	}
}
