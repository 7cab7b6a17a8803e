// Command idctl is the operator's and script's tool for an idgen cluster:
// membership (members, status, join, leave, remove), IDs (ids, decode, keygen), the
// uniqueness check (verify, history) and fault injection (fault clock).
//
// Global flags, accepted before or after the command:
//
//	--target host:port[,host:port...] | idgen:///seed:port[,...] | dns:///name:port   (env IDGEN_TARGET, default localhost:50051)
//	--timeout D    bound for each call (default 10s)
//	--json         JSON for scripts instead of tables
//	--tls-cert F --tls-key F --tls-ca F   mutual TLS (env IDGEN_TLS_CERT, _KEY, _CA)
//
// Admin commands (members, status, join, leave, remove, fault) go to the first
// address of the target; ids and verify balance over all of them; history
// asks every address and merges the answers.
//
// Exit codes: 0 ok, 1 the operation failed (the message says why and what to
// do), 2 usage error, 3 verify found duplicates or containment violations.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/idgen/idgen/rpc/tlsconf"
)

// Exit codes scripts can rely on.
const (
	exitOK       = 0
	exitFailed   = 1
	exitUsage    = 2
	exitViolated = 3
)

const defaultTarget = "localhost:50051"

// globals are the flags every command takes.
type globals struct {
	target  string
	timeout time.Duration
	json    bool
	tls     tlsconf.Files
	// targetSet: --target or IDGEN_TARGET named the target (decode and
	// layout then ask it for the cluster's layout).
	targetSet bool
}

// env is the process environment a command runs in.
type env struct {
	stdout, stderr io.Writer
	getenv         func(string) string
}

// usageError is a mistake in the command line: exit 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// violationError: verify found duplicates or containment violations: exit 3.
type violationError struct{ msg string }

func (e violationError) Error() string { return e.msg }

// runner runs a command with its positional arguments.
type runner func(ctx context.Context, g globals, args []string, e env) error

// command binds its own flags into fs and returns the function that runs it.
type command struct {
	name, args, help string
	bind             func(fs *flag.FlagSet) runner
}

func noFlags(r runner) func(*flag.FlagSet) runner {
	return func(*flag.FlagSet) runner { return r }
}

func commandList() []command {
	return []command{
		{name: "members", help: "list the cluster's nodes: slot, Raft role, gossip state, granted lead, clock skew, build and protocol versions, and the protocol the cluster runs", bind: noFlags(runMembers)},
		{name: "status", help: "this node's view of itself: slot, readiness, Raft state, window", bind: noFlags(runStatus)},
		{name: "join", args: "ADDR...", help: "ask the node to gossip-join other nodes' --gossip-addr addresses", bind: noFlags(runJoin)},
		{name: "leave", help: "the node releases its slot, leaves Raft and gossip, and exits", bind: noFlags(runLeave)},
		{name: "remove", args: "NODE", help: "force-remove another node (ID or name) and free its slot", bind: noFlags(runRemove)},
		{name: "ids", args: "-n N [--base62] [--batch B] [--code-key-file F [--code-tweak T]]", help: "fetch N IDs through the client library (round robin over every target address); with a key file, codes are encrypted", bind: bindIDs},
		{name: "decode", args: "ID|CODE... [--base62] [--layout SPEC] [--code-key-file F [--code-tweak T]]", help: "take IDs (decimal) or codes (base62) apart, under --layout, the layout of the cluster at --target (or IDGEN_TARGET) when one is named, else the default; all-digit input is decimal unless --base62; with a key file, every argument is an encrypted code", bind: bindDecode},
		{name: "layout", args: "[SPEC] [--unit D] [--epoch E]", help: "what a layout gives before a cluster is founded with it (idgend --layout): IDs a second per slot and per cluster, when the timestamp field ends, the code length now and when it grows; SPEC is ts/dc/m/seq, such as 35/2/1/11 --unit 10ms; without SPEC, the cluster's at --target, else the default", bind: bindLayout},
		{name: "keygen", args: "[--out FILE]", help: "a random 32-byte key, base64, for --code-key-file or --gossip-key", bind: bindKeygen},
		{name: "verify", args: "--duration D --rate R [--batch N[,N...]] [--concurrency C]", help: "load the target and check every acknowledged ID: no duplicates, each inside a window the Raft log granted to the node that served it, no malformed batch (--batch 0 draws the nodes' buffered batches)", bind: bindVerify},
		{name: "history", help: "the slot tenures the Raft log granted, merged from every target address", bind: noFlags(runHistory)},
		{name: "fault", args: "clock --offset D", help: "move the node's clock (only with idgend --enable-fault-injection); --offset 0 resets it", bind: bindFault},
		{name: "tls", args: "ca create --dir DIR | cert create --dir DIR --role server|client|admin --name NAME [--dns NAMES] [--ip IPS] [--days N]", help: "make the cluster's CA and its certificates (standard library crypto; keys are written 0600)", bind: bindTLS},
		{name: "safe-to-stop", args: "NODE [--wait D]", help: "whether stopping NODE (ID or name) now keeps the cluster serving: every other server ready, a quorum of voters left; exit 0 if so, 1 if not (the check between the steps of a rolling upgrade; --wait keeps asking)", bind: bindSafeToStop},
		{name: "version", help: "idctl's build and each target node's (version, VCS revision, Go), from Status", bind: noFlags(runVersion)},
		{name: "health", args: "[--http ADDR] [--ready]", help: "a node's /healthz (or /readyz) over its HTTP admin port, no certificate needed (the image's HEALTHCHECK)", bind: bindHealth},
		{name: "completion", args: "bash|zsh|fish", help: "a shell completion script for idctl's commands and flags", bind: noFlags(runCompletion)},
	}
}

