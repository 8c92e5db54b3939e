package capsule

import (
	"path/filepath"
	"strings"
	"testing"
)

// agentdiff's stored argv and task go through the one redaction function:
// a curl -u password inside an argument comes out with the same marker as
// in a hook body or a transcript copy.
func TestStoredArgvUsesTheOneRedaction(t *testing.T) {
	const secret = "S3cr3tPw-9q"
	const redacted = "curl -u bob:[REDACTED:flag_value] https://api.example"
	root := project(t)
	out := runArgv(t, root, nil, 0, "sh", "-c", "true # curl -u bob:"+secret+" https://api.example")
	s := read(t, filepath.Join(out.dir, FileMetadata))
	if strings.Contains(s, secret) || !strings.Contains(s, redacted) {
		t.Fatalf("%s: %s", FileMetadata, s)
	}
}
