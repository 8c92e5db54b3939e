package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/agentscm/agentscm/internal/client"
	"github.com/agentscm/agentscm/internal/connections"
	"github.com/agentscm/agentscm/internal/delivery"
	"github.com/agentscm/agentscm/internal/event"
	"github.com/agentscm/agentscm/internal/hub/api"
	"github.com/agentscm/agentscm/internal/spool"
)

// changeCaptureConversationCommand is `agentscm change-capture
// conversation`: the shared conversation bodies of a Work on the Hub.
func changeCaptureConversationCommand() *Command {
	return &Command{Name: "conversation", Summary: "list, print or delete the shared conversation bodies of a Work on the Hub", Run: runChangeCaptureConversation}
}

// untrustedBanner frames a printed body: it is agent output, to be read,
// never run.
const (
	untrustedBegin = "----- BEGIN UNTRUSTED AGENT OUTPUT (shared conversation body %s; read it, never run it) -----"
	untrustedEnd   = "----- END UNTRUSTED AGENT OUTPUT -----"
)

// conversationBody is the JSON form of a printed body.
type conversationBody struct {
	WorkID    string `json:"work_id"`
	Digest    string `json:"digest"`
	Untrusted bool   `json:"untrusted"`
	Note      string `json:"note"`
	// Body is the body's JSON (the redacted spool record body) when it is
	// JSON, else BodyText holds it.
	Body     any    `json:"body,omitempty"`
	BodyText string `json:"body_text,omitempty"`
}

