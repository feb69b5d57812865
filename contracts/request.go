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
// be read within their limits (so a failure response can echo mediaId and mediaUrl, and a log line
// stays short) and a *ParseError.
//
// A refusal that can be answered is answered with the returned request's MediaURL as originalUrl, so
// that is always a URI: EchoURL's when the payload's mediaUrl is missing or not one.
func ParseRequest(data []byte) (Request, error) {
	req, err := parseRequest(data)
	if err != nil {
		req = req.bounded()
	}
	if Correlatable(err) {
		req.MediaURL = req.EchoURL()
	}
	return req, err
}

// parseRequest reads the payload's fields first and judges the payload after, so a payload that is
// wrong as a whole (too big, trailing data, invalid UTF-8) is still answered when its mediaId can be
// read: encoding/json would otherwise pass such a payload as valid (invalid UTF-8 silently becomes
// U+FFFD, a second object after the first goes unread).
func parseRequest(data []byte) (Request, error) {
	var raw map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&raw); err != nil {
		return Request{}, &ParseError{Reason: "payload is not a JSON object: " + shortJSONError(err)}
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
	var fieldErr *ParseError
	for _, f := range fields {
		v, ok := raw[f.name]
		if !ok {
			fieldErr = firstOf(fieldErr, &ParseError{Field: f.name, Reason: "is missing"})
			continue
		}
		if err := json.Unmarshal(v, f.dst); err != nil {
			fieldErr = firstOf(fieldErr, &ParseError{Field: f.name, Reason: "must be a string, got " + jsonKind(v)})
			continue
		}
		if reason := badText(v); reason != "" {
			// Not the text that was sent: never used, never echoed.
			*f.dst = ""
			fieldErr = firstOf(fieldErr, &ParseError{Field: f.name, Reason: reason})
			continue
		}
		if *f.dst == "" {
			fieldErr = firstOf(fieldErr, &ParseError{Field: f.name, Reason: "is empty"})
		}
	}
	// recipe is optional: absent is the default recipe, the seed contract's outputs.
	if v, ok := raw["recipe"]; ok {
		switch err := json.Unmarshal(v, &req.Recipe); {
		case err != nil:
			fieldErr = firstOf(fieldErr, &ParseError{Field: "recipe", Reason: "must be a string, got " + jsonKind(v)})
		case badText(v) != "":
			req.Recipe = ""
			fieldErr = firstOf(fieldErr, &ParseError{Field: "recipe", Reason: badText(v)})
		case req.Recipe == "":
			fieldErr = firstOf(fieldErr, &ParseError{Field: "recipe", Reason: "is empty (leave it out for the default recipe)"})
		}
	}

	req.Source = parseSource(raw["source"])

	// Without a UUID mediaId there is nobody to answer: the contract's response carries a UUID, and
	// the API keys its records by it. Such a payload goes to the dead-letter stream.
	correlatable := validMediaID(req.MediaID)
	refuse := func(pe *ParseError) (Request, error) {
		pe.Correlatable = correlatable
		return req, pe
	}
	// The payload as a whole first: whatever its fields say, it is not what the contract allows.
	switch {
	case len(data) > MaxRequestBytes:
		return refuse(&ParseError{Reason: fmt.Sprintf("payload is %d bytes, limit is %d", len(data), MaxRequestBytes)})
	case trailing(data, dec.InputOffset()):
		return refuse(&ParseError{Reason: "payload has trailing data after the JSON object"})
	case fieldErr != nil:
		return refuse(fieldErr)
	case !utf8.Valid(data):
		return refuse(&ParseError{Reason: fmt.Sprintf("payload is not valid UTF-8 (at byte %d)", invalidUTF8At(data))})
	}
	if err := req.Validate(); err != nil {
		var pe *ParseError
		if errors.As(err, &pe) {
			return refuse(pe)
		}
		return req, err
	}
	return req, nil
}

// trailing reports whether anything but JSON whitespace follows the first value (which ends at off).
func trailing(data []byte, off int64) bool {
	return len(bytes.TrimLeft(data[off:], " \t\r\n")) > 0
}

