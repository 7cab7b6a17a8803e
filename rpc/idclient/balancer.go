package idclient

import (
	"context"
	"errors"
	"sync"
	"time"

	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/balancer/base"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// balancerName is round robin over healthy nodes with outlier ejection.
//
// Why not grpc-go's "outlier_detection_experimental": in grpc v1.85 that
// policy lives in internal/xds and is registered only by importing
// google.golang.org/grpc/xds, which pulls the Envoy control plane, OpenTelemetry
// and GCP detectors into every shortener binary. Listed in a service config
// without that import it is skipped silently. So the client carries its own
// small policy: the base balancer (one SubConn per address, client health
// checking on, only READY and SERVING SubConns reach the picker) with a picker
// that ejects a node after consecutive server-side failures.
const balancerName = "idgen_round_robin"

// Ejection settings, written here rather than configurable: they are the
// circuit breaker the design calls for, not a tuning knob.
const (
	ejectAfterFailures = 5                // consecutive failed calls
	baseEjectionTime   = 5 * time.Second  // doubled per repeat ejection
	maxEjectionTime    = 60 * time.Second // cap for the doubling
	// At most half the ready nodes are ejected at once (and never the last
	// one): when most nodes fail, the fault is probably not theirs.
	maxEjectedFraction = 0.5
)

func init() {
	// Registration is global in grpc-go; the name is ours alone.
	balancer.Register(ejectingBuilder{})
}

type ejectingBuilder struct{}

func (ejectingBuilder) Name() string { return balancerName }

// Build gives each ClientConn its own ejection bookkeeping, under the subset
// balancer (subset.go), which passes every address on unless the config
// asks for a subset.
func (ejectingBuilder) Build(cc balancer.ClientConn, opts balancer.BuildOptions) balancer.Balancer {
	b := &subsetBalancer{watched: map[string]*watchedConn{}}
	b.Balancer = base.NewBalancerBuilder(balancerName, &ejectingPickerBuilder{ej: newEjector()}, base.Config{HealthCheck: true}).
		Build(subsetConn{ClientConn: cc, b: b}, opts)
	return b
}

func newEjector() *ejector {
	return &ejector{stats: map[string]*scStats{}, ready: map[string]bool{}, now: time.Now}
}

type scStats struct {
	failures     int
	ejections    int
	ejectedUntil time.Time
}

// ejector counts consecutive failures per node address across pickers. It
// is keyed by address so that an ejection survives the node's health
// flapping or its connection being rebuilt.
type ejector struct {
	now   func() time.Time
	mu    sync.Mutex
	stats map[string]*scStats
	ready map[string]bool // the addresses of the newest picker
}

// countsAgainstNode reports whether a call's outcome says the node is at
// fault: a failure the node answered with, or a batch it should not have sent.
func countsAgainstNode(err error) bool {
	if errors.Is(err, ErrBadBatch) {
		return true
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.Internal, codes.Unknown, codes.DeadlineExceeded, codes.ResourceExhausted, codes.DataLoss:
		return true
	}
	return false
}

// done records the outcome of one call to addr. Whatever picker the call
// came from, the cap on ejections counts the nodes ready now.
func (e *ejector) done(addr string, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	st := e.stats[addr]
	if st == nil {
		return // forgotten since the pick
	}
	if status.Code(err) == codes.Canceled {
		return // the caller gave up (or a hedged attempt was not needed): nothing about the node
	}
	if err == nil || !countsAgainstNode(err) {
		st.failures = 0
		return
	}
	st.failures++
	if st.failures < ejectAfterFailures {
		return
	}
	now := e.now()
	ejected := 0
	for a := range e.ready {
		if s := e.stats[a]; s != nil && now.Before(s.ejectedUntil) {
			ejected++
		}
	}
	if len(e.ready) <= 1 || !e.ready[addr] || float64(ejected+1) > maxEjectedFraction*float64(len(e.ready)) {
		return
	}
	d := baseEjectionTime << st.ejections
	if d > maxEjectionTime || d <= 0 {
		d = maxEjectionTime
	}
	st.ejections++
	st.failures = 0
	st.ejectedUntil = now.Add(d)
}

func (e *ejector) ejected(addr string, now time.Time) bool {
	st := e.stats[addr]
	return st != nil && now.Before(st.ejectedUntil)
}

type ejectingPickerBuilder struct{ ej *ejector }

func (b *ejectingPickerBuilder) Build(info base.PickerBuildInfo) balancer.Picker {
	b.ej.mu.Lock()
	defer b.ej.mu.Unlock()
	now := b.ej.now()
	clear(b.ej.ready)
	scs := make([]balancer.SubConn, 0, len(info.ReadySCs))
	addrs := make([]string, 0, len(info.ReadySCs))
	for sc, sci := range info.ReadySCs {
		addr := sci.Address.Addr
		b.ej.ready[addr] = true
		if b.ej.stats[addr] == nil {
			b.ej.stats[addr] = &scStats{}
		}
		scs = append(scs, sc)
		addrs = append(addrs, addr)
	}
	// Forget nodes that are not ready and whose last ejection is long over;
	// a node that flaps keeps its ejection and its doubling.
	for addr, st := range b.ej.stats {
		if !b.ej.ready[addr] && now.Sub(st.ejectedUntil) > maxEjectionTime {
			delete(b.ej.stats, addr)
		}
	}
	if len(scs) == 0 {
		return base.NewErrPicker(balancer.ErrNoSubConnAvailable)
	}
	return &ejectingPicker{ej: b.ej, scs: scs, addrs: addrs}
}

type ejectingPicker struct {
	ej    *ejector
	scs   []balancer.SubConn
	addrs []string // addrs[i] is the address of scs[i]
	mu    sync.Mutex
	next  int
}

func (p *ejectingPicker) Pick(info balancer.PickInfo) (balancer.PickResult, error) {
	p.mu.Lock()
	start := p.next
	p.next = (p.next + 1) % len(p.scs)
	p.mu.Unlock()

	now := p.ej.now()
	p.ej.mu.Lock()
	chosen := start
	for i := range p.scs { // first node in round-robin order that is not ejected
		if j := (start + i) % len(p.scs); !p.ej.ejected(p.addrs[j], now) {
			chosen = j
			break
		}
	}
	p.ej.mu.Unlock()
	addr := p.addrs[chosen]
	return balancer.PickResult{
		SubConn: p.scs[chosen],
		Done: func(di balancer.DoneInfo) {
			if di.Err == nil {
				if o := outcomeFrom(info.Ctx); o != nil {
					// The caller checks the batch first: a malformed one
					// counts against the node like a failed call.
					o.deferReport(func(err error) { p.ej.done(addr, err) })
					return
				}
			}
			p.ej.done(addr, attemptResult(info.Ctx, di.Err))
		},
	}, nil
}

// outcome lets a caller settle a call's success only after it has checked
// the answer; the picker finds it in the call's context.
type outcome struct {
	mu      sync.Mutex
	pending func(error)
}

type outcomeKey struct{}

// withOutcome returns ctx carrying a new outcome.
func withOutcome(ctx context.Context) (context.Context, *outcome) {
	o := &outcome{}
	return context.WithValue(ctx, outcomeKey{}, o), o
}

func outcomeFrom(ctx context.Context) *outcome {
	if ctx == nil {
		return nil
	}
	o, _ := ctx.Value(outcomeKey{}).(*outcome)
	return o
}

func (o *outcome) deferReport(report func(error)) {
	o.mu.Lock()
	o.pending = report
	o.mu.Unlock()
}

// settle reports the checked outcome of the attempt that succeeded, if any:
// nil for a good answer, an error wrapping ErrBadBatch for a bad one.
func (o *outcome) settle(err error) {
	o.mu.Lock()
	report := o.pending
	o.pending = nil
	o.mu.Unlock()
	if report != nil {
		report(err)
	}
}
