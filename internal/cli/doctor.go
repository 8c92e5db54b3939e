package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentscm/agentscm/internal/agent/adapter"
	"github.com/agentscm/agentscm/internal/agent/claude"
	"github.com/agentscm/agentscm/internal/agent/codex"
	"github.com/agentscm/agentscm/internal/agent/gemini"
	"github.com/agentscm/agentscm/internal/agent/hookfile"
	"github.com/agentscm/agentscm/internal/binding"
	"github.com/agentscm/agentscm/internal/buildinfo"
	"github.com/agentscm/agentscm/internal/capture"
	"github.com/agentscm/agentscm/internal/changelog"
	"github.com/agentscm/agentscm/internal/client"
	"github.com/agentscm/agentscm/internal/connections"
	"github.com/agentscm/agentscm/internal/hub/api"
)

// Doctor check names, in the order they run.
const (
	dcConnection   = "connection"
	checkHub       = "hub"
	checkWork      = "work"
	checkCapture   = "capture"
	checkHooks     = "hooks"
	checkTrust     = "trust"
	checkBinaries  = "binaries"
	checkSpool     = "spool"
	checkDeliverer = "deliverer"
	checkChangelog = "changelog"
	checkWatcher   = "watcher"
)

// doctorCheck is one finding of agentscm doctor.
type doctorCheck struct {
	Checkout string `json:"checkout"`
	Agent    string `json:"agent,omitempty"`
	Check    string `json:"check"`
	// Status is ok, note (worth knowing, nothing wrong) or problem.
	Status string `json:"status"`
	Detail string `json:"detail"`
	// Fix is the command (or step) that fixes a problem.
	Fix string `json:"fix,omitempty"`
}

const (
	statusOK      = "ok"
	statusNote    = "note"
	statusProblem = "problem"
)

// doctorReport is agentscm doctor's --format json.
type doctorReport struct {
	Build    string        `json:"build"`
	Healthy  bool          `json:"healthy"`
	Problems int           `json:"problems"`
	Checks   []doctorCheck `json:"checks"`
}

// doctorHubTimeout bounds each Hub question of doctor.
const doctorHubTimeout = 3 * time.Second

// versionTimeout bounds one hook binary's --version run.
const versionTimeout = 5 * time.Second

func runDoctor(ctx context.Context, env *Env, args []string) error {
	fs := newFlags(env, "agentscm doctor", "[--root PATH | --all] [--format text|json]",
		`Check that agentscm works for the checkout holding the working directory,
for the agent whose hooks it installed: the client connection and whether
the Hub answers (at most 3 s), a current Work, capture on, the hooks
installed in the file the agent reads and, for Codex CLI, the project
trusted in $CODEX_HOME/config.toml (Codex skips an untrusted project's hooks
without a word), every binary the hooks name present and of this agentscm's
build (their --version), the spool healthy (the same checks inspect and
status run) and within its limits, the deliverer running or nothing
waiting for it, the changelog's hooks and whether its filesystem watcher
vouches for the next capture. With --all, every checkout with a capture
binding (a checkout that no longer exists is named as such). Each problem
is printed with the command that fixes it; it exits 1 when there is one.
Read-only.`)
	root := fs.String("root", "", rootHelp)
	all := fs.Bool("all", false, "check every checkout with a capture binding")
	format := formatFlag(fs)
	if err := parseFlags(env, fs, args, false); err != nil {
		return err
	}
	roots, err := doctorRoots(env, *root, *all)
	if err != nil {
		return err
	}
	rep := doctorReport{Build: buildinfo.BuildOf(buildinfo.Version("agentscm")), Checks: []doctorCheck{}}
	for _, r := range roots {
		if _, err := os.Stat(r); err != nil {
			rep.Checks = append(rep.Checks, doctorCheck{Checkout: r, Check: checkCapture, Status: statusProblem,
				Detail: "the checkout is gone: " + err.Error(), Fix: "agentscm change-capture unconfigure --root " + r + ", then change-capture forget --root " + r})
			continue
		}
		rep.Checks = append(rep.Checks, doctorCheckout(ctx, env, r)...)
	}
	for _, c := range rep.Checks {
		if c.Status == statusProblem {
			rep.Problems++
		}
	}
	rep.Healthy = rep.Problems == 0
	if *format == "json" {
		if err := writeJSON(env.Stdout, rep); err != nil {
			return err
		}
	} else {
		printDoctor(env.Stdout, &rep)
	}
	if !rep.Healthy {
		return &ExitCodeError{Code: ExitError}
	}
	return nil
}

