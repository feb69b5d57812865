package vips

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// riff builds a WEBP RIFF file from chunks given as fourcc, payload pairs.
func riff(chunks ...string) []byte {
	var body bytes.Buffer
	body.WriteString("WEBP")
	for i := 0; i < len(chunks); i += 2 {
		body.WriteString(chunks[i])
		binary.Write(&body, binary.LittleEndian, uint32(len(chunks[i+1])))
		body.WriteString(chunks[i+1])
		if len(chunks[i+1])%2 == 1 {
			body.WriteByte(0)
		}
	}
	var out bytes.Buffer
	out.WriteString("RIFF")
	binary.Write(&out, binary.LittleEndian, uint32(body.Len()))
	out.Write(body.Bytes())
	return out.Bytes()
}

func TestStripWebPMetadata(t *testing.T) {
	vp8x := string([]byte{0x20 | 0x10 | 0x08 | 0x04, 0, 0, 0, 9, 0, 0, 9, 0, 0}) // ICC, alpha, EXIF, XMP
	in := riff("VP8X", vp8x, "ICCP", "profile", "ALPH", "a", "VP8 ", "pixels", "EXIF", "camera", "XMP ", "<x/>")
	got, err := stripWebPMetadata(in)
	if err != nil {
		t.Fatal(err)
	}
	want := riff("VP8X", string([]byte{0x10, 0, 0, 0, 9, 0, 0, 9, 0, 0}), "ALPH", "a", "VP8 ", "pixels")
	if !bytes.Equal(got, want) {
		t.Errorf("stripped:\n%q\nwant:\n%q", got, want)
	}

	for name, bad := range map[string][]byte{
		"empty":          nil,
		"not riff":       []byte("RIFX....WEBPVP8 "),
		"cut header":     in[:len(in)-len("<x/>")-6],
		"chunk overruns": append(riff("VP8 ", "pixels")[:12], []byte("VP8 \xff\xff\xff\x7fab")...),
	} {
		if _, err := stripWebPMetadata(bad); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestReadHeaderRefusesBlockedLoaders(t *testing.T) {
	if err := Init(); err != nil {
		t.Fatal(err)
	}
	if err := Init(); err != nil { // idempotent
		t.Fatal(err)
	}
	dir := t.TempDir()
	csv := filepath.Join(dir, "data.csv")
	if err := os.WriteFile(csv, []byte("1,2\n3,4\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadHeader(csv); err == nil {
		t.Errorf("csv file accepted")
	}
	if _, err := ReadHeader(filepath.Join(dir, "x.jpg[shrink=2]")); err == nil {
		t.Errorf("path with load options accepted")
	}
}

// libvipsMapped reports whether libvips is in this process's address space.
func libvipsMapped() bool {
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		panic(err)
	}
	return bytes.Contains(maps, []byte("/libvips.so"))
}

// TestMain checks, before any test can call Init, that the binary did not bring libvips (and its ~130
// dependencies) in at start-up: it is loaded by Init only.
func TestMain(m *testing.M) {
	if libvipsMapped() {
		fmt.Fprintln(os.Stderr, "libvips is mapped before Init: the binary links it (check the --as-needed build and that the shim calls libvips only through its mw_ pointers)")
		os.Exit(1)
	}
	os.Exit(m.Run())
}

func TestLoadedByInit(t *testing.T) {
	if err := Init(); err != nil {
		t.Fatal(err)
	}
	if !libvipsMapped() {
		t.Fatal("libvips is not mapped after Init")
	}
}
