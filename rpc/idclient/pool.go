package idclient

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
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
	// Lookahead is the least number of fetched batches kept ready besides
	// the one being consumed (default DefaultLookahead); the pool keeps more
	// while draws are fast, enough for the draws of CallTimeout plus a second.
	Lookahead int
	// CallTimeout bounds one fetch (default: the client's call timeout).
	CallTimeout time.Duration
	// Codec, when set, makes NextCode return codes encrypted under its key
	// (generator.NewCodec) that cannot be walked; nil keeps plain base62.
	// It must be made for the cluster's layout (Client.Layout), or NextCode
	// fails; CodeKey has the pool make it. Decode stored codes with the same
	// codec.
	Codec *generator.Codec
	// CodeKey (generator.CodeKeySize bytes, ReadCodeKey) and CodeTweak,
	// instead of Codec: the pool makes the codec itself, for the layout the
	// cluster serves, so codes have the length that layout gives its IDs.
	// Pool.Codec returns it, to decode stored codes.
	CodeKey, CodeTweak []byte
}

// Pool hands out IDs one at a time from prefetched batches. A background
// producer is the only caller of GetIDBatch, so many callers running dry at
// once still cause a single fetch: every waiter rechecks the pool whenever a
// batch lands. Safe for concurrent use.
type Pool struct {
	client *Client
	opts   PoolOptions

	mu      sync.Mutex
	batches [][]int64     // fetched batches; batches[0] is being consumed
	changed chan struct{} // closed (and replaced) when a batch lands, one is used up, or the producer exits
	stopped bool          // the producer has exited: nothing more will land
	lastErr error         // last fetch error, nil after a success
	drawn   drawRate      // draws per second, for the lookahead
	lastLen int           // IDs in the last batch fetched

	stop      context.CancelFunc
	done      chan struct{}
	closeOnce sync.Once

	codecMu sync.Mutex
	codec   atomic.Pointer[generator.Codec] // made from CodeKey once the layout is known
}

// NewPool starts prefetching from client at once.
func NewPool(client *Client, opts PoolOptions) (*Pool, error) {
	if client == nil {
		return nil, errors.New("idclient: NewPool needs a client")
	}
	if opts.BatchSize < 0 || opts.Lookahead < 0 || opts.CallTimeout < 0 {
		return nil, fmt.Errorf("idclient: invalid pool options %+v", opts)
	}
	if opts.CodeKey != nil || opts.CodeTweak != nil {
		if opts.Codec != nil {
			return nil, fmt.Errorf("%w: PoolOptions: give Codec or CodeKey, not both", ErrBadOption)
		}
		// The key and tweak are checked now, with any layout; the codec is
		// made once the cluster's is known.
		if _, err := generator.NewCodec(opts.CodeKey, opts.CodeTweak, generator.DefaultLayout()); err != nil {
			return nil, fmt.Errorf("%w: PoolOptions.CodeKey: %v", ErrBadOption, err)
		}
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
		changed: make(chan struct{}),
		stop:    cancel,
		done:    make(chan struct{}),
	}
	go p.produce(ctx)
	return p, nil
}

// broadcastLocked wakes everyone waiting on the pool; p.mu is held.
func (p *Pool) broadcastLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

func (p *Pool) produce(ctx context.Context) {
	defer close(p.done)
	defer func() {
		p.mu.Lock()
		p.stopped = true
		p.broadcastLocked()
		p.mu.Unlock()
	}()
	backoff := fetchMinBackoff
	for p.waitForRoom(ctx) {
		callCtx, cancel := context.WithTimeout(ctx, p.opts.CallTimeout)
		ids, err := p.client.GetIDBatch(callCtx, p.opts.BatchSize)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			p.mu.Lock()
			p.lastErr = err
			p.mu.Unlock()
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
		backoff = fetchMinBackoff
		p.mu.Lock()
		p.lastErr = nil
		p.lastLen = len(ids)
		p.batches = append(p.batches, ids)
		p.broadcastLocked()
		p.mu.Unlock()
	}
}

