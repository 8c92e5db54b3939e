package hub_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/agentscm/agentscm/internal/changelog"
	"github.com/agentscm/agentscm/internal/hub/api"
)

// FuzzUploadIncrement feeds arbitrary bodies (with their true digest) to the
// upload: the Hub must answer with a typed error or store a body whose
// metadata names the position and session, never panic.
func FuzzUploadIncrement(f *testing.F) {
	f.Add(testIncrement(f, 0, "s"), "s")
	f.Add([]byte("\x1f\x8b\x08\x00garbage"), "s")
	f.Add([]byte{}, "")
	e := newMatrixEnvB(f)
	e.freshWorkB(f, "wt-fuzz")
	p, err := e.svc.EnsureLocal(context.Background(), "alice", "proj")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body []byte, session string) {
		res, err := e.svc.UploadIncrement(context.Background(), p, "proj", "wt-fuzz",
			api.IncrementUpload{Position: 0, Session: session, Digest: digestOf(body), Size: int64(len(body))}, bytes.NewReader(body))
		if err != nil {
			if _, ok := api.AsError(err); !ok {
				t.Fatalf("untyped error: %v", err)
			}
			return
		}
		if res.Position != 0 || res.Digest != digestOf(body) {
			t.Fatalf("stored %+v", res)
		}
	})
}

// FuzzReadMeta fuzzes the parser the Hub runs on every uploaded body.
func FuzzReadMeta(f *testing.F) {
	f.Add(testIncrement(f, 3, "s"))
	f.Add([]byte("\x1f\x8b\x08\x00garbage"))
	f.Fuzz(func(t *testing.T, body []byte) {
		m, err := changelog.ReadMetaFrom(bytes.NewReader(body))
		if err == nil && m == nil {
			t.Fatal("no metadata and no error")
		}
	})
}
