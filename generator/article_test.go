package generator

import (
	"errors"
	"fmt"
	"sync"
	"time"
)

// articleGenerator re-implements the design article's batch generator, the
// baseline for the benchmarks and for the throughput test: one mutex, a per-ID
// loop that composes each ID with shifts, and a batch that does not fit the
// rest of the current second waits for the next second (wasting the rest).
type articleGenerator struct {
	mu         sync.Mutex
	clock      Clock
	epoch      time.Time
	datacenter int64
	machine    int64
	lastTS     int64
	sequence   int64

	tsShift, dcShift, mShift int64
	maxSequence              int64

	// noWait makes a batch that would have to wait for the next second fail
	// with errWouldWait instead of spinning (the spin never ends on a fake clock).
	noWait bool
}

var errWouldWait = errors.New("article generator would wait for the next second")

func newArticleGenerator(clock Clock, datacenter, machine int64) *articleGenerator {
	return &articleGenerator{
		clock: clock, epoch: DefaultLayout().EpochTime(),
		datacenter: datacenter, machine: machine, lastTS: -1,
		tsShift: 14, dcShift: 12, mShift: 11, maxSequence: 2047,
	}
}

func (a *articleGenerator) now() int64 { return int64(a.clock.Now().Sub(a.epoch) / time.Second) }

func (a *articleGenerator) NextBatch(n int) ([]int64, error) {
	if n <= 0 || int64(n) > a.maxSequence+1 {
		return nil, fmt.Errorf("invalid batch size %d", n)
	}
	a.mu.Lock()
	defer a.mu.Unlock()

	ts := a.now()
	if ts < a.lastTS {
		return nil, errors.New("clock moved backwards")
	}
	if ts == a.lastTS {
		if a.sequence+int64(n) > a.maxSequence+1 {
			if a.noWait {
				return nil, errWouldWait
			}
			for ts <= a.lastTS {
				time.Sleep(time.Millisecond)
				ts = a.now()
			}
			a.sequence = 0
		}
	} else {
		a.sequence = 0
	}
	a.lastTS = ts

	ids := make([]int64, n)
	a.compose(ts, ids)
	return ids, nil
}

// compose is the article's per-ID loop; split out so that a benchmark can run
// it without the allocation.
func (a *articleGenerator) compose(ts int64, ids []int64) {
	for i := 0; i < len(ids); i++ {
		ids[i] = ts<<a.tsShift | a.datacenter<<a.dcShift | a.machine<<a.mShift | a.sequence
		a.sequence++
	}
}
