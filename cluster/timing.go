package cluster

import (
	"errors"
	"io"
	"log/slog"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// Raft timeouts for a node that is its cluster's only voter. hashicorp/raft's
// defaults (heartbeat and election timeout 1 s, lease 500 ms) make a follower
// wait 1-2 s before its first election, even when it is the only voter and
// nothing can answer it: a lone node's every start waited that long before it
// could claim its slot. A lone voter has no one to disagree with, so short
// timeouts cost nothing (Consul's dev mode does the same). The lease is not
// reloadable, so it is set here, once.
//
// Whether a node is lone is decided by its Raft configuration, not by its
// flags (see loneTimings): a seed started with --bootstrap-expect 1 that
// others joined is restarted with the same flags, and with 150 ms timeouts it
// would time out before the current leader's next heartbeat (a leader backs
// off to one per half its heartbeat timeout, 500 ms, to a peer it could not
// reach) and campaign on every restart.
const (
	loneTimeout = 150 * time.Millisecond
	// grownTimeout replaces the short heartbeat and election timeouts once
	// the configuration holds another voter: still twice the lease, and
	// heartbeats (a tenth of it) come well inside the lease.
	grownTimeout = 500 * time.Millisecond
	// growthCheck is how often a node running lone timings looks for other
	// voters.
	growthCheck = time.Second
)

// loneStart reports whether cfg starts a node that is its cluster's only voter.
func loneStart(cfg *Config) bool {
	return cfg.BootstrapExpect == 1 && len(cfg.Join) == 0
}

// loneTimings reports whether the node runs lone timings. With Raft state in
// the data dir the persisted configuration decides: lone only if it holds
// this node as its only voter, whatever the flags say. Without state the
// flags decide (loneStart), so that a fresh lone node elects itself at once.
// rc is the configuration the node will run (LocalID set); the stores are
// the ones it will run on, and addr is its advertised Raft address. A
// configuration that cannot be read gives raft's default timings, which are
// never wrong, only slower for a lone voter.
func loneTimings(cfg *Config, rc *raft.Config, hadState bool, logs raft.LogStore, stable raft.StableStore,
	snaps raft.SnapshotStore, addr raft.ServerAddress, logger *slog.Logger,
) bool {
	if !hadState {
		return loneStart(cfg)
	}
	c, err := persistedConfiguration(rc, logs, stable, snaps, addr)
	if err != nil {
		logger.Warn("raft configuration not read at start; raft's default timeouts", "err", err)
		return false
	}
	lone := onlyVoter(c, rc.LocalID)
	if !lone && loneStart(cfg) {
		logger.Info("started as a lone voter, but the raft configuration holds other voters; raft's default timeouts",
			"servers", len(c.Servers))
	}
	return lone
}

// persistedConfiguration reads the latest Raft configuration in the stores
// without starting Raft. raft.GetConfiguration builds a Raft that never
// runs, but it installs its heartbeat handler on the transport it is given
// (a heartbeat arriving there would be handled by the idle Raft, writing to
// the stores) and restores the latest snapshot into the FSM it is given. So
// it gets a transport of its own, and NoSnapshotRestoreOnStart: a snapshot's
// configuration is read from its metadata, and the FSM is never touched.
func persistedConfiguration(rc *raft.Config, logs raft.LogStore, stable raft.StableStore,
	snaps raft.SnapshotStore, addr raft.ServerAddress,
) (raft.Configuration, error) {
	probe := *rc // GetConfiguration marks its config to skip startup
	probe.Logger = hclog.NewNullLogger()
	probe.NotifyCh = nil
	probe.NoSnapshotRestoreOnStart = true
	_, trans := raft.NewInmemTransport(addr)
	defer trans.Close()
	return raft.GetConfiguration(&probe, discardFSM{}, logs, stable, snaps, trans)
}

// onlyVoter reports whether c holds id as its only voter.
func onlyVoter(c raft.Configuration, id raft.ServerID) bool {
	self, voters := false, 0
	for _, srv := range c.Servers {
		if srv.Suffrage == raft.Voter {
			voters++
			self = self || srv.ID == id
		}
	}
	return self && voters == 1
}

// discardFSM is the FSM persistedConfiguration's Raft is given; with
// NoSnapshotRestoreOnStart and no run loop it receives nothing. Should a
// restore reach it, it fails, and the node runs raft's default timings.
type discardFSM struct{}

func (discardFSM) Apply(*raft.Log) interface{} { return nil }

func (discardFSM) Snapshot() (raft.FSMSnapshot, error) {
	return nil, errors.New("configuration probe: no snapshots")
}

func (discardFSM) Restore(rc io.ReadCloser) error {
	rc.Close()
	return errors.New("configuration probe: no restores")
}

// loneTimeouts shortens rc's timeouts for a lone voter.
func loneTimeouts(rc *raft.Config) {
	rc.HeartbeatTimeout, rc.ElectionTimeout, rc.LeaderLeaseTimeout = loneTimeout, loneTimeout, loneTimeout
}

// watchGrowth lengthens the timeouts of a node running lone timings once its
// configuration holds another voter, so that a follower does not call
// elections over a heartbeat delayed by a loaded machine. The lease stays
// loneTimeout: hashicorp/raft cannot reload it.
func (s *raftStore) watchGrowth(localID raft.ServerID, logger *slog.Logger) {
	defer close(s.growthDone)
	tick := time.NewTicker(growthCheck)
	defer tick.Stop()
	for {
		select {
		case <-s.stopGrowth:
			return
		case <-tick.C:
		}
		if !s.otherVoter(localID) {
			continue
		}
		rc := s.raft.ReloadableConfig()
		rc.HeartbeatTimeout, rc.ElectionTimeout = grownTimeout, grownTimeout
		if err := s.raft.ReloadConfig(rc); err != nil {
			logger.Error("raft timeouts not lengthened", "err", err)
			continue
		}
		logger.Info("another voter joined; raft timeouts lengthened", "timeout", grownTimeout)
		return
	}
}

// otherVoter reports whether the latest configuration holds a voter besides localID.
func (s *raftStore) otherVoter(localID raft.ServerID) bool {
	f := s.raft.GetConfiguration()
	if f.Error() != nil {
		return false
	}
	for _, srv := range f.Configuration().Servers {
		if srv.Suffrage == raft.Voter && srv.ID != localID {
			return true
		}
	}
	return false
}
