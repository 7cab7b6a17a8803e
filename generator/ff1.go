package generator

import (
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"fmt"
	"math/bits"
)

// FF1 (NIST SP 800-38G Rev. 1, section 5.1) over AES: a keyed, tweakable
// permutation of the numeral strings of one length in one radix. Step
// numbers in comments are the standard's.
//
// This implementation takes halves whose values fit a uint64 (radix^v <
// 2^64), so every number in the rounds is machine arithmetic, never big.Int.
// That keeps b <= 8 and d <= 12: the round's variable bytes lie in the last
// block of Q and R alone yields S (no extra CIPH blocks in step 6.iii).

const (
	ff1Rounds    = 10
	ff1MinDomain = 1_000_000 // radix^minlen >= 10^6 (SP 800-38G Rev. 1, 5.1)
	ff1MaxRadix  = 1 << 16
	// ff1MaxTweak bounds the tweak (the standard lets an implementation pick
	// maxTlen); a deployment name fits easily.
	ff1MaxTweak = 256
)

// ff1 is FF1 with one AES key and radix. Safe for concurrent use: the AES
// block is read-only after key expansion.
type ff1 struct {
	block cipher.Block
	radix uint64
}

func newFF1(key []byte, radix int) (*ff1, error) {
	if radix < 2 || radix > ff1MaxRadix {
		return nil, fmt.Errorf("%w: radix %d not in 2..%d", ErrFF1Domain, radix, ff1MaxRadix)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidKey, err)
	}
	return &ff1{block: block, radix: uint64(radix)}, nil
}

// pow returns radix^k and false when it does not fit a uint64.
func (f *ff1) pow(k int) (uint64, bool) {
	p := uint64(1)
	for range k {
		hi, lo := bits.Mul64(p, f.radix)
		if hi != 0 {
			return 0, false
		}
		p = lo
	}
	return p, true
}

// ff1Params are the values steps 1-5 derive from the length and the tweak,
// plus the CBC-MAC state after every block of P||Q that no round changes.
type ff1Params struct {
	u, v   int
	powU   uint64 // radix^u
	powV   uint64 // radix^v
	b      int    // bytes of NUM(B) in Q
	d      int    // bytes of S used for y
	prefix [16]byte
	last   [16]byte // Q's last block with its variable bytes zero
}

func (f *ff1) params(tweak []byte, n int) (ff1Params, error) {
	var p ff1Params
	if len(tweak) > ff1MaxTweak {
		return p, fmt.Errorf("%w: tweak of %d bytes, at most %d", ErrFF1Domain, len(tweak), ff1MaxTweak)
	}
	if n < 2 {
		return p, fmt.Errorf("%w: %d numerals, at least 2", ErrFF1Domain, n)
	}
	if all, ok := f.pow(n); ok && all < ff1MinDomain {
		return p, fmt.Errorf("%w: radix %d with %d numerals is %d values, below the 10^6 minimum", ErrFF1Domain, f.radix, n, all)
	}
	p.u = n / 2 // step 1
	p.v = n - p.u
	var ok bool
	if p.powV, ok = f.pow(p.v); !ok {
		return p, fmt.Errorf("%w: radix %d with %d numerals: a half exceeds 64 bits", ErrFF1Domain, f.radix, n)
	}
	p.powU, _ = f.pow(p.u)
	// Step 3: b = ceil(ceil(v*log2(radix))/8), with ceil(log2(radix^v)) taken
	// exactly as the bit length of radix^v - 1 (no floating point).
	p.b = (bits.Len64(p.powV-1) + 7) / 8
	p.d = 4*((p.b+3)/4) + 4 // step 4

	// Step 5: P = [1]^1 [2]^1 [1]^1 [radix]^3 [10]^1 [u mod 256]^1 [n]^4 [t]^4.
	P := [16]byte{1, 2, 1, byte(f.radix >> 16), byte(f.radix >> 8), byte(f.radix), ff1Rounds, byte(p.u)}
	binary.BigEndian.PutUint32(P[8:], uint32(n))
	binary.BigEndian.PutUint32(P[12:], uint32(len(tweak)))
	f.block.Encrypt(p.prefix[:], P[:])

	// Step 6.i: Q = T || [0]^((-t-b-1) mod 16) || [i]^1 || [NUM(B)]^b. The
	// last b+1 bytes change per round and sit in Q's last block (b+1 <= 16);
	// every block before it is the same in all rounds.
	q := make([]byte, 0, len(tweak)+16+1+p.b)
	q = append(q, tweak...)
	q = append(q, make([]byte, mod(-len(tweak)-p.b-1, 16)+1+p.b)...)
	for len(q) > 16 {
		xorBlock(&p.prefix, q[:16])
		f.block.Encrypt(p.prefix[:], p.prefix[:])
		q = q[16:]
	}
	copy(p.last[:], q)
	return p, nil
}

func mod(a, m int) int { return (a%m + m) % m }

