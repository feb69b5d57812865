package transcoder_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/mediaworker/mediaworker/transcoder"
)

// Privacy: a variant is the picture and nothing else. Photos from phones and cameras carry where
// they were taken (GPS), the device and its serial numbers, the time, the owner's name and edits
// (EXIF, maker notes, XMP, IPTC), and an ICC profile; none of it may reach a variant, whatever the
// variant's format and fit. These tests prove it on files that phones, cameras and editors made and
// other projects ship (testdata/camera/README.md says where each comes from), read back with
// ExifTool, which reads every metadata format there is, not with libvips, which wrote them.

// privacyCameraFile is a file of testdata/camera and what it carries.
type privacyCameraFile struct {
	file string
	// carries are ExifTool groups (family 1) the source has: checked first, so that a variant
	// without them proves stripping, not a fixture that never had them.
	carries []string
	// markers are strings of the source's metadata (its device, author, software) that no byte
	// of any variant may contain.
	markers []string
	// rotated: the source's EXIF orientation is 6 (turn 90° to view). Stripping the tag must not
	// undo it: the pixels of its variants are upright.
	rotated bool
}

var privacyCameraFiles = []privacyCameraFile{
	{file: "nikon-d2h-gps.jpg", carries: []string{"GPS", "IFD0", "ExifIFD", "IFD1", "XMP-x", "Photoshop"},
		markers: []string{"NIKON", "D2H", "XMP toolkit"}},
	{file: "iphone4s-gps-rotated.jpg", carries: []string{"GPS", "IFD0", "ExifIFD", "Apple", "XMP-GPano"},
		markers: []string{"Apple", "iPhone", "Exiv2"}, rotated: true},
	{file: "iphonexs-gps-p3.heic", carries: []string{"GPS", "IFD0", "ExifIFD", "Apple", "ICC_Profile"},
		markers: []string{"Apple", "iPhone", "Display P3"}, rotated: true},
	{file: "samsung-gps-rotated.webp", carries: []string{"GPS", "IFD0", "ExifIFD", "IFD1"},
		markers: []string{"samsung", "SM-N975U"}, rotated: true},
	{file: "bush-dog-icc-iptc-xmp.jpg", carries: []string{"IPTC", "XMP-dc", "XMP-photoshop", "Photoshop", "ICC_Profile", "IFD0"},
		markers: []string{"LAVERTY", "Barney", "Photoshop", "sRGB IEC61966"}},
	{file: "gauge-icc-xmp.png", carries: []string{"ICC_Profile", "XMP-x", "XMP-exif"},
		markers: []string{"XMP Core", "Display"}},
}

// privacyRecipe is every shape a variant can have: each format, each fit (cover with each crop).
// 800 px is larger than most of the sources, so their inside variants are the decoded picture
// itself, not a resize of it; the HEIC's are a resize.
var privacyRecipe = []transcoder.ImageVariantSpec{
	{Name: "webp-inside", Width: 800, Height: 800, Fit: transcoder.FitInside, Format: transcoder.FormatWebP, Animated: true},
	{Name: "avif-inside", Width: 800, Height: 800, Fit: transcoder.FitInside, Format: transcoder.FormatAVIF},
	{Name: "jpeg-inside", Width: 800, Height: 800, Fit: transcoder.FitInside, Format: transcoder.FormatJPEG},
	{Name: "png-inside", Width: 800, Height: 800, Fit: transcoder.FitInside, Format: transcoder.FormatPNG},
	{Name: "webp-cover", Width: 256, Height: 256, Fit: transcoder.FitCover, Crop: transcoder.CropCentre, Format: transcoder.FormatWebP},
	{Name: "avif-cover", Width: 256, Height: 256, Fit: transcoder.FitCover, Crop: transcoder.CropAttention, Format: transcoder.FormatAVIF},
	{Name: "jpeg-cover", Width: 256, Height: 256, Fit: transcoder.FitCover, Crop: transcoder.CropEntropy, Format: transcoder.FormatJPEG},
	{Name: "png-cover", Width: 256, Height: 256, Fit: transcoder.FitCover, Format: transcoder.FormatPNG},
}

