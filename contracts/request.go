package contracts

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/google/uuid"
)

// MaxKeyBytes is the longest object key accepted (S3's own limit).
const MaxKeyBytes = 1024

// ParseError says why a request payload was refused. Correlatable is true when the payload carried a
// usable mediaId, so the refusal can be answered with a failure response; otherwise nobody can be told
// and the payload belongs in the dead-letter stream.
type ParseError struct {
	Field        string // the offending field, "" when the payload as a whole is unusable
	Reason       string
	Correlatable bool
}

// Correlatable reports whether err is a refusal that can be answered: a *ParseError of a payload
// that carried a usable mediaId. The one place that asks, for the worker's every path.
func Correlatable(err error) bool {
	var pe *ParseError
	return errors.As(err, &pe) && pe.Correlatable
}

func (e *ParseError) Error() string {
	if e.Field == "" {
		return "invalid request: " + e.Reason
	}
	return fmt.Sprintf("invalid request: %s %s", e.Field, e.Reason)
}

// ParseRequest decodes and validates a request payload. On error it still returns whatever fields could
// be read (so a failure response can echo mediaId and mediaUrl) and a *ParseError.
//
// A refusal that can be answered is answered with the returned request's MediaURL as originalUrl, so
// that is always a URI: EchoURL's when the payload's mediaUrl is missing or not one.
func ParseRequest(data []byte) (Request, error) {
	req, err := parseRequest(data)
	if Correlatable(err) {
		req.MediaURL = req.EchoURL()
	}
	return req, err
}

func parseRequest(data []byte) (Request, error) {
	var raw map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&raw); err != nil {
		return Request{}, &ParseError{Reason: "payload is not a JSON object: " + shortJSONError(err)}
	}
	if dec.More() {
		return Request{}, &ParseError{Reason: "payload has trailing data after the JSON object"}
	}
	if raw == nil {
		return Request{}, &ParseError{Reason: "payload is not a JSON object: null"}
	}

	var req Request
	fields := []struct {
		name string
		dst  *string
	}{
		{"mediaId", &req.MediaID},
		{"mediaUrl", &req.MediaURL},
		{"s3Bucket", &req.S3Bucket},
		{"s3Key", &req.S3Key},
	}
	var firstErr *ParseError
	for _, f := range fields {
		v, ok := raw[f.name]
		if !ok {
			firstErr = firstOf(firstErr, &ParseError{Field: f.name, Reason: "is missing"})
			continue
		}
		if err := json.Unmarshal(v, f.dst); err != nil {
			firstErr = firstOf(firstErr, &ParseError{Field: f.name, Reason: "must be a string, got " + jsonKind(v)})
			continue
		}
		if *f.dst == "" {
			firstErr = firstOf(firstErr, &ParseError{Field: f.name, Reason: "is empty"})
		}
	}

	// Without a UUID mediaId there is nobody to answer: the contract's response carries a UUID, and
	// the API keys its records by it. Such a payload goes to the dead-letter stream.
	correlatable := validMediaID(req.MediaID)
	if firstErr != nil {
		firstErr.Correlatable = correlatable
		return req, firstErr
	}
	if err := req.Validate(); err != nil {
		var pe *ParseError
		if errors.As(err, &pe) {
			pe.Correlatable = correlatable
		}
		return req, err
	}
	return req, nil
}

// EchoURL is the URI a response echoes as originalUrl: the request's mediaUrl when it is an absolute
// URI (always, for a valid request); for a refused request without one, the upload's own URI,
// s3://<bucket>/<key> (escaped like variant URLs), when bucket and key are valid; otherwise
// urn:uuid:<mediaId> (RFC 4122), which names the media the API asked about.
func (r Request) EchoURL() string {
	if AbsoluteURI(r.MediaURL) {
		return r.MediaURL
	}
	if ValidateBucket(r.S3Bucket) == nil && ValidateKey(r.S3Key) == nil {
		segs := strings.Split(r.S3Key, "/")
		for i, s := range segs {
			segs[i] = url.PathEscape(s)
		}
		return "s3://" + r.S3Bucket + "/" + strings.Join(segs, "/")
	}
	return "urn:uuid:" + strings.ToLower(r.MediaID)
}

