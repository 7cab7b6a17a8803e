package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
)

// commandExamples are shown by `idctl COMMAND --help`, one command line each.
func commandExamples(name string) []string {
	return map[string][]string{
		"members":      {"idctl --target 10.0.0.1:50051 members", "idctl members --json | jq '.members[] | select(.slot < 0)'"},
		"status":       {"idctl --target 10.0.0.1:50051 status", "idctl status --json | jq .ready"},
		"join":         {"idctl --target 10.0.0.1:50051 join 10.0.0.2:7946 10.0.0.3:7946"},
		"leave":        {"idctl --target idgen-4.idgen-peers:50051 leave   # before scaling the StatefulSet down"},
		"remove":       {"idctl remove n3   # a node that is gone for good; its slot is freed at once"},
		"ids":          {"idctl ids -n 10", "idctl --target a:50051,b:50051 ids -n 1000 --base62", "idctl ids -n 5 --code-key-file code.key"},
		"decode":       {"idctl decode 1234567890123", "idctl decode --base62 2TX", "idctl decode --code-key-file code.key aZ3kQ9x", "idctl --target 10.0.0.1:50051 decode 95306893862699008", "idctl decode --layout 35/2/1/11 --layout-unit 10ms 95306893862699008"},
		"layout":       {"idctl layout 35/2/1/11 --unit 10ms", "idctl layout 30/2/1/11 --epoch 2026-12-01", "idctl --target 10.0.0.1:50051 layout   # the cluster's"},
		"keygen":       {"idctl keygen --out gossip.key", "idctl keygen --out code.key"},
		"verify":       {"idctl --target a:50051,b:50051,c:50051 verify --duration 30s --rate 2000"},
		"history":      {"idctl --target a:50051,b:50051,c:50051 history"},
		"fault":        {"idctl fault clock --offset 3s   # only with idgend --enable-fault-injection", "idctl fault clock --offset 0"},
		"tls":          {"idctl tls ca create --dir tls", "idctl tls cert create --dir tls --role server --name server --dns idgen,idgen.default.svc", "idctl tls cert create --dir tls --role admin --name admin"},
		"safe-to-stop": {"idctl safe-to-stop n2 && systemctl restart idgend   # on n2's host", "idctl safe-to-stop n2 --wait 2m --json"},
		"version":      {"idctl version", "idctl --target a:50051,b:50051,c:50051 version --json"},
		"health":       {"idctl health", "idctl health --ready --http 10.0.0.1:9090"},
		"completion":   {"source <(idctl completion bash)", "idctl completion zsh > \"${fpath[1]}/_idctl\"", "idctl completion fish > ~/.config/fish/completions/idctl.fish"},
	}[name]
}

// printCommandHelp is `idctl COMMAND --help`.
func printCommandHelp(w io.Writer, c command, fs *flag.FlagSet) {
	fmt.Fprintf(w, "Usage: idctl %s\n\n%s\n", strings.TrimSpace(c.name+" "+c.args), c.help)
	if ex := commandExamples(c.name); len(ex) > 0 {
		fmt.Fprintf(w, "\nExamples:\n")
		for _, e := range ex {
			fmt.Fprintf(w, "  %s\n", e)
		}
	}
	fmt.Fprintf(w, "\nFlags (the global ones may also come before the command):\n")
	fs.PrintDefaults()
}

// completionFlag is one flag a command accepts, for completion scripts.
type completionFlag struct {
	name, usage string
	takesValue  bool
}

// commandFlags lists the flags a command accepts, globals included,
// straight from the FlagSet the command binds, so scripts never drift.
func commandFlags(c command) []completionFlag {
	fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
	var g globals
	addGlobalsKeep(fs, &g)
	c.bind(fs)
	var out []completionFlag
	fs.VisitAll(func(f *flag.Flag) {
		b, ok := f.Value.(interface{ IsBoolFlag() bool })
		out = append(out, completionFlag{name: f.Name, usage: f.Usage, takesValue: !ok || !b.IsBoolFlag()})
	})
	return out
}

