package generator

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// pow62 is 62^k.
func pow62(k int) int64 {
	p := int64(1)
	for range k {
		p *= 62
	}
	return p
}

func testCodec(t testing.TB, tweak string) *Codec {
	t.Helper()
	c, err := NewCodec(bytes.Repeat([]byte{0x5a}, CodeKeySize), []byte(tweak), DefaultLayout())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func mustEncode(t testing.TB, c *Codec, id int64) string {
	t.Helper()
	code, err := c.Encode(id)
	if err != nil {
		t.Fatalf("Encode(%d): %v", id, err)
	}
	return code
}

// wantCodeLen is the length the issue asks for: 7 below 62^7, else the
// plain base62 length.
func wantCodeLen(id int64) int { return max(MinCodeLen, len(Encode(id))) }

func TestCodecBoundaries(t *testing.T) {
	c := testCodec(t, "")
	l := DefaultLayout()
	for _, id := range []int64{0, 1, 61, 62, pow62(6), pow62(7) - 1, pow62(7), l.MaxID() - 1, l.MaxID()} {
		code := mustEncode(t, c, id)
		if len(code) != wantCodeLen(id) {
			t.Errorf("Encode(%d) = %q: %d characters, want %d", id, code, len(code), wantCodeLen(id))
		}
		if got, err := c.Decode(code); err != nil || got != id {
			t.Errorf("Decode(%q) = %d, %v; want %d", code, got, err, id)
		}
	}
	for _, id := range []int64{-1, l.MaxID() + 1} {
		if code, err := c.Encode(id); !errors.Is(err, ErrOutOfLayout) {
			t.Errorf("Encode(%d) = %q, %v; want ErrOutOfLayout", id, code, err)
		}
	}
}

// TestCodecEveryLength: a 63-bit layout has codes of 7 to 11 characters;
// each length round-trips at its ends and at random IDs inside it.
func TestCodecEveryLength(t *testing.T) {
	wide, err := NewLayout(DefaultEpoch, time.Nanosecond, 50, 2, 1, 10)
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewCodec(bytes.Repeat([]byte{1}, CodeKeySize), []byte("wide"), wide)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for n := MinCodeLen; n <= 11; n++ {
		lo, hi := int64(0), wide.MaxID()
		if n > MinCodeLen {
			lo = pow62(n - 1)
		}
		if n < 11 {
			hi = pow62(n) - 1
		}
		ids := []int64{lo, lo + 1, hi - 1, hi}
		for range 1000 {
			ids = append(ids, lo+rng.Int64N(hi-lo+1))
		}
		for _, id := range ids {
			code := mustEncode(t, c, id)
			if len(code) != n {
				t.Fatalf("Encode(%d) = %q, want %d characters", id, code, n)
			}
			if got, err := c.Decode(code); err != nil || got != id {
				t.Fatalf("Decode(%q) = %d, %v; want %d", code, got, err, id)
			}
		}
	}
}

// TestCodecProperties: over random layouts, keys, tweaks and IDs,
// decode(encode(x)) = x and the code has the plain base62 length, at least 7.
func TestCodecProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		seq := rapid.Uint8Range(1, 20).Draw(t, "seqBits")
		ts := rapid.Uint8Range(1, 60-seq).Draw(t, "tsBits")
		// A 1 ns unit lets the timestamp take up to 59 bits: IDs of up to
		// 63 bits, codes of up to 11 characters.
		layout, err := NewLayout(DefaultEpoch, time.Nanosecond, ts, 2, 1, seq)
		if err != nil {
			t.Fatal(err)
		}
		key := rapid.SliceOfN(rapid.Byte(), CodeKeySize, CodeKeySize).Draw(t, "key")
		tweak := rapid.SliceOfN(rapid.Byte(), 0, MaxCodeTweak).Draw(t, "tweak")
		c, err := NewCodec(key, tweak, layout)
		if err != nil {
			t.Fatal(err)
		}
		id := rapid.Int64Range(0, layout.MaxID()).Draw(t, "id")
		code, err := c.Encode(id)
		if err != nil {
			t.Fatal(err)
		}
		if len(code) != wantCodeLen(id) {
			t.Fatalf("Encode(%d) = %q, want %d characters", id, code, wantCodeLen(id))
		}
		got, err := c.Decode(code)
		if err != nil || got != id {
			t.Fatalf("Decode(Encode(%d) = %q) = %d, %v", id, code, got, err)
		}
	})
}