// doctorRoots are the checkouts doctor checks: every bound one with all,
// else the one at root (parseFlags defaults it to the enclosing checkout
// unless --all is given).
func doctorRoots(env *Env, root string, all bool) ([]string, error) {
	if !all {
		canon, err := binding.CanonicalRoot(root)
		if err != nil {
			return nil, err
		}
		return []string{canon}, nil
	}
	if root != "" {
		return nil, usagef("--root and --all exclude each other")
	}
	store, err := configStore(env)
	if err != nil {
		return nil, err
	}
	cfg, err := store.Bindings().Load()
	if err != nil {
		return nil, err
	}
	var roots []string
	for _, b := range cfg.Bindings {
		roots = append(roots, b.Root)
	}
	if len(roots) == 0 {
		return nil, errors.New("no checkout has a capture binding: run agentscm enable inside one")
	}
	return roots, nil
}

func printDoctor(w io.Writer, rep *doctorReport) {
	last := ""
	for _, c := range rep.Checks {
		if c.Checkout != last {
			fmt.Fprintf(w, "%s\n", c.Checkout)
			last = c.Checkout
		}
		mark := map[string]string{statusOK: "ok     ", statusNote: "note   ", statusProblem: "PROBLEM"}[c.Status]
		fmt.Fprintf(w, "  %s %-10s %s\n", mark, c.Check, c.Detail)
		if c.Fix != "" {
			fmt.Fprintf(w, "          %-10s fix: %s\n", "", c.Fix)
		}
	}
	if rep.Healthy {
		fmt.Fprintln(w, "no problems found")
	} else {
		fmt.Fprintf(w, "%d problem(s) found\n", rep.Problems)
	}
}

