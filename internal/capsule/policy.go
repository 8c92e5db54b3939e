// Package capsule implements agentdiff evidence transactions: a command runs
// between two no-follow manifests of a project root, its changes are
// classified against a version-1 policy, bounded backups and a sealed
// SHA-256 manifest make up the capsule, and rollback restores only paths whose
// current state still equals the recorded post-run state.
package capsule

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"time"
)

// Decision is a policy outcome, ordered allow < review < deny.
type Decision string

// Policy decisions.
const (
	Allow  Decision = "allow"
	Review Decision = "review"
	Deny   Decision = "deny"
)

func (d Decision) rank() int {
	switch d {
	case Allow:
		return 0
	case Review:
		return 1
	case Deny:
		return 2
	}
	return -1
}

// Stronger returns the stronger of two decisions (deny > review > allow).
func Stronger(a, b Decision) Decision {
	if b.rank() > a.rank() {
		return b
	}
	return a
}

// PolicyVersion is the only policy format version this package reads.
const PolicyVersion = 1

// Policy is the strict version-1 policy file.
type Policy struct {
	Version     int          `json:"version"`
	Description string       `json:"description,omitempty"`
	Paths       PathPolicy   `json:"paths"`
	Commands    CommandRules `json:"commands"`
	Limits      Limits       `json:"limits"`
	Backups     BackupBounds `json:"backups"`
}

// PathPolicy decides each changed path: every matching rule is considered and
// the strongest decision wins (deny > review > allow); Default applies when no
// rule matches.
type PathPolicy struct {
	Default Decision   `json:"default"`
	Rules   []PathRule `json:"rules"`
}

// PathRule applies Decision to changed paths matching Pattern.
type PathRule struct {
	Pattern  string   `json:"pattern"`
	Decision Decision `json:"decision"`
	Reason   string   `json:"reason,omitempty"`
}

// CommandRules decide whether the executable may launch.
type CommandRules struct {
	Default Decision      `json:"default"`
	Rules   []CommandRule `json:"rules"`
}

// CommandRule matches the executable by base name ("rm") or absolute path
// ("/usr/bin/rm"), compared with the resolved executable.
type CommandRule struct {
	Executable string   `json:"executable"`
	Decision   Decision `json:"decision"`
	Reason     string   `json:"reason,omitempty"`
}

// Limits bound a run; 0 means unlimited. Any exceeded limit is a deny outcome.
type Limits struct {
	MaxFilesChanged int64    `json:"max_files_changed"`
	MaxFilesDeleted int64    `json:"max_files_deleted"`
	MaxBytesWritten int64    `json:"max_bytes_written"`
	MaxDuration     Duration `json:"max_duration"`
}

// BackupBounds bound the before-state content kept for recovery.
type BackupBounds struct {
	MaxFileBytes  int64 `json:"max_file_bytes"`
	MaxTotalBytes int64 `json:"max_total_bytes"`
	MaxFiles      int64 `json:"max_files"`
}

// Duration is a time.Duration written as a Go duration string ("10m").
type Duration time.Duration

// MarshalJSON writes the duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads a duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration must be a string such as \"10m\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	if v < 0 {
		return fmt.Errorf("duration %q is negative", s)
	}
	*d = Duration(v)
	return nil
}

// DefaultPolicy is the safe built-in policy: writes to Git metadata,
// environment files, keys and certificates are denied; every other change
// needs review.
func DefaultPolicy() *Policy {
	deny := func(p, why string) PathRule { return PathRule{Pattern: p, Decision: Deny, Reason: why} }
	return &Policy{
		Version:     PolicyVersion,
		Description: "agentdiff built-in default: deny Git metadata, environment files, keys and certificates; review everything else",
		Paths: PathPolicy{
			Default: Review,
			Rules: []PathRule{
				deny(".git", "Git metadata"),
				deny(".git/**", "Git metadata"),
				deny("**/.env", "environment file"),
				deny("**/.env.*", "environment file"),
				deny("**/*.pem", "key or certificate"),
				deny("**/*.key", "private key"),
				deny("**/*.p12", "key store"),
				deny("**/*.pfx", "key store"),
				deny("**/*.crt", "certificate"),
				deny("**/*.cer", "certificate"),
				deny("**/id_rsa*", "SSH key"),
				deny("**/id_ecdsa*", "SSH key"),
				deny("**/id_ed25519*", "SSH key"),
				deny("**/.ssh/**", "SSH configuration"),
			},
		},
		Commands: CommandRules{Default: Allow, Rules: []CommandRule{}},
		Limits: Limits{
			MaxFilesChanged: 1000,
			MaxFilesDeleted: 100,
			MaxBytesWritten: 256 << 20,
			MaxDuration:     Duration(time.Hour),
		},
		Backups: BackupBounds{
			MaxFileBytes:  8 << 20,
			MaxTotalBytes: 256 << 20,
			MaxFiles:      100000,
		},
	}
}

