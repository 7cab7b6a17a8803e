package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/idgen/idgen/generator"
	idgenv1 "github.com/idgen/idgen/proto/idgen/v1"
)

// layoutSpec reads a layout from its bits (ts/dc/m/seq, or a whole layout
// as idctl status prints it) and, when given, a unit and an epoch.
func layoutSpec(spec, unit, epoch string) (generator.Layout, error) {
	if unit != "" {
		spec += " unit=" + unit
	}
	if epoch != "" {
		spec += " epoch=" + epoch
	}
	l, err := generator.ParseSpec(spec)
	if err != nil {
		return l, usagef("%v", strings.TrimPrefix(err.Error(), generator.ErrInvalidLayout.Error()+": "))
	}
	return l, nil
}

// clusterLayout asks the admin target for its cluster's layout (Status).
func clusterLayout(ctx context.Context, g globals) (generator.Layout, error) {
	st, err := callAdmin(ctx, g, func(ctx context.Context, c idgenv1.ClusterServiceClient) (*idgenv1.StatusResponse, error) {
		return c.Status(ctx, &idgenv1.StatusRequest{})
	})
	if err != nil {
		return generator.Layout{}, fmt.Errorf("cannot learn the cluster's layout from %s: %s; give --layout to work without a cluster",
			adminTarget(g.target), describe(err))
	}
	if st.GetLayout() == "" {
		return generator.Layout{}, fmt.Errorf("%s knows no cluster layout yet (it has not seen its cluster's first log entry); ask another node, or give --layout",
			adminTarget(g.target))
	}
	l, err := generator.ParseLayout(st.GetLayout())
	if err != nil {
		return generator.Layout{}, fmt.Errorf("%s reports layout %q: %v", adminTarget(g.target), st.GetLayout(), err)
	}
	return l, nil
}

// decodeLayout is the layout decode works under: --layout (with
// --layout-unit and --layout-epoch), else the cluster's when a target is
// named, else the default layout.
type decodeLayout struct{ bits, unit, epoch *string }

func addDecodeLayoutFlags(fs *flag.FlagSet) decodeLayout {
	return decodeLayout{
		bits:  fs.String("layout", "", "decode under this layout (ts/dc/m/seq, such as 35/2/1/11, or as idctl status prints it) instead of asking the cluster at --target"),
		unit:  fs.String("layout-unit", "", "with --layout: its unit (default 1s)"),
		epoch: fs.String("layout-epoch", "", "with --layout: its epoch, a date, RFC 3339 time or Unix seconds (default 2026-05-05)"),
	}
}

func (d decodeLayout) resolve(ctx context.Context, g globals) (generator.Layout, error) {
	if *d.bits == "" {
		if *d.unit != "" || *d.epoch != "" {
			return generator.Layout{}, usagef("--layout-unit and --layout-epoch need --layout")
		}
		if g.targetSet {
			return clusterLayout(ctx, g)
		}
		return generator.DefaultLayout(), nil
	}
	return layoutSpec(*d.bits, *d.unit, *d.epoch)
}

// layoutJSON is what `idctl layout --json` prints.
type layoutJSON struct {
	Layout            string      `json:"layout"`
	IdgendFlags       string      `json:"idgend_flags"`
	Epoch             string      `json:"epoch"`
	Slots             int         `json:"slots"`
	IDsPerSecondSlot  float64     `json:"ids_per_second_per_slot"`
	IDsPerSecondTotal float64     `json:"ids_per_second_per_cluster"`
	Ends              string      `json:"timestamp_field_ends"`
	YearsInAll        float64     `json:"years_in_all"`
	YearsLeft         float64     `json:"years_left"`
	Bits              int         `json:"bits"`
	MaxID             int64       `json:"max_id"`
	MaxCodeLen        int         `json:"max_code_length"`
	CodeLenNow        int         `json:"code_length_now"`
	CodeGrowth        *codeGrowth `json:"code_growth"`
	// Refused is why idgend --layout refuses the layout for a new cluster
	// ("" when it accepts it); only for a proposed layout.
	Refused *string `json:"refused_for_a_new_cluster,omitempty"`
}

type codeGrowth struct {
	At     string `json:"at"`
	Length int    `json:"length"`
}

const year = 365.25 * 24 * float64(time.Hour)