// doctorCheckout runs every check of one checkout.
func doctorCheckout(ctx context.Context, env *Env, root string) []doctorCheck {
	var out []doctorCheck
	add := func(agent, check, status, detail, fix string) {
		out = append(out, doctorCheck{Checkout: root, Agent: agent, Check: check, Status: status, Detail: detail, Fix: fix})
	}
	store, conns, err := captureDeps(env)
	if err != nil {
		add("", checkCapture, statusProblem, err.Error(), "set HOME or XDG_CONFIG_HOME")
		return out
	}
	c, err := connections.Lookup(store.Dir, root)
	connected := err == nil
	switch {
	case errors.Is(err, connections.ErrNoConnection):
		add("", dcConnection, statusProblem, "no client connection: nothing reaches a Hub", "agentscm enable")
	case err != nil:
		add("", dcConnection, statusProblem, "client connections unreadable: "+err.Error(), "agentscm client status")
	default:
		add("", dcConnection, statusOK, fmt.Sprintf("repository %s on %s", c.Repository, c.Hub), "")
	}
	if connected {
		hctx, cancel := context.WithTimeout(ctx, doctorHubTimeout)
		hc := checkConnection(hctx, env, c)
		if hc.Valid {
			add("", checkHub, statusOK, fmt.Sprintf("answers (%s, %s)", hc.Human, hc.Scope), "")
			out = append(out, doctorWork(hctx, root, c))
		} else {
			add("", checkHub, statusProblem, fmt.Sprintf("the Hub %s does not answer: %s (capture goes on; facts wait in the spool)", c.Hub, hc.Error), hubFix(c))
		}
		cancel()
	}

	cfg, err := store.Bindings().Load()
	if err != nil {
		add("", checkCapture, statusProblem, "capture config unreadable: "+err.Error(), "agentscm change-capture status")
		return out
	}
	b := cfg.Find(root)
	set, _ := binding.CaptureSetting(store, conns, root)
	switch {
	case b == nil:
		add("", checkCapture, statusProblem, "capture is not set up for this checkout", "agentscm enable")
	case !b.Enabled:
		add("", checkCapture, statusProblem, "capture is off (disabled; the spool is kept)", "agentscm enable")
	default:
		detail := "on (" + b.CaptureMode + ")"
		status, fix := statusOK, ""
		if set != nil && set.LineageMismatch {
			status, fix = statusProblem, "agentscm change-capture status (the binding was saved for another repository or Hub)"
			detail += fmt.Sprintf("; saved for %s on %s but connected to %s on %s", set.Repository, set.Hub, set.ConnectedRepository, set.ConnectedHub)
		}
		add("", checkCapture, status, detail, fix)
	}

	clDir := changelog.DirFor(store.Dir, root)
	_, clErr := changelog.LoadRoots(clDir)
	changelogOn := clErr == nil

	// Every agent with agentscm hooks in the file it reads, the capture
	// binding's first: its capture and changelog hooks, trust, binaries.
	primary, err := adapter.For(primaryAgent(root, b))
	if err != nil {
		add(bindingAgent(b), checkHooks, statusProblem, err.Error(), "agentscm enable")
		return out
	}
	ad := primary
	for _, a := range hookAgents(root, primary, b) {
		settings := filepath.Join(root, filepath.FromSlash(a.HookFile()))
		captureOn := false
		if b != nil && b.Enabled {
			if h, ok := b.HookOf(a.Name()); ok {
				captureOn, settings = true, h.Path(root)
			}
		}
		// Every captured agent needs the changelog's hooks too (agentscm
		// enable installs them for each).
		changelogHere := changelogOn && (captureOn || a.Name() == primary.Name() || hasMarked(settings, a.ChangelogSubcommand()))
		if !captureOn && !changelogHere {
			continue
		}
		out = append(out, doctorHooks(root, a, settings, captureOn, changelogHere)...)
		switch a.Name() {
		case codex.AgentName:
			out = append(out, doctorCodexTrust(env, root))
		case gemini.AgentName:
			add(a.Name(), checkTrust, statusNote, "not checked: "+gemini.TrustNote(root), "")
		}
		out = append(out, doctorBinaries(ctx, root, a.Name(), settings)...)
	}
	if b != nil {
		out = append(out, doctorSpool(root, ad.Name(), store, b)...)
	}
	switch {
	case changelogOn:
		add(ad.Name(), checkChangelog, statusOK, "on ("+clDir+")", "")
		out = append(out, doctorWatcher(ctx, env, root, ad.Name()))
	case clErr != nil && !errors.Is(clErr, os.ErrNotExist):
		add(ad.Name(), checkChangelog, statusProblem, "changelog unreadable: "+clErr.Error(), "agentscm changelog status")
	default:
		add(ad.Name(), checkChangelog, statusProblem, "the changelog is off: rewind has nothing to go back to", "agentscm enable")
	}
	return out
}

// bindingAgent is the first agent of a capture binding ("" without one:
// Claude Code).
func bindingAgent(b *binding.Binding) string {
	if b == nil {
		return ""
	}
	return b.Hooks()[0].Agent
}

// primaryAgent is the capture binding's first agent, else the first agent whose
// hook file in root holds marked agentscm hooks, else Claude Code.
func primaryAgent(root string, b *binding.Binding) string {
	if b != nil {
		return b.Hooks()[0].Agent
	}
	for _, name := range []string{claude.AgentName, codex.AgentName, gemini.AgentName} {
		if a, err := adapter.For(name); err == nil {
			file := filepath.Join(root, filepath.FromSlash(a.HookFile()))
			if hasMarked(file, a.CaptureSubcommand()) || hasMarked(file, a.ChangelogSubcommand()) {
				return name
			}
		}
	}
	return claude.AgentName
}

