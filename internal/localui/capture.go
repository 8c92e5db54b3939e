package localui

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/agentscm/agentscm/internal/binding"
	"github.com/agentscm/agentscm/internal/event"
)

// RetentionUnknown is the seed's wording when the Hub's retention is not
// known (an older Hub, an unreachable or slow Hub, no answer yet): it never
// names a number it was not given.
const RetentionUnknown = "kept for as long as the Hub operator sets (30 days unless changed)"

// RetentionWording says how long a Hub keeps shared conversation bodies:
// "kept N days on <hub>" when the Hub reported N, else RetentionUnknown.
func RetentionWording(days int, hub string) string {
	if days <= 0 {
		return RetentionUnknown
	}
	return fmt.Sprintf("kept %d days on %s", days, hub)
}

// Checkout is one checkout of GET /v1/local/capture: its capture_setting
// (read through capture.CaptureSetting, never a copy) and what the page
// offers for it.
type Checkout struct {
	binding.Setting
	// SharedConversationRetentionDays is what the checkout's Hub reported
	// (looked up with its own agent token, reused for a minute); absent when
	// unknown.
	SharedConversationRetentionDays int    `json:"shared_conversation_retention_days,omitempty"`
	SharedConversationRetention     string `json:"shared_conversation_retention"`
	// Sharing is the state of the switch "Share agent conversations with
	// Hub".
	Sharing bool `json:"sharing"`
	// CanShare says whether the switch may be turned on; WhyNot says why
	// not when it cannot.
	CanShare bool   `json:"can_share"`
	WhyNot   string `json:"why_not,omitempty"`
	// Notice is "Sharing was set for <repository> on <hub>; this checkout is
	// now connected to <repository> on <hub>" for a reconnected checkout.
	Notice string `json:"notice,omitempty"`
	// Displayed is the mode key a confirmation binds to: not-set-up, off,
	// or the capture mode.
	Displayed string `json:"displayed_mode"`
}

// List is the body of GET /v1/local/capture.
type List struct {
	Checkouts []Checkout `json:"checkouts"`
}

// modeKey is the mode a panel displayed and Confirm passes back.
func modeKey(s binding.Setting) string {
	switch {
	case !s.Configured:
		return "not-set-up"
	case !s.Enabled:
		return "off"
	}
	return s.Mode
}

// roots lists the checkouts with a binding or a client connection.
func (s *Server) roots() ([]string, error) {
	cfg, err := s.cfg.Store.Bindings().Load()
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []string
	for _, b := range cfg.Bindings {
		if !seen[b.Root] {
			seen[b.Root] = true
			out = append(out, b.Root)
		}
	}
	conn, err := s.cfg.Connected()
	if err != nil {
		return nil, err
	}
	for _, r := range conn {
		if !seen[r] {
			seen[r] = true
			out = append(out, r)
		}
	}
	sort.Strings(out)
	return out, nil
}

// checkouts reads every checkout's setting and its Hub's retention.
func (s *Server) checkouts(ctx context.Context) ([]Checkout, error) {
	roots, err := s.roots()
	if err != nil {
		return nil, err
	}
	out := make([]Checkout, 0, len(roots))
	for _, r := range roots {
		set, err := binding.CaptureSetting(s.cfg.Store, s.cfg.Conns, r)
		if err != nil {
			// A checkout that can no longer be read stays listed, with why.
			out = append(out, Checkout{Setting: binding.Setting{Root: r, State: "Unreadable"}, WhyNot: err.Error(),
				SharedConversationRetention: RetentionUnknown, Displayed: "unreadable"})
			continue
		}
		out = append(out, describe(*set))
		if s.cfg.Resume != nil && set.Enabled {
			go s.cfg.Resume(r)
		}
	}
	var wg sync.WaitGroup
	for i := range out {
		if out[i].ConnectedHub == "" {
			continue
		}
		wg.Add(1)
		go func(c *Checkout) {
			defer wg.Done()
			c.SharedConversationRetentionDays = s.retentionDays(ctx, c.Root, c.ConnectedHub, c.ConnectedRepository)
			c.SharedConversationRetention = RetentionWording(c.SharedConversationRetentionDays, c.ConnectedHub)
		}(&out[i])
	}
	wg.Wait()
	return out, nil
}

// describe derives what the page offers from a setting.
func describe(set binding.Setting) Checkout {
	c := Checkout{Setting: set, SharedConversationRetention: RetentionUnknown, Displayed: modeKey(set)}
	c.Sharing = set.Enabled && set.Mode == event.ModeSharedConversation
	switch {
	case set.LineageMismatch:
		c.Notice = fmt.Sprintf("Sharing was set for %s on %s; this checkout is now connected to %s on %s", set.Repository, set.Hub, set.ConnectedRepository, set.ConnectedHub)
		c.WhyNot = fmt.Sprintf("the capture binding was saved for %s on %s; to start fresh run agentscm change-capture unconfigure --root %s, then agentscm change-capture forget --root %s", set.Repository, set.Hub, set.Root, set.Root)
	case set.ConnectedHub == "":
		c.WhyNot = fmt.Sprintf("no client connection for this checkout; run agentscm client setup --root %s first", set.Root)
	case c.Sharing:
	default:
		c.CanShare = true
	}
	return c
}

