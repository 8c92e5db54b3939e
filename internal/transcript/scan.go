package transcript

import (
	"bytes"
	"encoding/json"
)

// Most transcript bytes are records the reader does not use (attachments
// with rendered context, tool results in metadata-only capture). Decoding
// each with encoding/json costs two full passes; head instead walks the
// top-level object once, jumping over string contents with IndexByte, and
// returns the "type" and "sessionId" values. Only the records the parser
// uses are then decoded in full, strictly.

// head is the top level of one record.
type head struct {
	typ, session string
	hasSession   bool
}

// scanHead checks that line is one structurally well-formed JSON object and
// returns its top-level type and sessionId. It accepts every line that
// json.Valid accepts (FuzzScanHead checks this); it is more lenient only
// inside values it skips (escape sequences, control characters, number
// syntax), which the records it lets through never contribute.
func scanHead(line []byte) (head, bool) {
	var h head
	i := skipWS(line, 0)
	if i >= len(line) || line[i] != '{' {
		return h, false
	}
	i = skipWS(line, i+1)
	if i < len(line) && line[i] == '}' {
		return h, skipWS(line, i+1) == len(line)
	}
	for {
		if i >= len(line) || line[i] != '"' {
			return h, false
		}
		kEnd, ok := skipString(line, i)
		if !ok {
			return h, false
		}
		key := line[i+1 : kEnd-1]
		i = skipWS(line, kEnd)
		if i >= len(line) || line[i] != ':' {
			return h, false
		}
		i = skipWS(line, i+1)
		vEnd, ok := skipValue(line, i, 0)
		if !ok {
			return h, false
		}
		if string(line[i:vEnd]) == "null" {
			// A later key wins, as in encoding/json; null names nothing.
			switch string(key) {
			case "type":
				h.typ = ""
			case "sessionId":
				h.session, h.hasSession = "", false
			}
		} else if string(key) == "type" || string(key) == "sessionId" {
			var s string
			if json.Unmarshal(line[i:vEnd], &s) == nil {
				if key[0] == 't' {
					h.typ = s
				} else {
					h.session, h.hasSession = s, true
				}
			} else if key[0] == 's' {
				// A non-string sessionId names no session we observe.
				h.session, h.hasSession = string(line[i:vEnd]), true
			}
		}
		i = skipWS(line, vEnd)
		if i >= len(line) {
			return h, false
		}
		if line[i] == '}' {
			return h, skipWS(line, i+1) == len(line)
		}
		if line[i] != ',' {
			return h, false
		}
		i = skipWS(line, i+1)
	}
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index after the string starting at b[i] == '"'.
func skipString(b []byte, i int) (int, bool) {
	j := i + 1
	for {
		k := bytes.IndexByte(b[j:], '"')
		if k < 0 {
			return 0, false
		}
		q := j + k
		// The quote is escaped when an odd number of backslashes precede it.
		n := 0
		for p := q - 1; p > i && b[p] == '\\'; p-- {
			n++
		}
		if n%2 == 0 {
			return q + 1, true
		}
		j = q + 1
	}
}

const maxDepth = 512

func skipValue(b []byte, i, depth int) (int, bool) {
	if i >= len(b) || depth > maxDepth {
		return 0, false
	}
	switch c := b[i]; {
	case c == '"':
		return skipString(b, i)
	case c == '{' || c == '[':
		closer := byte('}')
		if c == '[' {
			closer = ']'
		}
		i = skipWS(b, i+1)
		if i < len(b) && b[i] == closer {
			return i + 1, true
		}
		for {
			if c == '{' {
				if i >= len(b) || b[i] != '"' {
					return 0, false
				}
				end, ok := skipString(b, i)
				if !ok {
					return 0, false
				}
				i = skipWS(b, end)
				if i >= len(b) || b[i] != ':' {
					return 0, false
				}
				i = skipWS(b, i+1)
			}
			end, ok := skipValue(b, i, depth+1)
			if !ok {
				return 0, false
			}
			i = skipWS(b, end)
			if i >= len(b) {
				return 0, false
			}
			if b[i] == closer {
				return i + 1, true
			}
			if b[i] != ',' {
				return 0, false
			}
			i = skipWS(b, i+1)
		}
	case c == 't':
		return literal(b, i, "true")
	case c == 'f':
		return literal(b, i, "false")
	case c == 'n':
		return literal(b, i, "null")
	case c == '-' || (c >= '0' && c <= '9'):
		j := i + 1
		for j < len(b) && (b[j] >= '0' && b[j] <= '9' || b[j] == '.' || b[j] == 'e' || b[j] == 'E' || b[j] == '+' || b[j] == '-') {
			j++
		}
		return j, true
	}
	return 0, false
}

func literal(b []byte, i int, lit string) (int, bool) {
	if !bytes.HasPrefix(b[i:], []byte(lit)) {
		return 0, false
	}
	return i + len(lit), true
}
