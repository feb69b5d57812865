package contracts

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"regexp"
	"strings"
	"unicode/utf8"
)

// The limits of a request, all far below what NATS carries (1 MiB by default): a request is four short
// strings, so anything much bigger is a mistake or an attack, and is refused before any work. The
// answer to a refusal echoes none of an oversized field (EchoURL), so it stays small as well.
const (
	// MaxRequestBytes bounds the whole payload, unknown fields included.
	MaxRequestBytes = 64 << 10
	// MaxKeyBytes is the longest object key accepted (S3's own limit).
	MaxKeyBytes = 1024
	// MinBucketBytes and MaxBucketBytes bound a bucket name (S3's limits).
	MinBucketBytes = 3
	MaxBucketBytes = 63
	// MaxMediaURLBytes bounds mediaUrl, which every answer echoes as originalUrl.
	MaxMediaURLBytes = 4096
	// MaxNameBytes bounds a recipe's name and a variant's name: each becomes part of output keys.
	MaxNameBytes = 32
)

var namePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]*$`)

// ValidateName checks a recipe or variant name: 1 to MaxNameBytes lowercase letters, digits, '_' and
// '-', starting with a letter or digit. Names become path segments of output keys and the response's
// quality, so nothing else is taken.
func ValidateName(name string) error {
	switch {
	case name == "":
		return errors.New("is empty")
	case len(name) > MaxNameBytes:
		return fmt.Errorf("is %d bytes, limit is %d", len(name), MaxNameBytes)
	case !namePattern.MatchString(name):
		return fmt.Errorf("%q must be lowercase letters, digits, '_' or '-', starting with a letter or digit", name)
	}
	return nil
}

// MediaURLSchemes are the schemes a request's mediaUrl may have: the API's own web URLs, and the forms
// of the object stores' URLs the worker itself gives (s3://bucket/key, nats://objectstore/bucket/key).
// Anything else (javascript:, data:, file:, ...) would be echoed to the API as originalUrl, which a
// careless client renders as a link.
var MediaURLSchemes = []string{"http", "https", "s3", "nats"}

// ValidateBucket checks a bucket name against S3's rules for bucket names, which every supported store
// can take (the JetStream object store takes no dots: it refuses those names itself, permanently, as
// objstore.ErrInvalidName): 3 to 63 bytes of lowercase letters, digits, '.' and '-'; each
// dot-separated label starts and ends with a letter or a digit (so no "..", ".-" or "-."; and a name
// is never "." or ".."); not shaped like an IP address; none of the prefixes and suffixes AWS reserves.
// A name S3 refuses is refused here, with an answer, instead of by the store after the request
// reached a lane.
func ValidateBucket(b string) error {
	if len(b) < MinBucketBytes || len(b) > MaxBucketBytes {
		return fmt.Errorf("is %d bytes; bucket names are %d to %d bytes", len(b), MinBucketBytes, MaxBucketBytes)
	}
	for _, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			return fmt.Errorf("has character %q; bucket names use lowercase letters, digits, '-' and '.'", c)
		}
	}
	for _, label := range strings.Split(b, ".") {
		if label == "" || !alnum(label[0]) || !alnum(label[len(label)-1]) {
			return errors.New("must start and end with a letter or a digit, also around each '.' (no '..', '.-' or '-.')")
		}
	}
	if ipShaped.MatchString(b) {
		return errors.New("must not be shaped like an IP address")
	}
	for _, p := range reservedBucketPrefixes {
		if strings.HasPrefix(b, p) {
			return fmt.Errorf("must not start with %q (reserved by S3)", p)
		}
	}
	for _, s := range reservedBucketSuffixes {
		if strings.HasSuffix(b, s) {
			return fmt.Errorf("must not end with %q (reserved by S3)", s)
		}
	}
	return nil
}

var (
	ipShaped = regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$`)
	// AWS's reserved names (general purpose bucket naming rules): punycode, its own services, access
	// point and Multi-Region Access Point aliases, directory and table buckets.
	reservedBucketPrefixes = []string{"xn--", "sthree-", "amzn-s3-demo-"}
	reservedBucketSuffixes = []string{"-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3"}
)

func alnum(c byte) bool { return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' }

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

// ValidateMediaURL checks a request's mediaUrl, which every answer echoes as originalUrl: at most
// MaxMediaURLBytes of valid UTF-8, an absolute URI ("format": "uri" of the schemas, IPv6 hosts in
// brackets and without a zone, as the schema validator wants them) with a host, of one of
// MediaURLSchemes.
func ValidateMediaURL(s string) error {
	switch {
	case s == "":
		return errors.New("is empty")
	case len(s) > MaxMediaURLBytes:
		return fmt.Errorf("is %d bytes, limit is %d", len(s), MaxMediaURLBytes)
	case !utf8.ValidString(s):
		return errors.New("is not valid UTF-8")
	}
	u, err := url.Parse(s)
	if err != nil || u.Scheme == "" {
		return fmt.Errorf("must be an absolute URI, got %q", clip(s))
	}
	if !knownScheme(u.Scheme) {
		return fmt.Errorf("must be an http(s), s3 or nats URL, got scheme %q", clip(u.Scheme))
	}
	if u.Host == "" {
		return fmt.Errorf("must name a host, got %q", clip(s))
	}
	if h := u.Hostname(); strings.Contains(h, ":") {
		if a, err := netip.ParseAddr(h); err != nil || a.Zone() != "" || !strings.Contains(u.Host, "[") {
			return fmt.Errorf("has an invalid IPv6 host, got %q", clip(s))
		}
	}
	return nil
}

func knownScheme(scheme string) bool {
	for _, k := range MediaURLSchemes {
		if strings.EqualFold(scheme, k) {
			return true
		}
	}
	return false
}
