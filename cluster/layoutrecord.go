package cluster

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/idgen/idgen/cluster/core"
	"github.com/idgen/idgen/generator"
)

// A cluster's layout is chosen once, by the node that writes its Init (the
// first entry of the log), and never changes. A node mints only under the
// layout its own replica's Init records (agent.go); the data dir keeps a
// copy of it in layoutFile, written once the replica has applied the Init,
// so that a restart with another configured layout is refused at Open,
// before the node joins anything, and a restart without one knows its
// cluster's layout before its log is replayed. Data dirs written before the
// layout could be chosen hold the default layout, written at their first
// start: the only layout their clusters could have.

// readLayoutRecord returns the layout the data dir records for its cluster
// (nil when none is recorded yet), and refuses a configured layout that
// differs from it.
func readLayoutRecord(dir string, configured generator.Layout) (*generator.Layout, error) {
	path := filepath.Join(dir, layoutFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("layout file: %w", err)
	}
	var l generator.Layout
	if err := json.Unmarshal(bytes.TrimSpace(b), &l); err == nil {
		err = l.Validate()
	}
	if err != nil {
		return nil, fmt.Errorf("layout file %s is corrupt (%v); restore it, or remove it and the node takes its cluster's layout from its log again",
			path, err)
	}
	if configured != (generator.Layout{}) && configured != l {
		return nil, core.LayoutMismatch(l, configured, "data dir "+dir+" belongs to a cluster")
	}
	return &l, nil
}

// RecordedLayout is the layout the data dir in dir records for its
// cluster, if it records one: for idgend, which holds a layout it would
// refuse for a new cluster (one that ends within a year) acceptable for the
// cluster that already has it.
func RecordedLayout(dir string) (generator.Layout, bool, error) {
	l, err := readLayoutRecord(dir, generator.Layout{})
	if err != nil || l == nil {
		return generator.Layout{}, false, err
	}
	return *l, true, nil
}

// stateLayout is the layout the local replica's Init records.
func (lv *logView) stateLayout() (generator.Layout, bool) {
	n := lv.n
	var l generator.Layout
	ok := false
	n.fsm.view(func(s *core.State) {
		if s.Layout != nil {
			l, ok = *s.Layout, true
		}
	})
	return l, ok
}

// clusterLayout is the cluster's layout as far as this node knows it: its
// replica's, else the one its data dir recorded in an earlier run.
func (lv *logView) clusterLayout() (generator.Layout, bool) {
	if l, ok := lv.stateLayout(); ok {
		return l, true
	}
	if r := lv.recorded.Load(); r != nil {
		return *r, true
	}
	return generator.Layout{}, false
}

// trackLayout records the replica's layout in the data dir once it has one.
// Only the agent calls it (through trackIdentity), so writes never race.
func (lv *logView) trackLayout() {
	n := lv.n
	l, ok := lv.stateLayout()
	if !ok {
		return
	}
	if r := lv.recorded.Load(); r != nil && *r == l {
		return
	} else if r != nil {
		n.logger.Error("the log's first entry records another layout than the data dir; following the log",
			"data_dir_layout", r.String(), "log_layout", l.String())
	}
	b, err := json.Marshal(l)
	if err == nil {
		err = writeFileSync(filepath.Join(n.cfg.DataDir, layoutFile), b)
	}
	if err != nil {
		n.logger.Error("persist cluster layout", "err", err)
		return
	}
	lv.recorded.Store(&l)
	n.gossip.updateMeta(func(m *core.Meta) { m.Layout = l.String() })
	n.logger.Info("cluster layout", "layout", l.String())
}