// MaxPolicyBytes bounds a policy file.
const MaxPolicyBytes = 1 << 20

// ErrPolicy marks an invalid policy.
var ErrPolicy = errors.New("invalid policy")

// ParsePolicy decodes and validates a version-1 policy, refusing unknown keys,
// duplicate keys, trailing data and missing sections.
func ParsePolicy(data []byte) (*Policy, error) {
	if len(data) > MaxPolicyBytes {
		return nil, fmt.Errorf("%w: larger than %d bytes", ErrPolicy, MaxPolicyBytes)
	}
	{
		dec := json.NewDecoder(bytes.NewReader(data))
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrPolicy, err)
		}
		if _, err := dec.Token(); err != io.EOF {
			return nil, fmt.Errorf("%w: trailing data after the policy object", ErrPolicy)
		}
	}
	if err := checkDuplicateKeys(data); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrPolicy, err)
	}
	var probe struct {
		Version *int `json:"version"`
	}
	if err := json.Unmarshal(data, &probe); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrPolicy, err)
	}
	if probe.Version == nil {
		return nil, fmt.Errorf("%w: missing \"version\"", ErrPolicy)
	}
	if *probe.Version != PolicyVersion {
		return nil, fmt.Errorf("%w: unsupported version %d (this agentdiff reads version %d)", ErrPolicy, *probe.Version, PolicyVersion)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var p Policy
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrPolicy, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: trailing data after the policy object", ErrPolicy)
	}
	for _, key := range []string{"paths", "commands", "limits", "backups"} {
		if !hasTopKey(data, key) {
			return nil, fmt.Errorf("%w: missing section %q", ErrPolicy, key)
		}
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &p, nil
}

func hasTopKey(data []byte, key string) bool {
	var m map[string]json.RawMessage
	if json.Unmarshal(data, &m) != nil {
		return false
	}
	_, ok := m[key]
	return ok
}

// checkDuplicateKeys refuses an object with the same key twice at any depth.
func checkDuplicateKeys(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	var walk func(path string) error
	walk = func(p string) error {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		switch tok {
		case json.Delim('{'):
			seen := map[string]bool{}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return err
				}
				k := kt.(string)
				if seen[k] {
					return fmt.Errorf("duplicate key %q in %s", k, p)
				}
				seen[k] = true
				if err := walk(p + "." + k); err != nil {
					return err
				}
			}
			_, err = dec.Token()
			return err
		case json.Delim('['):
			for i := 0; dec.More(); i++ {
				if err := walk(fmt.Sprintf("%s[%d]", p, i)); err != nil {
					return err
				}
			}
			_, err = dec.Token()
			return err
		}
		return nil
	}
	return walk("$")
}

// Validate checks decisions, patterns and bounds.
func (p *Policy) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrPolicy, fmt.Sprintf(format, a...))
	}
	if p.Version != PolicyVersion {
		return bad("version must be %d", PolicyVersion)
	}
	if p.Paths.Default.rank() < 0 {
		return bad("paths.default must be allow, review or deny, not %q", p.Paths.Default)
	}
	if p.Paths.Rules == nil {
		return bad("paths.rules is required (use [] for none)")
	}
	for i, r := range p.Paths.Rules {
		if r.Decision.rank() < 0 {
			return bad("paths.rules[%d].decision must be allow, review or deny, not %q", i, r.Decision)
		}
		if err := validPattern(r.Pattern); err != nil {
			return bad("paths.rules[%d].pattern: %v", i, err)
		}
	}
	if p.Commands.Default != Allow && p.Commands.Default != Review && p.Commands.Default != Deny {
		return bad("commands.default must be allow, review or deny, not %q", p.Commands.Default)
	}
	if p.Commands.Rules == nil {
		return bad("commands.rules is required (use [] for none)")
	}
	for i, r := range p.Commands.Rules {
		if r.Decision.rank() < 0 {
			return bad("commands.rules[%d].decision must be allow, review or deny, not %q", i, r.Decision)
		}
		if r.Executable == "" || strings.ContainsRune(r.Executable, 0) || (strings.Contains(r.Executable, "/") && !path.IsAbs(r.Executable)) {
			return bad("commands.rules[%d].executable must be a base name or an absolute path, not %q", i, r.Executable)
		}
	}
	l := p.Limits
	if l.MaxFilesChanged < 0 || l.MaxFilesDeleted < 0 || l.MaxBytesWritten < 0 {
		return bad("limits must not be negative")
	}
	b := p.Backups
	if b.MaxFileBytes < 0 || b.MaxTotalBytes < 0 || b.MaxFiles < 0 {
		return bad("backup bounds must not be negative")
	}
	if b.MaxFileBytes > b.MaxTotalBytes {
		return bad("backups.max_file_bytes (%d) exceeds backups.max_total_bytes (%d)", b.MaxFileBytes, b.MaxTotalBytes)
	}
	return nil
}