func TestCodecNoSharedCodes(t *testing.T) {
	c := testCodec(t, "")
	l := DefaultLayout()
	rng := rand.New(rand.NewPCG(1, 2))
	ids := map[int64]bool{}
	for len(ids) < 200_000 {
		ids[rng.Int64N(l.MaxID()+1)] = true
	}
	// And a run of consecutive IDs on each side of the 7/8 boundary.
	for id := pow62(7) - 50_000; id < pow62(7)+50_000; id++ {
		ids[id] = true
	}
	codes := make(map[string]int64, len(ids))
	for id := range ids {
		code := mustEncode(t, c, id)
		if prev, ok := codes[code]; ok {
			t.Fatalf("IDs %d and %d share code %q", prev, id, code)
		}
		codes[code] = id
	}
}

// TestCodecNeighboursUnrelated: the codes of consecutive IDs agree at each
// position about 1 time in 62, as unrelated strings do, and sort in either
// order about half the time. Plain base62 fails both (checked too, so the
// test can fail).
func TestCodecNeighboursUnrelated(t *testing.T) {
	c := testCodec(t, "deployment-a")
	start, err := DefaultLayout().Compose(20_000_000, 5, 0) // a 7-character ID of 2026
	if err != nil {
		t.Fatal(err)
	}
	const pairs = 20_000
	related := func(encode func(int64) string) (string, bool) {
		var same [MinCodeLen]int
		ascending := 0
		prev := encode(start)
		for id := start + 1; id <= start+pairs; id++ {
			code := encode(id)
			for i := range same {
				if code[i] == prev[i] {
					same[i]++
				}
			}
			if code > prev {
				ascending++
			}
			prev = code
		}
		// Chance is pairs/62 = 323 per position (sd 18); allow twice that.
		// same[0] is the pairs that share a prefix at all.
		for i, n := range same {
			if n > 2*pairs/62 {
				return fmt.Sprintf("position %d equal in %d of %d pairs", i, n, pairs), true
			}
		}
		if ascending < pairs*45/100 || ascending > pairs*55/100 {
			return fmt.Sprintf("%d of %d pairs in ascending order", ascending, pairs), true
		}
		return "", false
	}
	if why, bad := related(func(id int64) string { return mustEncode(t, c, id) }); bad {
		t.Errorf("encrypted codes of neighbours are related: %s", why)
	}
	if _, bad := related(Encode); !bad {
		t.Errorf("plain base62 passes the neighbour check; the check tests nothing")
	}
}

func TestCodecKeyAndTweakMatter(t *testing.T) {
	id, err := DefaultLayout().Compose(20_000_000, 3, 7)
	if err != nil {
		t.Fatal(err)
	}
	a := testCodec(t, "")
	b := testCodec(t, "other deployment")
	other, err := NewCodec(bytes.Repeat([]byte{0x5b}, CodeKeySize), nil, DefaultLayout())
	if err != nil {
		t.Fatal(err)
	}
	codeA := mustEncode(t, a, id)
	for name, c := range map[string]*Codec{"another tweak": b, "another key": other} {
		code := mustEncode(t, c, id)
		if code == codeA {
			t.Errorf("%s gives the same code %q", name, code)
		}
		if got, err := c.Decode(codeA); err == nil && got == id {
			t.Errorf("%s decodes %q to the same ID %d", name, codeA, id)
		}
	}
}

