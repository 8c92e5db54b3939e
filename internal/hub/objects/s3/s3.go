// Package s3 keeps the Hub's objects in an S3-compatible bucket (minio-go):
// content-addressed keys <prefix>/<first two hex>/<digest>, bounded on write
// and on read, and uploaded in parts above PartSize. It moves bytes: the
// Hub checks them against their digest through objects.Verified. It is linked only by the command tree
// (internal/cli), never by agentscm-hook.
package s3

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/agentscm/agentscm/internal/fsutil"
	"github.com/agentscm/agentscm/internal/hub/objects"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// DefaultPartSize is the multipart threshold and part size: an object
// larger than it is uploaded in parts of this size (S3's minimum is 5 MiB).
const DefaultPartSize = 8 << 20

// Config says where the objects are.
type Config struct {
	Bucket string
	// Prefix is prepended to every key ("" for the bucket's root); it has no
	// leading or trailing slash.
	Prefix string
	// Endpoint is the server's URL (http:// or https://); "" is AWS S3.
	Endpoint string
	Region   string
	// Creds signs requests; nil means the chain of FromEnv.
	Creds *credentials.Credentials
	// PartSize is the multipart threshold (0: DefaultPartSize).
	PartSize uint64
	// Transport is the HTTP transport (nil: minio-go's default).
	Transport http.RoundTripper
}

// ParseURI reads s3://bucket/prefix into a Config.
func ParseURI(uri string) (Config, error) {
	u, err := url.Parse(uri)
	if err != nil || u.Scheme != "s3" || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return Config{}, fmt.Errorf("object store %q is not s3://BUCKET[/PREFIX]", uri)
	}
	prefix := strings.Trim(u.Path, "/")
	for _, part := range strings.Split(prefix, "/") {
		if prefix != "" && (part == "" || part == "." || part == "..") {
			return Config{}, fmt.Errorf("object store %q: the prefix has an empty, . or .. segment", uri)
		}
	}
	return Config{Bucket: u.Host, Prefix: prefix}, nil
}

// FromEnv completes c from the usual variables: AWS_ENDPOINT_URL_S3 or
// AWS_ENDPOINT_URL, AWS_REGION or AWS_DEFAULT_REGION, and credentials from
// AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (/ AWS_SESSION_TOKEN), else the
// shared credentials file (AWS_SHARED_CREDENTIALS_FILE, default
// ~/.aws/credentials; profile AWS_PROFILE, default "default").
func FromEnv(c Config, getenv func(string) string) Config {
	if c.Endpoint == "" {
		c.Endpoint = getenv("AWS_ENDPOINT_URL_S3")
	}
	if c.Endpoint == "" {
		c.Endpoint = getenv("AWS_ENDPOINT_URL")
	}
	if c.Region == "" {
		c.Region = getenv("AWS_REGION")
	}
	if c.Region == "" {
		c.Region = getenv("AWS_DEFAULT_REGION")
	}
	if c.Creds == nil {
		if id := getenv("AWS_ACCESS_KEY_ID"); id != "" {
			c.Creds = credentials.NewStaticV4(id, getenv("AWS_SECRET_ACCESS_KEY"), getenv("AWS_SESSION_TOKEN"))
		} else {
			c.Creds = credentials.NewFileAWSCredentials(getenv("AWS_SHARED_CREDENTIALS_FILE"), getenv("AWS_PROFILE"))
		}
	}
	return c
}

// Store is a bucket of objects.
type Store struct {
	c        *minio.Client
	bucket   string
	prefix   string
	partSize uint64
}

var _ objects.Store = (*Store)(nil)

