package webhooks

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

func TestRefusedAddresses(t *testing.T) {
	for _, a := range []string{
		"127.0.0.1", "127.1.2.3", "10.0.0.1", "172.16.0.1", "172.31.255.255", "192.168.1.1", "100.64.0.1", "100.127.255.254",
		"169.254.169.254", "0.0.0.0", "224.0.0.1", "255.255.255.255", "::1", "::", "fd00::1", "fc00::1", "fe80::1", "fe80::1%eth0",
		"::ffff:127.0.0.1", "::ffff:10.0.0.1", "64:ff9b::7f00:1", "64:ff9b::a00:1", "64:ff9b:1::a9fe:a9fe", "2002:7f00:1::1", "2002:a00:1::",
		"::127.0.0.1", "2001:0:4136:e378:8000:63bf:3fff:fdd2",
	} {
		if refused(netip.MustParseAddr(a)) == "" {
			t.Errorf("%s is not refused", a)
		}
	}
	for _, a := range []string{"93.184.216.34", "1.1.1.1", "100.128.0.1", "172.32.0.1", "2606:4700::1111", "::ffff:93.184.216.34", "64:ff9b::5db8:d822", "2002:5db8:d822::1"} {
		if why := refused(netip.MustParseAddr(a)); why != "" {
			t.Errorf("%s is refused: %s", a, why)
		}
	}
}

func TestConfigRefusesPrivateLiteralsUnlessAllowed(t *testing.T) {
	sec := "whsec_" + strings.Repeat("A", 32) // 24 bytes
	for _, u := range []string{"http://127.0.0.1:9/h", "http://10.0.0.1/h", "https://[::1]/h", "http://[::ffff:10.0.0.1]/h", "http://100.64.1.1/"} {
		e := Endpoint{Name: "x", URL: u, Secrets: []string{sec}}
		if err := e.Validate(); err == nil || !strings.Contains(err.Error(), "allow_private") {
			t.Errorf("%s: %v", u, err)
		}
		e.AllowPrivate = true
		if err := e.Validate(); err != nil {
			t.Errorf("%s with allow_private: %v", u, err)
		}
	}
}

func TestConfigChecksSecrets(t *testing.T) {
	base := Endpoint{Name: "x", URL: "https://hooks.example/h"}
	for _, tc := range []struct {
		secret, want string
	}{
		{"whsec_" + strings.Repeat("A", 28), "21 bytes"},      // too short
		{"whsec_" + strings.Repeat("A", 88), "66 bytes"},      // too long
		{strings.Repeat("A", 32), `must start with "whsec_"`}, // no prefix
		{"whsec_not*base64", "base64"},
	} {
		e := base
		e.Secrets = []string{tc.secret}
		if err := e.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.secret, err, tc.want)
		}
	}
	if err := base.Validate(); err == nil || !strings.Contains(err.Error(), "no signing secret") {
		t.Errorf("no secret: %v", err)
	}
	e := base
	e.Secrets = []string{"whsec_" + strings.Repeat("A", 32)}
	e.Events = []string{"progress", "answers"}
	if err := e.Validate(); err == nil || !strings.Contains(err.Error(), `unknown event "answers"`) {
		t.Errorf("events: %v", err)
	}
	e.Events, e.Buckets = []string{"progress"}, []string{"media"}
	if err := e.Validate(); err == nil || !strings.Contains(err.Error(), "progress events name no bucket") {
		t.Errorf("progress with buckets: %v", err)
	}
	if s := (Endpoint{Name: "x", URL: "https://u:p@h.example/h?token=t", Secrets: e.Secrets}).String(); strings.Contains(s, "AAAA") || strings.Contains(s, "token") || strings.Contains(s, "u:p") {
		t.Errorf("String leaks: %s", s)
	}
}

