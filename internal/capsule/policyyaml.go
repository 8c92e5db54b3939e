package capsule

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	yaml "go.yaml.in/yaml/v3"
)

// DefaultPolicyFile is the policy agentdiff reads from the project root
// when --policy is not given: a YAML version-1 policy, the same schema as
// the JSON one.
const DefaultPolicyFile = "agentdiff.yaml"

// IsYAMLPolicy reports whether a policy path names a YAML file.
func IsYAMLPolicy(path string) bool {
	return strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".yml")
}

// ParsePolicyYAML decodes a version-1 policy written in YAML: one document,
// a mapping with string keys, no duplicate keys (the YAML decoder refuses
// them), converted to JSON and then checked exactly as ParsePolicy checks a
// JSON policy (unknown keys, missing sections, values).
func ParsePolicyYAML(data []byte) (*Policy, error) {
	if len(data) > MaxPolicyBytes {
		return nil, fmt.Errorf("%w: larger than %d bytes", ErrPolicy, MaxPolicyBytes)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("%w: yaml: %w", ErrPolicy, err)
	}
	var extra any
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: yaml: a policy file holds one document", ErrPolicy)
	}
	if _, ok := doc.(map[string]any); !ok {
		return nil, fmt.Errorf("%w: yaml: the policy is a mapping with string keys", ErrPolicy)
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("%w: yaml: %w (keys must be strings)", ErrPolicy, err)
	}
	return ParsePolicy(b)
}