// hookAgents is primary, then every other agent of the capture binding b
// (nil: none) and every other agent whose hook file in root holds marked
// agentscm hooks of its own, in the order of the agent table.
func hookAgents(root string, primary adapter.Adapter, b *binding.Binding) []adapter.Adapter {
	out := []adapter.Adapter{primary}
	for _, a := range adapter.All() {
		if a.Name() == primary.Name() {
			continue
		}
		bound := false
		if b != nil {
			_, bound = b.HookOf(a.Name())
		}
		file := filepath.Join(root, filepath.FromSlash(a.HookFile()))
		if bound || hasMarked(file, a.CaptureSubcommand()) || hasMarked(file, a.ChangelogSubcommand()) {
			out = append(out, a)
		}
	}
	return out
}

// hasMarked reports whether the file holds a marked hook of subcommand.
func hasMarked(file, subcommand string) bool {
	evs, err := hookfile.MarkedEventsFor(file, subcommand)
	return err == nil && len(evs) > 0
}

// hubFix is what to do about a Hub that does not answer.
func hubFix(c connections.Connection) string {
	if c.Hub == connections.LocalHub {
		return "agentscm client status --check (the embedded Hub's files may be unreadable)"
	}
	return fmt.Sprintf("start the Hub at %s (agentscm hub serve), or connect elsewhere: agentscm client setup --hub URL --repository %s --token-file PATH", c.Hub, c.Repository)
}

func doctorWork(ctx context.Context, root string, c connections.Connection) doctorCheck {
	d := doctorCheck{Checkout: root, Check: checkWork}
	conn, err := client.Open(ctx, c, client.Options{})
	if err != nil {
		d.Status, d.Detail, d.Fix = statusProblem, "current Work unknown: "+err.Error(), "agentscm status"
		return d
	}
	defer conn.Close()
	cur, err := conn.CurrentWork(ctx, c.WorktreeID)
	switch e, ok := api.AsError(err); {
	case err == nil:
		d.Status, d.Detail = statusOK, "current: "+orUntitled(cur.Work.Title)
	case ok && e.Code == api.CodeNotFound:
		d.Status, d.Detail, d.Fix = statusProblem, "no current Work: captured facts stay local", "agentscm work start --title TEXT (or agentscm enable)"
	default:
		d.Status, d.Detail, d.Fix = statusProblem, "current Work unknown: "+err.Error(), "agentscm status"
	}
	return d
}

// doctorHooks checks that the settings file the agent reads holds the
// marked hooks of every event capture and the changelog need.
func doctorHooks(root string, ad adapter.Adapter, settings string, captureOn, changelogOn bool) []doctorCheck {
	rel := relTo(root, settings)
	type part struct {
		name, sub string
		events    []string
	}
	var parts []part
	if captureOn {
		parts = append(parts, part{"capture", ad.CaptureSubcommand(), ad.CaptureEvents()})
	}
	if changelogOn {
		events := ad.ChangelogEvents()
		if ad.Name() == claude.AgentName {
			events = changelog.HookEvents
		}
		parts = append(parts, part{"changelog", ad.ChangelogSubcommand(), events})
	}
	var out []doctorCheck
	for _, p := range parts {
		d := doctorCheck{Checkout: root, Agent: ad.Name(), Check: checkHooks}
		have, err := hookfile.MarkedEventsFor(settings, p.sub)
		if err != nil {
			d.Status, d.Detail, d.Fix = statusProblem, fmt.Sprintf("%s hooks: %s is unreadable: %v", p.name, rel, err), "fix or remove "+settings+", then agentscm enable"
			out = append(out, d)
			continue
		}
		var missing []string
		for _, ev := range p.events {
			if !slices.Contains(have, ev) {
				missing = append(missing, ev)
			}
		}
		switch {
		case len(missing) == 0:
			d.Status, d.Detail = statusOK, fmt.Sprintf("%s hooks in %s (%d events)", p.name, rel, len(p.events))
		case len(missing) == len(p.events):
			d.Status, d.Detail, d.Fix = statusProblem, fmt.Sprintf("no %s hooks in %s, where %s reads them: nothing is %s", p.name, rel, agentTitle(ad.Name()), capturedWord(p.name)), "agentscm enable"
		default:
			d.Status, d.Detail, d.Fix = statusProblem, fmt.Sprintf("%s hooks missing in %s for %s", p.name, rel, strings.Join(missing, ", ")), "agentscm enable"
		}
		out = append(out, d)
	}
	return out
}