// waitForRoom blocks while enough batches are ready besides the one being
// consumed: Lookahead, or more when draws are fast (adapt.go). It reports
// false when ctx ends.
func (p *Pool) waitForRoom(ctx context.Context) bool {
	p.mu.Lock()
	for len(p.batches) > p.drawn.lookahead(time.Now(), p.opts.Lookahead, p.lastLen, p.opts.CallTimeout+lookaheadMargin) {
		ch := p.changed
		p.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		}
		p.mu.Lock()
	}
	p.mu.Unlock()
	return ctx.Err() == nil
}

func (p *Pool) fetchErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lastErr
}

// NextID returns a unique ID, from the fetched batches when they hold one:
// IDs in the pool are always taken before a caller waits, and before its
// ended context is looked at. When the pool is empty it waits for the
// producer until ctx ends; the error then carries ctx's error and the last
// fetch error. After Close it keeps handing out already fetched IDs, then
// returns ErrPoolClosed.
func (p *Pool) NextID(ctx context.Context) (int64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		if id, ok := p.takeLocked(); ok {
			return id, nil
		}
		if p.stopped {
			return 0, ErrPoolClosed
		}
		if ctx.Err() != nil {
			if p.lastErr != nil {
				return 0, fmt.Errorf("idclient: no ID available: %w; last fetch failed: %w", ctx.Err(), p.lastErr)
			}
			return 0, fmt.Errorf("idclient: no ID available: %w", ctx.Err())
		}
		ch := p.changed
		p.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
		}
		p.mu.Lock()
	}
}

// takeLocked takes the next ID; p.mu is held. Using up a batch wakes the
// producer, which may now have room.
func (p *Pool) takeLocked() (int64, bool) {
	if len(p.batches) == 0 {
		return 0, false
	}
	b := p.batches[0]
	id := b[0]
	p.drawn.drawn++
	if len(b) > 1 {
		p.batches[0] = b[1:]
		return id, true
	}
	p.batches[0] = nil
	p.batches = p.batches[1:]
	p.broadcastLocked()
	return id, true
}

// NextCode returns NextID as the short link's code: encrypted by the pool's
// codec (PoolOptions.Codec or CodeKey) when it has one, else plain base62.
// An encrypted code has the length the cluster's layout gives the ID
// (generator.CodeLen); a Codec made for another layout is an error
// wrapping generator.ErrOutOfLayout.
func (p *Pool) NextCode(ctx context.Context) (string, error) {
	id, err := p.NextID(ctx)
	if err != nil {
		return "", err
	}
	codec, err := p.Codec()
	if err != nil {
		return "", err
	}
	if codec != nil {
		return codec.Encode(id)
	}
	return generator.Encode(id), nil
}

// ErrLayoutUnknown: the cluster's layout is not known yet, since no node has
// served a batch (Pool.Codec before the first fetch).
var ErrLayoutUnknown = errors.New("idclient: the cluster's layout is not known yet (no node has served a batch)")

// Codec is the codec NextCode encrypts with, nil for plain base62: Codec of
// the options, or the one made from CodeKey for the cluster's layout once a
// node has served a batch (ErrLayoutUnknown before).
func (p *Pool) Codec() (*generator.Codec, error) {
	if p.opts.Codec == nil && p.opts.CodeKey == nil && p.opts.CodeTweak == nil {
		return nil, nil
	}
	if c := p.codec.Load(); c != nil {
		return c, nil
	}
	l, ok := p.client.Layout()
	if !ok {
		return nil, ErrLayoutUnknown
	}
	if c := p.opts.Codec; c != nil {
		if c.Layout() != l {
			return nil, fmt.Errorf("%w: PoolOptions.Codec is made for layout %s, and the cluster serves %s: "+
				"make it with generator.NewCodec(key, tweak, client.Layout()), or give PoolOptions.CodeKey", generator.ErrOutOfLayout, c.Layout(), l)
		}
		p.codec.Store(c)
		return c, nil
	}
	p.codecMu.Lock()
	defer p.codecMu.Unlock()
	if c := p.codec.Load(); c != nil {
		return c, nil
	}
	c, err := generator.NewCodec(p.opts.CodeKey, p.opts.CodeTweak, l)
	if err != nil {
		return nil, fmt.Errorf("idclient: code key: %w", err)
	}
	p.codec.Store(c)
	return c, nil
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
