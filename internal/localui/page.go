package localui

import (
	"bytes"
	"embed"
	"html/template"
	"net/http"
	"path"
	"strings"
	"sync"
	"time"
)

//go:embed assets
var assets embed.FS

// pageTmpl parses the templates on first use, not at package init: every
// agentscm process (hooks included) links this package.
var pageTmpl = sync.OnceValue(func() *template.Template {
	return template.Must(template.New("page.html").Funcs(template.FuncMap{
		"settingsPath": func(root string) string { return path.Join(root, ".claude", "settings.local.json") },
	}).ParseFS(assets, "assets/page.html", "assets/refuse.html"))
})

// panelView is a confirmation panel as the page shows it.
type panelView struct {
	*panel
	ExpiresIn int    // seconds left
	ExpiresAt string // server clock, HH:MM:SS UTC
}

type checkoutView struct {
	Checkout
	Panel *panelView
}

type pageData struct {
	Checkouts []checkoutView
	Flashes   []flash
	CSRF      string
	Error     string
}

// page renders the local page: every checkout's setting, the switch, and
// the confirmation panels still valid. Panels that no longer hold are
// withdrawn with a message.
func (s *Server) page(w http.ResponseWriter, r *http.Request, ss *session) {
	list, err := s.checkouts(r.Context())
	now := s.cfg.Now()
	s.mu.Lock()
	data := pageData{CSRF: ss.csrf}
	if err != nil {
		data.Error = err.Error()
	}
	for _, c := range list {
		data.Checkouts = append(data.Checkouts, checkoutView{Checkout: c})
	}
	for id, p := range ss.panels {
		if err != nil {
			break // keep panels while the list cannot be read
		}
		var cv *checkoutView
		for i := range data.Checkouts {
			if data.Checkouts[i].Root == p.Root {
				cv = &data.Checkouts[i]
			}
		}
		var c *Checkout
		if cv != nil {
			c = &cv.Checkout
		}
		if why := p.withdrawn(c, now); why != "" {
			delete(ss.panels, id)
			ss.flashes = append(ss.flashes, flash{Error: true, Text: why})
			continue
		}
		left := p.Created.Add(PanelLifetime).Sub(now)
		cv.Panel = &panelView{panel: p, ExpiresIn: int((left + time.Second - 1) / time.Second),
			ExpiresAt: p.Created.Add(PanelLifetime).UTC().Format("15:04:05") + " UTC"}
	}
	data.Flashes, ss.flashes = ss.flashes, nil
	s.mu.Unlock()
	var b bytes.Buffer
	if err := pageTmpl().ExecuteTemplate(&b, "page.html", data); err != nil {
		http.Error(w, "render: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Write(b.Bytes())
}

// refuse answers with a short HTML page saying why.
func (s *Server) refuse(w http.ResponseWriter, code int, msg string) {
	var b bytes.Buffer
	if err := pageTmpl().ExecuteTemplate(&b, "refuse.html", map[string]any{"Code": code, "Status": http.StatusText(code), "Message": msg}); err != nil {
		http.Error(w, msg, code)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	w.Write(b.Bytes())
}

// asset serves the embedded style sheet and script.
func (s *Server) asset(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	var ctype string
	switch {
	case strings.HasSuffix(name, ".css"):
		ctype = "text/css; charset=utf-8"
	case strings.HasSuffix(name, ".js"):
		ctype = "text/javascript; charset=utf-8"
	default:
		http.NotFound(w, r)
		return
	}
	b, err := assets.ReadFile("assets/" + name)
	if err != nil || strings.Contains(name, "/") {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", ctype)
	w.Write(b)
}
