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
// header it cannot parse is left for ServeContent, which answers it with 416 without reading.
func boundRanges(header string, size int64) (spans map[int64]int64, honour bool) {
	ranges, ok := parseRanges(header, size)
	if !ok {
		return nil, true
	}
	if len(ranges) > maxRanges {
		return nil, false
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
			return nil, false
		}
		spans[r.start] = r.length
	}
	return spans, true
}

// parseRanges parses a Range header as net/http's ServeContent does (RFC 9110 §14.1.2): "bytes=" and
// comma-separated first-last, first- or -suffix ranges, empty elements skipped, ranges that start at or
// past the end dropped. ok is false without a header or when ServeContent would refuse it (416).
func parseRanges(s string, size int64) (ranges []byteRange, ok bool) {
	spec, found := strings.CutPrefix(s, "bytes=")
	if s == "" || !found {
		return nil, false
	}
	for ra := range strings.SplitSeq(spec, ",") {
		ra = strings.TrimSpace(ra)
		if ra == "" {
			continue
		}
		first, last, found := strings.Cut(ra, "-")
		if !found {
			return nil, false
		}
		first, last = strings.TrimSpace(first), strings.TrimSpace(last)
		var r byteRange
		if first == "" {
			// -N: the last N bytes.
			if last == "" || last[0] == '-' {
				return nil, false
			}
			n, err := strconv.ParseInt(last, 10, 64)
			if err != nil || n < 0 {
				return nil, false
			}
			n = min(n, size)
			r = byteRange{start: size - n, length: n}
		} else {
			start, err := strconv.ParseInt(first, 10, 64)
			if err != nil || start < 0 {
				return nil, false
			}
			if start >= size {
				continue // no overlap with the object: net/http drops it
			}
			r.start, r.length = start, size-start
			if last != "" {
				end, err := strconv.ParseInt(last, 10, 64)
				if err != nil || start > end {
					return nil, false
				}
				r.length = min(end, size-1) - start + 1
			}
		}
		ranges = append(ranges, r)
	}
	return ranges, len(ranges) > 0
}

// withoutRange returns r without its Range header: ServeContent then answers the whole object.
func withoutRange(r *http.Request) *http.Request {
	r = r.Clone(r.Context())
	r.Header.Del("Range")
	return r
}