// privacyLoaders is the libvips loader that reads each format back.
var privacyLoaders = map[transcoder.ImageFormat]string{
	transcoder.FormatWebP: "webpload",
	transcoder.FormatAVIF: "heifload",
	transcoder.FormatJPEG: "jpegload",
	transcoder.FormatPNG:  "pngload",
}

// privacyAllowed is everything ExifTool may report of a variant: its own bookkeeping, the file
// system's, and what describes the picture's coding (size, bit depth, colour type, codec boxes), by
// group (ExifTool's family 1) with the tags allowed in it (nil: any). Any other group is metadata:
// IFD0, IFD1, ExifIFD, GPS, InteropIFD, a maker's notes (Apple, Nikon...), XMP-*, IPTC, Photoshop,
// ICC_Profile and ICC-*, MPF, JFIF's thumbnail...; so is any tag of an allowed group not listed for
// it (a JPEG comment, a PNG text chunk, an EXIF-derived composite), and any tag named GPS-anything.
var privacyAllowed = map[string][]string{
	"ExifTool": nil, // ExifToolVersion, Warning
	"System":   nil, // FileName, FileSize, FileModifyDate, FilePermissions...
	"File": {"FileType", "FileTypeExtension", "MIMEType", "ImageWidth", "ImageHeight", "EncodingProcess",
		"BitsPerSample", "ColorComponents", "YCbCrSubSampling"},
	"JFIF": {"JFIFVersion", "ResolutionUnit", "XResolution", "YResolution"},
	"PNG": {"ImageWidth", "ImageHeight", "BitDepth", "ColorType", "Compression", "Filter", "Interlace",
		"SRGBRendering", "Gamma"},
	// libvips writes the picture's density as a pHYs chunk (the source's, when it said one): a
	// printing hint, not about who or where.
	"PNG-pHYs": {"PixelUnits", "PixelsPerUnitX", "PixelsPerUnitY"},
	"RIFF": {"VP8Version", "ImageWidth", "ImageHeight", "HorizontalScale", "VerticalScale", "WebP_Flags",
		"AlphaPreprocessing", "AlphaFiltering", "AlphaCompression"},
	// An AVIF's boxes: brand, the one image item, its size, depth, AV1 configuration and colour (nclx).
	"Meta": {"PrimaryItemReference"},
	"QuickTime": {"MajorBrand", "MinorVersion", "CompatibleBrands", "HandlerType", "ImageSpatialExtent",
		"ImagePixelDepth", "AV1ConfigurationVersion", "SeqProfile", "SeqLevelIdx0", "SeqTier0",
		"HighBitDepth", "TwelveBit", "ChromaFormat", "ChromaSamplePosition", "InitialDelaySamples",
		"ColorProfiles", "ColorPrimaries", "TransferCharacteristics", "MatrixCoefficients",
		"VideoFullRangeFlag", "MediaData", "MediaDataSize", "MediaDataOffset", "AuxiliaryImageType"},
	"Composite": {"ImageSize", "Megapixels"},
}

