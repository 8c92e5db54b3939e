package capture

import (
	"context"
	"encoding/json"
	"time"

	"github.com/agentscm/agentscm/internal/action"
	"github.com/agentscm/agentscm/internal/agent"
	"github.com/agentscm/agentscm/internal/binding"
	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/spool"
)

// Actions from execution rules live in internal/action (rules, receipts,
// the start and finish path). What stays here is the hook's glue: the
// binding's rules and source settings, and the managed recipe runs
// (managed.go), which take precedence over the generic Bash action.

// ruleFor returns the binding's rule for tool, if any.
func ruleFor(bd *binding.Binding, tool string) (action.Rule, bool) {
	return action.RuleFor(bd.ActionRules, tool)
}

// actionReceipts is a spool's action.Receipts with the short names the
// managed recipe path uses.
type actionReceipts struct {
	action.Receipts
	dir, spoolID string
}

func openActionReceipts(configDir string, sp *spool.Spool) actionReceipts {
	r := action.OpenReceipts(configDir, sp)
	return actionReceipts{Receipts: r, dir: r.Dir(), spoolID: r.SpoolID()}
}

func (a actionReceipts) ensure() error { return a.Ensure() }

func (a actionReceipts) read(name string) (*action.Receipt, bool, error) { return a.Read(name) }

func (a actionReceipts) writePending(name string, r *action.Receipt) error {
	return a.WritePending(name, r)
}

// appendReceipt appends the receipt's record and commits the receipt.
func appendReceipt(ss *spool.Tx, rs actionReceipts, name string, r *action.Receipt) error {
	return action.AppendReceipt(ss, rs.Receipts, name, r)
}

// actionEnv is what recordAction needs of one hook invocation.
type actionEnv struct {
	ss        *spool.Tx
	sp        *spool.Spool
	configDir string
	bd        *binding.Binding
	p         *agent.Payload
	rec       *event.Record
	now       time.Time
	// source captures the checkout's source; nil: action.Record's
	// default (the receipt directory's tree cache, a start's dirty bytes
	// retained in ss), unless a test replaces it.
	source func(ctx context.Context, root string) (*event.SourceBinding, error)
	// receiptLimit replaces MaxActionReceipts when set (tests).
	receiptLimit int
	// facts, when set, are the payload facts an intake record carried
	// (its payload is not kept); otherwise they come from p.
	facts *action.Facts
}

func factsOf(p *agent.Payload) action.Facts {
	f := action.FactsOf(p)
	f.CommandDigest = bashCommandDigest(p)
	return f
}

func (e actionEnv) payloadFacts() action.Facts {
	if e.facts != nil {
		return *e.facts
	}
	return factsOf(e.p)
}

// recordAction appends the action start or finish of a tool lifecycle
// record that was just retained, and reports what it did. It is called by
// HandleClaudeHook after the event append, in the same spool Session.
func recordAction(ctx context.Context, e actionEnv) (string, error) {
	rec := e.rec
	if rec.Kind != event.ToolStart && rec.Kind != event.ToolFinish {
		return "", nil
	}
	rs := openActionReceipts(e.configDir, e.sp)
	if e.receiptLimit > 0 {
		rs.Receipts = rs.WithLimit(e.receiptLimit)
	}
	// The exact visible command of a registered recipe's runner: the hook
	// keeps the lifecycle event, records the managed occurrence for the
	// runner and suppresses the generic Bash action (managed.go).
	if r, ok := managedRecipe(e.bd, rec.ToolName, e.payloadFacts().CommandDigest); ok {
		return recordManaged(e, rs, r)
	}
	return action.Record(ctx, action.Env{Session: e.ss, Spool: e.sp, Receipts: rs.Receipts,
		Rules: e.bd.ActionRules, Root: e.bd.Root, BaseRef: e.bd.BaseRef, SetupDigest: e.bd.SetupDigest,
		Record: rec, Facts: e.payloadFacts(), Now: e.now, Source: e.source})
}

func mustMarshal(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
