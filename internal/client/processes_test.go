package client_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/client"
	"github.com/agentscm/agentscm/internal/connections"
	"github.com/agentscm/agentscm/internal/hub/api"
)

// TestEmbeddedManyProcesses runs several hook-like processes at once on one
// embedded store: each looks up the checkout's connection, resolves a native
// session (two processes share each session, so first bindings race) and
// delivers envelopes. Every envelope is accepted exactly once.
func TestEmbeddedManyProcesses(t *testing.T) {
	if cfg := os.Getenv("HUB_CLIENT_CHILD"); cfg != "" {
		childDeliver(t, cfg, os.Getenv("HUB_CLIENT_ROOT"), os.Getenv("HUB_CLIENT_ID"))
		return
	}
	ctx := context.Background()
	cfg := filepath.Join(t.TempDir(), "agentscm")
	root := t.TempDir()
	c, _, err := client.SetupLocal(ctx, cfg, root, "proj", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	conn, err := client.Open(ctx, c, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	w := start(t, conn, c.WorktreeID)
	conn.Close()

	const procs = 6
	var wg sync.WaitGroup
	errs := make(chan string, procs)
	for i := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command(os.Args[0], "-test.run", "^TestEmbeddedManyProcesses$")
			cmd.Env = append(os.Environ(), "HUB_CLIENT_CHILD="+cfg, "HUB_CLIENT_ROOT="+root, "HUB_CLIENT_ID="+strconv.Itoa(i))
			if out, err := cmd.CombinedOutput(); err != nil {
				errs <- fmt.Sprintf("child %d: %v\n%s", i, err, out)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	conn, err = client.Open(ctx, c, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rec, err := conn.Record(ctx, w.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.Events) != procs*5 || len(rec.Sessions) != 2 {
		t.Fatalf("%d events in %d sessions, want %d in 2: %+v", len(rec.Events), len(rec.Sessions), procs*5, rec.Sessions)
	}
	for _, s := range rec.Sessions {
		if len(s.NativeSessionIDs) != 1 || s.Events != procs/2*5 {
			t.Fatalf("session %+v", s)
		}
	}
}

func childDeliver(t *testing.T, cfg, root, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, _ := strconv.Atoi(id)
	c, err := connections.Lookup(cfg, root)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := client.Open(ctx, c, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	tg, err := conn.Resolve(ctx, api.ResolveRequest{WorktreeID: c.WorktreeID, NativeSessionID: fmt.Sprint("native-", n%2)})
	if err != nil {
		t.Fatal(err)
	}
	for k := range 5 {
		seq := int64(n/2*5 + k + 1)
		r, err := conn.Deliver(ctx, eventsEnv(tg, fmt.Sprint("proc", n, k), api.Event{Seq: seq, Kind: "turn_end"}))
		if err != nil || r.Status != api.StatusAccepted {
			t.Fatalf("deliver: %+v %v", r, err)
		}
	}
}
