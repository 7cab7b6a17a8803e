package generator

import (
	"context"
	"fmt"
	"runtime/debug"
	"time"
)

// Buffer is a bounded queue of ready batches. Put blocks while it is full and
// Take while it is empty, so memory stays bounded when load is low.
type Buffer struct {
	ch chan []int64
}

// NewBuffer returns a buffer holding at most depth batches.
func NewBuffer(depth int) (*Buffer, error) {
	if depth < 1 {
		return nil, fmt.Errorf("%w: %d, want at least 1", ErrInvalidDepth, depth)
	}
	return &Buffer{ch: make(chan []int64, depth)}, nil
}

// Put adds a batch, waiting while the buffer is full or until ctx ends.
func (b *Buffer) Put(ctx context.Context, batch []int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case b.ch <- batch:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// Take removes the oldest batch, waiting while the buffer is empty or until
// ctx ends. A batch already waiting is returned even if ctx has ended.
func (b *Buffer) Take(ctx context.Context) ([]int64, error) {
	select {
	case batch := <-b.ch:
		return batch, nil
	default:
	}
	select {
	case batch := <-b.ch:
		return batch, nil
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// Drain discards every batch ready now and returns how many IDs it dropped.
func (b *Buffer) Drain() int {
	dropped := 0
	for {
		select {
		case batch := <-b.ch:
			dropped += len(batch)
		default:
			return dropped
		}
	}
}

// Len returns the number of batches ready now.
func (b *Buffer) Len() int { return len(b.ch) }

// Cap returns the buffer's depth.
func (b *Buffer) Cap() int { return cap(b.ch) }

// TakeRule is how a node hands out a batch of its prefetch buffer, decided
// from three facts about the node alone (TakeRuleFor). rpc's GetIDBatch
// carries it out, and the cluster's protocol simulator calls the same
// function, so what it checks is what ships.
type TakeRule int

const (
	// TakeRefuse: hand out nothing and refuse at once, so the caller tries
	// another node (not ready, nothing buffered).
	TakeRefuse TakeRule = iota
	// TakeDrop: the node met an older cluster. Its windows may overlap that
	// cluster's, so every buffered batch is dropped and nothing is handed out.
	TakeDrop
	// TakeBriefly: the node is not ready, but batches are buffered. They were
	// minted inside a window the node's log granted, so they stay safe to
	// hand out after a revoke while their tenure lasts (the server drops
	// those of a tenure that has ended): take the oldest, waiting only a
	// moment.
	TakeBriefly
	// TakeWait: the node is ready: take the oldest batch, waiting for one for
	// as long as the caller does.
	TakeWait
)

// TakeRuleFor decides how a node hands out a buffered batch: conflict is
// whether it met an older cluster, ready whether it serves now, buffered
// how many batches its buffer holds.
func TakeRuleFor(conflict, ready bool, buffered int) TakeRule {
	switch {
	case conflict:
		return TakeDrop
	case ready:
		return TakeWait
	case buffered > 0:
		return TakeBriefly
	}
	return TakeRefuse
}

// Backoff between failed mint attempts: doubling from the minimum, capped, and
// reset by a success. A failing mint (revoked slot, exhausted window) thus
// costs a few calls per second, not a busy loop.
const (
	producerMinBackoff = 10 * time.Millisecond
	producerMaxBackoff = time.Second
)

// Producer keeps a Buffer full with batches from mint.
type Producer struct {
	buf       *Buffer
	batchSize int
	mint      func(ctx context.Context, n int) ([]int64, error)
	onError   func(error)
}

// NewProducer returns a producer that fills buf with batches of batchSize IDs
// made by mint. onError (may be nil) hears every failed attempt.
func NewProducer(buf *Buffer, batchSize int, mint func(ctx context.Context, n int) ([]int64, error), onError func(error)) *Producer {
	if onError == nil {
		onError = func(error) {}
	}
	return &Producer{buf: buf, batchSize: batchSize, mint: mint, onError: onError}
}

// Run keeps the buffer full until ctx ends. It never pushes a partial batch.
// A mint error or panic is reported to onError and retried after a bounded
// backoff; Run returns only when ctx ends.
func (p *Producer) Run(ctx context.Context) {
	backoff := producerMinBackoff
	for ctx.Err() == nil {
		batch, err := p.safeMint(ctx)
		if err == nil && len(batch) != p.batchSize {
			err = fmt.Errorf("%w: got %d IDs, want %d", ErrPartialBatch, len(batch), p.batchSize)
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			p.onError(err)
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return
			}
			backoff = min(2*backoff, producerMaxBackoff)
			continue
		}
		backoff = producerMinBackoff
		if p.buf.Put(ctx, batch) != nil {
			return
		}
	}
}

func (p *Producer) safeMint(ctx context.Context) (batch []int64, err error) {
	defer func() {
		if r := recover(); r != nil {
			batch, err = nil, fmt.Errorf("%w: %v\n%s", ErrMintPanic, r, debug.Stack())
		}
	}()
	return p.mint(ctx, p.batchSize)
}
