package pipeline

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The formats a user may upload are promised in two places people read, docs/contract.md (a table
// per kind, by the type detection names) and README.md (a sentence, by the names people know). These
// tests hold both to the allow-list Detect uses, both ways: a type added to or dropped from accepted
// without the docs, or a format the docs promise that detection refuses, fails here.

// acceptedTypes returns accepted's types of one kind, sorted.
func acceptedTypes(kind MediaKind) []string {
	var out []string
	for _, a := range accepted {
		if a.kind == kind {
			out = append(out, a.mime)
		}
	}
	slices.Sort(out)
	return out
}

func readDoc(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// section returns the text of doc from the line starting with from up to the next line starting
// with to.
func section(t *testing.T, doc, from, to string) string {
	t.Helper()
	_, rest, ok := strings.Cut(doc, "\n"+from)
	if !ok {
		t.Fatalf("no line starting %q", from)
	}
	body, _, ok := strings.Cut(rest, "\n"+to)
	if !ok {
		t.Fatalf("no line starting %q after %q", to, from)
	}
	return from + body
}

var backtickedType = regexp.MustCompile("`((?:image|video|audio)/[a-z0-9.+-]+)`")

// tableTypes returns the `type/subtype` names quoted in the table rows (lines starting with "|") of
// text, sorted; prose around the tables (which names refused types) is not read.
func tableTypes(text string) []string {
	var out []string
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, "|") {
			continue
		}
		for _, m := range backtickedType.FindAllStringSubmatch(line, -1) {
			if !slices.Contains(out, m[1]) {
				out = append(out, m[1])
			}
		}
	}
	slices.Sort(out)
	return out
}

func TestContractDocListsExactlyTheAcceptedTypes(t *testing.T) {
	doc := readDoc(t, "../docs/contract.md")
	for _, tc := range []struct {
		kind      MediaKind
		from, to  string
		tableName string
	}{
		{Image, "Images become", "Videos become", "image formats"},
		{Video, "Videos become", "Output keys", "video containers"},
	} {
		got, want := tableTypes(section(t, doc, tc.from, tc.to)), acceptedTypes(tc.kind)
		if !slices.Equal(got, want) {
			t.Errorf("docs/contract.md's table of %s lists %q; detection accepts %q", tc.tableName, got, want)
		}
	}
}

// formatNames are the names people know formats by, as the README writes them, and the types
// detection gives each. A new accepted type needs its name here and in the README.
var formatNames = map[string][]string{
	"JPEG":     {"image/jpeg"},
	"PNG":      {"image/png"},
	"APNG":     {"image/apng"},
	"WebP":     {"image/webp"},
	"GIF":      {"image/gif"},
	"HEIC":     {"image/heic", "image/heic-sequence"},
	"HEIF":     {"image/heif", "image/heif-sequence"},
	"AVIF":     {"image/avif"},
	"TIFF":     {"image/tiff"},
	"MP4":      {"video/mp4"},
	"MOV":      {"video/quicktime"},
	"M4V":      {"video/x-m4v"},
	"3GP":      {"video/3gpp", "video/3gpp2"},
	"Matroska": {"video/matroska"},
	"WebM":     {"video/webm"},
	"AVI":      {"video/x-msvideo"},
	"MPEG-TS":  {mimeTransportStream},
	"M2TS":     {mimeTransportStream},
	"MPEG-PS":  {"video/mpeg"},
	"PDF":      {"application/pdf"},
	"SVG":      {"image/svg+xml"},
}

var parenthetical = regexp.MustCompile(`\s*\([^)]*\)`)

// namedTypes turns a list as the README writes it ("JPEG, PNG/APNG and AVIF (stills)") into the
// types detection gives those formats, sorted; a name it does not know fails the test.
func namedTypes(t *testing.T, list string) []string {
	t.Helper()
	list = parenthetical.ReplaceAllString(strings.Join(strings.Fields(list), " "), "")
	var out []string
	for _, item := range strings.Split(strings.ReplaceAll(list, " and ", ", "), ", ") {
		for _, name := range strings.Split(strings.TrimSpace(item), "/") {
			types, ok := formatNames[name]
			if !ok {
				t.Errorf("README names %q (in %q), which is not a format detection knows", name, list)
			}
			for _, m := range types {
				if !slices.Contains(out, m) {
					out = append(out, m)
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// between returns the text of doc after the first occurrence of from, up to the next occurrence of
// to, line breaks read as spaces.
func between(t *testing.T, doc, from, to string) string {
	t.Helper()
	_, rest, ok := strings.Cut(strings.Join(strings.Fields(doc), " "), from)
	if !ok {
		t.Fatalf("README.md has no %q", from)
	}
	body, _, ok := strings.Cut(rest, to)
	if !ok {
		t.Fatalf("README.md has no %q after %q", to, from)
	}
	return body
}

func TestReadmeListsExactlyTheAcceptedFormats(t *testing.T) {
	doc := readDoc(t, "../README.md")
	for _, tc := range []struct {
		kind     MediaKind
		from, to string
	}{
		{Image, "Accepted media, by content: images ", ";"},
		{Video, "; videos in ", ", at most"},
		{Image, "Images accepted: ", ", at most"},
		{Document, "; documents ", " for a recipe"},
	} {
		got, want := namedTypes(t, between(t, doc, tc.from, tc.to)), acceptedTypes(tc.kind)
		if !slices.Equal(got, want) {
			t.Errorf("README.md's %q… names the types %q; detection accepts %q", tc.from, got, want)
		}
	}
}

// The mapping itself must not hide a type: every accepted one has a name, and the checks above
// would fail on a type dropped from accepted but still named (namedTypes would return it).
func TestEveryAcceptedTypeHasAName(t *testing.T) {
	for _, a := range accepted {
		named := false
		for _, types := range formatNames {
			named = named || slices.Contains(types, a.mime)
		}
		if !named {
			t.Errorf("%s is accepted but has no name in formatNames (and so none in README.md)", a.mime)
		}
	}
}
