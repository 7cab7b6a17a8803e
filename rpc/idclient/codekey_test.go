package idclient

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idgen/idgen/generator"
	"github.com/idgen/idgen/rpc"
)

func writeFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "code.key")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestReadCodeKey(t *testing.T) {
	key := bytes.Repeat([]byte{7}, generator.CodeKeySize)
	text := base64.StdEncoding.EncodeToString(key)
	for _, content := range []string{text, text + "\n", "  " + text + "\r\n\n"} {
		got, err := ReadCodeKey(writeFile(t, content))
		if err != nil || !bytes.Equal(got, key) {
			t.Errorf("ReadCodeKey(%q) = %x, %v", content, got, err)
		}
	}
	for name, c := range map[string]struct{ path, msg string }{
		"missing":     {filepath.Join(t.TempDir(), "nope"), "no such file"},
		"empty":       {writeFile(t, ""), "0 bytes once decoded, want 32"},
		"not base64":  {writeFile(t, "not a key!"), "not base64"},
		"16-byte key": {writeFile(t, base64.StdEncoding.EncodeToString(key[:16])), "16 bytes once decoded, want 32"},
		"raw bytes":   {writeFile(t, string(key)), "not base64"},
		"two keys":    {writeFile(t, text+"\n"+text), "not base64"},
		"huge file":   {writeFile(t, strings.Repeat("A", maxKeyFile+1)), "over 4096 bytes"},
		"a directory": {t.TempDir(), "is a directory"},
	} {
		got, err := ReadCodeKey(c.path)
		if !errors.Is(err, ErrBadCodeKey) || !strings.Contains(err.Error(), c.msg) || got != nil {
			t.Errorf("%s: ReadCodeKey = %x, %v; want ErrBadCodeKey mentioning %q", name, got, err, c.msg)
		}
	}
}

// TestPoolNextCodeWithCodec: with a codec, NextCode's codes are 7
// characters, not in the IDs' order, and decode with the codec to the IDs
// the pool hands out, in their order; without one they stay plain base62.
func TestPoolNextCodeWithCodec(t *testing.T) {
	n := startNode(t, 2, rpc.ServerConfig{BatchSize: 50})
	codec, err := generator.NewCodec(bytes.Repeat([]byte{9}, generator.CodeKeySize), []byte("shortener-a"), generator.DefaultLayout())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool, err := NewPool(dial(t, n.addr), PoolOptions{Codec: codec})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var codes []string
	ascending := 0
	last := int64(-1)
	for i := range 40 {
		code, err := pool.NextCode(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(code) != generator.MinCodeLen {
			t.Fatalf("code %q: %d characters, want %d", code, len(code), generator.MinCodeLen)
		}
		id, err := codec.Decode(code)
		if err != nil {
			t.Fatalf("Decode(%q): %v", code, err)
		}
		if id <= last {
			t.Fatalf("code %d %q decodes to %d, not above the previous %d", i, code, id, last)
		}
		last = id
		if i > 0 && code > codes[i-1] {
			ascending++
		}
		codes = append(codes, code)
	}
	if ascending == len(codes)-1 {
		t.Errorf("codes sort like their IDs: %v", codes)
	}

	plain, err := NewPool(dial(t, n.addr), PoolOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	code, err := plain.NextCode(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if id, err := generator.Decode(code); err != nil || id <= last {
		t.Errorf("plain pool: code %q is not the base62 of a later ID (%d, %v)", code, id, err)
	}
}

// A codec for another layout than the cluster's refuses to encode its IDs:
// NextCode says so instead of handing out a code that decodes wrongly.
func TestPoolNextCodeRefusesCodecOfAnotherLayout(t *testing.T) {
	n := startNode(t, 1, rpc.ServerConfig{BatchSize: 10})
	narrow, err := generator.NewLayout(generator.DefaultEpoch, time.Second, 1, 0, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	codec, err := generator.NewCodec(make([]byte, generator.CodeKeySize), nil, narrow)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := NewPool(dial(t, n.addr), PoolOptions{Codec: codec})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if code, err := pool.NextCode(ctx); !errors.Is(err, generator.ErrOutOfLayout) || code != "" {
		t.Fatalf("NextCode = %q, %v; want ErrOutOfLayout", code, err)
	}
}
