package hookrun

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/agent/adapter"
	"github.com/agentscm/agentscm/internal/binding"
	"github.com/agentscm/agentscm/internal/binding/checkout"
	"github.com/agentscm/agentscm/internal/changelog"
	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/hookroute"
)

// TestBothPartsReceiveTheOneLookup: a hook process looks its checkout up
// once and hands that one lookup (the same value) to the capture and the
// changelog; each part finds in it what its own lookup found before (the
// deepest enabled capture binding, the deepest changelog, each through a
// symbolic link too), a part the route does not run is neither looked up
// nor run, and the changelog part really stores its increment in the
// changelog the lookup names.
func TestBothPartsReceiveTheOneLookup(t *testing.T) {
	both, captureOnly, changelogOnly := Parts{Capture: true, Changelog: true}, Parts{Capture: true}, Parts{Changelog: true}
	for _, tc := range []struct {
		name                 string
		bind, changelog, cwd string // relative to the test's base; "" none
		parts                Parts
		wantBind, wantCl     string
	}{
		{"both at the root", "repo", "repo", "repo/sub", both, "repo", "repo"},
		{"changelog only", "", "repo", "repo/sub", both, "", "repo"},
		{"capture only", "repo", "", "repo/sub", both, "repo", ""},
		{"binding nested in the changelog's checkout", "repo/inner", "repo", "repo/inner/x", both, "repo/inner", "repo"},
		{"through a symbolic link", "repo", "repo", "link/sub", both, "repo", "repo"},
		{"capture-only route", "repo", "repo", "repo/sub", captureOnly, "repo", ""},
		{"changelog-only route", "repo", "repo", "repo/sub", changelogOnly, "", "repo"},
		{"neither", "", "", "repo/sub", both, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base, err := filepath.EvalSymlinks(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			xdg := filepath.Join(base, "xdg")
			cfg := filepath.Join(xdg, "agentscm")
			for _, d := range []string{"repo/sub", "repo/inner/x", "xdg/agentscm/changelog"} {
				if err := os.MkdirAll(filepath.Join(base, d), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.Symlink(filepath.Join(base, "repo"), filepath.Join(base, "link")); err != nil {
				t.Fatal(err)
			}
			abs := func(rel string) string {
				if rel == "" {
					return ""
				}
				return filepath.Join(base, rel)
			}
			if tc.bind != "" {
				bindAt(t, cfg, abs(tc.bind), filepath.Join(base, "spool"))
			}
			if tc.changelog != "" {
				root := abs(tc.changelog)
				c, err := changelog.Open(changelog.DefaultDir(cfg, root), changelog.Options{Roots: []changelog.Root{{Name: "checkout", Path: root}}})
				if err != nil {
					t.Fatal(err)
				}
				if err := c.SaveRoots(); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(filepath.Join(base, "repo", "sub", "made.txt"), []byte("by the tool\n"), 0o644); err != nil {
				t.Fatal(err)
			}

			seen := map[string]*Checkout{}
			cwd := abs(tc.cwd)
			in := `{"session_id":"s1","cwd":"` + cwd + `","hook_event_name":"PostToolUse","tool_name":"Write","tool_use_id":"toolu_1","tool_input":{},"tool_response":{"success":true}}`
			var stdout, stderr bytes.Buffer
			getenv := func(k string) string {
				if k == "XDG_CONFIG_HOME" {
					return xdg
				}
				return ""
			}
			r := hookroute.Route{Agent: adapter.Claude{}, Parts: tc.parts}
			o := Options{seen: func(part string, co *Checkout) {
				if seen[part] != nil {
					t.Errorf("the %s part received a lookup twice", part)
				}
				seen[part] = co
			}}
			if code := Run(context.Background(), r, strings.NewReader(in), &stdout, &stderr, getenv, time.Now(), o); code != 0 || stdout.Len() != 0 || stderr.Len() != 0 {
				t.Fatalf("hook: exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
			}

			if (seen["capture"] != nil) != tc.parts.Capture || (seen["changelog"] != nil) != tc.parts.Changelog {
				t.Fatalf("parts that received a lookup: %v, want those of %+v", seen, tc.parts)
			}
			if tc.parts == both && seen["capture"] != seen["changelog"] {
				t.Fatalf("the capture received lookup %p, the changelog %p: want one", seen["capture"], seen["changelog"])
			}
			var co *Checkout
			for _, c := range seen {
				co = c
			}
			gotBind := ""
			if co.Binding != nil {
				gotBind = co.Binding.Root
			}
			if gotBind != abs(tc.wantBind) || co.Changelog.Root != abs(tc.wantCl) || co.BindingsErr != nil {
				t.Fatalf("lookup: binding %q, changelog %+v, err %v; want binding %q, changelog of %q", gotBind, co.Changelog, co.BindingsErr, abs(tc.wantBind), abs(tc.wantCl))
			}
			// Each part finds what its own lookup finds.
			if tc.parts.Capture {
				reg, err := binding.Registry{Dir: cfg}.Load()
				if err != nil {
					t.Fatal(err)
				}
				if own := reg.Lookup(filepath.Clean(cwd)); own != co.Binding && (own == nil || co.Binding == nil || own.Root != co.Binding.Root) {
					t.Errorf("the capture's own lookup finds %+v", own)
				}
			}
			if tc.parts.Changelog {
				if own := changelog.LookupFrom(cfg, checkout.Of(filepath.Clean(cwd))); own != co.Changelog {
					t.Errorf("the changelog's own lookup finds %+v, the pipeline's %+v", own, co.Changelog)
				}
			}
			if co.Changelog.Dir != "" {
				c, err := changelog.Open(co.Changelog.Dir, changelog.Options{Roots: []changelog.Root{{Name: "checkout", Path: co.Changelog.Root}}})
				if err != nil {
					t.Fatal(err)
				}
				incs, err := c.List()
				if err != nil {
					t.Fatal(err)
				}
				if len(incs) != 1 {
					t.Fatalf("%d increments in %s, want the tool call's one", len(incs), co.Changelog.Dir)
				}
			}
		})
	}
}

// bindAt saves an enabled capture binding of root (no connection: the
// capture then ignores the event, silently).
func bindAt(t *testing.T, cfg, root, spool string) {
	t.Helper()
	err := binding.Registry{Dir: cfg}.Update(func(c *binding.Config) (bool, error) {
		c.Bindings = append(c.Bindings, binding.Binding{Root: root, Spool: spool, CaptureMode: event.ModeMetadataOnly, Enabled: true, ConfiguredAt: time.Now()})
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
