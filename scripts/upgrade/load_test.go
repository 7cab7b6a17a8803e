package upgrade

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/idgen/idgen/rpc/idclient"
	"github.com/idgen/idgen/scripts/harness"
)

// The load the cluster carries for the whole roll: a Pool (what shorteners
// run) and plain GetIDBatch calls, which have no prefetching in front of
// them, through one client of every node.
const (
	poolRate  = 1800 // NextID draws a second
	rawRate   = 20   // GetIDBatch calls a second...
	rawCount  = 10   // ...of this many IDs: 200 IDs a second
	drawLimit = 5 * time.Second
	// keptErrors is how many failed draws per phase are kept, as examples.
	keptErrors = 5
	// slowDraw: draws this slow (or failed) are kept with their time and
	// node, to be charged to the restart they happened in.
	slowDraw = 10 * time.Millisecond
)

// sample is one slow or failed draw.
type sample struct {
	at     time.Time
	took   time.Duration
	node   string // raw calls: the node that served it
	failed bool
}

// drawStats is what one kind of draw saw during one phase.
type drawStats struct {
	calls, failed int64
	worst         time.Duration
	took          []time.Duration // every call's latency, for the percentiles
	errs          []string        // the first keptErrors failures
	perNode       map[string]int  // raw calls only: batches per serving node
	slow          []sample
}

func (s *drawStats) add(took time.Duration, err error, node string, at time.Time, phaseStart time.Time) {
	s.calls++
	s.took = append(s.took, took)
	s.worst = max(s.worst, took)
	if err != nil || took >= slowDraw {
		s.slow = append(s.slow, sample{at: at, took: took, node: node, failed: err != nil})
	}
	if err != nil {
		s.failed++
		if len(s.errs) < keptErrors {
			s.errs = append(s.errs, fmt.Sprintf("+%.1fs after %dms: %v", at.Sub(phaseStart).Seconds(), took.Milliseconds(), err))
		}
	}
}

func (s *drawStats) percentile(p float64) time.Duration {
	if len(s.took) == 0 {
		return 0
	}
	d := slices.Clone(s.took)
	slices.Sort(d)
	return d[min(len(d)-1, int(p*float64(len(d))))]
}

func (s *drawStats) String() string {
	return fmt.Sprintf("calls=%d failed=%d p50_ms=%.2f p99_ms=%.2f worst_ms=%.1f",
		s.calls, s.failed, ms(s.percentile(0.5)), ms(s.percentile(0.99)), ms(s.worst))
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// phaseLoad is the load's record of one phase of the roll.
type phaseLoad struct {
	name      string
	start     time.Time
	pool, raw drawStats
}

// load draws IDs until stop, charging each draw to the phase it started in,
// and keeps every ID for the duplicate check.
type load struct {
	mu     sync.Mutex
	phases []*phaseLoad
	ids    []int64

	stop func()
}

// phase starts charging draws to a new phase.
func (l *load) phase(name string) *phaseLoad {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := &phaseLoad{name: name, start: time.Now(), raw: drawStats{perNode: map[string]int{}}}
	l.phases = append(l.phases, p)
	return p
}

// current is the phase a draw starting now is charged to.
func (l *load) current() *phaseLoad {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.phases[len(l.phases)-1]
}

// worstBetween is the slowest kept pool and raw draw that started in
// [from, to].
func (l *load) worstBetween(from, to time.Time) (pool, raw time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	in := func(ss []sample, w *time.Duration) {
		for _, s := range ss {
			if !s.at.Before(from) && !s.at.After(to) {
				*w = max(*w, s.took)
			}
		}
	}
	for _, p := range l.phases {
		in(p.pool.slow, &pool)
		in(p.raw.slow, &raw)
	}
	return pool, raw
}

func (l *load) recordPool(p *phaseLoad, at time.Time, took time.Duration, id int64, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p.pool.add(took, err, "", at, p.start)
	if err == nil {
		l.ids = append(l.ids, id)
	}
}

func (l *load) recordRaw(p *phaseLoad, at time.Time, took time.Duration, b idclient.Batch, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p.raw.add(took, err, b.Node, at, p.start)
	if err == nil {
		p.raw.perNode[b.Node]++
		l.ids = append(l.ids, b.IDs...)
	}
}

// startLoad dials every target (a comma list of gRPC addresses) and draws
// poolRate IDs a second through a Pool and rawRate GetIDBatch calls of
// rawCount IDs a second, until stop. Draws go to a phase named "warm-up"
// until the first call of phase.
func startLoad(targets string) (*load, error) {
	client, err := idclient.Dial(targets)
	if err != nil {
		return nil, err
	}
	pool, err := idclient.NewPool(client, idclient.PoolOptions{})
	if err != nil {
		client.Close()
		return nil, err
	}
	l := &load{}
	l.phase("warm-up")
	run, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		pace(run, poolRate, func(ctx context.Context) {
			p, t0 := l.current(), time.Now()
			id, err := pool.NextID(ctx)
			if run.Err() == nil || err == nil {
				l.recordPool(p, t0, time.Since(t0), id, err)
			}
		})
	}()
	go func() {
		defer wg.Done()
		pace(run, rawRate, func(ctx context.Context) {
			p, t0 := l.current(), time.Now()
			b, err := client.FetchBatch(ctx, rawCount)
			if run.Err() == nil || err == nil {
				l.recordRaw(p, t0, time.Since(t0), b, err)
			}
		})
	}()
	var once sync.Once
	l.stop = func() {
		once.Do(func() {
			cancel()
			wg.Wait()
			pool.Close()
			client.Close()
		})
	}
	return l, nil
}

// pace is harness.Pace with each draw bounded by drawLimit; a draw cut
// short by the end of ctx is not recorded (the draw funcs above check it).
func pace(ctx context.Context, perSecond int, draw func(context.Context)) {
	harness.Pace(ctx, perSecond, drawLimit, draw)
}

// duplicates counts IDs drawn more than once (each extra copy counts) and
// returns a few of them.
func duplicates(ids []int64) (int, []int64) {
	s := slices.Clone(ids)
	slices.Sort(s)
	n := 0
	var examples []int64
	for i := 1; i < len(s); i++ {
		if s[i] == s[i-1] {
			n++
			if len(examples) < 5 {
				examples = append(examples, s[i])
			}
		}
	}
	return n, examples
}
