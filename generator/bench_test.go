package generator

import (
	"context"
	"testing"
	"time"
)

// stepClock is a fake clock for benchmarks: no lock, moved by the loop.
type stepClock struct{ t time.Time }

func (c *stepClock) Now() time.Time { return c.t }

func benchNextBatch(b *testing.B, n int) {
	l := DefaultLayout()
	clock := &stepClock{t: l.Time(1)}
	g, err := New(l, 5, 0, clock)
	if err != nil {
		b.Fatal(err)
	}
	g.Grant(l.MaxTimestamp())
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		clock.t = clock.t.Add(l.Unit)
		if _, err := g.NextBatch(ctx, n); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkNextBatch1160: the article's batch size, the fake clock moved one
// unit per call as in the article's benchmark.
func BenchmarkNextBatch1160(b *testing.B) { benchNextBatch(b, 1160) }

// BenchmarkNextBatch2048: a whole unit of sequence numbers per call.
func BenchmarkNextBatch2048(b *testing.B) { benchNextBatch(b, 2048) }

// BenchmarkFill1160: as NextBatch1160 but into a reused slice (no allocation).
func BenchmarkFill1160(b *testing.B) {
	l := DefaultLayout()
	clock := &stepClock{t: l.Time(1)}
	g, err := New(l, 5, 0, clock)
	if err != nil {
		b.Fatal(err)
	}
	g.Grant(l.MaxTimestamp())
	ctx := context.Background()
	dst := make([]int64, 1160)
	b.ReportAllocs()
	for b.Loop() {
		clock.t = clock.t.Add(l.Unit)
		if err := g.Fill(ctx, dst); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkArticleBatch1160 is the baseline: the article's algorithm
// (article_test.go) run the same way.
func BenchmarkArticleBatch1160(b *testing.B) {
	l := DefaultLayout()
	clock := &stepClock{t: l.Time(1)}
	a := newArticleGenerator(clock, 2, 1)
	b.ReportAllocs()
	for b.Loop() {
		clock.t = clock.t.Add(l.Unit)
		if _, err := a.NextBatch(1160); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkArticleLoop1160 is the article's per-ID loop alone, into a reused
// slice: the baseline's compute without its allocation, to compare with Fill1160.
func BenchmarkArticleLoop1160(b *testing.B) {
	a := newArticleGenerator(&stepClock{}, 2, 1)
	dst := make([]int64, 1160)
	ts := int64(1)
	b.ReportAllocs()
	for b.Loop() {
		ts++
		a.sequence = 0
		a.compose(ts, dst)
	}
}

var sink []int64

// BenchmarkMake1160 is the floor under every 1160-ID batch that returns a
// fresh slice: the allocation alone.
func BenchmarkMake1160(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		sink = make([]int64, 1160)
	}
}

func BenchmarkEncode(b *testing.B) {
	id := DefaultLayout().MaxID()
	b.ReportAllocs()
	for b.Loop() {
		_ = Encode(id)
	}
}

func BenchmarkDecode(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decode("4Ft7Bz2Q"); err != nil {
			b.Fatal(err)
		}
	}
}
