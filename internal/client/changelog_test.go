package client_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentscm/agentscm/internal/changelog"
	"github.com/agentscm/agentscm/internal/client"
	"github.com/agentscm/agentscm/internal/hub/api"
)

// increment captures a real changelog increment at pos of session.
func increment(t *testing.T, pos int, session string) (api.IncrementUpload, []byte) {
	t.Helper()
	base := t.TempDir()
	root := filepath.Join(base, "root")
	os.MkdirAll(root, 0o755)
	os.WriteFile(filepath.Join(root, "f.txt"), []byte(fmt.Sprint("content ", pos, session)), 0o644)
	c, err := changelog.Open(filepath.Join(base, "cl"), changelog.Options{Roots: []changelog.Root{{Name: "checkout", Path: root}}})
	if err != nil {
		t.Fatal(err)
	}
	inc, err := c.Capture(context.Background(), changelog.CaptureRequest{Position: pos, SessionID: session, Tool: "Bash"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(inc.Path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return api.IncrementUpload{Position: pos, Session: session, Digest: hex.EncodeToString(sum[:])}, b
}

func TestChangelogIncrementsBothConnections(t *testing.T) {
	for _, be := range backends() {
		t.Run(be.name, func(t *testing.T) {
			ctx := context.Background()
			f := be.open(t)
			w, err := f.alice.StartWork(ctx, api.StartWorkRequest{WorktreeID: "wt-cl", ChangelogGrant: &api.Grant{MaxObjects: 2, MaxBytes: 1 << 20}})
			if err != nil {
				t.Fatal(err)
			}
			var bodies [][]byte
			for i := 0; i < 2; i++ {
				up, b := increment(t, i, "native-1")
				// A body that does not hash to its digest.
				bad := up
				bad.Digest = hex.EncodeToString(make([]byte, 32))
				if _, err := f.alice.UploadIncrement(ctx, "wt-cl", bad, b); !isCode(err, 400, api.CodeDigestMismatch) {
					t.Fatalf("digest mismatch: %v", err)
				}
				res, err := f.alice.UploadIncrement(ctx, "wt-cl", up, b)
				if err != nil || res.Status != api.IncrementStored || res.WorkID != w.ID || res.Used.Objects != int64(i+1) || res.Grant.MaxObjects != 2 {
					t.Fatalf("upload %d: %+v %v", i, res, err)
				}
				bodies = append(bodies, b)
			}
			// Over the grant: a 422 naming the objects bound.
			up, b := increment(t, 2, "native-1")
			_, err = f.alice.UploadIncrement(ctx, "wt-cl", up, b)
			if e, ok := api.AsError(err); !ok || e.Status != 422 || e.Code != api.CodeGrantExceeded || e.Reason != api.BoundObjects || e.Detail == nil || e.Detail.Max != 2 {
				t.Fatalf("over the grant: %v", err)
			}
			// A read-only token may list and download but not upload or
			// change the grant.
			if _, err := f.reader.UploadIncrement(ctx, "wt-cl", up, b); !isCode(err, 403, api.CodeForbidden) {
				t.Fatalf("read-only upload: %v", err)
			}
			if _, err := f.reader.SetGrant(ctx, w.ID, api.GrantRequest{MaxObjects: 3, MaxBytes: 1 << 20}); !isCode(err, 403, api.CodeForbidden) {
				t.Fatalf("read-only grant: %v", err)
			}
			if _, err := f.carol.ListIncrements(ctx, w.ID); !isCode(err, 403, api.CodeForbidden) {
				t.Fatalf("other repository's list: %v", err)
			}
			list, err := f.reader.ListIncrements(ctx, w.ID)
			if err != nil || len(list.Increments) != 2 || list.Used.Objects != 2 {
				t.Fatalf("list %+v %v", list, err)
			}
			for i, in := range list.Increments {
				got, err := f.reader.GetIncrement(ctx, w.ID, in)
				if err != nil || string(got) != string(bodies[i]) {
					t.Fatalf("download %d: %d bytes, %v", i, len(got), err)
				}
			}
			// The client verifies what it downloads against what was listed.
			wrong := list.Increments[1]
			wrong.Digest = list.Increments[0].Digest
			if _, err := f.reader.GetIncrement(ctx, w.ID, wrong); !errors.Is(err, client.ErrIncrementDigest) {
				t.Fatalf("wrong digest: %v", err)
			}
			// Raising the grant lets the refused increment in.
			g, err := f.bob.SetGrant(ctx, w.ID, api.GrantRequest{MaxObjects: 3, MaxBytes: 1 << 20})
			if err != nil || g.Used.Objects != 2 || g.Grant.MaxObjects != 3 {
				t.Fatalf("grant %+v %v", g, err)
			}
			if res, err := f.alice.UploadIncrement(ctx, "wt-cl", up, b); err != nil || res.Used.Objects != 3 {
				t.Fatalf("after raising the grant: %+v %v", res, err)
			}
		})
	}
}

func isCode(err error, status int, code string) bool {
	e, ok := api.AsError(err)
	return ok && e.Status == status && e.Code == code
}
