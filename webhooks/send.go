package webhooks

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
)

// deliverer sends one signed request to one endpoint.
type deliverer struct {
	client *http.Client
	url    string
	sign   *signer
}

// result is one attempt's outcome.
type result struct {
	status     int           // 0: no answer
	retryAfter time.Duration // the answer's Retry-After, 0 when none
	err        error         // no answer, or why the answer is not a success
	at         time.Time
}

// ok: only a 2xx is a delivery; a 3xx is a failure (redirects are not followed).
func (r result) ok() bool { return r.err == nil && r.status >= 200 && r.status < 300 }

// backoff: the endpoint is overloaded or its gateway is; it gets a pause, not just a later retry.
func (r result) backoff() bool {
	return r.status == 429 || r.status == 502 || r.status == 503 || r.status == 504
}

func (r result) describe() string {
	switch {
	case r.err != nil && r.status != 0:
		return fmt.Sprintf("HTTP %d: %v", r.status, r.err)
	case r.err != nil:
		return r.err.Error()
	}
	return fmt.Sprintf("HTTP %d", r.status)
}

// maxAnswerBytes is how much of an endpoint's answer is read (and dropped), so the connection can be
// reused without a hostile endpoint making us read forever.
const maxAnswerBytes = 64 << 10

// send makes one attempt: POST body with the spec's headers, signed for this moment.
func (d *deliverer) send(ctx context.Context, id string, body []byte) result {
	now := time.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.url, bytes.NewReader(body))
	if err != nil {
		return result{err: fmt.Errorf("making the request: %w", err), at: now}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "mediaworker-webhooks/1")
	req.Header.Set(HeaderID, id)
	req.Header.Set(HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
	req.Header.Set(HeaderSignature, d.sign.sign(id, now, body))
	resp, err := d.client.Do(req)
	if err != nil {
		return result{err: fmt.Errorf("sending: %w", unwrapURLError(err)), at: now}
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxAnswerBytes))
	res := result{status: resp.StatusCode, retryAfter: retryAfter(resp.Header.Get("Retry-After"), now), at: now}
	switch {
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		res.err = fmt.Errorf("redirect to %q not followed (point the endpoint at the final URL)", Redact(resp.Header.Get("Location")))
	case resp.StatusCode >= 400:
		res.err = errors.New(http.StatusText(resp.StatusCode))
	case resp.StatusCode < 200:
		res.err = errors.New("informational status as a final answer")
	}
	return res
}

// unwrapURLError drops net/http's "Post <url>:" prefix, which would repeat the URL (and its query).
func unwrapURLError(err error) error {
	var ue interface{ Unwrap() error }
	if errors.As(err, &ue) {
		if inner := ue.Unwrap(); inner != nil {
			return inner
		}
	}
	return err
}

// retryAfter reads a Retry-After header: seconds, or an HTTP date.
func retryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseInt(v, 10, 64); err == nil && s > 0 {
		// Bounded before the multiplication: a huge value (say 18446744074) would wrap around
		// to a fraction of a second, the opposite of what the endpoint asked.
		return time.Duration(min(s, int64(maxRetryAfter/time.Second))) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// TestResult is what `mediaworker webhooks test` reports.
type TestResult struct {
	ID     string
	Status int
	Err    error
}

// SampleBody is the answer `mediaworker webhooks test` sends: seed-shaped, for a made-up media id.
const SampleBody = `{"mediaId":"00000000-0000-4000-8000-000000000000","originalUrl":"https://example.invalid/uploads/sample.jpg","success":true,` +
	`"processed":[{"quality":"high","format":"webp","url":"https://example.invalid/uploads/images/00000000-0000-4000-8000-000000000000/sample_high.webp","size":1234}]}`

// SendTest sends one signed sample to the endpoint, with its guard, timeout and keys, and says what
// came back; it does not retry.
func SendTest(ctx context.Context, e Endpoint, body []byte) TestResult {
	if err := e.Validate(); err != nil {
		return TestResult{Err: err}
	}
	sg, err := newSigner(e)
	if err != nil {
		return TestResult{Err: err}
	}
	d := &deliverer{client: newClient(e.timeout(), 1, e.AllowPrivate), url: e.URL, sign: sg}
	id := webhookID(e.Name, fmt.Sprintf("test/%d", time.Now().UnixNano()), 0)
	res := d.send(ctx, id, body)
	tr := TestResult{ID: id, Status: res.status}
	if !res.ok() {
		tr.Err = errors.New(res.describe())
	}
	return tr
}
