package generator

import (
	"fmt"
	"math"
)

// Encrypted codes: FF1 over the base62 alphabet turns an ID into a code of
// the same length as its plain base62 form, with neighbours unrelated and no
// order or volume visible. Each code length is its own bijection, so codes
// stay unique with no lookup.
const (
	// CodeKeySize is the length of a code key: AES-256.
	CodeKeySize = 32
	// MinCodeLen is the length of every code for an ID below 62^7.
	MinCodeLen = 7
	// MaxCodeTweak is the longest tweak NewCodec accepts.
	MaxCodeTweak = ff1MaxTweak
)

// Codec encrypts IDs of one layout into base62 codes and back, with FF1
// (NIST SP 800-38G) under a 256-bit AES key and an optional tweak. An ID
// below 62^7 becomes exactly 7 characters; an ID from 62^(n-1) up to
// 62^n - 1 (n > 7) becomes n characters, as its plain base62 form would.
// Safe for concurrent use.
type Codec struct {
	f      *ff1
	layout Layout
	maxLen int
	// params[n-MinCodeLen]: FF1's values for n-character codes under the
	// tweak, derived once (they cost AES calls of their own).
	params []ff1Params
}

// NewCodec builds a codec for layout from a CodeKeySize-byte key and a tweak
// of at most MaxCodeTweak bytes (nil for none; for example the deployment's
// name). Codes made under one key and tweak decode only under the same ones.
func NewCodec(key, tweak []byte, layout Layout) (*Codec, error) {
	if err := layout.Validate(); err != nil {
		return nil, err
	}
	if len(key) != CodeKeySize {
		return nil, fmt.Errorf("%w: %d bytes, want %d (AES-256)", ErrInvalidKey, len(key), CodeKeySize)
	}
	if len(tweak) > MaxCodeTweak {
		return nil, fmt.Errorf("%w: tweak of %d bytes, at most %d", ErrInvalidKey, len(tweak), MaxCodeTweak)
	}
	f, err := newFF1(key, len(base62Alphabet))
	if err != nil {
		return nil, err
	}
	c := &Codec{f: f, layout: layout, maxLen: max(MinCodeLen, layout.Base62Len())}
	for n := MinCodeLen; n <= c.maxLen; n++ {
		p, err := f.params(tweak, n)
		if err != nil {
			return nil, err
		}
		c.params = append(c.params, p)
	}
	return c, nil
}

// Layout is the layout whose IDs the codec encodes.
func (c *Codec) Layout() Layout { return c.layout }

// Encode returns id's code. IDs outside the layout are an error.
func (c *Codec) Encode(id int64) (string, error) {
	if id < 0 || id > c.layout.MaxID() {
		return "", fmt.Errorf("%w: id %d not in 0..%d for layout %s", ErrOutOfLayout, id, c.layout.MaxID(), c.layout)
	}
	var digits [11]uint16 // 62^11 > 2^63
	n := len(digits)
	for v := id; v > 0 || n > len(digits)-MinCodeLen; v /= 62 {
		n--
		digits[n] = uint16(v % 62)
	}
	x := digits[n:]
	if err := c.f.encryptWith(&c.params[len(x)-MinCodeLen], x); err != nil {
		return "", err
	}
	var buf [11]byte
	for i, d := range x {
		buf[i] = base62Alphabet[d]
	}
	return string(buf[:len(x)]), nil
}

// Decode returns the ID whose code is code. A code of the wrong length or
// with a character outside 0-9a-zA-Z is ErrInvalidCode; one that decrypts
// to no ID of the layout with this length (another key or tweak, a typo) is
// ErrUnknownCode.
func (c *Codec) Decode(code string) (int64, error) {
	if len(code) < MinCodeLen || len(code) > c.maxLen {
		return 0, fmt.Errorf("%w: %q has %d bytes; codes of this layout have %d to %d characters",
			ErrInvalidCode, code, len(code), MinCodeLen, c.maxLen)
	}
	var digits [11]uint16
	x := digits[:len(code)]
	for i := 0; i < len(code); i++ {
		d := base62Digits[code[i]]
		if d == 0xff {
			r := []rune(code[i:])[0]
			return 0, fmt.Errorf("%w: character %q at position %d is not in 0-9a-zA-Z", ErrInvalidCode, r, i)
		}
		x[i] = uint16(d)
	}
	if err := c.f.decryptWith(&c.params[len(x)-MinCodeLen], x); err != nil {
		return 0, err
	}
	var id int64
	for _, d := range x {
		if id > (math.MaxInt64-int64(d))/62 {
			return 0, fmt.Errorf("%w: %q decrypts past int64", ErrUnknownCode, code)
		}
		id = id*62 + int64(d)
	}
	switch {
	case id > c.layout.MaxID():
		return 0, fmt.Errorf("%w: %q decrypts to %d, above the layout's largest ID %d (another key or tweak, or a typo?)",
			ErrUnknownCode, code, id, c.layout.MaxID())
	case len(code) > MinCodeLen && x[0] == 0:
		// A shorter code encodes this ID: this length's bijection never
		// produces it.
		return 0, fmt.Errorf("%w: %q decrypts to %d, which has a %d-character code (another key or tweak, or a typo?)",
			ErrUnknownCode, code, id, max(MinCodeLen, len(Encode(id))))
	}
	return id, nil
}

// CodeLen is the length of a Codec's code of id: that of its plain base62
// form (Encode), but at least MinCodeLen characters.
func CodeLen(id int64) int { return max(MinCodeLen, len(Encode(id))) }
