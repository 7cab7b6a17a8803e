package cluster

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/hashicorp/raft"

	"github.com/idgen/idgen/cluster/core"
)

// A stop for a copy survives a restart. A process that stopped because a
// copy of its data dir outranks it records the reason in its data dir
// (stoppedFile) before it stops issuing. A restarted process forgets what it
// met, and until it met its copy again it would issue from its log once
// more, above every fence the other copy's cluster wrote. So a data dir that
// holds the record starts stopped: Status says stopped and why, nothing is
// issued, and Raft is left at once. Only wiping the data dir (the advice the
// reason gives) or removing the file by hand lets it issue again. A stop
// for another cluster is not recorded: one of its remedies is a restart
// once the node's own cluster has a leader again.
const stoppedFile = "STOPPED"

// stopForGood stops this process for good: a copy of its data dir, or of
// a member of its Raft group, or another Raft group of its cluster ID
// (forks.go) outranks it. It first tells every other member of its group
// the addresses in tell (where the other side runs, and for a fork this
// node's own), so that each asks them and stops too (checkCopies) without
// waiting for a sighting of its own. A copy of a node identity then leaves
// Raft (leave: one node ID speaks for one process); a member of a group
// that lost stays in it, issuing nothing, so that its group's log keeps a
// leader and the other group's leader reads each member's last windows
// from the member itself until it says it stopped.
func (cw *copyWatch) stopForGood(reason string, leave bool, tell ...string) {
	n := cw.n
	path := filepath.Join(n.cfg.DataDir, stoppedFile)
	if err := writeFileSync(path, []byte(reason+"\n")); err != nil {
		n.logger.Error("record in the data dir that this process stopped", "path", path, "err", err)
	}
	cw.n.ident.conflict.Store(&reason)
	n.logger.Error("stopping issuing: " + n.ident.conflictErr().Error())
	members := cw.groupGRPCAddrs()
	go func() {
		for _, about := range tell {
			cw.tellAll(members, about)
		}
		if leave {
			cw.leaveRaftAsCopy()
		}
	}()
}

// stoppedBefore reads the record of an earlier stop as a copy ("" for none).
func stoppedBefore(dataDir string) (string, error) {
	path := filepath.Join(dataDir, stoppedFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("this data dir stopped as a copy of another before this restart, and stays stopped: %s (wipe the data "+
		"dir to start it as a new node; remove %s only if the other copy is gone for good and its cluster never issued this "+
		"node's slot)", strings.TrimSpace(string(b)), path), nil
}

// groupGRPCAddrs is the gRPC address of every other server of this node's
// Raft configuration that one is known for.
func (cw *copyWatch) groupGRPCAddrs() []string {
	n := cw.n
	var out []string
	for _, srv := range n.rs.raft.GetConfiguration().Configuration().Servers {
		if id := string(srv.ID); id != n.id {
			if a := n.members.grpcAddrOf(id); a != "" {
				out = append(out, a)
			}
		}
	}
	return out
}

// leaveRaftAsCopy: a process that stopped because a copy of its identity
// outranks it takes no more part in Raft. Its votes and its log would be a
// second server of one ID (raftidentity.go), and as the leader it would
// refuse its whole cluster's claims for good (a leader in conflict applies
// nothing forwarded). So it hands leadership away if it has it, then shuts
// Raft down; it goes on answering Status, which says it stopped.
func (cw *copyWatch) leaveRaftAsCopy() {
	n := cw.n
	if n.rs.raft.State() == raft.Leader {
		if err := n.rs.raft.LeadershipTransfer().Error(); err != nil {
			n.logger.Warn("hand leadership away before leaving raft as a copy", "err", err)
		}
	}
	if err := n.rs.raft.Shutdown().Error(); err != nil {
		n.logger.Warn("leave raft as a copy", "err", err)
		return
	}
	n.logger.Warn("left raft: a copy of this node's data dir outranks this process")
}

// tellAll tells each node at to that a process runs at about under its
// identity or a member's (CopyTeller), one probe timeout each.
func (cw *copyWatch) tellAll(to []string, about string) {
	n := cw.n
	t, ok := n.cfg.Prober.(CopyTeller)
	if !ok {
		return
	}
	for _, addr := range to {
		ctx, cancel := context.WithTimeout(context.Background(), core.ProbeTimeout)
		if err := t.TellCopy(ctx, addr, about); err != nil {
			n.logger.Warn("tell a node of a copy of a node identity", "to", addr, "copy_grpc_addr", about, "err", err)
		}
		cancel()
	}
}
