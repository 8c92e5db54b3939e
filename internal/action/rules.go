package action

import (
	"fmt"
	"strings"
	"unicode"
)

// Rule makes a native tool call an action: TOOL=execution:COVERAGE:RESULT_SOURCE.
// The verification result of an execution rule is always unknown.
type Rule struct {
	Tool         string `json:"tool"`
	Kind         string `json:"kind"`
	Coverage     string `json:"coverage"`
	ResultSource string `json:"result_source"`
}

// String renders the rule in its command-line form.
func (r Rule) String() string {
	return r.Tool + "=" + r.Kind + ":" + r.Coverage + ":" + r.ResultSource
}

// Verification is what an execution rule reports about verification.
func (r Rule) Verification() string { return "unknown" }

// DefaultRule is the rule one-step setup installs.
var DefaultRule = Rule{Tool: "Bash", Kind: "execution", Coverage: "partial", ResultSource: "process_exit_code"}

// ValidCoverage reports whether c is a coverage value of the rule (and
// recipe) vocabulary: complete, partial or unknown.
func ValidCoverage(c string) bool {
	return c == "complete" || c == "partial" || c == "unknown"
}

// validResultSource reports a result source of the rule vocabulary.
func validResultSource(s string) bool { return s == "process_exit_code" || s == "unverified" }

// exitCodeTool reports the only tools whose hook payload can carry a
// process exit code.
func exitCodeTool(t string) bool { return t == "Bash" || t == "PowerShell" }

// ParseRule parses and validates TOOL=execution:COVERAGE:RESULT_SOURCE.
func ParseRule(s string) (Rule, error) {
	tool, spec, ok := strings.Cut(s, "=")
	parts := strings.Split(spec, ":")
	if !ok || len(parts) != 3 {
		return Rule{}, fmt.Errorf("--action-rule %q: want TOOL=execution:COVERAGE:RESULT_SOURCE", s)
	}
	r := Rule{Tool: tool, Kind: parts[0], Coverage: parts[1], ResultSource: parts[2]}
	if err := CheckToken("tool", r.Tool, 256); err != nil {
		return Rule{}, fmt.Errorf("--action-rule %q: %w", s, err)
	}
	if r.Kind != "execution" {
		return Rule{}, fmt.Errorf("--action-rule %q: rule kind %q is not supported; use execution", s, r.Kind)
	}
	if !ValidCoverage(r.Coverage) {
		return Rule{}, fmt.Errorf("--action-rule %q: coverage %q must be complete, partial or unknown", s, r.Coverage)
	}
	if !validResultSource(r.ResultSource) {
		return Rule{}, fmt.Errorf("--action-rule %q: result source %q must be process_exit_code or unverified", s, r.ResultSource)
	}
	if r.ResultSource == "process_exit_code" && !exitCodeTool(r.Tool) {
		return Rule{}, fmt.Errorf("--action-rule %q: process_exit_code is accepted only for Bash and PowerShell", s)
	}
	return r, nil
}

// ParseRules parses repeated --action-rule values, refusing two rules for
// one tool.
func ParseRules(specs []string) ([]Rule, error) {
	seen := map[string]bool{}
	var out []Rule
	for _, s := range specs {
		r, err := ParseRule(s)
		if err != nil {
			return nil, err
		}
		if seen[r.Tool] {
			return nil, fmt.Errorf("--action-rule: more than one rule for tool %q", r.Tool)
		}
		seen[r.Tool] = true
		out = append(out, r)
	}
	return out, nil
}

// RuleFor returns the rule of rules for tool, if any.
func RuleFor(rules []Rule, tool string) (Rule, bool) {
	for _, r := range rules {
		if r.Tool == tool {
			return r, true
		}
	}
	return Rule{}, false
}

// CheckToken validates a bounded printable identifier without spaces, '='
// or ':' (a rule's tool, a recipe's id).
func CheckToken(name, v string, limit int) error {
	if v == "" {
		return fmt.Errorf("%s is empty", name)
	}
	if len(v) > limit {
		return fmt.Errorf("%s is longer than %d bytes", name, limit)
	}
	for _, r := range v {
		if unicode.IsSpace(r) || !unicode.IsPrint(r) || r == '=' || r == ':' {
			return fmt.Errorf("%s %q has a space, control character, '=' or ':'", name, v)
		}
	}
	return nil
}
