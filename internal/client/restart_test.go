package client_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/agentscm/agentscm/internal/client"
	"github.com/agentscm/agentscm/internal/hub/api"
)

// TestKill9RestartReplay kills the Hub with SIGKILL while a batch of
// envelopes is being delivered, restarts it on the same data directory and
// replays the whole batch: every envelope acknowledged before the kill comes
// back as a duplicate, every other one is accepted or a duplicate (its commit
// raced the kill), and the record holds each event exactly once.
func TestKill9RestartReplay(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "data")
	sec := bootstrap(t, dir)
	s1 := startServer(t, dir)
	c1, err := client.NewHTTP(s1.URL, "proj", sec.alice, nil)
	if err != nil {
		t.Fatal(err)
	}
	w := start(t, c1, "wt-a")
	tg := resolve(t, c1, "wt-a", "native-1")

	const envelopes, perEnv = 300, 20
	batch := make([]*api.Envelope, envelopes)
	for i := range batch {
		evs := make([]api.Event, perEnv)
		for j := range evs {
			evs[j] = api.Event{Seq: int64(i*perEnv + j + 1), Kind: "tool_start", ToolName: "Bash", ToolUseID: fmt.Sprintf("toolu_%d_%d", i, j)}
		}
		batch[i] = eventsEnv(tg, fmt.Sprint("restart", i), evs...)
	}

	var acked sync.Map
	var nAcked atomic.Int64
	killed := make(chan struct{})
	work := make(chan int)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				r, err := c1.Deliver(ctx, batch[i])
				if err == nil && (r.Status == api.StatusAccepted || r.Status == api.StatusDuplicate) {
					acked.Store(i, true)
					nAcked.Add(1)
				}
			}
		}()
	}
	go func() {
		for nAcked.Load() < envelopes/3 {
			time.Sleep(time.Millisecond)
		}
		s1.kill9()
		close(killed)
	}()
	for i := range batch {
		work <- i
	}
	close(work)
	wg.Wait()
	<-killed
	before := nAcked.Load()
	if before == 0 || before == envelopes {
		t.Fatalf("the kill did not land mid-batch: %d of %d acknowledged", before, envelopes)
	}
	t.Logf("acknowledged before kill -9: %d of %d envelopes", before, envelopes)

	s2 := startServer(t, dir)
	c2, err := client.NewHTTP(s2.URL, "proj", sec.alice, nil)
	if err != nil {
		t.Fatal(err)
	}
	var dups, accepted int
	for i, env := range batch {
		r, err := c2.Deliver(ctx, env)
		if err != nil {
			t.Fatalf("replay %d: %v", i, err)
		}
		_, wasAcked := acked.Load(i)
		switch {
		case wasAcked && r.Status != api.StatusDuplicate:
			t.Fatalf("envelope %d was acknowledged before the kill but replays as %s", i, r.Status)
		case r.Status == api.StatusDuplicate:
			dups++
		default:
			accepted++
		}
	}
	t.Logf("replay after restart: %d duplicates, %d newly accepted", dups, accepted)
	rec, err := c2.Record(ctx, w.ID)
	if err != nil {
		t.Fatal(err)
	}
	s := rec.Sessions[0]
	if s.Events != envelopes*perEnv || s.MissingSeqs != 0 || s.LastSeq != envelopes*perEnv ||
		len(rec.Coverage.Reasons) != 1 || !strings.Contains(rec.Coverage.Reasons[0], "has not ended") {
		t.Fatalf("after replay: session %+v coverage %+v", s, rec.Coverage)
	}
	if int64(len(rec.Events))+rec.EventsOmitted != envelopes*perEnv {
		t.Fatalf("events %d + omitted %d", len(rec.Events), rec.EventsOmitted)
	}
}

// TestGracefulShutdown sends SIGTERM while a request is in flight (its body
// half sent): the request still completes with 200 and the process exits 0.
func TestGracefulShutdown(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	sec := bootstrap(t, dir)
	srv := startServer(t, dir)
	c, err := client.NewHTTP(srv.URL, "proj", sec.alice, nil)
	if err != nil {
		t.Fatal(err)
	}
	start(t, c, "wt-a")
	tg := resolve(t, c, "wt-a", "n1")
	body, err := json.Marshal(eventsEnv(tg, "graceful", api.Event{Seq: 1, Kind: "session_start"}))
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(srv.URL)
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/repositories/proj/envelopes HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n",
		u.Host, sec.alice, len(body))
	half := len(body) / 2
	if _, err := conn.Write(body[:half]); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // the server is now reading the body
	srv.cmd.Process.Signal(syscall.SIGTERM)
	time.Sleep(200 * time.Millisecond)
	if _, err := conn.Write(body[half:]); err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	status, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(status, "HTTP/1.1 200") {
		t.Fatalf("in-flight request during shutdown: %q", status)
	}
	select {
	case err := <-srv.done:
		srv.exited = true
		if err != nil {
			t.Fatalf("hub serve exited with %v; stderr: %s", err, srv.errb)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("hub serve did not exit after SIGTERM")
	}
	// New connections are refused once it is gone.
	if _, err := net.DialTimeout("tcp", u.Host, time.Second); err == nil {
		t.Fatal("still accepting connections after shutdown")
	}
}
