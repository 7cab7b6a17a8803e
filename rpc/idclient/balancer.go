package idclient

import (
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
// circuit breaker SPEC.md asks for, not a tuning knob.
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

// Build gives each ClientConn its own ejection bookkeeping.
func (ejectingBuilder) Build(cc balancer.ClientConn, opts balancer.BuildOptions) balancer.Balancer {
	pb := &ejectingPickerBuilder{ej: &ejector{stats: map[balancer.SubConn]*scStats{}, now: time.Now}}
	return base.NewBalancerBuilder(balancerName, pb, base.Config{HealthCheck: true}).Build(cc, opts)
}

type scStats struct {
	failures     int
	ejections    int
	ejectedUntil time.Time
}

// ejector counts consecutive failures per SubConn across pickers.
type ejector struct {
	now   func() time.Time
	mu    sync.Mutex
	stats map[balancer.SubConn]*scStats
}

// countsAgainstNode reports whether a call's outcome says the node is at fault.
func countsAgainstNode(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.Internal, codes.Unknown, codes.DeadlineExceeded, codes.ResourceExhausted, codes.DataLoss:
		return true
	}
	return false
}

func (e *ejector) done(sc balancer.SubConn, ready int, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	st := e.stats[sc]
	if st == nil {
		return // SubConn gone since the pick
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
	for _, s := range e.stats {
		if now.Before(s.ejectedUntil) {
			ejected++
		}
	}
	if ready <= 1 || float64(ejected+1) > maxEjectedFraction*float64(ready) {
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

type ejectingPickerBuilder struct{ ej *ejector }

func (b *ejectingPickerBuilder) Build(info base.PickerBuildInfo) balancer.Picker {
	if len(info.ReadySCs) == 0 {
		return base.NewErrPicker(balancer.ErrNoSubConnAvailable)
	}
	b.ej.mu.Lock()
	for sc := range b.ej.stats { // forget SubConns that are gone or not ready
		if _, ok := info.ReadySCs[sc]; !ok {
			delete(b.ej.stats, sc)
		}
	}
	scs := make([]balancer.SubConn, 0, len(info.ReadySCs))
	for sc := range info.ReadySCs {
		if b.ej.stats[sc] == nil {
			b.ej.stats[sc] = &scStats{}
		}
		scs = append(scs, sc)
	}
	b.ej.mu.Unlock()
	return &ejectingPicker{ej: b.ej, scs: scs}
}

type ejectingPicker struct {
	ej   *ejector
	scs  []balancer.SubConn
	mu   sync.Mutex
	next int
}

func (p *ejectingPicker) Pick(balancer.PickInfo) (balancer.PickResult, error) {
	p.mu.Lock()
	start := p.next
	p.next = (p.next + 1) % len(p.scs)
	p.mu.Unlock()

	now := p.ej.now()
	p.ej.mu.Lock()
	chosen := p.scs[start]
	for i := range p.scs { // first node in round-robin order that is not ejected
		sc := p.scs[(start+i)%len(p.scs)]
		if st := p.ej.stats[sc]; st == nil || !now.Before(st.ejectedUntil) {
			chosen = sc
			break
		}
	}
	p.ej.mu.Unlock()
	ready := len(p.scs)
	return balancer.PickResult{
		SubConn: chosen,
		Done: func(di balancer.DoneInfo) {
			p.ej.done(chosen, ready, di.Err)
		},
	}, nil
}
