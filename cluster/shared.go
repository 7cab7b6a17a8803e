package cluster

import (
	"sync/atomic"
	"time"

	"github.com/idgen/idgen/generator"
)

// offsetClock adds a settable offset to a base clock (fault injection).
type offsetClock struct {
	base   generator.Clock
	offset atomic.Int64
}

func (c *offsetClock) Now() time.Time {
	return c.base.Now().Add(time.Duration(c.offset.Load()))
}

// reasonText is why a node is not ready, "" when it is.
type reasonText struct{ p atomic.Pointer[string] }

func (r *reasonText) set(s string) { r.p.Store(&s) }

func (r *reasonText) get() string {
	if s := r.p.Load(); s != nil {
		return *s
	}
	return ""
}