// xorBlock is dst ^= src[:16], as two words (a byte loop cost a fifth of
// a code).
func xorBlock(dst *[16]byte, src []byte) {
	le := binary.LittleEndian
	le.PutUint64(dst[:8], le.Uint64(dst[:8])^le.Uint64(src[:8]))
	le.PutUint64(dst[8:], le.Uint64(dst[8:])^le.Uint64(src[8:16]))
}

// ff1Scratch holds the blocks of one encryption or decryption: block
// arguments of an interface method escape, so one allocation per call
// instead of one per round.
type ff1Scratch struct{ q, r [16]byte }

// y is steps 6.i-6.iv and the reduction of 6.vi: NUM(S) mod radix^m for
// round i, whose Q ends with NUM(x) (x is B when encrypting, A when
// decrypting).
func (f *ff1) y(p *ff1Params, s *ff1Scratch, i int, x uint64, m uint64) uint64 {
	s.q = p.last
	s.q[15-p.b] = byte(i)
	for k := 0; k < p.b; k++ {
		s.q[15-k] = byte(x >> (8 * k))
	}
	xorBlock(&s.q, p.prefix[:])
	f.block.Encrypt(s.r[:], s.q[:]) // step 6.ii: R = PRF(P || Q)
	// Steps 6.iii-iv: S = the first d bytes of R (d <= 12 < 16); y = NUM(S).
	var hi uint64
	for _, c := range s.r[:p.d-8] {
		hi = hi<<8 | uint64(c)
	}
	lo := binary.BigEndian.Uint64(s.r[p.d-8 : p.d])
	return bits.Rem64(hi, lo, m)
}

// num is NUM_radix: the numerals read most significant first. Callers keep
// len(x) within a half, whose value fits a uint64.
func (f *ff1) num(x []uint16) uint64 {
	var v uint64
	for _, d := range x {
		v = v*f.radix + uint64(d)
	}
	return v
}

// str is STR^m_radix: v written as len(dst) numerals.
func (f *ff1) str(dst []uint16, v uint64) {
	for i := len(dst) - 1; i >= 0; i-- {
		dst[i] = uint16(v % f.radix)
		v /= f.radix
	}
}

func (f *ff1) check(p *ff1Params, x []uint16) error {
	if len(x) != p.u+p.v {
		return fmt.Errorf("%w: %d numerals, the parameters are for %d", ErrFF1Domain, len(x), p.u+p.v)
	}
	for i, d := range x {
		if uint64(d) >= f.radix {
			return fmt.Errorf("%w: numeral %d at position %d is not below radix %d", ErrFF1Domain, d, i, f.radix)
		}
	}
	return nil
}

// encrypt replaces the numerals x with their FF1 encryption under tweak.
func (f *ff1) encrypt(tweak []byte, x []uint16) error {
	p, err := f.params(tweak, len(x))
	if err != nil {
		return err
	}
	return f.encryptWith(&p, x)
}

// decrypt replaces the numerals x with their FF1 decryption under tweak.
func (f *ff1) decrypt(tweak []byte, x []uint16) error {
	p, err := f.params(tweak, len(x))
	if err != nil {
		return err
	}
	return f.decryptWith(&p, x)
}

// encryptWith is encrypt with the parameters of x's length and the tweak
// already derived.
func (f *ff1) encryptWith(p *ff1Params, x []uint16) error {
	if err := f.check(p, x); err != nil {
		return err
	}
	var s ff1Scratch
	a, b := f.num(x[:p.u]), f.num(x[p.u:]) // step 2
	for i := range ff1Rounds {
		m := p.powU // step 6.v
		if i%2 == 1 {
			m = p.powV
		}
		c := addMod(a, f.y(p, &s, i, b, m), m) // step 6.vi
		a, b = b, c                            // steps 6.viii-ix
	}
	// After an even number of rounds A has u numerals and B has v again.
	f.str(x[:p.u], a)
	f.str(x[p.u:], b)
	return nil
}

// decryptWith is SP 800-38G Rev. 1's algorithm 8: the rounds backwards.
func (f *ff1) decryptWith(p *ff1Params, x []uint16) error {
	if err := f.check(p, x); err != nil {
		return err
	}
	var s ff1Scratch
	a, b := f.num(x[:p.u]), f.num(x[p.u:])
	for i := ff1Rounds - 1; i >= 0; i-- {
		m := p.powU
		if i%2 == 1 {
			m = p.powV
		}
		c := subMod(b, f.y(p, &s, i, a, m), m)
		a, b = c, a
	}
	f.str(x[:p.u], a)
	f.str(x[p.u:], b)
	return nil
}

// addMod is (a + y) mod m for a, y < m, without overflow.
func addMod(a, y, m uint64) uint64 {
	s, carry := bits.Add64(a, y, 0)
	if carry != 0 || s >= m {
		s -= m // wraps back into range when the sum carried
	}
	return s
}

// subMod is (a - y) mod m for a, y < m.
func subMod(a, y, m uint64) uint64 {
	if a >= y {
		return a - y
	}
	return a + (m - y)
}