// bounded is the request with every field over its limit cleared, so nothing oversized is echoed or
// logged, and with a recipe that is not a valid name cleared: a refusal's answer echoes the recipe,
// and response.schema.json allows only a name there ("../card", "card\u0000" or "<script>" would make
// the only answer the API gets one that fails its schema).
func (r Request) bounded() Request {
	for _, f := range []struct {
		v   *string
		max int
	}{{&r.MediaID, 36}, {&r.MediaURL, MaxMediaURLBytes}, {&r.S3Bucket, MaxBucketBytes}, {&r.S3Key, MaxKeyBytes}, {&r.Recipe, MaxNameBytes}} {
		if len(*f.v) > f.max {
			*f.v = ""
		}
	}
	if r.Recipe != "" && ValidateName(r.Recipe) != nil {
		r.Recipe = ""
	}
	return r
}

// EchoURL is the URI a response echoes as originalUrl: the request's mediaUrl when it is a valid one
// (ValidateMediaURL: always, for a valid request); for a refused request without one, the upload's own URI,
// s3://<bucket>/<key> (escaped like variant URLs), when bucket and key are valid; otherwise
// urn:uuid:<mediaId> (RFC 4122), which names the media the API asked about.
func (r Request) EchoURL() string {
	if ValidateMediaURL(r.MediaURL) == nil {
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
	if err := ValidateMediaURL(r.MediaURL); err != nil {
		return &ParseError{Field: "mediaUrl", Reason: err.Error()}
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
	if r.Recipe != "" {
		if err := ValidateName(r.Recipe); err != nil {
			return &ParseError{Field: "recipe", Reason: err.Error()}
		}
	}
	if n := KeysFor(r).Longest(); n > MaxKeyBytes {
		return &ParseError{Field: "s3Key", Reason: fmt.Sprintf(
			"is %d bytes: the output keys derived from it would be up to %d bytes, limit is %d (shorten the key by %d bytes)",
			len(r.S3Key), n, MaxKeyBytes, n-MaxKeyBytes)}
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

// badText says why the raw text of a JSON string is not the text its sender meant, "" when it is:
// invalid UTF-8 bytes, or a \u escape of half a UTF-16 surrogate pair. encoding/json turns both into
// U+FFFD without a word, so a key would be looked up as a different key and found missing.
func badText(raw []byte) string {
	if !utf8.Valid(raw) {
		return "is not valid UTF-8"
	}
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' {
			continue
		}
		i++ // the escaped character; a well-formed string (json.Unmarshal took it) has one
		if i >= len(raw) || raw[i] != 'u' {
			continue
		}
		r := hex4(raw[i+1:])
		i += 4
		switch {
		case r >= 0xDC00 && r <= 0xDFFF:
			return "has an unpaired UTF-16 surrogate escape"
		case r >= 0xD800 && r <= 0xDBFF:
			// A high surrogate must be followed at once by the escape of a low one.
			if i+6 >= len(raw) || raw[i+1] != '\\' || raw[i+2] != 'u' {
				return "has an unpaired UTF-16 surrogate escape"
			}
			if lo := hex4(raw[i+3:]); lo < 0xDC00 || lo > 0xDFFF {
				return "has an unpaired UTF-16 surrogate escape"
			}
			i += 6
		}
	}
	return ""
}

// hex4 is the value of the four hex digits b starts with, -1 when it does not.
func hex4(b []byte) int {
	if len(b) < 4 {
		return -1
	}
	v := 0
	for _, c := range b[:4] {
		switch {
		case c >= '0' && c <= '9':
			v = v<<4 | int(c-'0')
		case c >= 'a' && c <= 'f':
			v = v<<4 | int(c-'a'+10)
		case c >= 'A' && c <= 'F':
			v = v<<4 | int(c-'A'+10)
		default:
			return -1
		}
	}
	return v
}

// invalidUTF8At is the offset of the first byte of data that is not valid UTF-8.
func invalidUTF8At(data []byte) int {
	for i := 0; i < len(data); {
		r, n := utf8.DecodeRune(data[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return len(data)
}