func capturedWord(part string) string {
	if part == "changelog" {
		return "recorded for rewind"
	}
	return "captured"
}

// doctorCodexTrust checks that Codex CLI trusts the project: it skips the
// hooks of an untrusted project's .codex/hooks.json without a word.
func doctorCodexTrust(env *Env, root string) doctorCheck {
	d := doctorCheck{Checkout: root, Agent: codex.AgentName, Check: checkTrust}
	home, err := codexHome(env)
	if err != nil {
		d.Status, d.Detail, d.Fix = statusProblem, "cannot find Codex's config: "+err.Error(), "set CODEX_HOME or HOME"
		return d
	}
	cfg := filepath.Join(home, "config.toml")
	fix := fmt.Sprintf("add to %s: [projects.%q] trust_level = \"trusted\" (then review the hooks in Codex with /hooks)", cfg, root)
	trusted, err := codexTrusted(cfg, root)
	switch {
	case err != nil && !errors.Is(err, os.ErrNotExist):
		d.Status, d.Detail, d.Fix = statusProblem, "Codex's config is unreadable: "+err.Error(), fix
	case trusted:
		d.Status, d.Detail = statusOK, "Codex trusts the project ("+cfg+")"
	default:
		d.Status, d.Detail, d.Fix = statusProblem, "Codex does not trust the project: it skips the hooks in .codex/hooks.json without a word", fix
	}
	return d
}

// codexTrusted reports whether the Codex config.toml at path marks the
// project root trusted: a [projects."ROOT"] table (or a dotted key
// projects."ROOT".trust_level) with trust_level = "trusted". It reads the
// TOML forms Codex writes, not every form TOML allows.
func codexTrusted(path, root string) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	in := false
	sc := bufio.NewScanner(io.LimitReader(f, 4<<20))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if m := tomlProjectTable.FindStringSubmatch(line); m != nil {
			in = tomlKey(m[1]) == root
			continue
		}
		if strings.HasPrefix(line, "[") {
			in = false
			continue
		}
		if m := tomlTrustLine.FindStringSubmatch(line); m != nil {
			if m[1] == "" && in || m[1] != "" && tomlKey(m[1]) == root {
				return true, nil
			}
		}
	}
	return false, sc.Err()
}

var (
	// tomlProjectTable is a [projects."KEY"] header; tomlTrustLine is
	// trust_level = "trusted", bare or dotted as projects."KEY".trust_level.
	tomlProjectTable = regexp.MustCompile(`^\[\s*projects\s*\.\s*("(?:[^"\\]|\\.)*"|'[^']*')\s*\]\s*(?:#.*)?$`)
	tomlTrustLine    = regexp.MustCompile(`^(?:projects\s*\.\s*("(?:[^"\\]|\\.)*"|'[^']*')\s*\.\s*)?trust_level\s*=\s*(?:"trusted"|'trusted')\s*(?:#.*)?$`)
)

// tomlKey is a quoted TOML key's value ("" when it is malformed).
func tomlKey(q string) string {
	if strings.HasPrefix(q, "'") {
		return strings.Trim(q, "'")
	}
	s, err := strconv.Unquote(q)
	if err != nil {
		return ""
	}
	return s
}

// hookBinaryCheck is what doctor and status know of one binary a hook
// command names.
type hookBinaryCheck struct {
	Path    string `json:"path"`
	Build   string `json:"build,omitempty"`
	Problem string `json:"problem,omitempty"`
}

