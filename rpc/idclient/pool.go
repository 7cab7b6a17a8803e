package idclient

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/idgen/idgen/generator"
)

// ErrPoolClosed is returned by NextID after Close once every fetched ID is taken.
var ErrPoolClosed = errors.New("idclient: pool closed")

// Defaults for PoolOptions fields left zero.
const (
	DefaultLookahead = 2
	// The producer's wait after a failed fetch doubles from min to max and is
	// reset by a success: bounded, and a few calls per second at worst.
	fetchMinBackoff = 20 * time.Millisecond
	fetchMaxBackoff = time.Second
)

// PoolOptions configures NewPool.
type PoolOptions struct {
	// BatchSize is the count asked per fetch; 0 takes the node's default,
	// which nodes serve from their own prefetch buffer (the fastest path).
	BatchSize int
	// Lookahead is the number of fetched batches kept ready besides the one
	// being consumed (default DefaultLookahead).
	Lookahead int
	// CallTimeout bounds one fetch (default: the client's call timeout).
	CallTimeout time.Duration
}

// Pool hands out IDs one at a time from prefetched batches. A background
// producer is the only caller of GetIDBatch, so many callers running dry at
// once still cause a single fetch. Safe for concurrent use.
type Pool struct {
	client  *Client
	opts    PoolOptions
	batches chan []int64 // filled by the producer, closed when it exits

	mu  sync.Mutex
	cur []int64 // the batch being consumed

	errMu   sync.Mutex
	lastErr error // last fetch error, nil after a success

	stop      context.CancelFunc
	done      chan struct{}
	closeOnce sync.Once
}

// NewPool starts prefetching from client at once.
func NewPool(client *Client, opts PoolOptions) (*Pool, error) {
	if client == nil {
		return nil, errors.New("idclient: NewPool needs a client")
	}
	if opts.BatchSize < 0 || opts.Lookahead < 0 || opts.CallTimeout < 0 {
		return nil, fmt.Errorf("idclient: invalid pool options %+v", opts)
	}
	if opts.Lookahead == 0 {
		opts.Lookahead = DefaultLookahead
	}
	if opts.CallTimeout == 0 {
		opts.CallTimeout = client.callTimeout
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Pool{
		client:  client,
		opts:    opts,
		batches: make(chan []int64, opts.Lookahead),
		stop:    cancel,
		done:    make(chan struct{}),
	}
	go p.produce(ctx)
	return p, nil
}

func (p *Pool) produce(ctx context.Context) {
	defer close(p.done)
	defer close(p.batches)
	backoff := fetchMinBackoff
	for ctx.Err() == nil {
		callCtx, cancel := context.WithTimeout(ctx, p.opts.CallTimeout)
		ids, err := p.client.GetIDBatch(callCtx, p.opts.BatchSize)
		cancel()
		if err == nil && len(ids) == 0 {
			err = errors.New("idclient: node returned an empty batch")
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			p.setErr(err)
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return
			}
			backoff = min(2*backoff, fetchMaxBackoff)
			continue
		}
		p.setErr(nil)
		backoff = fetchMinBackoff
		select {
		case p.batches <- ids:
		case <-ctx.Done():
			return // a batch in hand is dropped: unused IDs are lost, never reused
		}
	}
}

func (p *Pool) setErr(err error) {
	p.errMu.Lock()
	p.lastErr = err
	p.errMu.Unlock()
}

func (p *Pool) fetchErr() error {
	p.errMu.Lock()
	defer p.errMu.Unlock()
	return p.lastErr
}

// NextID returns a unique ID, from the local batch when it has one. When the
// pool is empty it waits for the producer until ctx ends; the error then
// carries ctx's error and the last fetch error. After Close it keeps handing
// out already fetched IDs, then returns ErrPoolClosed.
func (p *Pool) NextID(ctx context.Context) (int64, error) {
	if id, ok := p.take(); ok {
		return id, nil
	}
	for {
		select {
		case b, ok := <-p.batches:
			if !ok {
				// Another caller may have refilled cur from the last batch.
				if id, ok := p.take(); ok {
					return id, nil
				}
				return 0, ErrPoolClosed
			}
			p.mu.Lock()
			p.cur = append(p.cur, b...) // keep IDs another caller's batch left
			p.mu.Unlock()
		case <-ctx.Done():
			if id, ok := p.take(); ok {
				return id, nil
			}
			if ferr := p.fetchErr(); ferr != nil {
				return 0, fmt.Errorf("idclient: no ID available: %w; last fetch failed: %w", ctx.Err(), ferr)
			}
			return 0, fmt.Errorf("idclient: no ID available: %w", ctx.Err())
		}
		if id, ok := p.take(); ok {
			return id, nil
		}
	}
}

func (p *Pool) take() (int64, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.cur) == 0 {
		return 0, false
	}
	id := p.cur[0]
	p.cur = p.cur[1:]
	return id, true
}

// NextCode returns NextID rendered in base62, the short link's code.
func (p *Pool) NextCode(ctx context.Context) (string, error) {
	id, err := p.NextID(ctx)
	if err != nil {
		return "", err
	}
	return generator.Encode(id), nil
}

// Close stops prefetching and waits for the producer to exit. IDs already
// fetched can still be taken. It does not close the Client.
func (p *Pool) Close() error {
	p.closeOnce.Do(func() {
		p.stop()
		<-p.done
	})
	return nil
}
