package spool

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fullAck is readAck's full decode of marker bytes b for seq.
func fullAck(t *testing.T, b []byte, seq uint64) (string, bool) {
	f, err := decodeFrame(b)
	if err != nil || f.typ != typeAck || f.key != fmt.Sprintf("%0*d", recordDigits, seq) {
		return "", false
	}
	d := string(f.body)
	if !strings.HasPrefix(d, "sha256:") || len(d) != 71 || !isHex(d[7:]) {
		return "", false
	}
	return d, true
}

// checkAckFast asserts that the fast check accepts exactly what the full
// decode accepts, with the same digest.
func checkAckFast(t *testing.T, b []byte, seq uint64) {
	t.Helper()
	fd, fok := ackFromFrame(b, seq)
	wd, wok := fullAck(t, b, seq)
	if fok != wok || fd != wd {
		t.Fatalf("marker %q seq %d: fast (%q, %v), full decode (%q, %v)", b, seq, fd, fok, wd, wok)
	}
}

func TestReadAckFastMatchesFullDecode(t *testing.T) {
	dir := t.TempDir()
	digest := envelopeDigest(strings.Repeat("0123456789abcdef", 4))
	for _, seq := range []uint64{1, 143, 9999999999999999} {
		good := encodeFrame(typeAck, fmt.Sprintf("%0*d", recordDigits, seq), []byte(digest))
		if len(good) != ackFrameSize || int64(len(good)) != ackFileSize {
			t.Fatalf("ack frame is %d bytes, ackFrameSize %d, ackFileSize %d", len(good), ackFrameSize, ackFileSize)
		}
		checkAckFast(t, good, seq)
		p := filepath.Join(dir, "m.ack")
		if err := os.WriteFile(p, good, 0o600); err != nil {
			t.Fatal(err)
		}
		if d, ok := readAckFast(p, seq); !ok || d != digest {
			t.Fatalf("a well-formed marker was not accepted: %q %v", d, ok)
		}
		if err := os.WriteFile(p, append([]byte(string(good)), 'x'), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, ok := readAckFast(p, seq); ok {
			t.Fatal("a longer marker file was accepted")
		}
		checkAckFast(t, good, seq+1) // another sequence's marker
		for i := range good {        // every one-byte change
			for _, c := range []byte{'0', 'f', 'F', ' ', '\n', 'x'} {
				b := []byte(string(good))
				if b[i] == c {
					continue
				}
				b[i] = c
				checkAckFast(t, b, seq)
			}
		}
		checkAckFast(t, good[:len(good)-1], seq)
		checkAckFast(t, append([]byte(string(good)), '\n'), seq)
		checkAckFast(t, nil, seq)
	}
	// Uppercase hex in the body is refused by both.
	up := encodeFrame(typeAck, fmt.Sprintf("%0*d", recordDigits, 7), []byte(strings.ToUpper(digest)))
	checkAckFast(t, up, 7)
	// A symlink to a good marker is refused by the fast path (O_NOFOLLOW).
	good := encodeFrame(typeAck, fmt.Sprintf("%0*d", recordDigits, 5), []byte(digest))
	os.WriteFile(filepath.Join(dir, "target"), good, 0o600)
	os.Symlink(filepath.Join(dir, "target"), filepath.Join(dir, "link.ack"))
	if _, ok := readAckFast(filepath.Join(dir, "link.ack"), 5); ok {
		t.Fatal("the fast path followed a symlink")
	}
}

func FuzzReadAckFast(f *testing.F) {
	digest := envelopeDigest(strings.Repeat("ab", 32))
	f.Add(encodeFrame(typeAck, fmt.Sprintf("%0*d", recordDigits, 3), []byte(digest)), uint64(3))
	f.Add([]byte("AGSPOOL1 ack 0000000000000003 71 "), uint64(3))
	f.Fuzz(func(t *testing.T, b []byte, seq uint64) {
		checkAckFast(t, b, seq)
	})
}
