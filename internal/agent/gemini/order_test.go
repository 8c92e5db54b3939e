package gemini

import (
	"os"
	"path/filepath"
	"testing"
)

// TestOrdererRecovers: with Recover set, the counter file of the current
// boot is trusted as it is (Recover is not asked); a missing file is a new
// session; a file of another boot, one without a boot (an older release),
// or one a crash left unreadable is raised to what Recover finds, and never
// lowered by it; without Recover an unreadable file is an error, as before.
func TestOrdererRecovers(t *testing.T) {
	for _, tc := range []struct {
		name      string
		file      string // "" : no file
		recovered int
		recover   bool
		want      string // the id of the next start
		asked     bool
		wantErr   bool
	}{
		{"new session", "", 7, true, "order-1", false, false},
		{"this boot", `{"starts":2,"finishes":2,"boot":"boot-b"}`, 7, true, "order-3", false, false},
		{"another boot, stale", `{"starts":2,"finishes":2,"boot":"boot-a"}`, 7, true, "order-8", true, false},
		{"another boot, current", `{"starts":9,"finishes":9,"boot":"boot-a"}`, 7, true, "order-10", true, false},
		{"no boot", `{"starts":2,"finishes":2}`, 4, true, "order-5", true, false},
		{"torn by a crash", ``, 3, true, "order-4", true, false},
		{"torn, no Recover", ``, 3, false, "", false, true},
		{"other boot, no Recover", `{"starts":2,"finishes":2,"boot":"boot-a"}`, 7, false, "order-3", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, session+".json")
			if tc.file != "" || tc.name == "torn by a crash" || tc.name == "torn, no Recover" {
				if err := os.WriteFile(path, []byte(tc.file), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			asked := false
			o := Orderer{Dir: dir, Boot: "boot-b"}
			if tc.recover {
				o.Recover = func(s, cwd string) (int, error) {
					if s != session || cwd != "/repo" {
						t.Errorf("Recover(%q, %q)", s, cwd)
					}
					asked = true
					return tc.recovered, nil
				}
			}
			p, err := o.Decode(hook("BeforeTool", map[string]any{"tool_name": "read_file", "tool_input": map[string]any{}}))
			if tc.wantErr {
				if err == nil {
					t.Fatalf("decoded %+v, want an error", p)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.ToolUseID != tc.want || asked != tc.asked {
				t.Fatalf("id %s (Recover asked: %v), want %s (%v)", p.ToolUseID, asked, tc.want, tc.asked)
			}
			// The finish pairs with it, from the current boot's file.
			asked = false
			p, err = o.Decode(hook("AfterTool", map[string]any{"tool_name": "read_file", "tool_response": map[string]any{"llmContent": "ok"}}))
			if err != nil || p.ToolUseID != tc.want || asked {
				t.Fatalf("finish: %v %s (Recover asked: %v), want %s", err, p.ToolUseID, asked, tc.want)
			}
		})
	}
}