// checkHookBinaries runs --version of every binary the marked hooks of
// the settings file name, and of the siblings those run, and compares
// each build with this agentscm's.
func checkHookBinaries(ctx context.Context, settings string) ([]hookBinaryCheck, error) {
	hooks, err := hookfile.MarkedHooks(settings)
	if err != nil {
		return nil, err
	}
	// The intake binary hands events and the deliverer to agentscm-hook
	// beside it, and agentscm-hook starts the changelog's watch server
	// from the agentscm beside it: those run too.
	exes := hookfile.HookExecutables(hooks)
	for i := 0; i < len(exes); i++ {
		sibling := ""
		switch filepath.Base(exes[i]) {
		case hookfile.IntakeBinary:
			sibling = filepath.Join(filepath.Dir(exes[i]), hookfile.HookBinary)
		case hookfile.HookBinary:
			sibling = filepath.Join(filepath.Dir(exes[i]), "agentscm")
		}
		if sibling != "" && !slices.Contains(exes, sibling) {
			exes = append(exes, sibling)
		}
	}
	want := buildinfo.BuildOf(buildinfo.Version("agentscm"))
	var out []hookBinaryCheck
	for _, e := range exes {
		out = append(out, checkHookBinary(ctx, e, want))
	}
	return out, nil
}

func checkHookBinary(ctx context.Context, path, want string) hookBinaryCheck {
	c := hookBinaryCheck{Path: path}
	fi, err := os.Stat(path)
	switch {
	case err != nil:
		c.Problem = "missing: " + err.Error()
		return c
	case !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0:
		c.Problem = "not an executable file"
		return c
	}
	vctx, cancel := context.WithTimeout(ctx, versionTimeout)
	defer cancel()
	b, err := exec.CommandContext(vctx, path, "--version").Output()
	if err != nil {
		c.Problem = "its --version failed: " + err.Error() + " (an agentscm binary from before --version, or not an agentscm binary)"
		return c
	}
	c.Build = buildinfo.BuildOf(string(b))
	if c.Build != want {
		c.Problem = fmt.Sprintf("another build: %s, while this agentscm is %s", c.Build, want)
	}
	return c
}

// hookBinaryFix is the command that fixes a hook binary problem.
func hookBinaryFix(path string) string {
	dir := filepath.Dir(path)
	if filepath.Base(dir) == "bin" {
		return fmt.Sprintf("install every binary from one build: scripts/install.sh --prefix %s (in the agentscm checkout), then agentscm enable", filepath.Dir(dir))
	}
	return fmt.Sprintf("build every binary from one checkout into %s: go build -o %s/ ./cmd/... (in the agentscm checkout), then agentscm enable", dir, dir)
}

func doctorBinaries(ctx context.Context, root, agent, settings string) []doctorCheck {
	checks, err := checkHookBinaries(ctx, settings)
	if err != nil {
		return []doctorCheck{{Checkout: root, Agent: agent, Check: checkBinaries, Status: statusProblem,
			Detail: "the hooks' file is unreadable: " + err.Error(), Fix: "agentscm enable"}}
	}
	var out []doctorCheck
	for _, c := range checks {
		d := doctorCheck{Checkout: root, Agent: agent, Check: checkBinaries, Status: statusOK, Detail: c.Path + " (this build)"}
		if c.Problem != "" {
			d.Status, d.Detail, d.Fix = statusProblem, c.Path+": "+c.Problem, hookBinaryFix(c.Path)
		}
		out = append(out, d)
	}
	return out
}

// spoolFinding is one thing wrong with a spool, with its fix.
type spoolFinding struct{ Problem, Fix string }

// spoolFindings are the problems status and doctor report of a binding's
// spool summary: the delivery path's failing check (as inspect names it),
// usage past 80% of a limit, capture paused, and the summary's problems.
func spoolFindings(b *binding.Binding, sum *capture.SpoolSummary) []spoolFinding {
	var out []spoolFinding
	if f := sum.Health.Failing; f != nil {
		out = append(out, spoolFinding{"delivery stops at the " + f.Name + " check: " + f.Problem, f.Fix})
	}
	if sum.Fraction.Records >= 0.8 || sum.Fraction.Bytes >= 0.8 {
		out = append(out, spoolFinding{"the spool is past 80% of a limit",
			fmt.Sprintf("agentscm change-capture compact --spool %s, or raise it with change-capture enable --max-records N --max-bytes N", b.Spool)})
	}
	if sum.Paused {
		out = append(out, spoolFinding{"capture is paused: the spool is full", "agentscm change-capture compact --spool " + b.Spool})
	}
	for _, p := range sum.Problems {
		out = append(out, spoolFinding{"spool: " + p, "agentscm change-capture inspect --spool " + b.Spool})
	}
	return out
}

