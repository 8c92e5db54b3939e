package cli

import (
	"context"
	"flag"
	"io"
	"strings"

	"github.com/agentscm/agentscm/internal/cliflag"
)

// conventionCommands are the top-level commands every command line tool
// here has: shell completion and the one-screen status of a checkout.
func conventionCommands() []*Command {
	return []*Command{
		{Name: "status", Summary: "one screen for this checkout: connection, Hub, capture, spool, Work, changelog, warnings", Run: runCheckoutStatus},
		{Name: "completion", Summary: "print a shell completion script (bash, zsh or fish)", Run: runCompletion},
	}
}

func runCompletion(ctx context.Context, env *Env, args []string) error {
	fs := newFlags(env, "agentscm completion", "bash|zsh|fish",
		`Print the completion script of the whole agentscm command tree (commands
and each command's flags) for a shell. Load it with, for example:
  bash: source <(agentscm completion bash)   (or save it in ~/.local/share/bash-completion/completions/agentscm)
  zsh:  agentscm completion zsh > "${fpath[1]}/_agentscm"
  fish: agentscm completion fish > ~/.config/fish/completions/agentscm.fish`)
	if err := parseFlags(env, fs, args, true); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usagef("want one shell: %s", strings.Join(cliflag.Shells(), ", "))
	}
	script, err := cliflag.Completion(fs.Arg(0), completionTree(ctx, Root()))
	if err != nil {
		return usagef("%v", err)
	}
	_, err = io.WriteString(env.Stdout, script)
	return err
}

// completionTree turns the command tree into completion nodes. A leaf's
// flags are read by running it with --help against a discarded output: every
// leaf defines its flags before parseFlags, which stops at --help.
func completionTree(ctx context.Context, c *Command) *cliflag.Node {
	n := &cliflag.Node{Name: c.Name}
	if c.Run == nil {
		n.Flags = []string{"--help"}
		if c.Name == "agentscm" {
			n.Flags = append(n.Flags, "--version")
		}
		for _, s := range c.Sub {
			n.Sub = append(n.Sub, completionTree(ctx, s))
		}
		return n
	}
	var sets []*flag.FlagSet
	env := &Env{Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: io.Discard,
		Getenv: func(string) string { return "" }, onFlags: func(fs *flag.FlagSet) { sets = append(sets, fs) }}
	if strings.HasPrefix(c.Name, "hook-") || c.Name == "completion" {
		return n // the hooks take no flags; completion's own help needs none
	}
	_ = c.Run(ctx, env, []string{"--help"})
	seen := map[string]bool{"--help": true}
	n.Flags = []string{"--help"}
	for _, fs := range sets {
		for _, f := range cliflag.FlagNames(fs) {
			if !seen[f] {
				seen[f] = true
				n.Flags = append(n.Flags, f)
			}
		}
	}
	return n
}
