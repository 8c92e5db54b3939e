package hubpage

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"time"
)

// A session is sealed into its cookie: AES-256-GCM under the page's
// session key over the expiry, the CSRF token and the token secret. No
// instance keeps state per session, so several hub serve instances that
// share a key (--page-session-key-file) accept each other's sessions, and
// the secret is never readable from the cookie (nor by page scripts:
// HttpOnly). Each request re-authenticates the secret, so a revoked token
// ends every session of it at once.

// KeyBytes is the length of a session key.
const KeyBytes = 32

// maxCookieBytes bounds the cookie a request may present.
const maxCookieBytes = 1024

const sessionAAD = "agentscm-hub-page-session-v1"

// DeriveKey turns a key file's content (at least KeyBytes bytes of random
// data) into a session key.
func DeriveKey(content []byte) ([]byte, error) {
	if len(content) < KeyBytes {
		return nil, fmt.Errorf("a page session key needs at least %d bytes, not %d", KeyBytes, len(content))
	}
	sum := sha256.Sum256(append([]byte(sessionAAD+"\x00"), content...))
	return sum[:], nil
}

func randomKey() []byte {
	k := make([]byte, KeyBytes)
	if _, err := rand.Read(k); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err))
	}
	return k
}

type sealer struct{ aead cipher.AEAD }

func newSealer(key []byte) (*sealer, error) {
	if len(key) != KeyBytes {
		return nil, fmt.Errorf("hubpage: the session key is %d bytes, not %d", len(key), KeyBytes)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &sealer{aead: aead}, nil
}

// seal returns the cookie value of a session.
func (s *sealer) seal(sess *session) string {
	plain := make([]byte, 8, 8+len(sess.csrf)+1+len(sess.secret))
	binary.BigEndian.PutUint64(plain, uint64(sess.expires.Unix()))
	plain = append(plain, sess.csrf...)
	plain = append(plain, 0)
	plain = append(plain, sess.secret...)
	nonce := make([]byte, s.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		panic(fmt.Sprintf("crypto/rand: %v", err))
	}
	return base64.RawURLEncoding.EncodeToString(s.aead.Seal(nonce, nonce, plain, []byte(sessionAAD)))
}

var errBadSession = errors.New("not a session of this Hub page")

// open returns the session sealed in a cookie value, expired or not.
func (s *sealer) open(v string) (*session, error) {
	if len(v) > maxCookieBytes {
		return nil, errBadSession
	}
	b, err := base64.RawURLEncoding.DecodeString(v)
	if err != nil || len(b) < s.aead.NonceSize() {
		return nil, errBadSession
	}
	plain, err := s.aead.Open(nil, b[:s.aead.NonceSize()], b[s.aead.NonceSize():], []byte(sessionAAD))
	if err != nil || len(plain) < 8+64+1 || plain[8+64] != 0 {
		return nil, errBadSession
	}
	exp := int64(binary.BigEndian.Uint64(plain[:8]))
	csrf := string(plain[8 : 8+64])
	if _, err := hex.DecodeString(csrf); err != nil {
		return nil, errBadSession
	}
	return &session{expires: time.Unix(exp, 0), csrf: csrf, secret: string(plain[8+64+1:])}, nil
}

// cookieID names a cookie value in the sign-out list.
func cookieID(v string) string {
	sum := sha256.Sum256([]byte(v))
	return hex.EncodeToString(sum[:16])
}
