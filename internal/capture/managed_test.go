package capture

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentscm/agentscm/internal/agent"
	"github.com/agentscm/agentscm/internal/binding"
)

// TestManagedRecipeExactCommand: only the exact visible Bash command of a
// registered recipe's runner matches; prefixes, suffixes, other shell
// commands, other tools and a binding without a runner do not.
func TestManagedRecipeExactCommand(t *testing.T) {
	r, err := binding.ParseRecipe([]byte(`{"id":"unit-test","argv":["/usr/bin/true"],"coverage":"complete","timeout_seconds":5,"max_output_bytes":10}`))
	if err != nil {
		t.Fatal(err)
	}
	bd := &binding.Binding{Root: "/repo", Recipes: []binding.Recipe{r}, Runner: "/opt/agent scm/agentscm"}
	exact := RunnerCommand(bd.Runner, "unit-test")
	if exact != `'/opt/agent scm/agentscm' change-capture run-recipe --id unit-test` {
		t.Fatalf("runner command %q", exact)
	}
	input := func(cmd any) json.RawMessage {
		b, _ := json.Marshal(map[string]any{"command": cmd, "description": "x", "timeout": 600000})
		return b
	}
	cases := []struct {
		name string
		tool string
		in   json.RawMessage
		bd   *binding.Binding
		want bool
	}{
		{"exact", "Bash", input(exact), bd, true},
		{"prefix", "Bash", input("cd /repo && " + exact), bd, false},
		{"suffix", "Bash", input(exact + " | tee out"), bd, false},
		{"trailing space", "Bash", input(exact + " "), bd, false},
		{"unquoted path", "Bash", input(strings.ReplaceAll(exact, "'", "")), bd, false},
		{"other id", "Bash", input(RunnerCommand(bd.Runner, "other")), bd, false},
		{"other tool", "PowerShell", input(exact), bd, false},
		{"not a string", "Bash", input([]string{exact}), bd, false},
		{"no runner", "Bash", input(exact), &binding.Binding{Recipes: bd.Recipes}, false},
		{"no recipes", "Bash", input(exact), &binding.Binding{Runner: bd.Runner}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := bashCommandDigest(&agent.Payload{ToolName: tc.tool, ToolInput: tc.in})
			if _, got := managedRecipe(tc.bd, tc.tool, d); got != tc.want {
				t.Fatalf("match %v, want %v", got, tc.want)
			}
		})
	}
}

// TestRecipeGuidanceBound: the guidance is refused, not truncated, past
// its bound, and a relative runner gives none.
func TestRecipeGuidanceBound(t *testing.T) {
	var rs []binding.Recipe
	for i := range binding.MaxRecipes {
		r, _ := binding.ParseRecipe([]byte(`{"id":"r` + strings.Repeat("x", 100) + string(rune('a'+i)) + `","argv":["/usr/bin/true"],"coverage":"complete","timeout_seconds":5,"max_output_bytes":10}`))
		rs = append(rs, r)
	}
	if g, err := RecipeGuidance(&binding.Binding{Root: "/repo", Recipes: rs, Runner: "/" + strings.Repeat("p", 1000)}); err == nil || g != "" {
		t.Fatalf("an oversized guidance: %d bytes, %v", len(g), err)
	}
	if g, err := RecipeGuidance(&binding.Binding{Root: "/repo", Recipes: rs[:1], Runner: "agentscm"}); err == nil || g != "" {
		t.Fatalf("a relative runner: %q, %v", g, err)
	}
	if g, err := RecipeGuidance(&binding.Binding{Root: "/repo", Recipes: rs, Runner: "/usr/bin/agentscm"}); err != nil || len(g) > MaxGuidanceBytes {
		t.Fatalf("16 recipes: %d bytes, %v", len(g), err)
	}
}
