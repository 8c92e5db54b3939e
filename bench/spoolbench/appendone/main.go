// Command appendone durably appends one record to a spool (spool.AppendTo,
// recovery included), as the hook does once per process: go run ./bench/spoolbench drives it.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/spool"
)

func main() {
	r := &event.Record{Agent: "claude-code", SessionID: "bench", Kind: event.ToolStart, HookEvent: "PreToolUse",
		ToolName: "Bash", ToolUseID: fmt.Sprintf("toolu_%d", time.Now().UnixNano()), ObservedAt: time.Now().UTC(), CaptureMode: event.ModeMetadataOnly}
	if _, err := spool.AppendTo(context.Background(), os.Args[1], r); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
