package console

import (
	"path"
	"strings"
	"unicode"
	"unicode/utf8"
)

// fileNameMax is the most runes of a file name the console shows: a key is the uploader's, as long as
// the store allows, and the lists are for scanning by eye.
const fileNameMax = 64

// FileName is how the console names a job's upload: the base name of its object key (s3Key), "" for
// none. The key is untrusted: invalid UTF-8, control and format characters (bidi overrides would
// reorder the text around them) become "?", and a long name keeps its start and its end, so the
// extension stays visible. html/template escapes what is left.
func FileName(key string) string {
	key = strings.TrimRight(key, "/")
	if key == "" {
		return ""
	}
	name := strings.Map(func(r rune) rune {
		if r == utf8.RuneError || unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			return '?'
		}
		return r
	}, path.Base(key))
	if r := []rune(name); len(r) > fileNameMax {
		name = string(r[:fileNameMax-21]) + "…" + string(r[len(r)-20:])
	}
	return name
}