func bindLayout(fs *flag.FlagSet) runner {
	unit := fs.String("unit", "", "the unit the timestamp counts, 1ms..1s (default 1s)")
	epoch := fs.String("epoch", "", "the timestamp's zero: a date (2026-05-05), RFC 3339 time or Unix seconds (default 2026-05-05)")
	return func(ctx context.Context, g globals, args []string, e env) error {
		now := time.Now()
		var l generator.Layout
		var err error
		proposed := len(args) > 0
		switch {
		case proposed:
			l, err = layoutSpec(strings.Join(args, " "), *unit, *epoch)
		case *unit != "" || *epoch != "":
			return usagef("--unit and --epoch go with a SPEC, such as idctl layout 35/2/1/11 --unit 10ms")
		case g.targetSet:
			l, err = clusterLayout(ctx, g)
		default:
			l = generator.DefaultLayout()
		}
		if err != nil {
			return err
		}
		out := describeLayout(l, now)
		var refused error
		if proposed {
			refused = l.CheckNew(now)
			msg := ""
			if refused != nil {
				msg = strings.TrimPrefix(refused.Error(), generator.ErrInvalidLayout.Error()+": ")
			}
			out.Refused = &msg
		}
		if g.json {
			if err := printJSON(e.stdout, out); err != nil {
				return err
			}
		} else if err := printLayout(e, l, out, now); err != nil {
			return err
		}
		if refused != nil {
			return fmt.Errorf("idgend --layout refuses it for a new cluster")
		}
		return nil
	}
}

func describeLayout(l generator.Layout, now time.Time) layoutJSON {
	out := layoutJSON{
		Layout:            l.String(),
		IdgendFlags:       idgendFlags(l),
		Epoch:             l.EpochTime().Format(time.RFC3339),
		Slots:             l.Slots(),
		IDsPerSecondSlot:  l.IDsPerSecond(),
		IDsPerSecondTotal: l.IDsPerSecond() * float64(l.Slots()),
		Ends:              l.ExhaustedAt().Format(time.RFC3339),
		YearsInAll:        float64(l.ExhaustedAt().Sub(l.EpochTime())) / year,
		YearsLeft:         float64(l.ExhaustedAt().Sub(now)) / year,
		Bits:              int(l.TimestampBits + l.DatacenterBits + l.MachineBits + l.SequenceBits),
		MaxID:             l.MaxID(),
		MaxCodeLen:        generator.CodeLen(l.MaxID()),
		CodeLenNow:        l.CodeLenAt(now),
	}
	if at, n, ok := l.CodeGrowth(now); ok {
		out.CodeGrowth = &codeGrowth{At: at.Format(time.RFC3339), Length: n}
	}
	return out
}

func printLayout(e env, l generator.Layout, d layoutJSON, now time.Time) error {
	grows := fmt.Sprintf("never: every ID has %d characters until the layout ends", d.CodeLenNow)
	if d.CodeGrowth != nil {
		grows = fmt.Sprintf("to %d characters from %s", d.CodeGrowth.Length, d.CodeGrowth.At[:10])
	}
	left := fmt.Sprintf("%.1f years from now, %.1f in all", d.YearsLeft, d.YearsInAll)
	if d.YearsLeft < 0 {
		left = fmt.Sprintf("%.1f years ago, after %.1f", -d.YearsLeft, d.YearsInAll)
	}
	tw := table(e.stdout)
	rows := [][2]string{
		{"layout", d.Layout},
		{"idgend flags", d.IdgendFlags},
		{"epoch", d.Epoch},
		{"IDs a second", fmt.Sprintf("%s per slot, %s for the cluster's %d slots", thousands(d.IDsPerSecondSlot), thousands(d.IDsPerSecondTotal), d.Slots)},
		{"timestamp field ends", fmt.Sprintf("%s (%s)", d.Ends, left)},
		{"largest ID", fmt.Sprintf("%d (%d bits, %d base62 characters)", d.MaxID, d.Bits, d.MaxCodeLen)},
		{"codes now", fmt.Sprintf("%d characters (%s)", d.CodeLenNow, now.UTC().Format("2006-01-02"))},
		{"codes grow", grows},
	}
	if d.Refused != nil {
		verdict := "accepted by idgend --layout"
		if *d.Refused != "" {
			verdict = "refused by idgend --layout: " + *d.Refused
		}
		rows = append(rows, [2]string{"for a new cluster", verdict})
	}
	for _, kv := range rows {
		fmt.Fprintf(tw, "%s:\t%s\n", kv[0], kv[1])
	}
	return tw.Flush()
}

// idgendFlags are the idgend flags that found a cluster with l.
func idgendFlags(l generator.Layout) string {
	return fmt.Sprintf("--layout %d/%d/%d/%d --layout-unit %s --layout-epoch %s", l.TimestampBits, l.DatacenterBits, l.MachineBits, l.SequenceBits,
		l.Unit, l.EpochTime().Format(time.RFC3339))
}

// thousands writes a whole number with commas: 1,638,400.
func thousands(f float64) string {
	s := strconv.FormatFloat(f, 'f', 0, 64)
	if f != float64(int64(f)) {
		s = strconv.FormatFloat(f, 'f', 1, 64)
	}
	whole, frac, _ := strings.Cut(s, ".")
	var b strings.Builder
	for i, c := range whole {
		if i > 0 && (len(whole)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if frac != "" {
		b.WriteString("." + frac)
	}
	return b.String()
}
