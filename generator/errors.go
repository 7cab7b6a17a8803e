package generator

import "errors"

// Errors returned by this package. Callers test them with errors.Is; the
// returned errors wrap them with the numbers that explain the failure.
var (
	// ErrInvalidLayout: a layout's bit widths, unit or lifetime are unusable.
	ErrInvalidLayout = errors.New("invalid layout")
	// ErrOutOfLayout: a value does not fit the layout (Compose, Decompose).
	ErrOutOfLayout = errors.New("value outside layout")
	// ErrInvalidCode: a string is not a base62 code this package can decode.
	ErrInvalidCode = errors.New("invalid base62 code")
	// ErrInvalidSlot: a slot outside 0..Slots()-1.
	ErrInvalidSlot = errors.New("invalid slot")
	// ErrInvalidFloor: a floor outside 0..MaxTimestamp().
	ErrInvalidFloor = errors.New("invalid floor")
	// ErrBatchSize: a batch size outside 1..MaxBatch.
	ErrBatchSize = errors.New("invalid batch size")
	// ErrWindowExhausted: the batch does not fit below the granted high-water
	// mark and no grant arrived before the caller's context ended.
	ErrWindowExhausted = errors.New("window exhausted")
	// ErrLayoutExhausted: the batch would need a timestamp past the end of the
	// layout's timestamp field. It never recovers.
	ErrLayoutExhausted = errors.New("layout exhausted")
	// ErrRevoked: the generator was revoked (its slot was lost) and issues nothing more.
	ErrRevoked = errors.New("generator revoked")
	// ErrInvalidDepth: a buffer depth below 1.
	ErrInvalidDepth = errors.New("invalid buffer depth")
	// ErrMintPanic: the producer's mint function panicked.
	ErrMintPanic = errors.New("mint panicked")
	// ErrPartialBatch: the producer's mint function returned a batch of the wrong size.
	ErrPartialBatch = errors.New("mint returned a partial batch")
	// ErrInvalidKey: a code key that is not 32 bytes, or a tweak over its limit.
	ErrInvalidKey = errors.New("invalid code key")
	// ErrUnknownCode: a well-formed code that decrypts, under the codec's key
	// and tweak, to no ID that encodes to it (made under another key or tweak,
	// or mistyped).
	ErrUnknownCode = errors.New("code decodes to no ID")
	// ErrFF1Domain: FF1 asked for a radix, length, tweak or numeral outside
	// what the standard or this implementation supports.
	ErrFF1Domain = errors.New("outside FF1's domain")
)
