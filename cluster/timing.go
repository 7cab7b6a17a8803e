package cluster

import (
	"log/slog"
	"time"

	"github.com/hashicorp/raft"
)

// Raft timeouts for a node started as a lone voter (--bootstrap-expect 1 and
// no --join). hashicorp/raft's defaults (heartbeat and election timeout 1 s,
// lease 500 ms) make a follower wait 1-2 s before its first election, even
// when it is the only voter and nothing can answer it: a lone node's every
// start waited that long before it could claim its slot. A lone voter has no
// one to disagree with, so short timeouts cost nothing (Consul's dev mode
// does the same). The lease is not reloadable, so it is set here, once.
const (
	loneTimeout = 150 * time.Millisecond
	// grownTimeout replaces the short heartbeat and election timeouts once
	// the configuration holds another voter: still twice the lease, and
	// heartbeats (a tenth of it) come well inside the lease.
	grownTimeout = 500 * time.Millisecond
	// growthCheck is how often a lone-started node looks for other voters.
	growthCheck = time.Second
)

// loneStart reports whether cfg starts a node that is its cluster's only voter.
func loneStart(cfg *Config) bool {
	return cfg.BootstrapExpect == 1 && len(cfg.Join) == 0
}

// loneTimeouts shortens rc's timeouts for a lone voter.
func loneTimeouts(rc *raft.Config) {
	rc.HeartbeatTimeout, rc.ElectionTimeout, rc.LeaderLeaseTimeout = loneTimeout, loneTimeout, loneTimeout
}

// watchGrowth lengthens the timeouts of a lone-started node once its
// configuration holds another voter, so that a follower does not call
// elections over a heartbeat delayed by a loaded machine.
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
