package hubpage

import (
	"bytes"
	"context"
	"fmt"
	"sync"

	"github.com/agentscm/agentscm/internal/changelog/incmeta"
	"github.com/agentscm/agentscm/internal/hub"
	"github.com/agentscm/agentscm/internal/timeline"
)

// metaCache remembers the metadata of increments by object digest: an
// increment's bytes never change under its digest, so its metadata is read
// once per process. It is bounded; when full it is emptied.
type metaCache struct {
	mu  sync.Mutex
	max int
	m   map[string]*incmeta.Meta
}

func newMetaCache(max int) *metaCache { return &metaCache{max: max, m: map[string]*incmeta.Meta{}} }

func (c *metaCache) get(digest string) *incmeta.Meta {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[digest]
}

func (c *metaCache) put(digest string, m *incmeta.Meta) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= c.max {
		clear(c.m)
	}
	c.m[digest] = m
}

// MaxMetaReadBytes bounds the increment bytes one page request reads to
// find file names (the Hub keeps an increment as one object, so its
// metadata is read with it); increments past it are listed without names
// until a later request, and the cache keeps what was read.
const MaxMetaReadBytes = 64 << 20

// hubIncrements reads the metadata of a Work's increments on the Hub (the
// names each call created, modified and deleted; never a file's bytes) for
// its timeline.
func (s *Server) hubIncrements(ctx context.Context, p hub.Principal, work string) ([]timeline.Increment, timeline.Source) {
	list, err := s.svc.ListIncrements(ctx, p, p.RepositoryName, work, "")
	if err != nil {
		return nil, timeline.Source{Note: "the Hub's changelog of this Work could not be listed: " + err.Error()}
	}
	if len(list.Increments) == 0 {
		return nil, timeline.Source{Note: "this Work holds no changelog increments (agentscm changelog enable on the checkout records each call's files)"}
	}
	out := make([]timeline.Increment, 0, len(list.Increments))
	unread, deferred := 0, 0
	budget := s.opts.MaxMetaReadBytes
	for _, in := range list.Increments {
		m := s.metas.get(in.Digest)
		if m == nil && in.Size > budget {
			deferred++
			out = append(out, timeline.Increment{Position: in.Position, WorktreeID: in.WorktreeID, Session: in.Session, Tool: in.Tool, Failed: in.Failed, Kind: in.Kind,
				Unread: "file names not read on this request (the page reads a bounded number of increment bytes per request); reload the page"})
			continue
		}
		if m == nil {
			budget -= in.Size
			_, b, err := s.svc.GetIncrement(ctx, p, p.RepositoryName, work, in.WorktreeID, in.Position)
			if err == nil {
				m, err = incmeta.ReadFrom(bytes.NewReader(b))
			}
			if err != nil {
				s.opts.Log.Printf("hubpage: increment %d of work %s: %v", in.Position, work, err)
				unread++
				// Listed without names: its position still shows.
				out = append(out, timeline.Increment{Position: in.Position, WorktreeID: in.WorktreeID, Session: in.Session, Tool: in.Tool, Failed: in.Failed, Kind: in.Kind,
					Unread: "its increment could not be read on the Hub, so its file names are missing"})
				continue
			}
			s.metas.put(in.Digest, m)
		}
		inc := timeline.FromMeta(m, in.WorktreeID)
		out = append(out, inc)
	}
	src := timeline.Source{Name: "hub"}
	switch {
	case unread > 0:
		src.Note = fmt.Sprintf("%d increments could not be read, so their file names are missing", unread)
	case deferred > 0:
		src.Note = fmt.Sprintf("%d large increments were not read on this request, so their file names are missing; reload the page (or run change-capture show in the checkout)", deferred)
	}
	return out, src
}
