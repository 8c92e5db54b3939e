package s3

import (
	"os"
	"path/filepath"
	"testing"
)

func TestParseURI(t *testing.T) {
	for _, tc := range []struct {
		uri            string
		bucket, prefix string
		ok             bool
	}{
		{"s3://hub", "hub", "", true},
		{"s3://hub/", "hub", "", true},
		{"s3://hub/team/objects/", "hub", "team/objects", true},
		{"s3://hub/a//b", "", "", false},
		{"s3://hub/../x", "", "", false},
		{"s3://", "", "", false},
		{"s3://key:secret@hub/x", "", "", false},
		{"http://hub/x", "", "", false},
		{"/srv/objects", "", "", false},
	} {
		c, err := ParseURI(tc.uri)
		if (err == nil) != tc.ok || c.Bucket != tc.bucket || c.Prefix != tc.prefix {
			t.Errorf("ParseURI(%q) = %+v, %v", tc.uri, c, err)
		}
	}
}

func TestFromEnv(t *testing.T) {
	env := map[string]string{"AWS_ENDPOINT_URL": "http://127.0.0.1:9000", "AWS_DEFAULT_REGION": "eu-west-1",
		"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"}
	c := FromEnv(Config{Bucket: "b"}, func(k string) string { return env[k] })
	if c.Endpoint != "http://127.0.0.1:9000" || c.Region != "eu-west-1" || c.Creds == nil {
		t.Fatalf("FromEnv = %+v", c)
	}
	v, err := c.Creds.GetWithContext(nil)
	if err != nil || v.AccessKeyID != "k" || v.SecretAccessKey != "s" {
		t.Fatalf("credentials = %+v, %v", v, err)
	}
	env["AWS_ENDPOINT_URL_S3"] = "https://s3.example"
	if c := FromEnv(Config{}, func(k string) string { return env[k] }); c.Endpoint != "https://s3.example" {
		t.Fatalf("AWS_ENDPOINT_URL_S3 not preferred: %q", c.Endpoint)
	}
	// Without the variables, the shared credentials file and profile.
	file := filepath.Join(t.TempDir(), "credentials")
	os.WriteFile(file, []byte("[default]\naws_access_key_id = d\naws_secret_access_key = ds\n[team]\naws_access_key_id = tk\naws_secret_access_key = ts\n"), 0o600)
	env = map[string]string{"AWS_SHARED_CREDENTIALS_FILE": file, "AWS_PROFILE": "team"}
	v, err = FromEnv(Config{}, func(k string) string { return env[k] }).Creds.GetWithContext(nil)
	if err != nil || v.AccessKeyID != "tk" || v.SecretAccessKey != "ts" {
		t.Fatalf("file credentials = %+v, %v", v, err)
	}
}
