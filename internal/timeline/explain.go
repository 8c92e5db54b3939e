package timeline

import "strings"

// Explain says in words what a gap of kind with reason means and why it is
// there, for a person reading the record. Every kind and reason the client
// and the Hub emit has its own sentence; an unknown one is named as given,
// never hidden.
func Explain(kind, reason string) (meaning, why string) {
	meaning = kindMeaning[kind]
	if meaning == "" {
		meaning = "a gap of kind " + kind + ", which this version does not describe: treat the record as partial there"
	}
	why = reasonWhy(kind, reason)
	return meaning, why
}

var kindMeaning = map[string]string{
	"identity_uncertain": "the event may be counted twice: Claude Code gave it no identity of its own, " +
		"so a hook that ran again after a timeout could not be told apart from a real repeat",
	"capture_interrupted":  "capture stopped for a while here: what happened in between was not recorded",
	"adapter_started_late": "the start of this session was not observed: whatever happened before the first recorded event is not covered",
	"redacted":             "a conversation body was altered before it was kept: a secret-looking part was replaced by [REDACTED:kind]",
	"provider_history":     "the provider's saved history (the transcript the usage is read from) could not be read completely",
	"outage":               "the Hub or the Work was unreachable for these events: they were kept locally but not sent",
	"content_not_retained": "an event was kept, but its body could not be stored",
}

// reasonWhy explains a gap's reason. Reasons with a variable part
// (hub_refused:<why>, first_event_<hook>, session_start_<source>) are
// matched on their prefix.
func reasonWhy(kind, reason string) string {
	if w, ok := reasonText[reason]; ok {
		return w
	}
	switch {
	case reason == "":
		return "the client gave no reason"
	case strings.HasPrefix(reason, "hub_refused:"):
		return "the Hub permanently refused an envelope of this session (" + strings.TrimPrefix(reason, "hub_refused:") +
			"); the client keeps it locally (change-capture inspect lists it) and marks its place with this gap"
	case strings.HasPrefix(reason, "first_event_"):
		return "the first event seen of this session was " + strings.TrimPrefix(reason, "first_event_") +
			", not its SessionStart: capture was switched on (or the Work started) while the session was already running"
	case strings.HasPrefix(reason, "session_start_"):
		return "the session was started with source " + strings.TrimPrefix(reason, "session_start_") +
			" (a resumed, cleared or compacted conversation): its earlier history happened before this record"
	case strings.HasPrefix(reason, "transcript_"):
		return "the transcript reader stopped at a record it could not use (" + reason + ")"
	}
	return "the client named the reason " + reason
}

var reasonText = map[string]string{
	// identity_uncertain
	"no_provider_identity": "Claude Code's hook payload for this event carries no id (for example UserPromptSubmit or Stop), " +
		"so it was given a local occurrence number; this is normal in every session and loses nothing",
	"claim_limit": "the capture ledger's bound on remembered identities was reached, so this event's identity was not remembered",
	// adapter_started_late
	"unassociated_before_target": "the session's earlier events arrived while the checkout had no current Work, so they were kept only as local facts",
	"transcript_import":          "the session was imported from a saved transcript (change-capture import), which is not proof of live observation",
	// capture_interrupted: the transcript reader (usage records)
	"transcript_replaced":         "the session's transcript file was replaced while it was being read, so the reader started over from the new file",
	"transcript_truncated":        "the session's transcript file became shorter than what was already read, so records may be missing",
	"transcript_malformed_record": "transcript records that were not valid JSON were skipped",
	"transcript_oversized_record": "transcript records over the reader's size bound were skipped",
	"transcript_foreign_session":  "transcript records of another session were skipped",
	"transcript_work_changed":     "the session's Work changed while its transcript was read, so the reading started over for the new Work",
	// capture_interrupted: spool bounds and failures
	"record_limit": "the private spool reached its record limit; capture paused until space was made " +
		"(change-capture deliver, then change-capture compact; or a larger spool: change-capture enable --max-records N --max-bytes N)",
	"byte_limit": "the private spool reached its byte limit; capture paused until space was made " +
		"(change-capture deliver, then change-capture compact; or a larger spool: change-capture enable --max-records N --max-bytes N)",
	"artifact_limit":     "a body was larger than the spool's per-artifact limit, so it was not kept",
	"order_ledger_limit": "the spool's ledger of open action starts was full; the start was kept as an ordinary event",
	"capture_disabled": "capture was turned off (change-capture unconfigure) while the session was open and turned on again later; " +
		"what the session did in between was not observed",
	"no_space":     "the disk was full when the event was written",
	"write_failed": "writing the event to the private spool failed",
	"io_error":     "the disk reported an I/O error when the event was written",
	"lock_timeout": "another hook held the spool for the whole wait and the intake could not take this event (full, or the event too large), " +
		"so it could not be written; the next hook recorded this gap",
	"target_unavailable": "no current Work could be resolved for these events (no Work started, the Hub was unreachable, " +
		"or the Work was paused or taken over), so only sanitized local facts were kept",
	"action_receipt_limit": "the action receipt store was full, so an action start was not recorded",
	"stream_boundary": "another client account continued this session (capture was re-enabled with a new spool, " +
		"or the session moved to a second worktree): what happened between the two accounts was not observed",
	// redacted
	"body_redacted": "shared-conversation mode redacts every body before it is kept; this body needed it",
}