// retentionDays returns the Hub's retention for a checkout's connection,
// reusing an answer for a minute (an unknown one too, so a dead Hub does not
// slow every page).
func (s *Server) retentionDays(ctx context.Context, root, hub, repo string) int {
	if s.cfg.Retention == nil {
		return 0
	}
	key := root + "\x00" + hub + "\x00" + repo
	now := s.cfg.Now()
	s.mu.Lock()
	e, ok := s.retention[key]
	s.mu.Unlock()
	if ok && now.Sub(e.at) < RetentionReuse && now.Sub(e.at) >= 0 {
		return e.days
	}
	cctx, cancel := context.WithTimeout(ctx, RetentionTimeout)
	defer cancel()
	days, err := s.cfg.Retention(cctx, root)
	if err != nil || days < 0 {
		days = 0
	}
	s.mu.Lock()
	if len(s.retention) > 4096 {
		clear(s.retention)
	}
	s.retention[key] = retained{days: days, at: now}
	s.mu.Unlock()
	return days
}

// find returns the listed checkout of root.
func find(list []Checkout, root string) *Checkout {
	for i := range list {
		if list[i].Root == root {
			return &list[i]
		}
	}
	return nil
}

func (s *Server) listJSON(w http.ResponseWriter, r *http.Request, ss *session) {
	list, err := s.checkouts(r.Context())
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, List{Checkouts: list})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

// panel is one confirmation panel: what it displayed, bound to the session.
type panel struct {
	ID         string
	Root       string
	Hub        string
	Repository string
	Mode       string // modeKey when shown
	Retention  string
	Created    time.Time
}

// expired says whether a panel's two minutes are over (a clock set back by
// more than a minute counts as expired too).
func (p *panel) expired(now time.Time) bool {
	return now.Sub(p.Created) >= PanelLifetime || now.Before(p.Created.Add(-time.Minute))
}

// reconnected says whether the checkout's connection is no longer the one
// the panel displayed.
func (p *panel) reconnected(c *Checkout) bool {
	return c.ConnectedHub != p.Hub || c.ConnectedRepository != p.Repository
}

// withdrawn says why a panel no longer holds for the checkout as it is now
// (empty: it holds).
func (p *panel) withdrawn(c *Checkout, now time.Time) string {
	switch {
	case p.expired(now):
		return fmt.Sprintf("The confirmation for %s expired after two minutes; nothing was changed. Click Share agent conversations with Hub again to review the consequences.", p.Root)
	case c == nil:
		return fmt.Sprintf("The confirmation for %s was withdrawn: the checkout is no longer listed; nothing was changed.", p.Root)
	case p.reconnected(c):
		now := "no client connection"
		if c.ConnectedHub != "" {
			now = fmt.Sprintf("%s on %s", c.ConnectedRepository, c.ConnectedHub)
		}
		return fmt.Sprintf("The confirmation for %s was withdrawn: this checkout is now connected to %s, not %s on %s; nothing was changed. Review and confirm again.", p.Root, now, p.Repository, p.Hub)
	case c.Displayed != p.Mode:
		return fmt.Sprintf("The confirmation for %s was withdrawn: its capture setting changed to %s since it was shown; nothing was changed. Review and confirm again.", p.Root, c.State)
	}
	return ""
}

// share opens the confirmation panel of a checkout: nothing changes yet.
func (s *Server) share(w http.ResponseWriter, r *http.Request, ss *session) {
	defer http.Redirect(w, r, "/", http.StatusSeeOther)
	root := r.PostForm.Get("root")
	list, err := s.checkouts(r.Context())
	if err != nil {
		s.addFlash(ss, true, err.Error())
		return
	}
	c := find(list, root)
	if c == nil {
		s.addFlash(ss, true, "That checkout is not listed; nothing was changed.")
		return
	}
	if !c.CanShare {
		msg := "Sharing cannot be turned on for " + c.Root
		if c.WhyNot != "" {
			msg += ": " + c.WhyNot
		}
		s.addFlash(ss, true, msg)
		return
	}
	p := &panel{ID: randomHex(16), Root: c.Root, Hub: c.ConnectedHub, Repository: c.ConnectedRepository, Mode: c.Displayed,
		Retention: c.SharedConversationRetention, Created: s.cfg.Now()}
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, q := range ss.panels {
		if q.Root == p.Root {
			delete(ss.panels, id) // one panel per checkout: the newest
		}
	}
	if len(ss.panels) >= maxPanels {
		ss.flashes = append(ss.flashes, flash{Error: true, Text: "Too many open confirmations; cancel some first."})
		return
	}
	ss.panels[p.ID] = p
}

