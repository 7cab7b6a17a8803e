package idclient

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/idgen/idgen/generator"
)

// ErrBadCodeKey: a code key file that cannot be read or does not hold the
// base64 of generator.CodeKeySize bytes.
var ErrBadCodeKey = errors.New("idclient: bad code key file")

// maxKeyFile bounds what ReadCodeKey reads: a key is 44 characters.
const maxKeyFile = 4096

// ReadCodeKey reads a code key file: the base64 text `idctl keygen` prints
// (surrounding whitespace ignored). Pass the key to generator.NewCodec and
// the codec to PoolOptions.Codec; keep old keys to decode old codes.
func ReadCodeKey(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadCodeKey, err)
	}
	defer f.Close()
	text, err := io.ReadAll(io.LimitReader(f, maxKeyFile+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrBadCodeKey, path, err)
	}
	if len(text) > maxKeyFile {
		return nil, fmt.Errorf("%w: %s is over %d bytes; want the one line `idctl keygen` prints", ErrBadCodeKey, path, maxKeyFile)
	}
	key, err := ParseCodeKey(text)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return key, nil
}

// ParseCodeKey decodes the base64 text of a code key (as `idctl keygen`
// prints it) and checks its length.
func ParseCodeKey(text []byte) ([]byte, error) {
	text = bytes.TrimSpace(text)
	key := make([]byte, base64.StdEncoding.DecodedLen(len(text)))
	n, err := base64.StdEncoding.Decode(key, text)
	if err != nil {
		return nil, fmt.Errorf("%w: not base64 (%v); make one with `idctl keygen`", ErrBadCodeKey, err)
	}
	if n != generator.CodeKeySize {
		return nil, fmt.Errorf("%w: %d bytes once decoded, want %d; make one with `idctl keygen`", ErrBadCodeKey, n, generator.CodeKeySize)
	}
	return key[:n], nil
}
