package capsule

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// FuzzManifestValidate feeds hostile before/after.json bytes to the strict
// decoder and validator: an accepted manifest has only safe, unique paths.
func FuzzManifestValidate(f *testing.F) {
	f.Add([]byte(`{"schema_version":1,"entries":[{"path":"a","type":"file","size":1,"mode":"0644","mtime_ns":1,"sha256":"` + strings.Repeat("a", 64) + `"}]}`))
	f.Add([]byte(`{"schema_version":1,"entries":[{"path":"../x","type":"dir","mode":"0755"}]}`))
	f.Add([]byte(`{"schema_version":1,"entries":[{"path":".agentdiff/lock","type":"symlink","mode":"0777","target":"/etc"}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var m Manifest
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if dec.Decode(&m) != nil || m.validate() != nil {
			return
		}
		seen := map[string]bool{}
		for _, e := range m.Entries {
			if validRel(e.Path) != nil || seen[e.Path] || strings.Contains(e.Path, "..") && strings.Contains("/"+e.Path+"/", "/../") {
				t.Fatalf("accepted unsafe manifest path %q", e.Path)
			}
			seen[e.Path] = true
		}
		// diff over accepted manifests must not panic.
		diff(&m, &Manifest{SchemaVersion: 1})
	})
}
