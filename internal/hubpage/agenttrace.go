package hubpage

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"

	"github.com/agentscm/agentscm/internal/attribution"
	"github.com/agentscm/agentscm/internal/changelog"
	"github.com/agentscm/agentscm/internal/changelog/incmeta"
)

// MaxTraceReadBytes bounds the increment bytes one Agent Trace download
// reads; a Work holding more is refused with 413.
const MaxTraceReadBytes = 64 << 20

// hubSource serves a Work's increments, read once, to attribution.
type hubSource map[int][]byte

func (h hubSource) FilesAt(pos int, rels []string) (*changelog.FilesAt, error) {
	b, ok := h[pos]
	if !ok {
		return nil, fmt.Errorf("increment %d was not read", pos)
	}
	return changelog.ReadFilesAtFrom(bytes.NewReader(b), "checkout", rels, attribution.MaxFileBytes)
}

// agentTrace downloads the Agent Trace record of a Work: the lines its
// sessions' calls and the work outside them wrote, in the files as the
// Work's last increment of one worktree leaves them (see
// docs/attribution.md). It reads the uploaded increments only: no
// transcript, so no prompt number or model.
func (s *Server) agentTrace(w http.ResponseWriter, r *http.Request, c *caller) {
	id := r.PathValue("work")
	ctx := r.Context()
	list, err := s.svc.ListIncrements(ctx, c.p, c.p.RepositoryName, id, "")
	if err != nil {
		s.failErr(w, r, c, err)
		return
	}
	trees := map[string]int64{}
	for _, in := range list.Increments {
		trees[in.WorktreeID] += in.Size
	}
	if len(trees) == 0 {
		s.fail(w, r, c, http.StatusNotFound, "This Work holds no changelog increments, so there is nothing to attribute (agentscm changelog enable on the checkout records each call's files).")
		return
	}
	wt := r.URL.Query().Get("worktree")
	if wt == "" && len(trees) == 1 {
		for k := range trees {
			wt = k
		}
	}
	if _, ok := trees[wt]; !ok {
		var names []string
		for k := range trees {
			names = append(names, k)
		}
		sort.Strings(names)
		s.fail(w, r, c, http.StatusBadRequest, "This Work's increments come from the worktrees "+strings.Join(names, ", ")+": add ?worktree= and one of them to the address.")
		return
	}
	if trees[wt] > MaxTraceReadBytes {
		s.fail(w, r, c, http.StatusRequestEntityTooLarge, fmt.Sprintf("The increments of this worktree hold %d bytes, more than the %d one download reads; run agentscm export --format agent-trace --work-id %s in the checkout instead.", trees[wt], MaxTraceReadBytes, id))
		return
	}
	var infos []changelog.Info
	src := hubSource{}
	for _, in := range list.Increments {
		if in.WorktreeID != wt {
			continue
		}
		_, b, err := s.svc.GetIncrement(ctx, c.p, c.p.RepositoryName, id, wt, in.Position)
		if err != nil {
			s.failErr(w, r, c, err)
			return
		}
		m, err := incmeta.ReadFrom(bytes.NewReader(b))
		if err != nil {
			s.opts.Log.Printf("hubpage: agent trace: increment %d of work %s: %v", in.Position, id, err)
			continue
		}
		src[in.Position] = b
		infos = append(infos, changelog.Info{Position: in.Position, Kind: m.Kind, Session: m.SessionID, Tool: m.Tool, Failed: m.Failed,
			Changes: m.Changes, ToolUseID: m.ToolUseID, Outside: m.Outside, Holds: m.Holds, Reverted: m.Reverted})
	}
	sort.Slice(infos, func(i, j int) bool { return infos[i].Position < infos[j].Position })
	rec, err := attribution.OpenIncrements(infos, src).StateTrace(ctx, s.opts.Now(), attribution.ToolVersion())
	if err != nil {
		s.fail(w, r, c, http.StatusInternalServerError, "The Work's increments could not be attributed: "+err.Error())
		return
	}
	vendor := rec.Metadata[attribution.VendorKey].(map[string]any)
	vendor["work_id"], vendor["worktree_id"] = id, wt
	w.Header().Set("Content-Type", attribution.TraceMediaType)
	w.Header().Set("Content-Disposition", `attachment; filename="agent-trace-`+strings.Map(safeName, id)+`.json"`)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(rec)
}

// safeName keeps a file name's letters, digits, '-' and '_'.
func safeName(r rune) rune {
	if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
		return r
	}
	return '_'
}