// TestPrivacyCameraFilesLeaveNoMetadata: every camera file, through a recipe of every format and fit;
// ExifTool finds in no variant GPS, EXIF, maker notes, XMP, IPTC, Photoshop data or an ICC profile,
// and no byte of any variant spells the source's device or author. Each variant decodes, at the
// size the result says, in the format asked, upright.
func TestPrivacyCameraFilesLeaveNoMetadata(t *testing.T) {
	exiftool := requireExifTool(t)
	im := newImages(t, transcoder.DefaultImageConfig())
	for _, c := range privacyCameraFiles {
		t.Run(c.file, func(t *testing.T) {
			t.Parallel() // each transform runs on one thread: two files at once use both cores
			src := filepath.Join("testdata", "camera", c.file)
			srcTags := exifToolTags(t, exiftool, src)[src]
			for _, g := range c.carries {
				if len(groupTags(srcTags, g)) == 0 {
					t.Fatalf("control: the source carries no %s tags; ExifTool reads %v", g, sortedKeys(srcTags))
				}
			}
			for _, g := range c.carries { // and the check below would see them
				if !slices.ContainsFunc(privacyLeaks(srcTags), func(l string) bool { return strings.HasPrefix(l, g+":") }) {
					t.Fatalf("control: the check does not report the source's %s tags", g)
				}
			}
			if c.rotated && srcTags["IFD0:Orientation"] != "Rotate 90 CW" {
				t.Fatalf("control: source orientation %v, want Rotate 90 CW", srcTags["IFD0:Orientation"])
			}

			out := t.TempDir()
			res, err := im.TransformRecipe(context.Background(), src, out, privacyRecipe)
			if err != nil {
				t.Fatalf("TransformRecipe: %v", err)
			}
			if len(res.Variants) != len(privacyRecipe) {
				t.Fatalf("got %d variants, want %d", len(res.Variants), len(privacyRecipe))
			}
			paths := make([]string, len(res.Variants))
			for i, v := range res.Variants {
				paths[i] = v.Path
			}
			tags := exifToolTags(t, exiftool, paths...)
			for i, v := range res.Variants {
				spec := privacyRecipe[i]
				label := fmt.Sprintf("%s (%s %s)", v.Quality, spec.Format, spec.Fit)
				if v.Quality != spec.Name || v.Format != spec.Format {
					t.Errorf("variant %d is %s %s, want %s %s", i, v.Quality, v.Format, spec.Name, spec.Format)
				}
				if leaks := privacyLeaks(tags[v.Path]); len(leaks) > 0 {
					t.Errorf("%s carries the source's metadata:\n  %s", label, strings.Join(leaks, "\n  "))
				}
				if found := bytesContaining(t, v.Path, c.markers); len(found) > 0 {
					t.Errorf("%s: its bytes contain %q, from the source's metadata", label, found)
				}

				info := testenv.DecodeImage(t, v.Path) // every pixel decodes
				if info.Width <= 0 || info.Height <= 0 || info.Width != v.Width || info.Height != v.Height {
					t.Errorf("%s: decodes to %dx%d, the result says %dx%d", label, info.Width, info.Height, v.Width, v.Height)
				}
				if want := privacyLoaders[spec.Format]; !strings.HasPrefix(info.Loader, want) {
					t.Errorf("%s: read by %q, want %s", label, info.Loader, want)
				}
				for k, val := range info.Fields { // libvips' own view agrees
					if strings.HasPrefix(k, "exif-") || k == "xmp-data" || k == "iptc-data" || k == "icc-profile-data" ||
						(k == "orientation" && val != "1") {
						t.Errorf("%s: libvips reads metadata field %s = %.60s", label, k, val)
					}
				}
				if spec.Fit == transcoder.FitCover && info.Width != info.Height {
					t.Errorf("%s: cover of a square box is %dx%d", label, info.Width, info.Height)
				}
				if c.rotated && spec.Fit == transcoder.FitInside && info.Height <= info.Width {
					// Stored landscape, viewed portrait: without the orientation tag, the pixels must be turned.
					t.Errorf("%s: %dx%d, want the upright (portrait) picture", label, info.Width, info.Height)
				}
			}
		})
	}
}

