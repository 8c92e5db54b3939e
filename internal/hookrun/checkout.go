package hookrun

import (
	"path/filepath"

	"github.com/agentscm/agentscm/internal/binding"
	"github.com/agentscm/agentscm/internal/binding/checkout"
	"github.com/agentscm/agentscm/internal/changelog"
	"github.com/agentscm/agentscm/internal/event"
)

// Checkout is the one lookup of the checkout a hook's cwd belongs to,
// made once per hook process before its parts run and handed to both:
// the capture's binding and the changelog's directory are two questions
// of one checkout.Lookup (each with its fallback to the cwd with its
// symbolic links resolved), and the capture config is read once for the
// capture's binding and the changelog's sharing.
type Checkout struct {
	// Cwd is the payload's cwd, clean.
	Cwd string
	// BindingsErr is why the capture config could not be read (the
	// capture part fails with it; the changelog keeps no conversation
	// copy decision from it: NoCopy false, as before).
	BindingsErr error
	// Binding is the enabled capture binding containing Cwd (nil: none,
	// or the route runs no capture).
	Binding *binding.Binding
	// Changelog is the changelog of the checkout containing Cwd (zero:
	// none, or the route runs no changelog).
	Changelog changelog.Found
	// NoCopy: the changelog's checkout has a capture binding in
	// metadata-only mode, so its changelog keeps no copy of the
	// conversation (changelog.Options.ConversationRefs).
	NoCopy bool
}

// LookupCheckout looks up, once, the checkout of cwd for the parts a
// route runs: the capture's enabled binding and the changelog's directory
// (a part the route does not run is not looked up). The capture config is
// read only when a part needs it.
func LookupCheckout(configDir, cwd string, parts Parts) Checkout {
	co := Checkout{Cwd: filepath.Clean(cwd)}
	l := checkout.Of(co.Cwd)
	if parts.Changelog {
		co.Changelog = changelog.LookupFrom(configDir, l)
	}
	if !parts.Capture && co.Changelog.Dir == "" {
		return co
	}
	cfg, err := binding.Registry{Dir: configDir}.Load()
	if err != nil {
		co.BindingsErr = err
		return co
	}
	if parts.Capture {
		co.Binding = cfg.LookupFrom(l)
	}
	if co.Changelog.Dir != "" {
		co.NoCopy = metadataOnly(cfg, co.Changelog.Root)
	}
	return co
}

// metadataOnly reports whether cfg binds the checkout at root in
// metadata-only mode.
func metadataOnly(cfg *binding.Config, root string) bool {
	b := cfg.ForPath(root)
	return b != nil && b.CaptureMode == event.ModeMetadataOnly
}
