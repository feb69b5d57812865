package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/mediaworker/mediaworker/app"
)

const webhookSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

func TestConfigFileWebhookEndpoints(t *testing.T) {
	path := writeConfig(t, `webhooks:
  retry_schedule: 1s,1m
  endpoints:
    - name: api
      url: https://api.example/hooks?token=abc
      secrets: [`+webhookSecret+`]
      events: [response]
      buckets: media
      timeout: 5s
    - name: audit
      url: https://audit.example/hooks
      ed25519_key: whsk_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=
      allow_private: false
      concurrency: 2
`)
	cfg := app.DefaultConfig()
	c := newCommand("run", "", "")
	bindRunSettings(c, &cfg)
	if _, err := c.parse([]string{"--config", path}); err != nil {
		t.Fatal(err)
	}
	if !applyRecipes(c, &cfg, os.Stderr) {
		t.Fatal("refused")
	}
	w := cfg.Webhooks
	if len(w.Endpoints) != 2 || w.Endpoints[0].Name != "api" || w.Endpoints[0].Buckets[0] != "media" || w.Endpoints[0].Timeout.String() != "5s" ||
		w.Endpoints[1].Concurrency != 2 || len(w.Schedule) != 2 || w.Schedule[1].String() != "1m0s" {
		t.Fatalf("decoded: %+v", w)
	}
	if err := cfg.Webhooks.Validate(); err != nil {
		t.Fatal(err)
	}

	// `config` masks the secrets and the URL's query.
	code, out, errs := run(t, "config", "--config", path, "--webhook-url", "https://one.example/h?sig=flagtoken", "--webhook-secret", webhookSecret)
	if strings.Contains(out, "MfKQ9r8") || strings.Contains(out, "AAECAwQF") || strings.Contains(out, "token=abc") || strings.Contains(out, "flagtoken") ||
		!strings.Contains(out, "https://one.example/h ") || !strings.Contains(out, "webhook endpoint: api https://api.example/hooks") {
		t.Fatalf("config output (exit %d) shows a secret or lacks the endpoints:\n%s%s", code, out, errs)
	}
}

func TestConfigFileWebhookMistakes(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{"webhooks:\n  endpoints:\n    - name: api\n      url: https://a.example/\n      secret: x\n", `:5:7: webhooks.endpoints[0].secret: unknown key "secret" (did you mean "secrets"?)`},
		{"webhooks:\n  endpoints:\n    - name: api\n      url: https://a.example/\n      secrets: [whsec_AAAA]\n", `:3:7: webhooks.endpoints[0]: webhook endpoint "api": secret 1: is 3 bytes; Standard Webhooks asks for 24–64`},
		{"webhooks:\n  endpoints:\n    - name: api\n      url: http://10.0.0.1/\n      secrets: [" + webhookSecret + "]\n", "is private (RFC 1918, 10/8); set allow_private"},
		{"webhooks:\n  endpoints:\n    - name: api\n      url: https://a.example/\n      secrets: [" + webhookSecret + "]\n      timeout: 5\n", ":6:16: webhooks.endpoints[0].timeout: must be text"},
		{"webhooks:\n  endpoints: {name: api}\n", "webhooks.endpoints: must be a list of endpoints"},
	} {
		path := writeConfig(t, tc.body)
		code, out, errs := run(t, "config", "check", path)
		if code != exitUsage || !strings.Contains(errs, tc.want) {
			t.Errorf("%q: exit %d, want %q in\n%s%s", tc.body, code, tc.want, out, errs)
		}
	}
	// The simple case's flags are checked too: a secret shorter than the spec allows is refused.
	code, _, errs := run(t, "config", "--webhook-url", "https://a.example/", "--webhook-secret", "whsec_AAAA")
	if code != exitUsage || !strings.Contains(errs, "is 3 bytes") {
		t.Errorf("short flag secret: exit %d: %s", code, errs)
	}
	code, _, errs = run(t, "config", "--webhook-url", "http://127.0.0.1:9/h", "--webhook-secret", webhookSecret)
	if code != exitUsage || !strings.Contains(errs, "loopback") {
		t.Errorf("loopback without allow: exit %d: %s", code, errs)
	}
}

func TestWebhooksTestCommand(t *testing.T) {
	var hits atomic.Int32
	var sig atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		sig.Store(r.Header.Get("webhook-signature"))
	}))
	defer srv.Close()
	code, _, errs := run(t, "webhooks", "test", "--secret", webhookSecret, srv.URL)
	if code != exitFailure || !strings.Contains(errs, "loopback") || hits.Load() != 0 {
		t.Fatalf("without --allow-private: exit %d, %d hits: %s", code, hits.Load(), errs)
	}
	code, out, errs := run(t, "webhooks", "test", "--secret", webhookSecret, "--allow-private", srv.URL)
	if code != exitOK || !strings.Contains(out, "delivered: HTTP 200") || hits.Load() != 1 || !strings.HasPrefix(sig.Load().(string), "v1,") {
		t.Fatalf("with --allow-private: exit %d, %d hits: %s%s", code, hits.Load(), out, errs)
	}
	code, out, _ = run(t, "webhooks", "secret")
	if code != exitOK || !strings.HasPrefix(out, "whsec_") || len(strings.TrimSpace(out)) != len("whsec_")+44 {
		t.Fatalf("secret: %d %q", code, out)
	}
	code, out, _ = run(t, "webhooks", "public-key", "whsk_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=")
	if code != exitOK || !strings.HasPrefix(out, "whpk_") {
		t.Fatalf("public-key: %d %q", code, out)
	}
}
