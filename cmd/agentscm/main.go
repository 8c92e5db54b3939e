// Command agentscm is source control for AI agent work: it captures what
// coding agents do in a checkout, keeps it in a private spool and shares
// typed facts with a Hub.
package main

import (
	"context"
	"os"

	"github.com/agentscm/agentscm/internal/cli"
)

func main() {
	os.Exit(cli.Main(context.Background(), cli.OSEnv(), os.Args[1:]))
}
