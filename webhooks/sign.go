package webhooks

import (
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Standard Webhooks 1.0 headers.
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
)

// signer signs a delivery with every configured key: one "v1,<base64 HMAC-SHA256>" per secret (so a
// receiver that still holds only the old secret of a rotation verifies too) and "v1a,<base64
// Ed25519>" for the asymmetric key, space-separated, as the spec's webhook-signature carries them.
type signer struct {
	secrets [][]byte
	ed      ed25519.PrivateKey
}

// newSigner decodes the endpoint's keys (checked by Validate).
func newSigner(e Endpoint) (*signer, error) {
	s := &signer{}
	for i, sec := range e.Secrets {
		k, err := decodeSecret(sec)
		if err != nil {
			return nil, fmt.Errorf("webhook endpoint %q: secret %d: %w", e.Name, i+1, err)
		}
		s.secrets = append(s.secrets, k)
	}
	if e.Ed25519Key != "" {
		k, err := decodeEd25519(e.Ed25519Key)
		if err != nil {
			return nil, fmt.Errorf("webhook endpoint %q: ed25519 key: %w", e.Name, err)
		}
		s.ed = k
	}
	return s, nil
}

// sign returns the webhook-signature header's value for one attempt.
func (s *signer) sign(id string, ts time.Time, body []byte) string {
	content := signedContent(id, ts, body)
	sigs := make([]string, 0, len(s.secrets)+1)
	for _, k := range s.secrets {
		mac := hmac.New(sha256.New, k)
		mac.Write(content)
		sigs = append(sigs, "v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	}
	if s.ed != nil {
		sigs = append(sigs, "v1a,"+base64.StdEncoding.EncodeToString(ed25519.Sign(s.ed, content)))
	}
	return strings.Join(sigs, " ")
}

// signedContent is what the spec signs: "<webhook-id>.<webhook-timestamp>.<body>".
func signedContent(id string, ts time.Time, body []byte) []byte {
	b := make([]byte, 0, len(id)+len(body)+24)
	b = append(b, id...)
	b = append(b, '.')
	b = strconv.AppendInt(b, ts.Unix(), 10)
	b = append(b, '.')
	return append(b, body...)
}
