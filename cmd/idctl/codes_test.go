package main

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idgen/idgen/generator"
	"github.com/idgen/idgen/rpc/idclient"
)

func TestKeygen(t *testing.T) {
	out1, _, code1 := runCapture(t, "", "keygen")
	out2, _, code2 := runCapture(t, "", "keygen")
	if code1 != 0 || code2 != 0 {
		t.Fatalf("keygen: exit %d, %d", code1, code2)
	}
	for _, out := range []string{out1, out2} {
		key, err := base64.StdEncoding.DecodeString(strings.TrimSuffix(out, "\n"))
		if err != nil || len(key) != 32 || !strings.HasSuffix(out, "\n") {
			t.Fatalf("keygen printed %q: %d bytes, %v; want one line of base64 of 32 bytes", out, len(key), err)
		}
	}
	if out1 == out2 {
		t.Fatalf("two keygens printed the same key %q", out1)
	}

	path := filepath.Join(t.TempDir(), "code.key")
	if _, errOut, code := runCapture(t, "", "keygen", "--out", path); code != 0 {
		t.Fatalf("keygen --out: exit %d %s", code, errOut)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v, mode %v; want 0600", err, fi.Mode())
	}
	if _, err := idclient.ReadCodeKey(path); err != nil {
		t.Fatalf("the written key does not read back: %v", err)
	}
	before, _ := os.ReadFile(path)
	// A second keygen onto the same file would orphan every code made under it.
	if _, errOut, code := runCapture(t, "", "keygen", "--out", path); code != exitUsage || !strings.Contains(errOut, "never overwritten") {
		t.Fatalf("keygen over an existing key: exit %d %s", code, errOut)
	}
	if after, _ := os.ReadFile(path); string(after) != string(before) {
		t.Fatalf("refused keygen changed the key file")
	}
	if _, _, code := runCapture(t, "", "keygen", "extra"); code != exitUsage {
		t.Fatalf("keygen with an argument: exit %d", code)
	}
}

// keyFile writes a fresh key with idctl keygen and returns its path and a
// codec for it under tweak.
func keyFile(t *testing.T, tweak string) (string, *generator.Codec) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "code.key")
	if _, errOut, code := runCapture(t, "", "keygen", "--out", path); code != 0 {
		t.Fatalf("keygen: exit %d %s", code, errOut)
	}
	key, err := idclient.ReadCodeKey(path)
	if err != nil {
		t.Fatal(err)
	}
	c, err := generator.NewCodec(key, []byte(tweak), generator.DefaultLayout())
	if err != nil {
		t.Fatal(err)
	}
	return path, c
}

func TestDecodeWithCodeKey(t *testing.T) {
	path, codec := keyFile(t, "prod")
	id, err := generator.DefaultLayout().Compose(20_000_000, 5, 917)
	if err != nil {
		t.Fatal(err)
	}
	code, err := codec.Encode(id)
	if err != nil {
		t.Fatal(err)
	}
	out, errOut, exit := runCapture(t, "", "decode", "--code-key-file", path, "--code-tweak", "prod", "--json", code)
	var d decodedJSON
	if exit != 0 || json.Unmarshal([]byte(out), &d) != nil {
		t.Fatalf("decode: exit %d %s %s", exit, out, errOut)
	}
	if d.ID != id || d.Code != code || d.Slot != 5 || d.Sequence != 917 || d.Timestamp != 20_000_000 {
		t.Fatalf("decode %s = %+v, want ID %d slot 5 sequence 917", code, d, id)
	}

	otherPath, _ := keyFile(t, "")
	for name, args := range map[string][]string{
		"another key":       {"decode", "--code-key-file", otherPath, "--code-tweak", "prod", "--json", code},
		"another tweak":     {"decode", "--code-key-file", path, "--code-tweak", "staging", "--json", code},
		"the plain decoder": {"decode", "--json", code},
	} {
		out, _, exit := runCapture(t, "", args...)
		if exit == 0 && strings.Contains(out, `"id": `+jsonInt(id)) {
			t.Errorf("%s decodes %s to the same ID %d", name, code, id)
		}
	}
	// A code of the wrong length, and a code no ID has under this key and
	// tweak, are refused with exit 2. (The code is found with the "prod"
	// codec, so it is asked under "prod": under another tweak it may be a
	// valid code.)
	unknown := ""
	for i := int64(0); unknown == ""; i++ {
		s := generator.Encode(3521614606208 + i) // 62^7 on: 8 characters
		if _, err := codec.Decode(s); err != nil {
			unknown = s
		}
	}
	for _, bad := range []string{"abc", unknown} {
		if _, errOut, exit := runCapture(t, "", "decode", "--code-key-file", path, "--code-tweak", "prod", bad); exit != exitUsage || !strings.Contains(errOut, "not a code of this key") {
			t.Errorf("decode %s: exit %d %s", bad, exit, errOut)
		}
	}
}

func jsonInt(v int64) string { b, _ := json.Marshal(v); return string(b) }

// TestBadCodeKeyRefusedBeforeAnyCall: a bad key file or a tweak without a
// key is a usage error (exit 2) found before dialing, so the unreachable
// target never turns it into exit 1.
func TestBadCodeKeyRefusedBeforeAnyCall(t *testing.T) {
	dir := t.TempDir()
	short := filepath.Join(dir, "short.key")
	if err := os.WriteFile(short, []byte(base64.StdEncoding.EncodeToString(make([]byte, 16))), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"ids", "--base62", "--code-key-file", filepath.Join(dir, "missing")}, "no such file"},
		{[]string{"ids", "--base62", "--code-key-file", short}, "16 bytes once decoded, want 32"},
		{[]string{"ids", "--base62", "--code-tweak", "prod"}, "--code-tweak needs --code-key-file"},
		{[]string{"decode", "--code-key-file", short, "abcdefg"}, "want 32"},
	} {
		_, errOut, exit := runCapture(t, "127.0.0.1:1", append([]string{"--timeout", "2s"}, c.args...)...)
		if exit != exitUsage || !strings.Contains(errOut, c.msg) {
			t.Errorf("idctl %v: exit %d %q; want %d mentioning %q", c.args, exit, errOut, exitUsage, c.msg)
		}
	}
}
