package app

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"path"
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

// prefixToken starts the path segment that carries a directory's signature (SignObjectPrefixURL).
const prefixToken = "~sig-"

// SignObjectPrefixURL signs the directory of key instead of key alone, for files that name each other
// by relative URL (contracts.SignsPrefix: HLS playlists and segments, a storyboard's VTT and sprite). A
// query string is dropped when a player resolves a relative URL, so the signature goes in the path:
// "/~sig-<expires>-<base64url HMAC-SHA256 of "<dir>/\n<expires>">" before the file's name, and every
// URL resolved from it carries it too. rawURL ends with key's file name.
func SignObjectPrefixURL(secret, rawURL, key string, expires time.Time) string {
	exp := expires.Unix()
	tok := prefixToken + strconv.FormatInt(exp, 10) + "-" + objectMAC(secret, path.Dir(key)+"/", exp)
	i := strings.LastIndex(rawURL, "/")
	return rawURL[:i] + "/" + tok + rawURL[i:]
}

// splitPrefixToken takes a directory signature out of a requested key: "dir/~sig-E-S/file" is the
// key "dir/file" with the token. ok is false when the key carries none.
func splitPrefixToken(key string) (plain string, expires int64, sig string, ok bool) {
	dir, file := path.Split(key)
	tokDir, tok := path.Split(strings.TrimSuffix(dir, "/"))
	if !strings.HasPrefix(tok, prefixToken) {
		return key, 0, "", false
	}
	expStr, sig, found := strings.Cut(strings.TrimPrefix(tok, prefixToken), "-")
	exp, err := strconv.ParseInt(expStr, 10, 64)
	if !found || err != nil || sig == "" {
		return key, 0, "", false
	}
	return tokDir + file, exp, sig, true
}

// verifyObjectPrefix checks a directory signature for key (whose directory it must cover).
func verifyObjectPrefix(secret, key string, expires int64, sig string, now time.Time) error {
	if !hmac.Equal([]byte(sig), []byte(objectMAC(secret, path.Dir(key)+"/", expires))) {
		return errors.New("bad signature")
	}
	if now.Unix() > expires {
		return errors.New("this URL has expired")
	}
	return nil
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
