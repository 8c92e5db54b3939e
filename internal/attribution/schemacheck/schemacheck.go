// Package schemacheck checks a JSON document against the subset of JSON
// Schema (draft 2020-12) the Agent Trace record schema uses: type,
// required, properties, items, enum, pattern, minimum, maxLength, format
// (uuid, date-time, uri) and local $ref into $defs. Tests use it to check
// agentscm's notes and exports against the vendored specification schema.
package schemacheck

import (
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"time"
)

// Check validates doc against schema and returns every violation found
// (nil when there is none).
func Check(schema, doc []byte) ([]string, error) {
	var s map[string]any
	if err := json.Unmarshal(schema, &s); err != nil {
		return nil, fmt.Errorf("schema: %w", err)
	}
	var d any
	dec := json.NewDecoder(strings.NewReader(string(doc)))
	dec.UseNumber()
	if err := dec.Decode(&d); err != nil {
		return nil, fmt.Errorf("document: %w", err)
	}
	c := &checker{root: s}
	c.check("$", s, d)
	return c.errs, nil
}

type checker struct {
	root map[string]any
	errs []string
}

func (c *checker) fail(at, format string, a ...any) {
	c.errs = append(c.errs, at+": "+fmt.Sprintf(format, a...))
}

func (c *checker) resolve(s map[string]any) map[string]any {
	for {
		ref, ok := s["$ref"].(string)
		if !ok {
			return s
		}
		name, ok := strings.CutPrefix(ref, "#/$defs/")
		defs, _ := c.root["$defs"].(map[string]any)
		def, found := defs[name].(map[string]any)
		if !ok || !found {
			c.fail("schema", "unresolvable $ref %q", ref)
			return map[string]any{}
		}
		s = def
	}
}

var uuidRE = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

func (c *checker) check(at string, s map[string]any, d any) {
	s = c.resolve(s)
	if t, ok := s["type"].(string); ok && !hasType(d, t) {
		c.fail(at, "is %s, not %s", typeOf(d), t)
		return
	}
	if enum, ok := s["enum"].([]any); ok {
		found := false
		for _, e := range enum {
			if fmt.Sprint(e) == fmt.Sprint(d) {
				found = true
			}
		}
		if !found {
			c.fail(at, "%v is not one of %v", d, enum)
		}
	}
	switch v := d.(type) {
	case string:
		if p, ok := s["pattern"].(string); ok && !regexp.MustCompile(p).MatchString(v) {
			c.fail(at, "%q does not match %s", v, p)
		}
		if m, ok := s["maxLength"].(float64); ok && float64(len([]rune(v))) > m {
			c.fail(at, "longer than %v", m)
		}
		switch s["format"] {
		case "uuid":
			if !uuidRE.MatchString(v) {
				c.fail(at, "%q is not a uuid", v)
			}
		case "date-time":
			if _, err := time.Parse(time.RFC3339, v); err != nil {
				c.fail(at, "%q is not an RFC 3339 date-time", v)
			}
		case "uri":
			if u, err := url.Parse(v); err != nil || u.Scheme == "" {
				c.fail(at, "%q is not an absolute URI", v)
			}
		}
	case json.Number:
		if m, ok := s["minimum"].(float64); ok {
			if f, err := v.Float64(); err != nil || f < m {
				c.fail(at, "%v is below the minimum %v", v, m)
			}
		}
	case map[string]any:
		if req, ok := s["required"].([]any); ok {
			for _, r := range req {
				if _, present := v[r.(string)]; !present {
					c.fail(at, "lacks the required %q", r)
				}
			}
		}
		props, _ := s["properties"].(map[string]any)
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if ps, ok := props[k].(map[string]any); ok {
				c.check(at+"."+k, ps, v[k])
			}
		}
	case []any:
		if items, ok := s["items"].(map[string]any); ok {
			for i, e := range v {
				c.check(fmt.Sprintf("%s[%d]", at, i), items, e)
			}
		}
	}
}

func hasType(d any, t string) bool {
	switch t {
	case "object":
		_, ok := d.(map[string]any)
		return ok
	case "array":
		_, ok := d.([]any)
		return ok
	case "string":
		_, ok := d.(string)
		return ok
	case "boolean":
		_, ok := d.(bool)
		return ok
	case "number":
		_, ok := d.(json.Number)
		return ok
	case "integer":
		n, ok := d.(json.Number)
		if !ok {
			return false
		}
		_, err := n.Int64()
		return err == nil
	case "null":
		return d == nil
	}
	return false
}

func typeOf(d any) string {
	switch d.(type) {
	case map[string]any:
		return "object"
	case []any:
		return "array"
	case string:
		return "string"
	case bool:
		return "boolean"
	case json.Number:
		return "number"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", d)
}
