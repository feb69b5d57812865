package app

import (
	"cmp"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// Range requests on /objects. A video player seeking or a CDN filling its cache in slices asks for one
// range, sometimes two; a request for hundreds of small ranges only makes the worker read the object
// over and over (400 one-byte ranges on a 21 MB MP4 cost 14 s of CPU before these checks).

// maxRanges is the most ranges /objects serves in one request. More, or ranges that overlap, and the
// Range header is ignored: the whole object is answered with 200, once. That is what RFC 9110 §14.2
// allows ("a server MAY ignore the Range header field", notably for many small or overlapping ranges),
// what nginx's max_ranges and Apache's MaxRanges do past their limit, and what net/http's ServeContent
// does when the ranges add up to more than the object. 416 would be cheaper still, but it tells a
// client that asked for bytes that exist that they do not; a full answer costs one read of the object,
// as a plain GET does, so it amplifies nothing.
const maxRanges = 8

// byteRange is a range resolved against the object's size, as net/http resolves it.
type byteRange struct{ start, length int64 }

// boundRanges checks a request's Range header for an object of size bytes. It returns honour == false
// when the header must be dropped (too many ranges, or overlapping ones). Otherwise spans gives the
// length of each range by its start (nil without ranges), so the object reader fetches each exactly; a
// header it cannot parse is left for ServeContent, which answers it with 416 without reading. header is
// the Range header ServeContent is to answer: the request's own, or, when it held suffix ranges of
// length 0 ("bytes=-0", see parseRanges), the ranges left without them, or when none is left one that
// starts at the object's end, which ServeContent answers 416 (Content-Range: bytes */size) after its
// conditional checks (If-Range, If-None-Match), as for any range past the end.
func boundRanges(in string, size int64) (spans map[int64]int64, header string, honour bool) {
	ranges, ok, zeroSuffix := parseRanges(in, size)
	header = in
	switch {
	case zeroSuffix && ok:
		header = rangesHeader(ranges)
	case zeroSuffix:
		header = "bytes=" + strconv.FormatInt(size, 10) + "-"
	}
	if !ok {
		return nil, header, true
	}
	if len(ranges) > maxRanges {
		return nil, header, false
	}
	// Overlapping ranges ask for the same bytes twice: no player or cache does that, and serving them
	// would send more than the object (net/http answers such a request in full only once the ranges
	// add up to more than the object). Ranges out of order are served: with at most maxRanges of them,
	// each costs one seek.
	sorted := slices.Clone(ranges)
	slices.SortFunc(sorted, func(a, b byteRange) int { return cmp.Compare(a.start, b.start) })
	spans = make(map[int64]int64, len(ranges))
	for i, r := range sorted {
		if i > 0 && r.start < sorted[i-1].start+sorted[i-1].length {
			return nil, header, false
		}
		spans[r.start] = r.length
	}
	return spans, header, true
}

// rangesHeader writes ranges, resolved against the object's size, back as a Range header.
func rangesHeader(ranges []byteRange) string {
	specs := make([]string, len(ranges))
	for i, r := range ranges {
		specs[i] = strconv.FormatInt(r.start, 10) + "-" + strconv.FormatInt(r.start+r.length-1, 10)
	}
	return "bytes=" + strings.Join(specs, ",")
}

// parseRanges parses a Range header as net/http's ServeContent does (RFC 9110 §14.1.2): "bytes=" and
// comma-separated first-last, first- or -suffix ranges, empty elements skipped, ranges that start at or
// past the end dropped. ok is false without a header or when ServeContent would refuse it (416).
//
// Unlike ServeContent, it drops a suffix range of length 0 too, and says so (zeroSuffix): RFC 9110
// §14.1.1 calls only a suffix range "with a non-zero suffix-length" satisfiable, but net/http 1.26
// serves "bytes=-0" as a range of no bytes at the object's end, a 206 whose Content-Range is inverted
// ("bytes 100-99/100"), which a client cannot read. Without other ranges such a header is a 416.
func parseRanges(s string, size int64) (ranges []byteRange, ok, zeroSuffix bool) {
	spec, found := strings.CutPrefix(s, "bytes=")
	if s == "" || !found {
		return nil, false, false
	}
	for ra := range strings.SplitSeq(spec, ",") {
		ra = strings.TrimSpace(ra)
		if ra == "" {
			continue
		}
		first, last, found := strings.Cut(ra, "-")
		if !found {
			return nil, false, false
		}
		first, last = strings.TrimSpace(first), strings.TrimSpace(last)
		var r byteRange
		if first == "" {
			// -N: the last N bytes.
			if last == "" || last[0] == '-' {
				return nil, false, false
			}
			n, err := strconv.ParseInt(last, 10, 64)
			if err != nil || n < 0 {
				return nil, false, false
			}
			if n == 0 && size > 0 {
				zeroSuffix = true
				continue
			}
			n = min(n, size)
			r = byteRange{start: size - n, length: n}
		} else {
			start, err := strconv.ParseInt(first, 10, 64)
			if err != nil || start < 0 {
				return nil, false, false
			}
			if start >= size {
				continue // no overlap with the object: net/http drops it
			}
			r.start, r.length = start, size-start
			if last != "" {
				end, err := strconv.ParseInt(last, 10, 64)
				if err != nil || start > end {
					return nil, false, false
				}
				r.length = min(end, size-1) - start + 1
			}
		}
		ranges = append(ranges, r)
	}
	return ranges, len(ranges) > 0, zeroSuffix
}

// withRange returns r with header as its Range header ("": none, and ServeContent answers the whole
// object).
func withRange(r *http.Request, header string) *http.Request {
	r = r.Clone(r.Context())
	if header == "" {
		r.Header.Del("Range")
	} else {
		r.Header.Set("Range", header)
	}
	return r
}
