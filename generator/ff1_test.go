package generator

import (
	"encoding/hex"
	"errors"
	"slices"
	"testing"
)

// The FF1 samples NIST publishes beside SP 800-38G (FF1samples.pdf): three
// keys (AES-128, -192, -256), each with radix 10 without and with a tweak
// and radix 36 with a tweak. Radix 36's numerals are 0-9a-z, the first 36
// characters of the base62 alphabet.
var ff1Samples = []struct {
	name, key, tweak string
	radix            int
	pt, ct           string
}{
	{"1", "2B7E151628AED2A6ABF7158809CF4F3C", "", 10, "0123456789", "2433477484"},
	{"2", "2B7E151628AED2A6ABF7158809CF4F3C", "39383736353433323130", 10, "0123456789", "6124200773"},
	{"3", "2B7E151628AED2A6ABF7158809CF4F3C", "3737373770717273373737", 36, "0123456789abcdefghi", "a9tv40mll9kdu509eum"},
	{"4", "2B7E151628AED2A6ABF7158809CF4F3CEF4359D8D580AA4F", "", 10, "0123456789", "2830668132"},
	{"5", "2B7E151628AED2A6ABF7158809CF4F3CEF4359D8D580AA4F", "39383736353433323130", 10, "0123456789", "2496655549"},
	{"6", "2B7E151628AED2A6ABF7158809CF4F3CEF4359D8D580AA4F", "3737373770717273373737", 36, "0123456789abcdefghi", "xbj3kv35jrawxv32ysr"},
	{"7", "2B7E151628AED2A6ABF7158809CF4F3CEF4359D8D580AA4F7F036D6F04FC6A94", "", 10, "0123456789", "6657667009"},
	{"8", "2B7E151628AED2A6ABF7158809CF4F3CEF4359D8D580AA4F7F036D6F04FC6A94", "39383736353433323130", 10, "0123456789", "1001623463"},
	{"9", "2B7E151628AED2A6ABF7158809CF4F3CEF4359D8D580AA4F7F036D6F04FC6A94", "3737373770717273373737", 36, "0123456789abcdefghi", "xs8a0azh2avyalyzuwd"},
}

func numerals(t *testing.T, s string) []uint16 {
	t.Helper()
	x := make([]uint16, len(s))
	for i := range s {
		d := base62Digits[s[i]]
		if d == 0xff {
			t.Fatalf("%q: not a numeral", s)
		}
		x[i] = uint16(d)
	}
	return x
}

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestFF1NISTSamples(t *testing.T) {
	for _, s := range ff1Samples {
		t.Run("sample"+s.name, func(t *testing.T) {
			f, err := newFF1(unhex(t, s.key), s.radix)
			if err != nil {
				t.Fatal(err)
			}
			tweak := unhex(t, s.tweak)
			x := numerals(t, s.pt)
			if err := f.encrypt(tweak, x); err != nil {
				t.Fatal(err)
			}
			if want := numerals(t, s.ct); !slices.Equal(x, want) {
				t.Fatalf("encrypt(%s) = %v, want %s = %v", s.pt, x, s.ct, want)
			}
			if err := f.decrypt(tweak, x); err != nil {
				t.Fatal(err)
			}
			if want := numerals(t, s.pt); !slices.Equal(x, want) {
				t.Fatalf("decrypt(%s) = %v, want %s", s.ct, x, s.pt)
			}
		})
	}
}

func TestFF1RefusesOutsideDomain(t *testing.T) {
	key := make([]byte, 16)
	if _, err := newFF1(key, 1); !errors.Is(err, ErrFF1Domain) {
		t.Errorf("radix 1: %v", err)
	}
	if _, err := newFF1(key, 1<<16+1); !errors.Is(err, ErrFF1Domain) {
		t.Errorf("radix 65537: %v", err)
	}
	if _, err := newFF1(make([]byte, 15), 10); !errors.Is(err, ErrInvalidKey) {
		t.Errorf("15-byte key: %v", err)
	}
	f, err := newFF1(key, 10)
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		tweak []byte
		x     []uint16
	}{
		"below 10^6 values":       {nil, make([]uint16, 5)},
		"one numeral":             {nil, make([]uint16, 1)},
		"half above 64 bits":      {nil, make([]uint16, 40)},
		"numeral not below radix": {nil, []uint16{0, 1, 2, 3, 4, 5, 10}},
		"tweak too long":          {make([]byte, ff1MaxTweak+1), make([]uint16, 6)},
	} {
		before := slices.Clone(c.x)
		if err := f.encrypt(c.tweak, c.x); !errors.Is(err, ErrFF1Domain) {
			t.Errorf("%s: encrypt err %v, want ErrFF1Domain", name, err)
		}
		if err := f.decrypt(c.tweak, c.x); !errors.Is(err, ErrFF1Domain) {
			t.Errorf("%s: decrypt err %v, want ErrFF1Domain", name, err)
		}
		if !slices.Equal(before, c.x) {
			t.Errorf("%s: refused input changed to %v", name, c.x)
		}
	}
	// The smallest domain the standard allows: 10^6.
	if err := f.encrypt(nil, make([]uint16, 6)); err != nil {
		t.Errorf("radix 10, 6 numerals: %v", err)
	}
}