func TestNewCodecRefuses(t *testing.T) {
	l := DefaultLayout()
	for _, n := range []int{0, 16, 24, 31, 33} {
		if _, err := NewCodec(make([]byte, n), nil, l); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("%d-byte key: %v, want ErrInvalidKey", n, err)
		}
	}
	if _, err := NewCodec(make([]byte, CodeKeySize), make([]byte, MaxCodeTweak+1), l); !errors.Is(err, ErrInvalidKey) {
		t.Errorf("long tweak: %v, want ErrInvalidKey", err)
	}
	if _, err := NewCodec(make([]byte, CodeKeySize), nil, Layout{}); !errors.Is(err, ErrInvalidLayout) {
		t.Errorf("zero layout: %v, want ErrInvalidLayout", err)
	}
	// The caller's key and tweak may change afterwards; the codec keeps its own.
	key, tweak := make([]byte, CodeKeySize), []byte("t")
	c, err := NewCodec(key, tweak, l)
	if err != nil {
		t.Fatal(err)
	}
	before := mustEncode(t, c, 12345)
	tweak[0] = 'u'
	if after := mustEncode(t, c, 12345); after != before {
		t.Errorf("changing the caller's tweak changed the code: %q -> %q", before, after)
	}
}

func TestCodecDecodeErrors(t *testing.T) {
	c := testCodec(t, "")
	for _, in := range []string{"", "abcdef", "abcdefghi", "abc-efg", "abcdéf", "\xff\xff\xff\xff\xff\xff\xff"} {
		if id, err := c.Decode(in); !errors.Is(err, ErrInvalidCode) {
			t.Errorf("Decode(%q) = %d, %v; want ErrInvalidCode", in, id, err)
		}
	}
	// An 8-character code that decrypts to an ID below 62^7, whose code has 7.
	x := []uint16{0, 1, 2, 3, 4, 5, 6, 7}
	if err := c.f.encryptWith(&c.params[1], x); err != nil {
		t.Fatal(err)
	}
	var short strings.Builder
	for _, d := range x {
		short.WriteByte(base62Alphabet[d])
	}
	if id, err := c.Decode(short.String()); !errors.Is(err, ErrUnknownCode) || !strings.Contains(err.Error(), "7-character code") {
		t.Errorf("Decode(%q) = %d, %v; want ErrUnknownCode naming the 7-character code", short.String(), id, err)
	}
	// Most 8-character strings decrypt above the layout's largest ID.
	unknown := 0
	for i := range 1000 {
		if _, err := c.Decode(Encode(pow62(7) + int64(i)*7919)); errors.Is(err, ErrUnknownCode) {
			unknown++
		}
	}
	if unknown < 900 {
		t.Errorf("%d of 1000 arbitrary 8-character strings refused, want nearly all (the layout's IDs fill 0.4%% of them)", unknown)
	}
}

func FuzzCodecDecode(f *testing.F) {
	c := testCodec(f, "fuzz")
	for _, s := range []string{"", "0000000", "zzzzzzz", "ZZZZZZZZ", "00000000", "abc-efg", "é", "\xff", "aZl8N0y58M7", mustEncode(f, c, 1)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, err := c.Decode(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidCode) && !errors.Is(err, ErrUnknownCode) {
				t.Fatalf("Decode(%q): %v, want ErrInvalidCode or ErrUnknownCode", s, err)
			}
			return
		}
		// A code that decodes is the one code of its ID.
		if back := mustEncode(t, c, id); back != s {
			t.Fatalf("Decode(%q) = %d, whose code is %q", s, id, back)
		}
	})
}

// BenchmarkCodecEncode encrypts the same ID BenchmarkEncode renders in
// plain base62 (the layout's largest, 8 characters); the goal is at most
// 2 us per code.
func BenchmarkCodecEncode(b *testing.B) {
	c := testCodec(b, "deployment-a")
	id := DefaultLayout().MaxID()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Encode(id); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCodecDecode decrypts an 8-character code, as BenchmarkDecode
// parses one.
func BenchmarkCodecDecode(b *testing.B) {
	c := testCodec(b, "deployment-a")
	code := mustEncode(b, c, DefaultLayout().MaxID())
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Decode(code); err != nil {
			b.Fatal(err)
		}
	}
}