// A name that resolves to loopback is refused when the connection is made, before any byte is sent.
func TestNameResolvingToLoopbackRefusedAtConnect(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { hits.Add(1) }))
	defer srv.Close()
	port := srv.URL[strings.LastIndex(srv.URL, ":")+1:]
	sec := "whsec_" + strings.Repeat("A", 32)
	e := Endpoint{Name: "x", URL: "http://localhost:" + port + "/h", Secrets: []string{sec}}
	res := SendTest(context.Background(), e, []byte(SampleBody))
	if !errors.Is(res.Err, ErrRefusedAddress) && (res.Err == nil || !strings.Contains(res.Err.Error(), "refused address")) {
		t.Fatalf("want a refusal, got %+v", res)
	}
	if hits.Load() != 0 {
		t.Fatal("the refused endpoint was reached")
	}
	e.AllowPrivate = true
	if res := SendTest(context.Background(), e, []byte(SampleBody)); res.Err != nil || hits.Load() != 1 {
		t.Fatalf("allowed: %+v, hits %d", res, hits.Load())
	}
}

// A redirect is not followed: the 3xx is a failed attempt and the target gets nothing.
func TestRedirectNotFollowed(t *testing.T) {
	var targetHits atomic.Int32
	target := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { targetHits.Add(1) }))
	defer target.Close()
	src := httptest.NewServer(http.RedirectHandler(target.URL, http.StatusTemporaryRedirect))
	defer src.Close()
	e := Endpoint{Name: "x", URL: src.URL, Secrets: []string{"whsec_" + strings.Repeat("A", 32)}, AllowPrivate: true}
	res := SendTest(context.Background(), e, []byte(SampleBody))
	if res.Err == nil || res.Status != http.StatusTemporaryRedirect || !strings.Contains(res.Err.Error(), "not followed") || targetHits.Load() != 0 {
		t.Fatalf("%+v, target hits %d", res, targetHits.Load())
	}
}

// The reference library accepts our signature and rejects a tampered body, a wrong secret and a
// timestamp six minutes old.
func TestReferenceLibraryVerifiesAndRejects(t *testing.T) {
	secret := "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw" // the spec's example secret (24 bytes)
	wrong := "whsec_" + strings.Repeat("B", 32)
	sg, err := newSigner(Endpoint{Secrets: []string{secret}})
	if err != nil {
		t.Fatal(err)
	}
	wh, _ := standardwebhooks.NewWebhook(secret)
	whWrong, _ := standardwebhooks.NewWebhook(wrong)
	body := []byte(SampleBody)
	headers := func(ts time.Time, b []byte) http.Header {
		h := http.Header{}
		h.Set(HeaderID, "msg_1")
		h.Set(HeaderTimestamp, strconv.FormatInt(ts.Unix(), 10))
		h.Set(HeaderSignature, sg.sign("msg_1", ts, b))
		return h
	}
	now := time.Now()
	if err := wh.Verify(body, headers(now, body)); err != nil {
		t.Fatalf("a good delivery: %v", err)
	}
	tampered := append([]byte(nil), body...)
	tampered[10] ^= 1
	if err := wh.Verify(tampered, headers(now, body)); !errors.Is(err, standardwebhooks.ErrNoMatchingSignature) {
		t.Fatalf("tampered body: %v", err)
	}
	if err := whWrong.Verify(body, headers(now, body)); !errors.Is(err, standardwebhooks.ErrNoMatchingSignature) {
		t.Fatalf("wrong secret: %v", err)
	}
	if err := wh.Verify(body, headers(now.Add(-6*time.Minute), body)); !errors.Is(err, standardwebhooks.ErrMessageTooOld) {
		t.Fatalf("6 minutes old: %v", err)
	}
	// The spec's own test vector: this id, timestamp and body give this signature.
	ts := time.Unix(1614265330, 0)
	want := "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
	if got := sg.sign("msg_p5jXN8AQM9LWM0D4loKWxJek", ts, []byte(`{"test": 2432232314}`)); got != want {
		t.Fatalf("spec vector: got %s, want %s", got, want)
	}
}
