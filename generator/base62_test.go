package generator

import (
	"errors"
	"math"
	"strings"
	"testing"
)

func TestBase62Vectors(t *testing.T) {
	cases := []struct {
		id   int64
		code string
	}{
		{0, "0"}, {9, "9"}, {10, "a"}, {35, "z"}, {36, "A"}, {61, "Z"}, {62, "10"},
		{11157, "2TX"},
		{math.MaxInt64, "aZl8N0y58M7"},
	}
	for _, c := range cases {
		if got := Encode(c.id); got != c.code {
			t.Errorf("Encode(%d) = %q, want %q", c.id, got, c.code)
		}
		if got, err := Decode(c.code); err != nil || got != c.id {
			t.Errorf("Decode(%q) = %d, %v, want %d", c.code, got, err, c.id)
		}
	}
	if got := Encode(-1); got != "" {
		t.Errorf("Encode(-1) = %q, want empty", got)
	}
}

func TestDecodeErrors(t *testing.T) {
	cases := []struct {
		in, msg string
	}{
		{"", "empty"},
		{"2T-X", `'-' at position 2`},
		{"ab€", `'€' at position 2`},
		{"aZl8N0y58M8", "overflows"},
		{"zzzzzzzzzzzz", "overflows"},
	}
	for _, c := range cases {
		_, err := Decode(c.in)
		if !errors.Is(err, ErrInvalidCode) || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("Decode(%q) err = %v, want ErrInvalidCode mentioning %q", c.in, err, c.msg)
		}
	}
}

func FuzzBase62RoundTrip(f *testing.F) {
	for _, id := range []int64{0, 1, 61, 62, 11157, 1 << 42, math.MaxInt64} {
		f.Add(id)
	}
	f.Fuzz(func(t *testing.T, id int64) {
		if id < 0 {
			id = -(id + 1)
		}
		s := Encode(id)
		got, err := Decode(s)
		if err != nil || got != id {
			t.Fatalf("Decode(Encode(%d)=%q) = %d, %v", id, s, got, err)
		}
	})
}

func FuzzDecode(f *testing.F) {
	for _, s := range []string{"", "0", "00", "2TX", "aZl8N0y58M7", "aZl8N0y58M8", "-1", "é", "\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, err := Decode(s)
		if err != nil {
			return
		}
		if id < 0 {
			t.Fatalf("Decode(%q) = %d, negative", s, id)
		}
		canonical := strings.TrimLeft(s, "0")
		if canonical == "" {
			canonical = "0"
		}
		if got := Encode(id); got != canonical {
			t.Fatalf("Encode(Decode(%q)) = %q, want %q", s, got, canonical)
		}
	})
}