// absoluteURI reports whether s is an absolute URI ("format": "uri" of the schemas).
func AbsoluteURI(s string) bool {
	u, err := url.Parse(s)
	return err == nil && u.Scheme != "" && s != ""
}

// validMediaID reports whether id is a UUID in its 36-character form.
func validMediaID(id string) bool {
	_, err := uuid.Parse(id)
	return err == nil && len(id) == 36
}

// Validate checks the values of a decoded request. It returns a *ParseError naming the first bad field.
func (r Request) Validate() error {
	if r.MediaID == "" {
		return &ParseError{Field: "mediaId", Reason: "is empty"}
	}
	if !validMediaID(r.MediaID) {
		return &ParseError{Field: "mediaId", Reason: fmt.Sprintf("must be a UUID like 550e8400-e29b-41d4-a716-446655440000, got %q", clip(r.MediaID))}
	}
	if r.MediaURL == "" {
		return &ParseError{Field: "mediaUrl", Reason: "is empty"}
	}
	if !AbsoluteURI(r.MediaURL) {
		return &ParseError{Field: "mediaUrl", Reason: fmt.Sprintf("must be an absolute URI, got %q", clip(r.MediaURL))}
	}
	if r.S3Bucket == "" {
		return &ParseError{Field: "s3Bucket", Reason: "is empty"}
	}
	if err := ValidateBucket(r.S3Bucket); err != nil {
		return &ParseError{Field: "s3Bucket", Reason: err.Error()}
	}
	if err := ValidateKey(r.S3Key); err != nil {
		return &ParseError{Field: "s3Key", Reason: err.Error()}
	}
	if n := KeysFor(r).Longest(); n > MaxKeyBytes {
		return &ParseError{Field: "s3Key", Reason: fmt.Sprintf(
			"is %d bytes: the output keys derived from it would be up to %d bytes, limit is %d (shorten the key by %d bytes)",
			len(r.S3Key), n, MaxKeyBytes, n-MaxKeyBytes)}
	}
	return nil
}

// ValidateBucket checks a bucket name against the characters every supported store accepts.
func ValidateBucket(b string) error {
	if len(b) > 63 {
		return fmt.Errorf("is %d bytes, limit is 63", len(b))
	}
	for _, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf("has character %q; bucket names use letters, digits, '-', '_' and '.'", c)
		}
	}
	return nil
}

// ValidateKey checks an object key from a request. Keys come from users: they must be valid UTF-8, at most
// MaxKeyBytes, free of NUL and control characters, relative (no leading '/'), and free of '.' and '..'
// segments, so that keys derived from them can never escape the request's directory.
func ValidateKey(key string) error {
	switch {
	case key == "":
		return errors.New("is empty")
	case len(key) > MaxKeyBytes:
		return fmt.Errorf("is %d bytes, limit is %d", len(key), MaxKeyBytes)
	case !utf8.ValidString(key):
		return errors.New("is not valid UTF-8")
	case strings.HasPrefix(key, "/"):
		return errors.New("must not start with '/'")
	case strings.HasSuffix(key, "/"):
		return errors.New("must name an object, not a directory (ends with '/')")
	}
	for _, c := range key {
		if c < 0x20 || c == 0x7f || (c >= 0x80 && c < 0xa0) {
			return fmt.Errorf("contains control character %U", c)
		}
	}
	for _, seg := range strings.Split(key, "/") {
		switch seg {
		case "":
			return errors.New("has an empty path segment ('//')")
		case ".", "..":
			return fmt.Errorf("has a %q path segment", seg)
		}
	}
	return nil
}

func firstOf(cur, next *ParseError) *ParseError {
	if cur != nil {
		return cur
	}
	return next
}

func jsonKind(v json.RawMessage) string {
	s := bytes.TrimSpace(v)
	if len(s) == 0 {
		return "nothing"
	}
	switch s[0] {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	default:
		return "a number"
	}
}

func shortJSONError(err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("%v (at byte %d)", se, se.Offset)
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return "top-level value is " + te.Value
	}
	return err.Error()
}

func clip(s string) string {
	const max = 80
	if len(s) <= max {
		return s
	}
	return s[:max] + "…"
}