func validPattern(p string) error {
	if p == "" {
		return errors.New("empty pattern")
	}
	if strings.HasPrefix(p, "/") || strings.HasSuffix(p, "/") || strings.ContainsRune(p, 0) {
		return fmt.Errorf("%q must be relative, without a leading or trailing slash", p)
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("%q has an empty, \".\" or \"..\" segment", p)
		}
		if seg == "**" {
			continue
		}
		if strings.Contains(seg, "**") {
			return fmt.Errorf("%q: ** must be a whole segment", p)
		}
		if _, err := path.Match(seg, ""); err != nil {
			return fmt.Errorf("%q: %w", p, err)
		}
	}
	return nil
}

// MatchPattern reports whether the slash-separated path matches pattern:
// "*", "?" and "[...]" match within one segment, a "**" segment matches zero
// or more segments.
func MatchPattern(pattern, name string) bool {
	return matchSegs(strings.Split(pattern, "/"), strings.Split(name, "/"))
}

func matchSegs(ps, ns []string) bool {
	for len(ps) > 0 {
		if ps[0] == "**" {
			rest := ps[1:]
			for i := 0; i <= len(ns); i++ {
				if matchSegs(rest, ns[i:]) {
					return true
				}
			}
			return false
		}
		if len(ns) == 0 {
			return false
		}
		if ok, _ := path.Match(ps[0], ns[0]); !ok {
			return false
		}
		ps, ns = ps[1:], ns[1:]
	}
	return len(ns) == 0
}

// Provenance says which rule produced a decision.
type Provenance struct {
	Source  string `json:"source"` // "rule" or "default"
	Index   int    `json:"index"`  // rule index when Source is "rule", else -1
	Pattern string `json:"pattern,omitempty"`
	Match   string `json:"executable,omitempty"`
	Reason  string `json:"reason,omitempty"`
}

// PathDecision is the policy decision for one path with its provenance.
type PathDecision struct {
	Decision   Decision   `json:"decision"`
	Provenance Provenance `json:"provenance"`
	// Matched lists every matching rule index, in file order.
	Matched []int `json:"matched_rules"`
}

// DecidePath applies the path rules: the strongest matching decision wins and
// its first rule in file order is the provenance.
func (p *Policy) DecidePath(rel string) PathDecision {
	out := PathDecision{Decision: p.Paths.Default, Provenance: Provenance{Source: "default", Index: -1}, Matched: []int{}}
	best := -1
	for i, r := range p.Paths.Rules {
		if !MatchPattern(r.Pattern, rel) {
			continue
		}
		out.Matched = append(out.Matched, i)
		if best < 0 || r.Decision.rank() > p.Paths.Rules[best].Decision.rank() {
			best = i
		}
	}
	if best >= 0 {
		r := p.Paths.Rules[best]
		out.Decision = r.Decision
		out.Provenance = Provenance{Source: "rule", Index: best, Pattern: r.Pattern, Reason: r.Reason}
	}
	return out
}

// CommandDecision is the launch decision for the resolved executable.
type CommandDecision struct {
	Executable string     `json:"executable"`
	Resolved   string     `json:"resolved,omitempty"`
	Decision   Decision   `json:"decision"`
	Provenance Provenance `json:"provenance"`
}

// DecideCommand applies the command rules to the executable as given (argv[0])
// and as resolved; the strongest matching rule wins.
func (p *Policy) DecideCommand(argv0, resolved string) CommandDecision {
	out := CommandDecision{Executable: argv0, Resolved: resolved, Decision: p.Commands.Default, Provenance: Provenance{Source: "default", Index: -1}}
	best := -1
	for i, r := range p.Commands.Rules {
		var ok bool
		if path.IsAbs(r.Executable) {
			ok = r.Executable == resolved || r.Executable == argv0
		} else {
			ok = r.Executable == path.Base(argv0) || (resolved != "" && r.Executable == path.Base(resolved))
		}
		if ok && (best < 0 || r.Decision.rank() > p.Commands.Rules[best].Decision.rank()) {
			best = i
		}
	}
	if best >= 0 {
		r := p.Commands.Rules[best]
		out.Decision = r.Decision
		out.Provenance = Provenance{Source: "rule", Index: best, Match: r.Executable, Reason: r.Reason}
	}
	return out
}

// Marshal returns the canonical indented JSON of the policy.
func (p *Policy) Marshal() []byte {
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		panic(err) // only plain types
	}
	return append(b, '\n')
}
