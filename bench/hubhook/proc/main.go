// Command proc is the subject of the hubhook benchmark: what the capture hook
// does with the Hub on every invocation, as a fresh process. Modes:
//
//	lookup   read the connections file and find the checkout's connection
//	open     lookup, then open the connection (SQLite for an embedded one)
//	deliver  open, resolve the native session's exact target and deliver one
//	         events envelope (a fresh identity and sequence number each run)
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"time"

	"github.com/agentscm/agentscm/internal/client"
	"github.com/agentscm/agentscm/internal/connections"
	"github.com/agentscm/agentscm/internal/hub/api"
)

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: proc lookup|open|deliver CONFIGDIR ROOT")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Args[2], os.Args[3]); err != nil {
		fmt.Fprintln(os.Stderr, "proc:", err)
		os.Exit(1)
	}
}

func run(mode, configDir, root string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := connections.Lookup(configDir, root)
	if err != nil || mode == "lookup" {
		return err
	}
	conn, err := client.Open(ctx, c, client.Options{})
	if err != nil {
		return err
	}
	defer conn.Close()
	if mode == "open" {
		return nil
	}
	tg, err := conn.Resolve(ctx, api.ResolveRequest{WorktreeID: c.WorktreeID, NativeSessionID: "bench-native"})
	if err != nil {
		return err
	}
	now := time.Now().UnixNano()
	sum := sha256.Sum256(fmt.Appendf(nil, "%d-%d", os.Getpid(), now))
	env := &api.Envelope{Identity: hex.EncodeToString(sum[:]), Type: api.TypeEvents, WorkID: tg.WorkID, Generation: tg.Generation,
		Session: tg.Session, NativeSessionID: tg.NativeSessionID,
		Events: []api.Event{{Seq: now, Kind: "tool_start", ToolName: "Bash", ToolUseID: "toolu_bench", ObservedAt: now / 1e9}}}
	r, err := conn.Deliver(ctx, env)
	if err != nil {
		return err
	}
	if r.Status != api.StatusAccepted {
		return fmt.Errorf("delivery answered %s", r.Status)
	}
	return nil
}
