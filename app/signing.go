package app

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// URLSigningConfig makes /objects serve only signed, expiring URLs, for sites that put the worker behind
// a CDN and do not want variants fetchable by whoever guesses a key. The signature is over the key only
// (not the host or bucket), so URLs built on --public-base-url verify at the origin unchanged.
type URLSigningConfig struct {
	Key string        // HMAC-SHA256 secret; "" serves unsigned URLs
	TTL time.Duration // lifetime of the URLs put in responses
}

// DefaultURLSigningConfig: off; when on, response URLs live 7 days, as long as responses are kept.
func DefaultURLSigningConfig() URLSigningConfig { return URLSigningConfig{TTL: 7 * 24 * time.Hour} }

// Validate checks the settings.
func (c URLSigningConfig) Validate() error {
	if c.Key != "" && len(c.Key) < 32 {
		return fmt.Errorf("the signing key (URLSigningConfig.Key) is %d bytes; use at least 32 (e.g. `openssl rand -hex 32`)", len(c.Key))
	}
	if c.Key != "" && c.TTL <= 0 {
		return fmt.Errorf("the URLs' lifetime (URLSigningConfig.TTL) %s must be positive", c.TTL)
	}
	return nil
}

// Query parameters of a signed URL.
const (
	paramExpires   = "expires"
	paramSignature = "signature"
)

// SignObjectURL appends expires=<unix seconds>&signature=<base64url HMAC-SHA256 of "<key>\n<expires>">
// to rawURL. An API that keeps URLs longer than the TTL mints fresh ones with the same function (or the
// same three lines in its own language).
func SignObjectURL(secret, rawURL, key string, expires time.Time) string {
	exp := expires.Unix()
	sep := "?"
	if strings.Contains(rawURL, "?") {
		sep = "&"
	}
	return rawURL + sep + paramExpires + "=" + strconv.FormatInt(exp, 10) + "&" + paramSignature + "=" + objectMAC(secret, key, exp)
}

func objectMAC(secret, key string, expires int64) string {
	m := hmac.New(sha256.New, []byte(secret))
	fmt.Fprintf(m, "%s\n%d", key, expires)
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// verifyObjectURL checks the signature and expiry in q for key.
func verifyObjectURL(secret, key string, q url.Values, now time.Time) error {
	exp, err := strconv.ParseInt(q.Get(paramExpires), 10, 64)
	if err != nil || q.Get(paramSignature) == "" {
		return errors.New("this URL needs a signature (expires and signature parameters)")
	}
	if !hmac.Equal([]byte(q.Get(paramSignature)), []byte(objectMAC(secret, key, exp))) {
		return errors.New("bad signature")
	}
	if now.Unix() > exp {
		return errors.New("this URL has expired")
	}
	return nil
}