func main() {
	ctx := context.Background()
	os.Exit(run(ctx, os.Args[1:], env{stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv}))
}

func run(ctx context.Context, args []string, e env) int {
	var g globals
	top := flag.NewFlagSet("idctl", flag.ContinueOnError)
	top.SetOutput(e.stderr)
	addGlobals(top, &g, e)
	top.Usage = func() { usage(e.stderr, top) }
	if err := top.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if top.NArg() == 0 {
		usage(e.stderr, top)
		return exitUsage
	}
	name := top.Arg(0)
	var cmd *command
	for _, c := range commandList() {
		if c.name == name {
			cmd = &c
		}
	}
	if cmd == nil {
		fmt.Fprintf(e.stderr, "idctl: unknown command %q\n", name)
		usage(e.stderr, top)
		return exitUsage
	}
	fs := flag.NewFlagSet("idctl "+name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	// The globals again, so they may follow the command too; parsed values
	// from before the command stay unless repeated.
	addGlobalsKeep(fs, &g)
	runCmd := cmd.bind(fs)
	fs.Usage = func() { printCommandHelp(e.stderr, *cmd, fs) }
	rest, err := parseInterleaved(fs, top.Args()[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	g.targetSet = strings.TrimSpace(e.getenv("IDGEN_TARGET")) != ""
	for _, f := range []*flag.FlagSet{top, fs} {
		f.Visit(func(f *flag.Flag) { g.targetSet = g.targetSet || f.Name == "target" })
	}
	if g.timeout <= 0 {
		fmt.Fprintf(e.stderr, "idctl: --timeout %s must be positive\n", g.timeout)
		return exitUsage
	}
	if strings.TrimSpace(g.target) == "" {
		fmt.Fprintln(e.stderr, "idctl: --target is empty; want host:port[,host:port...], idgen:///seed:port[,...] or dns:///name:port")
		return exitUsage
	}
	if err := g.tls.Check(); err != nil {
		fmt.Fprintf(e.stderr, "idctl: %v: give --tls-cert, --tls-key and --tls-ca (or IDGEN_TLS_*) together\n", err)
		return exitUsage
	}
	err = runCmd(ctx, g, rest, e)
	var ue usageError
	var ve violationError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ue):
		fmt.Fprintf(e.stderr, "idctl %s: %v\n", name, err)
		fmt.Fprintf(e.stderr, "Usage: idctl %s %s\n", name, cmd.args)
		return exitUsage
	case errors.As(err, &ve):
		fmt.Fprintf(e.stderr, "idctl %s: %v\n", name, err)
		return exitViolated
	default:
		fmt.Fprintf(e.stderr, "idctl %s: %s\n", name, describe(err))
		return exitFailed
	}
}

func addGlobals(fs *flag.FlagSet, g *globals, e env) {
	target := defaultTarget
	if v := strings.TrimSpace(e.getenv("IDGEN_TARGET")); v != "" {
		target = v
	}
	fs.StringVar(&g.target, "target", target, "host:port[,host:port...], idgen:///seed:port[,...] or dns:///name:port (env IDGEN_TARGET); admin commands use the first address")
	fs.DurationVar(&g.timeout, "timeout", 10*time.Second, "bound for each call")
	fs.BoolVar(&g.json, "json", false, "print JSON instead of tables")
	g.tls = tlsFromEnv(e)
	addTLSFlags(fs, &g.tls)
}

// addGlobalsKeep registers the globals with their current values as defaults.
func addGlobalsKeep(fs *flag.FlagSet, g *globals) {
	fs.StringVar(&g.target, "target", g.target, "host:port[,host:port...], idgen:///seed:port[,...] or dns:///name:port (env IDGEN_TARGET); admin commands use the first address")
	fs.DurationVar(&g.timeout, "timeout", g.timeout, "bound for each call")
	fs.BoolVar(&g.json, "json", g.json, "print JSON instead of tables")
	addTLSFlags(fs, &g.tls)
}

// parseInterleaved parses flags that may come before, between or after the
// positional arguments, and returns the positionals.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		// "--" ends the flags: everything after it is positional.
		if i := len(args) - fs.NArg(); i > 0 && args[i-1] == "--" {
			return append(pos, fs.Args()...), nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

func usage(w io.Writer, top *flag.FlagSet) {
	fmt.Fprintf(w, "Usage: idctl [--target T] [--timeout D] [--json] [--tls-cert F --tls-key F --tls-ca F] COMMAND [ARGS]\n\nCommands:\n")
	for _, c := range commandList() {
		fmt.Fprintf(w, "  %s\n      %s\n", strings.TrimSpace(c.name+" "+c.args), c.help)
	}
	fmt.Fprintf(w, "\nGlobal flags (also accepted after the command):\n")
	top.PrintDefaults()
	fmt.Fprintf(w, "\nExit codes: 0 ok, 1 operation failed, 2 usage error, 3 verify found duplicates or violations.\n")
}
