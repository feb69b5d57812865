package s3_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/objstore"
	"github.com/mediaworker/mediaworker/objstore/s3"
	"github.com/mediaworker/mediaworker/objstore/storetest"
)

func config(m *testenv.MinIO) s3.Config {
	cfg := s3.DefaultConfig()
	cfg.Endpoint = m.Endpoint
	cfg.AccessKey = m.AccessKey
	cfg.SecretKey = m.SecretKey
	return cfg
}

// gwConfig is the store's configuration for versitygw, the S3 server the tests run against.
func gwConfig(g *testenv.VersityGW) s3.Config {
	cfg := s3.DefaultConfig()
	cfg.Endpoint, cfg.AccessKey, cfg.SecretKey = g.Endpoint, g.AccessKey, g.SecretKey
	return cfg
}

func newStore(t *testing.T, cfg s3.Config) *s3.Store {
	t.Helper()
	s, err := s3.New(cfg)
	if err != nil {
		t.Fatalf("s3.New: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// The contract on MinIO too: sites that still run it.
func TestContractMinIO(t *testing.T) {
	m := testenv.StartMinIO(t)
	storetest.Run(t, func(t *testing.T) objstore.Store { return newStore(t, config(m)) })
}

func TestURL(t *testing.T) {
	cfg := s3.DefaultConfig()
	cfg.Endpoint = "minio.local:9000"
	s := newStore(t, cfg)
	if got, want := s.URL("media", "a dir/ph oto.jpg"), "http://minio.local:9000/media/a%20dir/ph%20oto.jpg"; got != want {
		t.Errorf("URL = %q, want %q", got, want)
	}
	cfg.UseTLS = true
	if got, want := newStore(t, cfg).URL("media", "k.jpg"), "https://minio.local:9000/media/k.jpg"; got != want {
		t.Errorf("URL with TLS = %q, want %q", got, want)
	}
	cfg.PublicURL = "https://cdn.example.com/assets/"
	if got, want := newStore(t, cfg).URL("media", "x/y z.webp"), "https://cdn.example.com/assets/media/x/y%20z.webp"; got != want {
		t.Errorf("URL with PublicURL = %q, want %q", got, want)
	}
}

func TestConfigValidate(t *testing.T) {
	if err := s3.DefaultConfig().Validate(); err != nil {
		t.Fatalf("DefaultConfig is invalid: %v", err)
	}
	for name, mutate := range map[string]func(*s3.Config){
		"scheme in endpoint": func(c *s3.Config) { c.Endpoint = "http://127.0.0.1:9000" },
		"empty endpoint":     func(c *s3.Config) { c.Endpoint = "" },
		"half credentials":   func(c *s3.Config) { c.AccessKey = "a" },
		"relative public":    func(c *s3.Config) { c.PublicURL = "cdn.example.com" },
		"tiny parts":         func(c *s3.Config) { c.PartSize = 1 << 20 },
		"zero retries":       func(c *s3.Config) { c.MaxRetries = 0 },
		"zero timeout":       func(c *s3.Config) { c.Timeout = 0 },
	} {
		cfg := s3.DefaultConfig()
		mutate(&cfg)
		if err := cfg.Validate(); err == nil {
			t.Errorf("%s: Validate accepted %+v", name, cfg)
		}
		if _, err := s3.New(cfg); err == nil {
			t.Errorf("%s: New accepted %+v", name, cfg)
		}
	}
}

// TestOutage checks what readiness and the pipeline see when the S3 server goes away and comes back:
// errors that are transient (not ErrNotFound), returned within the caller's deadline, and recovery
// without a new Store.
func TestOutage(t *testing.T) {
	m := testenv.StartS3(t)
	s := newStore(t, gwConfig(m))
	ctx := t.Context()
	if err := s.EnsureBucket(ctx, "media"); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, "media", "k", strings.NewReader("v"), 1, "text/plain"); err != nil {
		t.Fatal(err)
	}

	m.Stop()
	short, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	start := time.Now()
	if err := s.Ping(short); err == nil {
		t.Error("Ping succeeded with the S3 server stopped")
	}
	_, err := s.Stat(short, "media", "k")
	if err == nil || objstore.IsPermanent(err) {
		t.Errorf("Stat with the S3 server stopped = %v, want a transient error", err)
	}
	if took := time.Since(start); took > 4*time.Second {
		t.Errorf("calls against a stopped S3 server took %s", took)
	}

	m.Start()
	testenv.Eventually(t, 10*time.Second, func() error { return s.Ping(ctx) })
	info, err := s.Stat(ctx, "media", "k")
	if err != nil || info.Size != 1 {
		t.Fatalf("Stat after restart = %+v, %v", info, err)
	}
}

func TestBadCredentials(t *testing.T) {
	m := testenv.StartS3(t)
	cfg := gwConfig(m)
	cfg.SecretKey = "wrong-secret"
	s := newStore(t, cfg)
	err := s.Ping(t.Context())
	if err == nil {
		t.Fatal("Ping with a wrong secret succeeded")
	}
	if errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("bad credentials reported as not found: %v", err)
	}
}
