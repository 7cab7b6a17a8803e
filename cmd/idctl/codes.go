package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/idgen/idgen/generator"
	"github.com/idgen/idgen/rpc/idclient"
)

// keySize is what keygen makes: an AES-256 code key, and the size a
// memberlist gossip key may have too.
const keySize = generator.CodeKeySize

// bindKeygen is `idctl keygen`: 32 random bytes, base64, on stdout or in a
// new file readable by its owner only.
func bindKeygen(fs *flag.FlagSet) runner {
	out := fs.String("out", "", "write the key to this new file (mode 0600; an existing file is refused) instead of stdout")
	return func(_ context.Context, _ globals, args []string, e env) error {
		if err := noArgs(args); err != nil {
			return err
		}
		key := make([]byte, keySize)
		if _, err := rand.Read(key); err != nil {
			return fmt.Errorf("reading random bytes: %w", err)
		}
		line := base64.StdEncoding.EncodeToString(key) + "\n"
		if *out == "" {
			_, err := fmt.Fprint(e.stdout, line)
			return err
		}
		f, err := os.OpenFile(*out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, os.ErrExist) {
			return usagef("--out %s exists; a key is never overwritten (codes made under it would no longer decode)", *out)
		}
		if err != nil {
			return err
		}
		if _, err := f.WriteString(line); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
		fmt.Fprintf(e.stderr, "wrote %s (keep it secret; keep it as long as its codes must decode)\n", *out)
		return nil
	}
}

// codeFlags are --code-key-file and --code-tweak, shared by ids and decode.
type codeFlags struct {
	keyFile, tweak *string
}

func addCodeFlags(fs *flag.FlagSet) codeFlags {
	return codeFlags{
		keyFile: fs.String("code-key-file", "", "file with a key from `idctl keygen`: codes are encrypted (FF1), so they cannot be walked"),
		tweak:   fs.String("code-tweak", "", "with --code-key-file: a tweak, e.g. the deployment's name; codes decode only with the same one"),
	}
}

// codec returns the codec the flags ask for, or nil for plain base62. A bad
// key file is a usage error, found before any call.
func (c codeFlags) codec(layout generator.Layout) (*generator.Codec, error) {
	if *c.keyFile == "" {
		if *c.tweak != "" {
			return nil, usagef("--code-tweak needs --code-key-file")
		}
		return nil, nil
	}
	key, err := idclient.ReadCodeKey(*c.keyFile)
	if err != nil {
		return nil, usagef("--code-key-file: %v", err)
	}
	codec, err := generator.NewCodec(key, []byte(*c.tweak), layout)
	if err != nil {
		return nil, usagef("--code-key-file: %v", err)
	}
	return codec, nil
}

// encoder renders an ID as a code: encrypted with codec, else plain base62.
func encoder(codec *generator.Codec) func(int64) (string, error) {
	if codec == nil {
		return func(id int64) (string, error) { return generator.Encode(id), nil }
	}
	return codec.Encode
}

// parseInput reads a decode argument: with a codec every argument is an
// encrypted code (one may be all digits), else as parseIDOrCode does. It
// returns the ID and its code.
func parseInput(s string, forceBase62 bool, codec *generator.Codec) (int64, string, error) {
	if codec == nil {
		id, err := parseIDOrCode(s, forceBase62)
		return id, generator.Encode(id), err
	}
	code := strings.TrimSpace(s)
	id, err := codec.Decode(code)
	if err != nil {
		return 0, "", fmt.Errorf("%q is not a code of this key and tweak: %w", s, err)
	}
	return id, code, nil
}
