package spool

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Every file the spool writes, except the two empty lock files, is framed:
//
//	AGSPOOL1 <type> <key> <length> <sha256-hex>\n<body of exactly length bytes>
//
// so that recovery can tell a fully written temporary file from a torn one,
// and knows from the content alone where the file belongs.
const frameMagic = "AGSPOOL1"

// Frame types.
const (
	typeCommit   = "commit"
	typeScope    = "scope"
	typeLimits   = "limits"
	typeCursor   = "cursor"
	typeEnvelope = "envelope"
	typeAck      = "ack"
	typeArtifact = "artifact"
	typeIndex    = "index"
)

const maxHeaderBytes = 256

// errMalformed reports a file that does not decode as a spool frame.
var errMalformed = errors.New("malformed spool file")

type frame struct {
	typ  string
	key  string
	body []byte
	sum  string // hex sha256 of body
}

func encodeFrame(typ, key string, body []byte) []byte {
	sum := sha256.Sum256(body)
	h := fmt.Sprintf("%s %s %s %d %s\n", frameMagic, typ, key, len(body), hex.EncodeToString(sum[:]))
	out := make([]byte, 0, len(h)+len(body))
	out = append(out, h...)
	return append(out, body...)
}

func validToken(s string) bool {
	if s == "" || len(s) > 80 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// decodeFrame validates b completely: header grammar, exact length and body
// digest. It never panics on hostile input.
func decodeFrame(b []byte) (frame, error) {
	var f frame
	nl := bytes.IndexByte(b[:min(len(b), maxHeaderBytes)], '\n')
	if nl < 0 {
		return f, fmt.Errorf("%w: no header line", errMalformed)
	}
	fields := strings.Split(string(b[:nl]), " ")
	if len(fields) != 5 || fields[0] != frameMagic {
		return f, fmt.Errorf("%w: bad header", errMalformed)
	}
	if !validToken(fields[1]) || !validToken(fields[2]) {
		return f, fmt.Errorf("%w: bad header token", errMalformed)
	}
	n, err := strconv.ParseUint(fields[3], 10, 63)
	if err != nil || fields[3] != strconv.FormatUint(n, 10) {
		return f, fmt.Errorf("%w: bad length", errMalformed)
	}
	body := b[nl+1:]
	if uint64(len(body)) != n {
		return f, fmt.Errorf("%w: length %d, header says %d", errMalformed, len(body), n)
	}
	sum := sha256.Sum256(body)
	hexsum := hex.EncodeToString(sum[:])
	if fields[4] != hexsum {
		return f, fmt.Errorf("%w: body digest mismatch", errMalformed)
	}
	return frame{typ: fields[1], key: fields[2], body: body, sum: hexsum}, nil
}

// Envelope classes, encoded as one letter in outbox file names so that
// admission and the active order ledger need no file reads.
const (
	classEvent   = 'e' // ordinary event
	classStart   = 's' // action start held in the active order ledger
	classFinish  = 'f' // action finish (priority: finishes a started action)
	classPause   = 'g' // capture_interrupted gap (priority)
	classGap     = 'm' // other gap, e.g. content_not_retained (priority)
	classOrder   = 'o' // capture_interrupted gap for a full active order ledger (priority)
	recordDigits = 16
)

func validClass(c byte) bool {
	switch c {
	case classEvent, classStart, classFinish, classPause, classGap, classOrder:
		return true
	}
	return false
}

// outboxName is "<seq:016d>-<class>-<filesize>.rec".
func outboxName(seq uint64, class byte, size int64) string {
	return fmt.Sprintf("%0*d-%c-%d.rec", recordDigits, seq, class, size)
}

type outboxEntry struct {
	name  string
	seq   uint64
	class byte
	size  int64
}

func parseOutboxName(n string) (outboxEntry, bool) {
	base, ok := strings.CutSuffix(n, ".rec")
	if !ok || len(base) < recordDigits+4 || base[recordDigits] != '-' || base[recordDigits+2] != '-' {
		return outboxEntry{}, false
	}
	seq, ok := parseDecimal(base[:recordDigits])
	if !ok || seq == 0 {
		return outboxEntry{}, false
	}
	c := base[recordDigits+1]
	if !validClass(c) {
		return outboxEntry{}, false
	}
	size, ok := parseDecimal(base[recordDigits+3:])
	if !ok || size > 1<<40 || base[recordDigits+3:] != strconv.FormatUint(size, 10) {
		return outboxEntry{}, false
	}
	return outboxEntry{name: n, seq: seq, class: c, size: int64(size)}, true
}

func parseDecimal(s string) (uint64, bool) {
	if s == "" {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	v, err := strconv.ParseUint(s, 10, 64)
	return v, err == nil
}

// ackName is "<seq:016d>.ack".
func ackName(seq uint64) string { return fmt.Sprintf("%0*d.ack", recordDigits, seq) }

func parseAckName(n string) (uint64, bool) {
	base, ok := strings.CutSuffix(n, ".ack")
	if !ok || len(base) != recordDigits {
		return 0, false
	}
	v, ok := parseDecimal(base)
	return v, ok && v > 0
}

// artifactName is "<sha256-hex>-<filesize>.art".
func artifactName(digest string, size int64) string {
	return fmt.Sprintf("%s-%d.art", digest, size)
}

func parseArtifactName(n string) (digest string, size int64, ok bool) {
	base, ok := strings.CutSuffix(n, ".art")
	if !ok || len(base) < 66 || base[64] != '-' || !isHex(base[:64]) {
		return "", 0, false
	}
	v, ok := parseDecimal(base[65:])
	if !ok || v > 1<<40 || base[65:] != strconv.FormatUint(v, 10) {
		return "", 0, false
	}
	return base[:64], int64(v), true
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// Compaction index names: "index-<gen:08d>-<high:016d>.json" once its
// cleanup is done, ".pending" while its cleanup may still be incomplete. high
// is the highest sequence number assigned when the index was written, so the
// next sequence is known from names alone after history was compacted.
func indexName(gen, high uint64, pending bool) string {
	ext := ".json"
	if pending {
		ext = ".pending"
	}
	return fmt.Sprintf("index-%08d-%0*d%s", gen, recordDigits, high, ext)
}

type indexEntry struct {
	name    string
	gen     uint64
	high    uint64
	pending bool
}

func parseIndexName(n string) (indexEntry, bool) {
	rest, ok := strings.CutPrefix(n, "index-")
	if !ok {
		return indexEntry{}, false
	}
	e := indexEntry{name: n}
	if b, ok2 := strings.CutSuffix(rest, ".json"); ok2 {
		rest = b
	} else if b, ok2 := strings.CutSuffix(rest, ".pending"); ok2 {
		rest, e.pending = b, true
	} else {
		return indexEntry{}, false
	}
	if len(rest) != 8+1+recordDigits || rest[8] != '-' {
		return indexEntry{}, false
	}
	g, ok1 := parseDecimal(rest[:8])
	h, ok2 := parseDecimal(rest[9:])
	if !ok1 || !ok2 {
		return indexEntry{}, false
	}
	e.gen, e.high = g, h
	return e, true
}

// envelopeDigest renders the exact envelope digest an acknowledgement must
// carry: the sha256 of the envelope body.
func envelopeDigest(hexsum string) string { return "sha256:" + hexsum }
