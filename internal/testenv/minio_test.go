package testenv

import (
	"bytes"
	"io"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

func TestCacheDir(t *testing.T) {
	t.Setenv("MW_CACHE_DIR", "/x/mw")
	t.Setenv("XDG_CACHE_HOME", "/x/xdg")
	if d, _ := CacheDir(); d != "/x/mw" {
		t.Errorf("with MW_CACHE_DIR: %q", d)
	}
	t.Setenv("MW_CACHE_DIR", "")
	if d, _ := CacheDir(); d != "/x/xdg/mediaworker" {
		t.Errorf("with XDG_CACHE_HOME: %q", d)
	}
	t.Setenv("XDG_CACHE_HOME", "")
	t.Setenv("HOME", "/x/home")
	if d, _ := CacheDir(); d != filepath.Join("/x/home", ".cache", "mediaworker") {
		t.Errorf("with HOME only: %q", d)
	}
}

// TestMinIOStopStart checks what fault tests rely on: Stop makes the server unreachable, and Start
// brings it back on the same address with the same data.
func TestMinIOStopStart(t *testing.T) {
	m := StartMinIO(t)
	client, err := minio.New(m.Endpoint, &minio.Options{
		Creds:        credentials.NewStaticV4(m.AccessKey, m.SecretKey, ""),
		BucketLookup: minio.BucketLookupPath,
		MaxRetries:   1,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if err := client.MakeBucket(ctx, "media", minio.MakeBucketOptions{}); err != nil {
		t.Fatalf("MakeBucket: %v", err)
	}
	body := []byte("survives a restart")
	if _, err := client.PutObject(ctx, "media", "a/b.txt", bytes.NewReader(body), int64(len(body)), minio.PutObjectOptions{}); err != nil {
		t.Fatalf("PutObject: %v", err)
	}

	m.Stop()
	m.Stop() // idempotent
	hc := &http.Client{Timeout: time.Second}
	if resp, err := hc.Get(m.URL() + "/minio/health/live"); err == nil {
		resp.Body.Close()
		t.Fatal("MinIO still answers after Stop")
	}

	m.Start()
	obj, err := client.GetObject(ctx, "media", "a/b.txt", minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Close()
	got, err := io.ReadAll(obj)
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("after restart: %q, %v", got, err)
	}
}
