package generator

import (
	"fmt"
	"math"
)

const base62Alphabet = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"

// base62Digits maps a byte to its digit value, or 0xff outside the alphabet.
var base62Digits = func() (t [256]byte) {
	for i := range t {
		t[i] = 0xff
	}
	for i := 0; i < len(base62Alphabet); i++ {
		t[base62Alphabet[i]] = byte(i)
	}
	return t
}()

// Encode renders id in base62 (0-9, a-z, A-Z), most significant digit first,
// without padding; 0 is "0". IDs are never negative; a negative id yields "".
func Encode(id int64) string {
	if id < 0 {
		return ""
	}
	if id == 0 {
		return "0"
	}
	var buf [11]byte // 62^11 > 2^63
	i := len(buf)
	for id > 0 {
		i--
		buf[i] = base62Alphabet[id%62]
		id /= 62
	}
	return string(buf[i:])
}

// Decode parses a base62 code made by Encode. It rejects the empty string,
// characters outside the alphabet (naming the character and its byte
// position) and values above the largest int64. Leading zeros are accepted.
func Decode(s string) (int64, error) {
	if s == "" {
		return 0, fmt.Errorf("%w: empty string", ErrInvalidCode)
	}
	var v int64
	for i := 0; i < len(s); i++ {
		d := base62Digits[s[i]]
		if d == 0xff {
			r := []rune(s[i:])[0]
			return 0, fmt.Errorf("%w: character %q at position %d is not in 0-9a-zA-Z", ErrInvalidCode, r, i)
		}
		if v > (math.MaxInt64-int64(d))/62 {
			return 0, fmt.Errorf("%w: %q overflows int64", ErrInvalidCode, s)
		}
		v = v*62 + int64(d)
	}
	return v, nil
}