// takePanel removes and returns a session's panel (a panel is used once).
func (s *Server) takePanel(ss *session, id string) *panel {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := ss.panels[id]
	delete(ss.panels, id)
	return p
}

// confirm turns sharing on with exactly what the panel displayed:
// binding.EnableCapture with Expect set to the repository and Hub shown, so
// a checkout reconnected meanwhile is refused under the connections lock.
func (s *Server) confirm(w http.ResponseWriter, r *http.Request, ss *session) {
	defer http.Redirect(w, r, "/", http.StatusSeeOther)
	f := r.PostForm
	p := s.takePanel(ss, f.Get("panel"))
	if p == nil {
		s.addFlash(ss, true, "This confirmation is no longer valid (it was used, cancelled, replaced or withdrawn); nothing was changed. Click Share agent conversations with Hub again.")
		return
	}
	if f.Get("root") != p.Root || f.Get("hub") != p.Hub || f.Get("repository") != p.Repository || f.Get("mode") != p.Mode {
		s.addFlash(ss, true, "The confirmation does not match what its panel displayed; nothing was changed.")
		return
	}
	if p.expired(s.cfg.Now()) {
		s.addFlash(ss, true, p.withdrawn(nil, s.cfg.Now()))
		return
	}
	set, err := binding.CaptureSetting(s.cfg.Store, s.cfg.Conns, p.Root)
	if err != nil {
		s.addFlash(ss, true, fmt.Sprintf("Sharing was not turned on for %s: %v", p.Root, err))
		return
	}
	cur := describe(*set)
	// A reconnect is left to EnableCapture's expectation check below, which
	// refuses it under the connections lock with the seed's words; a mode
	// that changed on the same connection is refused here.
	if !p.reconnected(&cur) && cur.Displayed != p.Mode {
		s.addFlash(ss, true, p.withdrawn(&cur, s.cfg.Now()))
		return
	}
	agent := ""
	if p.Mode == "not-set-up" && s.cfg.Agent != nil {
		agent = s.cfg.Agent(p.Root)
	}
	// A tab closed mid-request does not cut a setup short.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), time.Minute)
	defer cancel()
	res, err := binding.EnableCapture(ctx, s.cfg.Store, s.cfg.Conns, binding.EnableOptions{
		Root: p.Root, Mode: event.ModeSharedConversation,
		Expect:    &binding.Lineage{Repository: p.Repository, Hub: p.Hub},
		ConfigDir: s.cfg.Store.Dir, Executable: s.cfg.Executable, Now: s.cfg.Now(), Agent: agent,
	})
	if err != nil {
		s.addFlash(ss, true, fmt.Sprintf("Sharing was not turned on for %s: %v", p.Root, err))
		return
	}
	msg := fmt.Sprintf("Sharing is on for %s: conversations of new sessions are shared with %s on %s, %s.", p.Root, p.Repository, p.Hub, p.Retention)
	switch res.Action {
	case "created":
		msg += " Capture was set up for this checkout (hooks in " + res.ClaudeSettings + ")."
	case "re-enabled":
		msg += " Capture was re-enabled with the binding's saved settings."
	}
	s.addFlash(ss, false, msg)
	for _, warn := range res.Warnings {
		s.addFlash(ss, true, "warning: "+warn)
	}
}

// cancel closes a panel without changing anything.
func (s *Server) cancel(w http.ResponseWriter, r *http.Request, ss *session) {
	s.takePanel(ss, r.PostForm.Get("panel"))
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// off turns sharing off without confirmation: binding.SetCaptureMode to
// metadata-only, which needs no client connection.
func (s *Server) off(w http.ResponseWriter, r *http.Request, ss *session) {
	defer http.Redirect(w, r, "/", http.StatusSeeOther)
	root := r.PostForm.Get("root")
	roots, err := s.roots()
	if err != nil {
		s.addFlash(ss, true, err.Error())
		return
	}
	i := sort.SearchStrings(roots, root)
	if i == len(roots) || roots[i] != root {
		s.addFlash(ss, true, "That checkout is not listed; nothing was changed.")
		return
	}
	s.mu.Lock()
	for id, q := range ss.panels {
		if q.Root == root {
			delete(ss.panels, id)
		}
	}
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), time.Minute)
	defer cancel()
	res, err := binding.SetCaptureMode(ctx, s.cfg.Store, s.cfg.Conns, root, event.ModeMetadataOnly, nil)
	if err != nil {
		s.addFlash(ss, true, fmt.Sprintf("Sharing was not turned off for %s: %v", root, err))
		return
	}
	if res.Changed {
		s.addFlash(ss, false, fmt.Sprintf("Sharing is off for %s (now Metadata only). Bodies already shared stay on the Hub until they expire or you delete them.", root))
	} else {
		s.addFlash(ss, false, fmt.Sprintf("%s was already Metadata only.", root))
	}
}
