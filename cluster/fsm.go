package cluster

import (
	"io"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"

	"github.com/idgen/idgen/cluster/core"
)

// fsm applies the log to the state. It is the only writer of the state; reads
// go through view, which hands out the current state under a read lock.
type fsm struct {
	mu    sync.RWMutex
	state *core.State
	// changed receives a signal (never blocking) after every applied entry,
	// waking the slot agent for its next pass. The agent may be blocked in
	// a reserve (2 s) or a claim (5 s) meanwhile; a generator whose tenure
	// the entry ended is stopped by afterApply, not by the agent.
	changed chan struct{}
	// afterApply, if set, runs after every applied entry and restored
	// snapshot, outside the lock and before Raft applies the next entry:
	// the node stops a generator whose tenure the replica just ended there
	// (Node.stopIfEnded), whatever its agent is doing.
	afterApply func()
	// lastCommand is the last command entry applied since start or the last
	// restore (Status reports it; reconcile compares it with the leader's
	// log, logmatch.go).
	lastCommand atomic.Pointer[appliedEntry]
}

func newFSM() *fsm {
	return &fsm{state: core.NewState(), changed: make(chan struct{}, 1)}
}

// view runs f with the current state; f must not keep or modify it.
func (f *fsm) view(fn func(s *core.State)) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	fn(f.state)
}

func (f *fsm) notify() {
	select {
	case f.changed <- struct{}{}:
	default:
	}
}

// Apply implements raft.FSM. It returns a result or an error.
func (f *fsm) Apply(l *raft.Log) interface{} {
	if l.Type != raft.LogCommand {
		return nil
	}
	res := func() interface{} {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.state.ApplyEntry(l.Index, l.Data)
	}()
	f.lastCommand.Store(&appliedEntry{index: l.Index, hash: entryHash(l)})
	f.notify()
	if f.afterApply != nil {
		f.afterApply()
	}
	return res
}

// Snapshot implements raft.FSM.
func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return &fsmSnapshot{state: f.state.Clone()}, nil
}

// Restore implements raft.FSM: it replaces the whole state.
func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	f.lastCommand.Store(nil)
	s, err := core.DecodeSnapshot(rc)
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.state = s
	f.mu.Unlock()
	f.notify()
	if f.afterApply != nil {
		f.afterApply()
	}
	return nil
}

type fsmSnapshot struct{ state *core.State }

func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	if err := core.EncodeSnapshot(sink, s.state); err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}

func (s *fsmSnapshot) Release() {}
