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

// FuzzBaseManifest feeds hostile base manifest bytes to the line parser: an
// accepted base is in strict walk order, hashes exactly its regular files and
// never panics.
func FuzzBaseManifest(f *testing.F) {
	sum := strings.Repeat("ab", 32)
	f.Add([]byte(baseHeader + "d 0755 0 1 2 3 4 0 0 - \"a\"\nf 0644 5 1 2 3 5 1 1 " + sum + " \"a/b\"\nl 0777 3 1 2 3 6 0 0 - \"a/c\" \"../x\"\n"))
	f.Add([]byte(baseHeader + "f 0644 5 1 2 3 5 1 1 " + sum + " \"q\\\"\\n\"\n"))
	f.Add([]byte(baseHeader + "d 0755 0 1 2 3 4 0 0 - \"b\"\nd 0755 0 1 2 3 4 0 0 - \"a\"\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		ents, err := readBase(bytes.NewReader(b), "")
		if err != nil {
			return
		}
		for i, e := range ents {
			if i > 0 && walkCompare(ents[i-1].Path, e.Path) >= 0 {
				t.Fatalf("accepted out of order %q after %q", e.Path, ents[i-1].Path)
			}
			if (e.Type == "file") != validSum(e.SHA256) {
				t.Fatalf("accepted %+v", e)
			}
			// What it accepted encodes back to the same line.
			var line []byte
			line = appendEntryLine(line, &ents[i])
			again, err := readBase(bytes.NewReader(append([]byte(baseHeader), line...)), "")
			if err != nil || len(again) != 1 || again[0].Path != e.Path || again[0].Target != e.Target {
				t.Fatalf("round trip of %+v: %v", e, err)
			}
		}
	})
}

// FuzzManifestResolve feeds hostile version-2 after.json bytes (changes and
// removals to a before manifest) to the strict decoder, resolve and validate:
// an accepted manifest has only safe, unique paths and diff does not panic.
func FuzzManifestResolve(f *testing.F) {
	sum := strings.Repeat("c", 64)
	f.Add([]byte(`{"schema_version":2,"phase":"after","base":{"file":"before.json","entries":2},"changes":[{"path":"a","type":"file","size":1,"mode":"0644","mtime_ns":1,"sha256":"` + sum + `"}],"removed":["d"],"total":1}`))
	f.Add([]byte(`{"schema_version":2,"base":{"file":"before.json","entries":2},"changes":[{"path":"../x","type":"dir","mode":"0755"}],"total":3}`))
	f.Add([]byte(`{"schema_version":2,"base":{"file":"manifest-base","sha256":"` + sum + `","entries":0},"total":0}`))
	f.Add([]byte(`{"schema_version":2,"base":{"file":"before.json","entries":2},"removed":["zz"],"total":1}`))
	f.Add([]byte(`{"schema_version":2,"base":{"file":"before.json","entries":2},"changes":[{"path":"d","type":"dir","mode":"0755"}],"removed":["d"],"total":2}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		before := &Manifest{SchemaVersion: 2, Entries: []ManifestEntry{
			{Path: "a", Type: "file", Mode: "0644", SHA256: strings.Repeat("a", 64)},
			{Path: "d", Type: "dir", Mode: "0755"},
		}}
		var m Manifest
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if dec.Decode(&m) != nil || m.resolve(t.TempDir(), before) != nil || m.validate() != nil {
			return
		}
		seen := map[string]bool{}
		for _, e := range m.Entries {
			if validRel(e.Path) != nil || seen[e.Path] {
				t.Fatalf("accepted unsafe or duplicate path %q", e.Path)
			}
			seen[e.Path] = true
		}
		if len(m.Entries) != m.Total {
			t.Fatalf("%d entries, total %d", len(m.Entries), m.Total)
		}
		diff(before, &m)
	})
}
