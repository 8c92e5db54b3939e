package hookfile

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// object is a JSON object that keeps its keys in file order and its values
// as raw bytes, so rewriting one key leaves every other one as it was.
type object struct {
	fields []field
}

type field struct {
	key   string
	value json.RawMessage
}

func parseObject(b []byte) (*object, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return nil, fmt.Errorf("invalid JSON: %w", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errors.New("not a JSON object")
	}
	o := &object{}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("invalid JSON: %w", err)
		}
		k, ok := tok.(string)
		if !ok {
			return nil, errors.New("invalid JSON object key")
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, fmt.Errorf("invalid JSON value for %q: %w", k, err)
		}
		if seen[k] {
			return nil, fmt.Errorf("duplicate key %q", k)
		}
		seen[k] = true
		o.fields = append(o.fields, field{k, v})
	}
	if _, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("invalid JSON: %w", err)
	}
	if dec.More() {
		return nil, errors.New("trailing data after the JSON object")
	}
	if _, err := dec.Token(); err == nil {
		return nil, errors.New("trailing data after the JSON object")
	}
	return o, nil
}

func (o *object) get(k string) (json.RawMessage, bool) {
	for _, f := range o.fields {
		if f.key == k {
			return f.value, true
		}
	}
	return nil, false
}

func (o *object) set(k string, v json.RawMessage) {
	for i := range o.fields {
		if o.fields[i].key == k {
			o.fields[i].value = v
			return
		}
	}
	o.fields = append(o.fields, field{k, v})
}

func (o *object) del(k string) {
	for i := range o.fields {
		if o.fields[i].key == k {
			o.fields = append(o.fields[:i], o.fields[i+1:]...)
			return
		}
	}
}

func (o *object) keys() []string {
	out := make([]string, len(o.fields))
	for i, f := range o.fields {
		out[i] = f.key
	}
	return out
}

func (o *object) marshal() (json.RawMessage, error) {
	var buf bytes.Buffer
	buf.WriteByte('{')
	for i, f := range o.fields {
		if i > 0 {
			buf.WriteByte(',')
		}
		kb, err := json.Marshal(f.key)
		if err != nil {
			return nil, err
		}
		buf.Write(kb)
		buf.WriteByte(':')
		buf.Write(f.value)
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}
