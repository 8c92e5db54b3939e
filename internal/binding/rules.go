package binding

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"strings"

	"github.com/agentscm/agentscm/internal/action"
	"github.com/agentscm/agentscm/internal/fsutil"
)

// Recipe is a registered private recipe: a direct argv run at the checkout
// root under a timeout and a combined output bound.
type Recipe struct {
	ID             string   `json:"id"`
	Argv           []string `json:"argv"`
	Coverage       string   `json:"coverage"`
	TimeoutSeconds int      `json:"timeout_seconds"`
	MaxOutputBytes int64    `json:"max_output_bytes"`
	// Digest is the SHA-256 of the recipe's canonical JSON (every field
	// above), computed by agentscm.
	Digest string `json:"digest"`
}

// Recipe bounds.
const (
	MaxRecipes           = 16
	maxRecipeFileBytes   = 64 << 10
	maxRecipeTimeout     = 24 * 60 * 60
	maxRecipeOutputBytes = 64 << 20
	maxRecipeArgs        = 256
)

// recipeFile is the strict JSON object of a recipe file.
type recipeFile struct {
	ID             *string  `json:"id"`
	Argv           []string `json:"argv"`
	Coverage       *string  `json:"coverage"`
	TimeoutSeconds *int     `json:"timeout_seconds"`
	MaxOutputBytes *int64   `json:"max_output_bytes"`
}

// LoadRecipe reads and validates one recipe file (absolute path).
func LoadRecipe(file string) (Recipe, error) {
	if !filepath.IsAbs(file) {
		return Recipe{}, fmt.Errorf("--recipe-file %q is not an absolute path", file)
	}
	b, err := fsutil.ReadFileNoFollow(file, maxRecipeFileBytes)
	if err != nil {
		return Recipe{}, fmt.Errorf("--recipe-file %s: %w", file, err)
	}
	r, err := ParseRecipe(b)
	if err != nil {
		return Recipe{}, fmt.Errorf("--recipe-file %s: %w", file, err)
	}
	return r, nil
}

// ParseRecipe validates a recipe's strict JSON object: every field present,
// no unknown field, an absolute executable.
func ParseRecipe(b []byte) (Recipe, error) {
	var f recipeFile
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return Recipe{}, fmt.Errorf("not a strict recipe object: %w", err)
	}
	if dec.More() {
		return Recipe{}, errors.New("not a strict recipe object: trailing data")
	}
	if f.ID == nil || f.Argv == nil || f.Coverage == nil || f.TimeoutSeconds == nil || f.MaxOutputBytes == nil {
		return Recipe{}, errors.New("a recipe needs id, argv, coverage, timeout_seconds and max_output_bytes")
	}
	r := Recipe{ID: *f.ID, Argv: f.Argv, Coverage: *f.Coverage, TimeoutSeconds: *f.TimeoutSeconds, MaxOutputBytes: *f.MaxOutputBytes}
	if err := action.CheckToken("recipe id", r.ID, 128); err != nil {
		return Recipe{}, err
	}
	if len(r.Argv) == 0 || len(r.Argv) > maxRecipeArgs {
		return Recipe{}, fmt.Errorf("recipe %s: argv must have 1 to %d elements", r.ID, maxRecipeArgs)
	}
	if !path.IsAbs(r.Argv[0]) || path.Clean(r.Argv[0]) != r.Argv[0] {
		return Recipe{}, fmt.Errorf("recipe %s: the executable %q must be a clean absolute path", r.ID, r.Argv[0])
	}
	for _, a := range r.Argv {
		if strings.ContainsRune(a, 0) || len(a) > 4096 {
			return Recipe{}, fmt.Errorf("recipe %s: an argument holds a NUL byte or exceeds 4096 bytes", r.ID)
		}
	}
	if !action.ValidCoverage(r.Coverage) {
		return Recipe{}, fmt.Errorf("recipe %s: coverage %q must be complete, partial or unknown", r.ID, r.Coverage)
	}
	if r.TimeoutSeconds < 1 || r.TimeoutSeconds > maxRecipeTimeout {
		return Recipe{}, fmt.Errorf("recipe %s: timeout_seconds must be 1 to %d", r.ID, maxRecipeTimeout)
	}
	if r.MaxOutputBytes < 1 || r.MaxOutputBytes > maxRecipeOutputBytes {
		return Recipe{}, fmt.Errorf("recipe %s: max_output_bytes must be 1 to %d", r.ID, maxRecipeOutputBytes)
	}
	r.Digest = recipeDigest(r)
	return r, nil
}

// recipeDigest hashes every execution semantic of a recipe in a fixed
// canonical JSON form.
func recipeDigest(r Recipe) string {
	canon, _ := json.Marshal(struct {
		ID             string   `json:"id"`
		Argv           []string `json:"argv"`
		Coverage       string   `json:"coverage"`
		TimeoutSeconds int      `json:"timeout_seconds"`
		MaxOutputBytes int64    `json:"max_output_bytes"`
	}{r.ID, r.Argv, r.Coverage, r.TimeoutSeconds, r.MaxOutputBytes})
	sum := sha256.Sum256(canon)
	return hex.EncodeToString(sum[:])
}

// CheckRecipes refuses more than 16 distinct recipe ids or digests and one id
// registered with two different definitions; exact duplicates collapse.
func CheckRecipes(rs []Recipe) ([]Recipe, error) {
	byID := map[string]string{}
	digests := map[string]bool{}
	var out []Recipe
	for _, r := range rs {
		if d, ok := byID[r.ID]; ok {
			if d != r.Digest {
				return nil, fmt.Errorf("recipe id %q is registered twice with different definitions", r.ID)
			}
			continue
		}
		byID[r.ID] = r.Digest
		digests[r.Digest] = true
		out = append(out, r)
	}
	if len(byID) > MaxRecipes || len(digests) > MaxRecipes {
		return nil, fmt.Errorf("at most %d distinct recipe ids and digests are accepted, got %d ids and %d digests", MaxRecipes, len(byID), len(digests))
	}
	return out, nil
}

// checkSettingsRel validates a Claude settings path relative to the root.
func checkSettingsRel(rel string) error {
	if rel == "" || path.IsAbs(rel) || path.Clean(rel) != rel || rel == "." || strings.HasPrefix(rel, "../") || rel == ".." {
		return fmt.Errorf("claude settings path %q must be a clean path inside the checkout", rel)
	}
	if strings.HasPrefix(rel, ".git/") {
		return fmt.Errorf("claude settings path %q must not be inside .git", rel)
	}
	if !strings.HasSuffix(rel, ".json") {
		return fmt.Errorf("claude settings path %q must name a .json file", rel)
	}
	return nil
}

// RecipeByID returns the binding's registered recipe id.
func (b *Binding) RecipeByID(id string) (Recipe, bool) {
	for _, r := range b.Recipes {
		if r.ID == id {
			return r, true
		}
	}
	return Recipe{}, false
}
