package rpc

import (
	"context"
	"sync"

	"github.com/idgen/idgen/generator"
)

// fairTake hands out the prefetch buffer's batches to the callers waiting
// for one, identity by identity in turn (round robin), and in arrival order
// within an identity. A node makes only so many batches a second (its slot's
// sequence space), so first come, first served let one identity that keeps
// many calls waiting take every batch: with 8 such calls per node a second
// service's Pool got no ID in 15 s.
type fairTake struct {
	buf *generator.Buffer

	mu     sync.Mutex
	queues map[string][]*takeWaiter // per identity, oldest first
	order  []string                 // identities with waiters, next first
	wake   chan struct{}            // a waiter arrived
}

// takeWaiter is one caller waiting for a batch. done: the dispatcher
// chose it and its batch is on ch (or about to be); gone: it gave up.
type takeWaiter struct {
	ctx        context.Context
	ch         chan []int64
	done, gone bool
}

func newFairTake(buf *generator.Buffer) *fairTake {
	return &fairTake{buf: buf, queues: map[string][]*takeWaiter{}, wake: make(chan struct{}, 1)}
}

// take waits for a batch for a caller of identity, until ctx ends.
func (f *fairTake) take(ctx context.Context, identity string) ([]int64, error) {
	w := &takeWaiter{ctx: ctx, ch: make(chan []int64, 1)}
	f.mu.Lock()
	if len(f.queues[identity]) == 0 {
		f.order = append(f.order, identity)
	}
	f.queues[identity] = append(f.queues[identity], w)
	f.mu.Unlock()
	select {
	case f.wake <- struct{}{}:
	default:
	}
	select {
	case b := <-w.ch:
		return b, nil
	case <-ctx.Done():
	}
	f.mu.Lock()
	if w.done { // chosen as it gave up: its batch is on its way
		f.mu.Unlock()
		return <-w.ch, nil
	}
	w.gone = true
	f.remove(identity, w)
	f.mu.Unlock()
	return nil, context.Cause(ctx)
}

// remove takes w out of identity's queue, if it is still there; f.mu held.
func (f *fairTake) remove(identity string, w *takeWaiter) {
	q := f.queues[identity]
	for i, o := range q {
		if o == w {
			q = append(q[:i], q[i+1:]...)
			break
		}
	}
	if len(q) > 0 {
		f.queues[identity] = q
		return
	}
	delete(f.queues, identity)
	for i, id := range f.order {
		if id == identity {
			f.order = append(f.order[:i], f.order[i+1:]...)
			break
		}
	}
}

// next pops the waiter whose turn it is: the oldest of the identity next in
// turn, which then goes to the back. It waits for one until ctx ends (nil).
func (f *fairTake) next(ctx context.Context) *takeWaiter {
	for {
		f.mu.Lock()
		if len(f.order) > 0 {
			id := f.order[0]
			w := f.queues[id][0]
			f.queues[id] = f.queues[id][1:]
			f.order = f.order[1:]
			if len(f.queues[id]) > 0 {
				f.order = append(f.order, id)
			} else {
				delete(f.queues, id)
			}
			f.mu.Unlock()
			return w
		}
		f.mu.Unlock()
		select {
		case <-f.wake:
		case <-ctx.Done():
			return nil
		}
	}
}

// run is the dispatcher: for each waiter in turn it takes the next batch
// from the buffer (waiting as long as that caller does) and hands it over. A
// batch taken for a caller that gave up meanwhile goes to the next one.
func (f *fairTake) run(ctx context.Context) {
	var held []int64
	for {
		w := f.next(ctx)
		if w == nil {
			return
		}
		batch := held
		held = nil
		if batch == nil {
			b, err := f.buf.Take(w.ctx)
			if err != nil {
				continue // the caller gave up; take removed it
			}
			batch = b
		}
		f.mu.Lock()
		if w.gone {
			f.mu.Unlock()
			held = batch
			continue
		}
		w.done = true
		f.mu.Unlock()
		w.ch <- batch
	}
}