func doctorSpool(root, agent string, store capture.StateDir, b *binding.Binding) []doctorCheck {
	sum, err := store.SummarizeSpool(b)
	if err != nil {
		return []doctorCheck{{Checkout: root, Agent: agent, Check: checkSpool, Status: statusProblem,
			Detail: "spool unreadable: " + err.Error(), Fix: "agentscm change-capture inspect --spool " + b.Spool}}
	}
	var out []doctorCheck
	for _, f := range spoolFindings(b, sum) {
		out = append(out, doctorCheck{Checkout: root, Agent: agent, Check: checkSpool, Status: statusProblem, Detail: f.Problem, Fix: f.Fix})
	}
	if len(out) == 0 {
		out = append(out, doctorCheck{Checkout: root, Agent: agent, Check: checkSpool, Status: statusOK,
			Detail: fmt.Sprintf("healthy; %.0f%% of its records, %.0f%% of its bytes", sum.Fraction.Records*100, sum.Fraction.Bytes*100)})
	}
	return append(out, doctorDeliverer(root, agent, store, b.Spool, sum))
}

// doctorDeliverer checks that the deliverer runs or nothing waits for it.
func doctorDeliverer(root, agent string, store capture.StateDir, spoolDir string, sum *capture.SpoolSummary) doctorCheck {
	d := doctorCheck{Checkout: root, Agent: agent, Check: checkDeliverer}
	waiting := max(sum.Unacknowledged-sum.Deferred.Total, 0)
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	running := store.WaitDeliverer(ctx, spoolDir) != nil
	cancel()
	last, err := store.DeliverStatus(spoolDir)
	fix := "agentscm change-capture deliver --spool " + spoolDir
	switch {
	case running:
		d.Status, d.Detail = statusOK, "a deliverer is running"
	case err != nil:
		d.Status, d.Detail, d.Fix = statusProblem, "the last deliverer run's report is unreadable: "+err.Error(), fix
	case waiting == 0:
		d.Status, d.Detail = statusOK, "nothing waits for delivery"
	case last != nil && (last.Outcome == "failed" || last.Outcome == "error" || last.Resume):
		detail := last.Outcome
		if last.Detail != "" {
			detail += ": " + last.Detail
		}
		d.Status, d.Detail, d.Fix = statusProblem, fmt.Sprintf("%d records wait for delivery and no deliverer runs (the last run, %s, ended %s)", waiting, last.Finished.UTC().Format(time.RFC3339), detail), fix
	default:
		d.Status, d.Detail = statusNote, fmt.Sprintf("%d records are not acknowledged by the Hub (local-only facts, or waiting for the next hook's deliverer)", waiting)
	}
	return d
}

// doctorWatcher says whether the changelog's filesystem watcher vouches
// for the next capture (a note when it does not: the capture is then
// complete but lists every directory).
func doctorWatcher(ctx context.Context, env *Env, root, agent string) doctorCheck {
	d := doctorCheck{Checkout: root, Agent: agent, Check: checkWatcher}
	rf := rootFlags{root: root}
	c, err := openChangelog(env, &rf, false)
	if err != nil {
		d.Status, d.Detail, d.Fix = statusProblem, "changelog unreadable: "+err.Error(), "agentscm changelog status"
		return d
	}
	rep, err := c.WatchStatus(ctx, env.Getenv)
	switch {
	case err != nil:
		d.Status, d.Detail, d.Fix = statusProblem, "watcher state unreadable: "+err.Error(), "agentscm changelog status"
	case rep.Vouches:
		d.Status, d.Detail = statusOK, fmt.Sprintf("the watcher vouches (pid %d): the next capture lists only what changed", rep.PID)
	default:
		d.Status, d.Detail = statusNote, "the watcher does not vouch: "+rep.Reason
	}
	return d
}