// shells that `idctl completion` writes scripts for.
var completionShells = []string{"bash", "zsh", "fish"}

// runCompletion is `idctl completion bash|zsh|fish`.
func runCompletion(_ context.Context, _ globals, args []string, e env) error {
	if len(args) != 1 {
		return usagef("want one shell: %s", strings.Join(completionShells, ", "))
	}
	cmds := commandList()
	switch args[0] {
	case "bash":
		fmt.Fprint(e.stdout, bashCompletion(cmds))
	case "zsh":
		// zsh runs the bash function through bashcompinit, which ships with zsh.
		fmt.Fprintf(e.stdout, "#compdef idctl\nautoload -U +X bashcompinit && bashcompinit\n%s", bashCompletion(cmds))
	case "fish":
		fmt.Fprint(e.stdout, fishCompletion(cmds))
	default:
		return usagef("shell %q: want one of %s", args[0], strings.Join(completionShells, ", "))
	}
	return nil
}

func bashCompletion(cmds []command) string {
	var b strings.Builder
	var names []string
	valueFlags := map[string]bool{}
	for _, c := range cmds {
		names = append(names, c.name)
	}
	b.WriteString("# bash completion for idctl: source <(idctl completion bash)\n_idctl() {\n")
	b.WriteString("  local cur=\"${COMP_WORDS[COMP_CWORD]}\" cmd=\"\" i w\n")
	b.WriteString("  for ((i = 1; i < COMP_CWORD; i++)); do\n    w=\"${COMP_WORDS[i]}\"\n    case \"$w\" in\n")
	for _, c := range cmds {
		for _, f := range commandFlags(c) {
			if f.takesValue {
				valueFlags["-"+f.name] = true
				valueFlags["--"+f.name] = true
			}
		}
	}
	var vf []string
	for f := range valueFlags {
		vf = append(vf, f)
	}
	sort.Strings(vf)
	fmt.Fprintf(&b, "      %s) ((i++)) ;;\n", strings.Join(vf, "|"))
	b.WriteString("      -*) ;;\n      *) cmd=\"$w\"; break ;;\n    esac\n  done\n  case \"$cmd\" in\n")
	globals := commandFlags(command{name: "", bind: noFlags(nil)})
	fmt.Fprintf(&b, "    \"\") COMPREPLY=($(compgen -W %q -- \"$cur\")) ;;\n", strings.Join(names, " ")+" "+dashed(globals))
	for _, c := range cmds {
		words := dashed(commandFlags(c))
		if c.name == "completion" {
			words = strings.Join(completionShells, " ")
		}
		fmt.Fprintf(&b, "    %s) COMPREPLY=($(compgen -W %q -- \"$cur\")) ;;\n", c.name, words)
	}
	b.WriteString("  esac\n}\ncomplete -o default -F _idctl idctl\n")
	return b.String()
}

func dashed(flags []completionFlag) string {
	var out []string
	for _, f := range flags {
		out = append(out, "--"+f.name)
	}
	return strings.Join(out, " ")
}

func fishCompletion(cmds []command) string {
	var b strings.Builder
	b.WriteString("# fish completion for idctl: idctl completion fish > ~/.config/fish/completions/idctl.fish\ncomplete -c idctl -f\n")
	var names []string
	for _, c := range cmds {
		names = append(names, c.name)
		fmt.Fprintf(&b, "complete -c idctl -n __fish_use_subcommand -a %s -d %s\n", c.name, fishQuote(c.help))
	}
	for _, c := range cmds {
		for _, f := range commandFlags(c) {
			r := ""
			if f.takesValue {
				r = " -r"
			}
			fmt.Fprintf(&b, "complete -c idctl -n '__fish_seen_subcommand_from %s' -l %s%s -d %s\n", c.name, f.name, r, fishQuote(f.usage))
		}
	}
	fmt.Fprintf(&b, "complete -c idctl -n '__fish_seen_subcommand_from completion' -a '%s'\n", strings.Join(completionShells, " "))
	return b.String()
}

// fishQuote single-quotes s for fish, where only \ and ' are special.
func fishQuote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}
