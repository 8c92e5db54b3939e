package action

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestParseRule(t *testing.T) {
	for _, tc := range []struct {
		in, err string
	}{
		{"Bash=execution:partial:process_exit_code", ""},
		{"PowerShell=execution:complete:process_exit_code", ""},
		{"Edit=execution:unknown:unverified", ""},
		{"Edit=execution:unknown:process_exit_code", "only for Bash and PowerShell"},
		{"Bash=verification:partial:unverified", "not supported"},
		{"Bash=execution:most:unverified", "coverage"},
		{"Bash=execution:partial:guess", "result source"},
		{"Bash", "want TOOL="},
		{"=execution:partial:unverified", "tool is empty"},
		{"My Tool=execution:partial:unverified", "space"},
	} {
		r, err := ParseRule(tc.in)
		if tc.err == "" {
			if err != nil || r.String() != tc.in {
				t.Errorf("ParseRule(%q) = %v, %v; want it back", tc.in, r, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("ParseRule(%q) error %v; want one containing %q", tc.in, err, tc.err)
		}
	}
	if _, err := ParseRules([]string{"Bash=execution:partial:unverified", "Bash=execution:complete:unverified"}); err == nil {
		t.Error("two rules for one tool accepted")
	}
	if r, ok := RuleFor([]Rule{DefaultRule}, "Bash"); !ok || r != DefaultRule {
		t.Errorf("RuleFor Bash = %v, %v", r, ok)
	}
	if _, ok := RuleFor([]Rule{DefaultRule}, "Edit"); ok {
		t.Error("RuleFor found a rule for Edit")
	}
}

func TestExplicitExitCodeAndResult(t *testing.T) {
	for _, tc := range []struct {
		resp, field, hook, result string
		code                      int
	}{
		{`{"exit_code":0}`, "integer", "PostToolUse", "succeeded", 0},
		{`{"exitCode":3}`, "integer", "PostToolUse", "failed", 3},
		{`{"exit_code":0,"exitCode":1}`, "malformed", "PostToolUse", "unknown", 0},
		{`{"exit_code":"0"}`, "malformed", "PostToolUse", "unknown", 0},
		{`{"exit_code":1.0}`, "malformed", "PostToolUse", "unknown", 0},
		{`{"stdout":"x"}`, "absent", "PostToolUse", "unknown", 0},
		{``, "absent", "PostToolUseFailure", "failed", 0},
	} {
		code, field := ExplicitExitCode(json.RawMessage(tc.resp))
		if field != tc.field || (field == "integer") != (code != nil) || (code != nil && *code != tc.code) {
			t.Errorf("ExplicitExitCode(%s) = %v, %q", tc.resp, code, field)
		}
		if res, ver := Result(DefaultRule, tc.hook, code); res != tc.result || ver != "unknown" {
			t.Errorf("Result(%s, %s) = %s, %s; want %s, unknown", tc.resp, tc.hook, res, ver, tc.result)
		}
	}
}

func TestIDAndDigest(t *testing.T) {
	if ID("claude-code", "s", "t1") == ID("claude-code", "s", "t2") || !strings.HasPrefix(ID("a", "b", "c"), "act_") {
		t.Error("action ids do not tell tool uses apart")
	}
	if CanonicalInputDigest(json.RawMessage(`{"b":1,"a":"x"}`)) != CanonicalInputDigest(json.RawMessage(` {"a":"x", "b":1}`)) {
		t.Error("key order changes the digest")
	}
	if CanonicalInputDigest(json.RawMessage(`{"a":1}`)) == CanonicalInputDigest(json.RawMessage(`{"a":1.0}`)) {
		t.Error("1 and 1.0 digest alike")
	}
}
