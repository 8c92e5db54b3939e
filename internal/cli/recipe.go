package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/agentscm/agentscm/internal/delivery"
	"github.com/agentscm/agentscm/internal/recipe"
)

// recipeCommands are the managed recipe commands of change-capture.
func recipeCommands() []*Command {
	return []*Command{
		{Name: "run-recipe", Summary: "run a registered recipe as the verification of a managed Claude Code Bash call", Run: runRunRecipe},
		{Name: "reconcile-recipe", Summary: "resolve recipe attempts a crash left unresolved (never runs the recipe)", Run: runReconcileRecipe},
	}
}

const runRecipeHelp = `Run the registered recipe ID as the single verification action of the
managed Bash call that invoked it. It is meant to be run by Claude Code's
Bash tool with exactly the command the SessionStart guidance gives
('ABS/agentscm change-capture run-recipe --id ID'); there is no argv,
source, Work, generation or result override.

It refuses, running nothing, unless: ID is registered for the checkout;
the working directory is exactly the configured repository root; Claude
Code's child-session marker (CLAUDE_CODE_CHILD_SESSION=1 or CLAUDECODE=1)
and session identity (CLAUDE_CODE_SESSION_ID) are set; the PreToolUse hook
of this exact command durably recorded its managed occurrence; the
session's current authorized target resolves and is the one that
occurrence was captured under; and no unresolved attempt fences the same
Work, checkout and recipe. A private checkout-wide lock serializes recipe
callers of one checkout (a second caller waits).

It durably records the verification start before spawning, runs the
absolute argv directly at the root with null stdin in its own process
group, with the environment cleared and only PATH, HOME, USER, TMPDIR,
LANG, CARGO_HOME, RUSTUP_HOME and CARGO_TARGET_DIR copied when present.
stdout and stderr stay visible; their admitted prefixes (combined at most
max_output_bytes) are retained privately. Exit 0 of the child is passed,
any other exit status failed; the timeout, SIGINT/SIGTERM (the child's
process group is terminated and reaped), the output limit, a spawn or
I/O failure stop the run as incomplete, never passed. The result is
caller_asserted.

Exit status: the child's exit code; 128+N when signal N killed it; 124
timeout; 125 output limit or I/O stop; 127 spawn failure; 130
cancellation; 1 for a refusal or an error; 2 for bad usage.`

func runRunRecipe(ctx context.Context, env *Env, args []string) error {
	fs := newFlags(env, "agentscm change-capture run-recipe", "--id ID", runRecipeHelp)
	id := fs.String("id", "", "registered recipe id")
	if err := parseFlags(env, fs, args, false); err != nil {
		return err
	}
	if *id == "" {
		return usagef("--id is required")
	}
	store, err := configStore(env)
	if err != nil {
		return err
	}
	cwd, err := os.Getwd()
	if err != nil {
		return err
	}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	// A closed stdout (the host went away) is an I/O stop, not a SIGPIPE
	// death that would skip the finish. Notify (not Ignore, which the child
	// would inherit across exec) makes the write return EPIPE.
	pipes := make(chan os.Signal, 1)
	signal.Notify(pipes, syscall.SIGPIPE)
	defer signal.Stop(pipes)
	rc, err := recipe.Run(ctx, recipe.Options{
		Store: store, Hubs: delivery.Opener{ConfigDir: store.Dir}, ID: *id, Cwd: cwd,
		LookupEnv: os.LookupEnv, Stdout: env.Stdout, Stderr: env.Stderr, Now: env.Now,
		Signals: sigs, Failpoint: os.Getenv(recipe.FailpointEnv),
	})
	var ref *recipe.Refusal
	if errors.As(err, &ref) {
		return fmt.Errorf("refused: %s", ref.Msg)
	}
	if rc == nil {
		return err
	}
	code := ""
	if rc.ExitCode != nil {
		code = fmt.Sprintf(", exit %d", *rc.ExitCode)
	} else if rc.Signal != "" {
		code = ", " + rc.Signal
	}
	stop := ""
	if rc.Stop != "" {
		stop = fmt.Sprintf(", stopped: %s (%s)", rc.Stop, rc.StopDetail)
	}
	fmt.Fprintf(env.Stderr, "agentscm: recipe %s: verification %s (result %s%s%s), action %s\n", rc.RecipeID, rc.Verification, rc.Result, code, stop, rc.ActionID)
	if err != nil {
		return &ExitCodeError{Code: ExitError, Err: err}
	}
	if st := rc.ExitStatus(); st != 0 {
		return &ExitCodeError{Code: st}
	}
	return nil
}

const reconcileRecipeHelp = `Recheck the unresolved attempts of recipe ID on the checkout (the working
directory unless --root is given). It never launches the recipe. For each
attempt it first rechecks the session's current Work authorization, then:
- no action start became durable: the reservation is cleared, its unused
  order released, and the managed occurrence can never launch the child;
- a durable (or possibly durable) start on this same boot: it stays
  unresolved, since the child may have spawned before its spawned phase was
  persisted, even when the retained phase still says reserved;
- after a verified reboot of this same host (same machine id, another boot
  id): an incomplete/unknown finish is appended with the original bindings;
- another host, or missing or ambiguous identity: it stays unresolved.
It refuses while another recipe caller holds the checkout lock.`

func runReconcileRecipe(ctx context.Context, env *Env, args []string) error {
	fs := newFlags(env, "agentscm change-capture reconcile-recipe", "--id ID [--root PATH] [--format text|json]", reconcileRecipeHelp)
	id := fs.String("id", "", "recipe id")
	root := fs.String("root", "", rootHelp)
	format := formatFlag(fs)
	if err := parseFlags(env, fs, args, false); err != nil {
		return err
	}
	if *id == "" {
		return usagef("--id is required")
	}
	store, err := configStore(env)
	if err != nil {
		return err
	}
	out, err := recipe.Reconcile(ctx, recipe.ReconcileOptions{Store: store, Hubs: delivery.Opener{ConfigDir: store.Dir}, ID: *id, Root: *root, Now: env.Now})
	var ref *recipe.Refusal
	if errors.As(err, &ref) {
		return fmt.Errorf("refused: %s", ref.Msg)
	}
	if err != nil {
		return err
	}
	if *format == "json" {
		return writeJSON(env.Stdout, out)
	}
	if len(out) == 0 {
		fmt.Fprintf(env.Stdout, "no unresolved attempt of recipe %s\n", *id)
		return nil
	}
	for _, r := range out {
		fmt.Fprintf(env.Stdout, "%s  %s  (Work %s, session %s, phase %s, start %s)\n  %s\n", r.ActionID, r.Outcome, r.WorkID, r.Session, r.Phase, r.Start, r.Reason)
	}
	return nil
}
