package agent

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	"github.com/agentscm/agentscm/internal/event"
)

// SetupComponents are the parts of an agent setup; a hook exposes at most
// model, permission mode and effort, so the others are always unobserved.
var SetupComponents = []string{
	"model", "permission_mode", "effort",
	"system_prompt", "tool_definitions", "mcp_servers", "settings_files", "memory_files", "host_version",
}

const maxSetupValue = 128

// ObservedSetup returns the setup a raw hook payload exposes (model,
// permission_mode, effort; Claude Code 2.1.x sends permission_mode and
// effort as {"level": ...} on tool and turn events, model on some
// SessionStart payloads), or nil when it exposes none of them. Everything
// not observed is listed in Unobserved, so the setup never reads as complete.
func ObservedSetup(raw []byte) *event.Setup {
	var p struct {
		Model          json.RawMessage `json:"model"`
		PermissionMode json.RawMessage `json:"permission_mode"`
		Effort         json.RawMessage `json:"effort"`
	}
	if json.Unmarshal(raw, &p) != nil {
		return nil
	}
	return setupFrom(p.Model, p.PermissionMode, p.Effort)
}

func setupFrom(model, permissionMode, effort json.RawMessage) *event.Setup {
	s := &event.Setup{
		Model:          setupValue(model, "id", "model"),
		PermissionMode: setupValue(permissionMode),
		Effort:         setupValue(effort, "level"),
	}
	if s.Model == "" && s.PermissionMode == "" && s.Effort == "" {
		return nil
	}
	s.Unobserved = []string{}
	for _, c := range SetupComponents {
		if (c == "model" && s.Model != "") || (c == "permission_mode" && s.PermissionMode != "") || (c == "effort" && s.Effort != "") {
			continue
		}
		s.Unobserved = append(s.Unobserved, c)
	}
	b, _ := json.Marshal(s.ArtifactBody())
	sum := sha256.Sum256(b)
	s.Artifact = "sha256:" + hex.EncodeToString(sum[:])
	return s
}

// setupValue reads a bounded identifier given as a string or as an object
// holding it under one of keys.
func setupValue(raw json.RawMessage, keys ...string) string {
	if len(raw) == 0 {
		return ""
	}
	var v string
	if json.Unmarshal(raw, &v) != nil {
		var obj map[string]json.RawMessage
		if json.Unmarshal(raw, &obj) != nil {
			return ""
		}
		for _, k := range keys {
			if json.Unmarshal(obj[k], &v) == nil && v != "" {
				break
			}
		}
	}
	if len(v) > maxSetupValue || checkID("setup", v, maxSetupValue, false) != nil {
		return ""
	}
	return v
}

// RedactBody scrubs a shared-conversation body in place, as hook bodies are.
func RedactBody(b *event.Body) { redactBody(b) }