// ResultText explains the words of a tool call's result, as Claude Code
// reports them (ResultWhy: as each agent does).
var ResultText = map[string]string{
	"succeeded": "Claude Code reported that the tool returned (PostToolUse)",
	"failed":    "Claude Code reported that the tool failed (PostToolUseFailure)",
}

// Agent names of the hosts whose sessions a record holds (the capture's
// adapter names).
const (
	AgentClaude = "claude-code"
	AgentCodex  = "codex"
	AgentGemini = "gemini"
)

// agentText is how the texts name each agent.
var agentText = map[string]string{AgentClaude: "Claude Code", AgentCodex: "Codex CLI", AgentGemini: "Gemini CLI"}

// resultText is ResultText for the agents with hook events of their own.
var resultText = map[string]map[string]string{
	AgentCodex: {
		"succeeded": "Codex CLI reported that the tool returned (PostToolUse; for a shell call, exit code 0 in its rollout file)",
		"failed":    "Codex CLI reported that the call failed (PostToolUse with a non-zero exit code in its rollout file, or a failed patch)",
	},
	AgentGemini: {
		"succeeded": "Gemini CLI reported that the tool returned (AfterTool)",
		"failed":    "Gemini CLI reported that the tool failed (AfterTool with an error, or a shell result stating a non-zero exit code)",
	},
}

// ResultWhy explains the result word of a call of a session of agent
// ("" or unknown: as Claude Code reports it).
func ResultWhy(agent, result string) string {
	if t, ok := resultText[agent][result]; ok {
		return t
	}
	return ResultText[result]
}

// ExplainFor is Explain for a gap of a session of agent: the texts name
// that agent where they name the host ("" or unknown: Claude Code).
func ExplainFor(agent, kind, reason string) (meaning, why string) {
	meaning, why = Explain(kind, reason)
	if name, ok := agentText[agent]; ok && agent != AgentClaude {
		meaning = strings.ReplaceAll(meaning, "Claude Code", name)
		why = strings.ReplaceAll(why, "Claude Code", name)
	}
	return meaning, why
}

// driftWhy explains an action's source drift.
func driftWhy(drift string, stale bool) string {
	switch {
	case stale:
		return "not checked: the agent setup changed between the start and the finish, so the finish says nothing about the started setup"
	case drift == "none_observed":
		return "the checkout's source at the finish matched the start (a change undone during the run would not show)"
	case drift == "changed":
		return "the checkout's source at the finish differs from the source the action started on"
	case drift == "unknown":
		return "not checked: the start's source was not bound (for example an unborn branch or a capture bound that stopped the binding)"
	case drift == "":
		return "no finish yet"
	}
	return "drift " + drift
}