// TestPrivacyCheckSeesMetadata: the check of TestPrivacyCameraFilesLeaveNoMetadata is not blind to
// any format. libvips' own thumbnail, which keeps the source's metadata, of the iPhone's HEIC (GPS,
// EXIF, ICC) and of the agency photo (EXIF, XMP, ICC; IPTC and Photoshop where JPEG holds them) is
// reported in each variant format, and its bytes give the source's device or author away.
func TestPrivacyCheckSeesMetadata(t *testing.T) {
	exiftool := requireExifTool(t)
	testenv.RequireBinary(t, "vips")
	dir := t.TempDir()
	for _, c := range []struct {
		file   string
		want   map[string][]string // by extension: the groups that must be reported
		marker string
	}{
		{"iphonexs-gps-p3.heic", map[string][]string{
			"webp": {"GPS", "IFD0", "ExifIFD", "ICC_Profile"}, "avif": {"GPS", "IFD0", "ExifIFD", "ICC_Profile"},
			"jpg": {"GPS", "IFD0", "ExifIFD", "ICC_Profile"}, "png": {"GPS", "IFD0", "ExifIFD", "ICC_Profile"},
		}, "iPhone XS"},
		{"bush-dog-icc-iptc-xmp.jpg", map[string][]string{
			"webp": {"IFD0", "XMP-dc", "ICC_Profile"}, "avif": {"IFD0", "XMP-dc", "ICC_Profile"},
			"jpg": {"IFD0", "XMP-dc", "ICC_Profile", "IPTC", "Photoshop"}, "png": {"IFD0", "XMP-dc", "ICC_Profile"},
		}, "LAVERTY"},
	} {
		src := filepath.Join("testdata", "camera", c.file)
		var paths []string
		for _, ext := range []string{"webp", "avif", "jpg", "png"} {
			p := filepath.Join(dir, strings.TrimSuffix(c.file, filepath.Ext(c.file))+"."+ext)
			testenv.RunVips(t, "thumbnail", src, p, "128")
			paths = append(paths, p)
		}
		tags := exifToolTags(t, exiftool, paths...)
		for _, p := range paths {
			leaks := privacyLeaks(tags[p])
			for _, g := range c.want[strings.TrimPrefix(filepath.Ext(p), ".")] {
				if !slices.ContainsFunc(leaks, func(l string) bool { return strings.HasPrefix(l, g+":") }) {
					t.Errorf("%s: %s tags not reported; reported:\n  %s", filepath.Base(p), g, strings.Join(leaks, "\n  "))
				}
			}
			if found := bytesContaining(t, p, []string{c.marker}); len(found) == 0 {
				t.Errorf("%s: %q not found in its bytes", filepath.Base(p), c.marker)
			}
		}
	}
}

// requireExifTool returns ExifTool's path. A missing ExifTool fails the test (CI installs it; a
// skipped privacy test would prove nothing).
func requireExifTool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("exiftool")
	if err != nil {
		t.Fatal("exiftool is not installed (Debian: libimage-exiftool-perl): run scripts/install-deps.sh (as root) first")
	}
	return p
}

// exifToolTags reads every tag of every file with ExifTool (all of them, duplicates too, named
// group:tag with the group of family 1, e.g. "GPS:GPSLatitude", unknown tags included), by file.
func exifToolTags(t *testing.T, exiftool string, paths ...string) map[string]map[string]any {
	t.Helper()
	args := append([]string{"-j", "-a", "-u", "-G1", "-struct"}, paths...)
	out, err := exec.Command(exiftool, args...).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("exiftool %s: %v\n%s", strings.Join(args, " "), err, stderr)
	}
	var files []map[string]any
	if err := json.Unmarshal(out, &files); err != nil {
		t.Fatalf("parsing exiftool's JSON: %v\n%s", err, out)
	}
	byPath := make(map[string]map[string]any, len(files))
	for _, f := range files {
		p, _ := f["SourceFile"].(string)
		delete(f, "SourceFile")
		byPath[p] = f
	}
	for _, p := range paths {
		if _, ok := byPath[p]; !ok {
			t.Fatalf("exiftool said nothing of %s:\n%s", p, out)
		}
	}
	return byPath
}

// privacyLeaks lists the tags of a variant that are metadata (see privacyAllowed), as
// "group:tag = value".
func privacyLeaks(tags map[string]any) []string {
	var leaks []string
	for _, k := range sortedKeys(tags) {
		group, tag, _ := strings.Cut(k, ":")
		allowed, ok := privacyAllowed[group]
		switch {
		case strings.Contains(strings.ToUpper(tag), "GPS"),
			!ok,
			allowed != nil && !slices.Contains(allowed, tag):
			leaks = append(leaks, fmt.Sprintf("%s = %.80v", k, tags[k]))
		}
	}
	return leaks
}

// groupTags returns the tags of one group.
func groupTags(tags map[string]any, group string) []string {
	var in []string
	for k := range tags {
		if g, _, _ := strings.Cut(k, ":"); g == group {
			in = append(in, k)
		}
	}
	return in
}

// bytesContaining returns the markers found in the file's bytes, case-insensitively.
func bytesContaining(t *testing.T, path string, markers []string) []string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	data := strings.ToLower(string(raw))
	var found []string
	for _, m := range markers {
		if strings.Contains(data, strings.ToLower(m)) {
			found = append(found, m)
		}
	}
	return found
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
