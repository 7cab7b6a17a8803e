package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/idgen/idgen/generator"
	"github.com/idgen/idgen/rpc/idclient"
)

// defaultIDsBatch is idgend's default --batch-size, which is never above its
// --max-count: such calls are served from the node's prefetch buffer.
const defaultIDsBatch = 1000

type idJSON struct {
	ID   int64  `json:"id"`
	Code string `json:"code"`
	Slot int    `json:"slot"`
}

func bindIDs(fs *flag.FlagSet) runner {
	n := fs.Int("n", 1, "number of IDs")
	base62 := fs.Bool("base62", false, "print base62 codes instead of decimal IDs")
	batch := fs.Int("batch", defaultIDsBatch, "IDs per call; calls go round robin over the target's nodes, so small batches spread over them")
	codes := addCodeFlags(fs)
	return func(ctx context.Context, g globals, args []string, e env) error {
		if err := noArgs(args); err != nil {
			return err
		}
		if *n < 1 {
			return usagef("-n %d: want at least 1", *n)
		}
		per := *batch
		if per < 1 {
			return usagef("--batch %d: want at least 1", per)
		}
		// The key is checked before any call; the codec is made for the
		// layout the cluster serves, which the first batch brings.
		if _, err := codes.codec(generator.DefaultLayout()); err != nil {
			return err
		}
		client, err := idclient.Dial(g.target, append(g.clientOptions(), idclient.WithCallTimeout(g.timeout))...)
		if err != nil {
			return usagef("%v", err)
		}
		defer client.Close()
		ids := make([]int64, 0, *n)
		for len(ids) < *n {
			// The node's own maximum decides; a count over it comes back as
			// InvalidArgument with the limit in the message.
			got, err := client.GetIDBatch(ctx, min(per, *n-len(ids)))
			if err != nil {
				return err
			}
			ids = append(ids, got...)
		}
		layout, _ := client.Layout()
		codec, err := codes.codec(layout)
		if err != nil {
			return err
		}
		encode := encoder(codec)
		if g.json {
			out := make([]idJSON, 0, len(ids))
			for _, id := range ids {
				p, _ := layout.Decompose(id)
				code, err := encode(id)
				if err != nil {
					return err
				}
				out = append(out, idJSON{ID: id, Code: code, Slot: p.Slot})
			}
			return printJSON(e.stdout, out)
		}
		var b strings.Builder
		for _, id := range ids {
			if *base62 {
				code, err := encode(id)
				if err != nil {
					return err
				}
				b.WriteString(code)
			} else {
				b.WriteString(strconv.FormatInt(id, 10))
			}
			b.WriteByte('\n')
		}
		_, err = fmt.Fprint(e.stdout, b.String())
		return err
	}
}

type decodedJSON struct {
	Input      string `json:"input"`
	ID         int64  `json:"id"`
	Code       string `json:"code"`
	Timestamp  int64  `json:"timestamp"`
	Time       string `json:"time"`
	Datacenter int    `json:"datacenter"`
	Machine    int    `json:"machine"`
	Slot       int    `json:"slot"`
	Sequence   int64  `json:"sequence"`
}

func bindDecode(fs *flag.FlagSet) runner {
	forceBase62 := fs.Bool("base62", false, "read every argument as a base62 code, even all-digit ones")
	codes := addCodeFlags(fs)
	layoutFlags := addDecodeLayoutFlags(fs)
	return func(ctx context.Context, g globals, args []string, e env) error {
		if len(args) == 0 {
			return usagef("decode needs at least one ID or code")
		}
		if _, err := codes.codec(generator.DefaultLayout()); err != nil {
			return err
		}
		layout, err := layoutFlags.resolve(ctx, g)
		if err != nil {
			return err
		}
		codec, err := codes.codec(layout)
		if err != nil {
			return err
		}
		var out []decodedJSON
		for _, a := range args {
			id, code, err := parseInput(a, *forceBase62, codec)
			if err != nil {
				return usagef("%v", err)
			}
			p, err := layout.Decompose(id)
			if err != nil {
				return usagef("%q: %v", a, err)
			}
			out = append(out, decodedJSON{
				Input: a, ID: id, Code: code, Timestamp: p.Timestamp, Time: p.Time.Format(time.RFC3339),
				Datacenter: p.Datacenter, Machine: p.Machine, Slot: p.Slot, Sequence: p.Sequence,
			})
		}
		if g.json {
			if len(out) == 1 {
				return printJSON(e.stdout, out[0])
			}
			return printJSON(e.stdout, out)
		}
		tw := table(e.stdout)
		fmt.Fprintln(tw, "ID\tCODE\tTIMESTAMP\tTIME (UTC)\tDC\tMACHINE\tSLOT\tSEQUENCE")
		for _, d := range out {
			fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%d\t%d\t%d\t%d\n", d.ID, d.Code, d.Timestamp, d.Time, d.Datacenter, d.Machine, d.Slot, d.Sequence)
		}
		return tw.Flush()
	}
}

// parseIDOrCode reads all-digit input as a decimal ID (unless forceBase62),
// anything else as a base62 code.
func parseIDOrCode(s string, forceBase62 bool) (int64, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, errors.New("empty ID")
	}
	if !forceBase62 && strings.Trim(s, "0123456789") == "" {
		id, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%q is not a decimal ID: %v", s, err)
		}
		return id, nil
	}
	id, err := generator.Decode(s)
	if err != nil {
		return 0, fmt.Errorf("%q is neither a decimal ID nor a base62 code: %v", s, err)
	}
	return id, nil
}