func runChangeCaptureConversation(ctx context.Context, env *Env, args []string) error {
	fs := newFlags(env, "agentscm change-capture conversation", "--work-id ID [--digest SHA256 | --delete SHA256 | --upload] [--root PATH] [--format text|json]",
		`Read the shared conversation bodies of a Work on the checkout's Hub: those
uploaded from checkouts in shared-conversation mode (redacted before they
were kept). Only the human who shared a body (any of that person's tokens for
the repository) and Hub admins can read it; a listing shows your own entries
(an admin's: everyone's); anything else is refused with 403, whether or not
the body exists.

  --work-id W               list your entries (state, size, expiry)
  --work-id W --digest D    print one body (untrusted agent output: read it,
                            never run it)
  --work-id W --delete D    delete one body now (a read-write token; an admin
                            deletes every author's copy); it then answers 410
  --work-id W --upload      upload this checkout's shared bodies of the Work
                            that the Hub lacks (a copy whose object it lost
                            returns to awaiting upload)

Bodies expire on the Hub after its retention (hub serve
--shared-conversation-retention-days, 30 days unless changed).`)
	root := fs.String("root", "", rootHelp)
	id := fs.String("work-id", "", "the Work (required)")
	digest := fs.String("digest", "", "print the body with this SHA-256 (64 hex)")
	del := fs.String("delete", "", "delete the body with this SHA-256 (64 hex) now")
	upload := fs.Bool("upload", false, "upload this checkout's shared bodies of the Work that the Hub lacks (such as copies whose object it lost)")
	format := formatFlag(fs)
	if err := parseFlags(env, fs, args, false); err != nil {
		return err
	}
	if *id == "" {
		return usagef("--work-id is required")
	}
	if (*digest != "" && *del != "") || (*upload && (*digest != "" || *del != "")) {
		return usagef("--digest, --delete and --upload are exclusive")
	}
	for _, d := range []string{*digest, *del} {
		if d != "" && !api.IsDigest(strings.TrimPrefix(d, "sha256:")) {
			return usagef("%q is not a SHA-256 digest (64 lowercase hex characters)", d)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, hubTimeout)
	defer cancel()
	cc, conn, err := openCheckout(ctx, env, *root)
	if err != nil {
		return err
	}
	defer conn.Close()
	bc, ok := conn.(client.BodyConn)
	if !ok {
		return errors.New("this connection cannot read shared conversation bodies")
	}
	if l, ok := conn.(*client.Local); ok {
		// The embedded Hub has no server process to sweep every ten
		// minutes: one pass now, so expired bodies answer 410.
		if _, err := l.Sweep(ctx); err != nil {
			fmt.Fprintf(env.Stderr, "agentscm: retention sweep of the embedded Hub: %v\n", err)
		}
	}
	switch {
	case *upload:
		res, err := uploadShared(ctx, env, bc, cc, *id)
		if *format == "json" && err == nil {
			return writeJSON(env.Stdout, res)
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(env.Stdout, "work %s: %d shared bodies in this checkout's spool, %d lacked by the Hub, %d uploaded\n", *id, res.Shared, res.Missing, res.Uploaded)
		return nil
	case *digest != "":
		d := strings.TrimPrefix(*digest, "sha256:")
		b, err := bc.GetBody(ctx, *id, d)
		if err != nil {
			return err
		}
		return printConversationBody(env.Stdout, *id, d, b, *format == "json")
	case *del != "":
		d := strings.TrimPrefix(*del, "sha256:")
		res, err := bc.DeleteBody(ctx, *id, d)
		if err != nil {
			return err
		}
		if *format == "json" {
			return writeJSON(env.Stdout, res)
		}
		fmt.Fprintf(env.Stdout, "deleted body %s of work %s (%d declaration(s)); it now answers 410\n", d, *id, res.Deleted)
		return nil
	}
	list, err := bc.ListBodies(ctx, *id)
	if err != nil {
		return err
	}
	if *format == "json" {
		return writeJSON(env.Stdout, list)
	}
	fmt.Fprintf(env.Stdout, "work %s: %d shared conversation bodies (kept %d days on this Hub)\n", list.WorkID, len(list.Bodies), list.SharedConversationRetentionDays)
	for _, b := range list.Bodies {
		until := "expires " + ts(b.ExpiresAt)
		if b.EndedAt != 0 {
			until = b.State + " " + ts(b.EndedAt)
		}
		fmt.Fprintf(env.Stdout, "  %s  %-15s %8d bytes  %s  by %s  session %s  %s\n", b.Digest, b.State, b.Bytes, b.Retention, b.Author, b.Session, until)
	}
	if list.Omitted > 0 {
		fmt.Fprintf(env.Stdout, "  (%d more not listed)\n", list.Omitted)
	}
	return nil
}

// printConversationBody prints a body framed as untrusted agent output.
// Text mode writes it between banner lines with control characters other
// than newline and tab escaped, so it cannot drive the terminal.
func printConversationBody(out io.Writer, workID, digest string, b []byte, asJSON bool) error {
	if asJSON {
		cb := conversationBody{WorkID: workID, Digest: digest, Untrusted: true, Note: "untrusted agent output: read it, never run it"}
		var v any
		if err := json.Unmarshal(b, &v); err == nil {
			cb.Body = v
		} else {
			cb.BodyText = string(b)
		}
		return writeJSON(out, cb)
	}
	fmt.Fprintf(out, untrustedBegin+"\n", digest)
	fmt.Fprintln(out, escapeControl(string(b)))
	fmt.Fprintln(out, untrustedEnd)
	return nil
}

// escapeControl replaces control characters (but newline and tab) and
// invalid UTF-8 with visible escapes.
func escapeControl(s string) string {
	var sb strings.Builder
	for i, r := range s {
		switch {
		case r == utf8.RuneError && !strings.HasPrefix(s[i:], "\uFFFD"):
			fmt.Fprintf(&sb, `\x%02x`, s[i])
		case r == '\n' || r == '\t':
			sb.WriteRune(r)
		case r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0):
			fmt.Fprintf(&sb, `\u%04x`, r)
		default:
			sb.WriteRune(r)
		}
	}
	return sb.String()
}

// uploadShared uploads the checkout's shared bodies of a Work that the Hub
// lacks: only for a binding still in shared-conversation mode, and only
// bodies its spool retains from shared-conversation capture.
func uploadShared(ctx context.Context, env *Env, bc client.BodyConn, c connections.Connection, workID string) (delivery.UploadResult, error) {
	res := delivery.UploadResult{WorkID: workID}
	st, err := configStore(env)
	if err != nil {
		return res, err
	}
	cfg, err := st.Bindings().Load()
	if err != nil {
		return res, err
	}
	b := cfg.ForPath(c.Root)
	if b == nil {
		return res, fmt.Errorf("no enabled capture binding for %s: nothing to upload", c.Root)
	}
	if b.CaptureMode != event.ModeSharedConversation {
		return res, fmt.Errorf("%s is in %s mode: bodies leave the machine only in shared-conversation mode", c.Root, b.CaptureMode)
	}
	sp, err := spool.OpenReadOnly(b.Spool)
	if err != nil {
		return res, err
	}
	recs, err := sp.Events()
	if err != nil {
		return res, err
	}
	return delivery.UploadShared(ctx, bc, b.Spool, workID, recs)
}
