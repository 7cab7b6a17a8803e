package idclient

import (
	"fmt"
	"sync/atomic"

	"github.com/idgen/idgen/generator"
	idgenv1 "github.com/idgen/idgen/proto/idgen/v1"
)

// A cluster's ID layout is chosen when it is founded (idgend --layout) and
// never changes. Every GetIDBatch answer names it (GetIDBatchResponse.layout,
// empty from nodes older than the field, which run the default layout), and
// the client checks each batch against it. The first layout a node serves
// becomes the client's (unless WithLayout pinned one); a node that serves
// another is refused like a malformed batch (ErrBadBatch), and counted
// toward its ejection: its IDs may overlap the cluster's.

// knownLayout is a layout the client accepts batches under, with what
// checking a batch needs of it.
type knownLayout struct {
	text     string // as the responses carry it
	layout   generator.Layout
	node     string // the node that first served it ("" when pinned)
	maxID    int64
	slotMask int64
	seqBits  uint8
}

func newKnownLayout(l generator.Layout, node string) *knownLayout {
	return &knownLayout{text: l.String(), layout: l, node: node, maxID: l.MaxID(), slotMask: int64(l.Slots() - 1), seqBits: l.SequenceBits}
}

// defaultLayoutText is what a node older than GetIDBatchResponse.layout serves.
var defaultLayoutText = generator.DefaultLayout().String()

// WithLayout makes the client accept batches of layout l only, instead of
// taking the layout of the first node that answers: a node of another
// cluster, or one whose layout is wrong, is then refused even when it
// answers first.
func WithLayout(l generator.Layout) Option {
	return func(o *options) { o.layout = &l }
}

// layouts holds the client's layout once known.
type layouts struct {
	cur atomic.Pointer[knownLayout]
}

// of returns the layout the batch in resp is checked under: the client's,
// learnt from the first node that served one (or pinned). A node serving
// another layout, or a layout that cannot be read, is an ErrBadBatch.
func (ls *layouts) of(resp *idgenv1.GetIDBatchResponse) (*knownLayout, error) {
	text := resp.GetLayout()
	if text == "" {
		text = defaultLayoutText
	}
	cur := ls.cur.Load()
	if cur != nil && cur.text == text {
		return cur, nil
	}
	if cur == nil {
		l, err := generator.ParseLayout(text)
		if err != nil {
			return nil, fmt.Errorf("%w: node %q names layout %q: %v", ErrBadBatch, resp.GetNode(), text, err)
		}
		if ls.cur.CompareAndSwap(nil, newKnownLayout(l, resp.GetNode())) {
			return ls.cur.Load(), nil
		}
		if cur = ls.cur.Load(); cur.text == text {
			return cur, nil
		}
	}
	first := "pinned by WithLayout"
	if cur.node != "" {
		first = fmt.Sprintf("first served by node %q", cur.node)
	}
	return nil, fmt.Errorf("%w: node %q serves layout %s, and this client's cluster has layout %s (%s): "+
		"its IDs may collide with the cluster's; is it a member of another cluster?",
		ErrBadBatch, resp.GetNode(), text, cur.text, first)
}

// Layout is the cluster's ID layout, once a node has served a batch (or as
// WithLayout pinned it): build a generator.Codec for NextCode's codes with it.
func (c *Client) Layout() (generator.Layout, bool) {
	if l := c.layouts.cur.Load(); l != nil {
		return l.layout, true
	}
	return generator.Layout{}, false
}