// Open connects to the bucket and checks that it exists.
func Open(ctx context.Context, c Config) (*Store, error) {
	host, secure := "s3.amazonaws.com", true
	if c.Endpoint != "" {
		u, err := url.Parse(c.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") {
			return nil, fmt.Errorf("S3 endpoint %q is not http(s)://HOST[:PORT]", c.Endpoint)
		}
		host, secure = u.Host, u.Scheme == "https"
	}
	if c.PartSize == 0 {
		c.PartSize = DefaultPartSize
	}
	if c.PartSize < 5<<20 {
		return nil, fmt.Errorf("S3 part size %d is below the 5 MiB minimum", c.PartSize)
	}
	if c.Creds == nil {
		return nil, errors.New("S3: no credentials")
	}
	cl, err := minio.New(host, &minio.Options{Creds: c.Creds, Secure: secure, Region: c.Region, Transport: c.Transport})
	if err != nil {
		return nil, fmt.Errorf("S3 client: %w", err)
	}
	ok, err := cl.BucketExists(ctx, c.Bucket)
	if err != nil {
		return nil, fmt.Errorf("S3 bucket %s: %w", c.Bucket, err)
	}
	if !ok {
		return nil, fmt.Errorf("S3 bucket %s does not exist", c.Bucket)
	}
	return &Store{c: cl, bucket: c.Bucket, prefix: c.Prefix, partSize: c.PartSize}, nil
}

func (s *Store) key(digest string) (string, error) {
	if !objects.ValidDigest(digest) {
		return "", objects.ErrBadName
	}
	k := digest[:2] + "/" + digest
	if s.prefix != "" {
		k = s.prefix + "/" + k
	}
	return k, nil
}

func notFound(err error) bool {
	r := minio.ToErrorResponse(err)
	return r.Code == minio.NoSuchKey || r.StatusCode == http.StatusNotFound
}

// Put stores at most limit bytes from r under digest. An object already
// present is kept as it is (its bytes are the same, by their name).
func (s *Store) Put(ctx context.Context, digest string, r io.Reader, limit int64) error {
	k, err := s.key(digest)
	if err != nil {
		return err
	}
	b, err := fsutil.ReadBounded(r, limit)
	if err != nil {
		return fmt.Errorf("read object: %w", err)
	}
	if has, err := s.Has(ctx, digest); err != nil {
		return err
	} else if has {
		return nil
	}
	// DisableContentSha256: the body is verified by its digest
	// (objects.Verified), and over plain HTTP some servers keep minio-go's
	// chunk-signature framing of a multipart upload in the stored bytes
	// (caught by Verified on read if they do).
	_, err = s.c.PutObject(ctx, s.bucket, k, bytes.NewReader(b), int64(len(b)), minio.PutObjectOptions{
		ContentType: "application/octet-stream", PartSize: s.partSize, DisableContentSha256: true,
	})
	if err != nil {
		return fmt.Errorf("store object: %w", err)
	}
	return nil
}

// Get returns an object's bytes (at most limit).
func (s *Store) Get(ctx context.Context, digest string, limit int64) ([]byte, error) {
	k, err := s.key(digest)
	if err != nil {
		return nil, err
	}
	o, err := s.c.GetObject(ctx, s.bucket, k, minio.GetObjectOptions{})
	if err != nil {
		if notFound(err) {
			return nil, objects.ErrNotFound
		}
		return nil, fmt.Errorf("read object: %w", err)
	}
	defer o.Close()
	b, err := fsutil.ReadBounded(o, limit)
	if err != nil {
		if notFound(err) {
			return nil, objects.ErrNotFound
		}
		return nil, fmt.Errorf("read object: %w", err)
	}
	return b, nil
}

// Has reports whether an object is present.
func (s *Store) Has(ctx context.Context, digest string) (bool, error) {
	k, err := s.key(digest)
	if err != nil {
		return false, err
	}
	if _, err := s.c.StatObject(ctx, s.bucket, k, minio.StatObjectOptions{}); err != nil {
		if notFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("stat object: %w", err)
	}
	return true, nil
}

// Delete removes an object; a missing object is not an error.
func (s *Store) Delete(ctx context.Context, digest string) error {
	k, err := s.key(digest)
	if err != nil {
		return err
	}
	if err := s.c.RemoveObject(ctx, s.bucket, k, minio.RemoveObjectOptions{}); err != nil && !notFound(err) {
		return fmt.Errorf("delete object: %w", err)
	}
	return nil
}
