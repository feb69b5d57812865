package faults

import (
	"bytes"
	"image"
	"image/color"
	"image/jpeg"
	"net"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mediaworker/mediaworker/contracts"
	"github.com/mediaworker/mediaworker/internal/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// Issue 32 item 6's judged cases for documents, against the built binary configured by a file: a
// recipe "pages" with documents: true beside requests that name no recipe. The render child is the
// built worker itself (`mediaworker render-document`), confined, with real poppler, librsvg and clamd.
func TestDocumentsThroughTheBuiltWorker(t *testing.T) {
	clamd := testenv.StartClamd(t)
	srv := testenv.StartNATS(t)
	dir := t.TempDir()
	conf := writeFile(t, dir, "site.yaml", []byte(`recipes:
  pages:
    documents: true
    images:
      - {name: page, width: 600, format: webp}
      - {name: thumb, width: 160, height: 160, fit: cover, crop: centre, format: jpeg}
`))
	startWorker(t, "a", workerOpts{natsURL: srv.ClientURL(), clamd: clamd, args: []string{"--config", conf}})
	l := newLedger(t, srv.ClientURL())
	c := newClient(t, l, nil, 1)

	// A loopback listener that counts the connections the hostile SVG's images would make, and a
	// secret outside every job's scratch directory that its file:// image names.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var dials atomic.Int32
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			dials.Add(1)
			conn.Close()
		}
	}()
	secret := writeFile(t, dir, "secret.png", []byte("not for documents"))

	red, green, blue := color.RGBA{230, 20, 20, 255}, color.RGBA{20, 200, 20, 255}, color.RGBA{20, 20, 230, 255}
	a4 := func(fills ...color.RGBA) []byte {
		return testenv.MakePDF(testenv.PDFOpts{Width: 595, Height: 842, Fills: fills})
	}
	files := map[string][]byte{
		"u/report.pdf":   a4(red, green, blue),
		"u/eicar.pdf":    testenv.MakePDF(testenv.PDFOpts{Width: 595, Height: 842, Fills: []color.RGBA{red}, Comment: testenv.EICAR}),
		"u/hostile.svg":  testenv.HostileSVG(secret, "http://"+ln.Addr().String()+"/x.png"),
		"u/huge.svg":     []byte(`<svg xmlns="http://www.w3.org/2000/svg" width="100000" height="100000"><rect width="10" height="10"/></svg>`),
		"u/poster.pdf":   testenv.MakePDF(testenv.PDFOpts{Width: 14400, Height: 14400, Fills: []color.RGBA{red}}),
		"u/broken.pdf":   []byte("%PDF-1.4\n1 0 obj\n<< /Type /Catalog /Pages 2 0 R\nthis is not a PDF any more"),
		"u/after.pdf":    a4(green),
		"u/fallback.svg": testenv.HostileSVG(secret, "http://"+ln.Addr().String()+"/y.png"),
	}
	for key, data := range files {
		c.upload(writeFile(t, dir, filepath.Base(key), data), key)
	}
	ask := func(key, recipe string) string {
		req := testenv.NewRequest(bucket, key)
		req.Recipe = recipe
		testenv.PublishRequest(t, c.js, streams.Subjects().Request, req, jetstream.WithExpectStream(streams.RequestsStream()))
		return req.MediaID
	}
	// One document slot: the failing renders go first, so the last job shows the worker lives on.
	var (
		report      = ask("u/report.pdf", "pages")
		eicarDocs   = ask("u/eicar.pdf", "pages")
		hostile     = ask("u/hostile.svg", "pages")
		huge        = ask("u/huge.svg", "pages")
		poster      = ask("u/poster.pdf", "pages")
		broken      = ask("u/broken.pdf", "pages")
		plainPDF    = ask("u/report.pdf", "")
		plainSVG    = ask("u/fallback.svg", "")
		after       = ask("u/after.pdf", "pages")
		eicarNoDocs string
	)
	// The infected file is removed once found: the request without a documents recipe needs its own copy.
	c.upload(writeFile(t, dir, "eicar2.pdf", files["u/eicar.pdf"]), "u/eicar2.pdf")
	eicarNoDocs = ask("u/eicar2.pdf", "")
	l.await([]string{report, eicarDocs, hostile, huge, poster, broken, plainPDF, plainSVG, after, eicarNoDocs}, 3*time.Minute)

	// (a) A clean 3-page PDF: page 1's variants at the recipe's sizes, the page count in the metadata
	// (the ledger checked every answer against contracts/schemas).
	r := l.one(report)
	if !r.Success || r.Recipe != "pages" || len(r.Processed) != 2 || r.Metadata == nil || r.Metadata.Pages != 3 ||
		r.Metadata.MIME != "application/pdf" || r.Metadata.Width != 595 || r.Metadata.Height != 842 {
		t.Fatalf("the 3-page PDF: %+v %+v", r, r.Metadata)
	}
	for _, v := range r.Processed {
		img := decodeVariant(t, v)
		b := img.Bounds()
		if b.Dx() != v.Width || b.Dy() != v.Height {
			t.Errorf("%s decodes at %d×%d, the answer says %d×%d", v.Quality, b.Dx(), b.Dy(), v.Width, v.Height)
		}
		switch v.Quality {
		case "page": // A4 inside a 600-wide box: 600 × 849 (842/595 × 600 = 848.9)
			if b.Dx() != 600 || b.Dy() < 848 || b.Dy() > 849 {
				t.Errorf("page variant %d×%d, want 600×848/849", b.Dx(), b.Dy())
			}
		case "thumb":
			if b.Dx() != 160 || b.Dy() != 160 {
				t.Errorf("thumb variant %d×%d, want 160×160", b.Dx(), b.Dy())
			}
		}
		// Page 1 is red; pages 2 and 3 (green, blue) never reach a variant.
		if cr, cg, cb, _ := img.At(b.Dx()/2, b.Dy()/2).RGBA(); cr>>8 < 180 || cg>>8 > 80 || cb>>8 > 80 {
			t.Errorf("%s's centre is (%d, %d, %d), want page 1's red", v.Quality, cr>>8, cg>>8, cb>>8)
		}
	}

	// (b) EICAR in a PDF: a virus event, with the documents recipe and without.
	l.mu.Lock()
	for name, id := range map[string]string{"with documents": eicarDocs, "without documents": eicarNoDocs} {
		if len(l.viruses[id]) != 1 {
			t.Errorf("EICAR PDF %s: %d virus events, want 1 (answer %+v)", name, len(l.viruses[id]), l.responses[id])
		}
	}
	l.mu.Unlock()

	// (c) The hostile SVG renders with nothing fetched: no connection, and no variant is an SVG.
	r = l.one(hostile)
	if !r.Success || len(r.Processed) != 2 || r.Metadata == nil || r.Metadata.Pages != 1 || r.Metadata.MIME != "image/svg+xml" {
		t.Fatalf("the hostile SVG: %+v %+v", r, r.Metadata)
	}
	for _, v := range r.Processed {
		if strings.HasSuffix(keyOf(t, v.URL), ".svg") || (v.Format != contracts.FormatWebP && v.Format != contracts.FormatJPG) {
			t.Errorf("the hostile SVG's variant %+v is stored as an SVG", v)
		}
		img := decodeVariant(t, v)
		if cr, cg, cb, _ := img.At(5, 5).RGBA(); cb>>8 < 180 || cr>>8 > 80 || cg>>8 > 80 {
			t.Errorf("%s's corner is (%d, %d, %d), want the SVG's blue", v.Quality, cr>>8, cg>>8, cb>>8)
		}
	}
	if n := dials.Load(); n != 0 {
		t.Errorf("rendering the hostile SVG connected %d times to its http:// image", n)
	}

	// (d) Over the pixel limit, in its words, before anything is rendered.
	for id, words := range map[string]string{
		huge:   "the SVG's canvas is 100000 × 100000 pixels (10000 megapixels); the limit is 100 megapixels",
		poster: "the PDF's first page is 200 × 200 inches (14400 × 14400 points), 207.4 megapixels at 72 dpi; the limit is 100 megapixels",
	} {
		if r := l.one(id); r.Success || !strings.Contains(r.Error, words) {
			t.Errorf("over the pixel limit: %+v, want an error saying %q", r, words)
		}
	}

	// (e) Without a documents recipe: answered exactly as before the document kind (docs/contract.md).
	for id, want := range map[string]string{
		plainPDF: "detecting: unsupported media type: application/pdf",
		plainSVG: "detecting: unsupported media type: image/svg+xml",
	} {
		if r := l.one(id); r.Success || r.Error != want || len(r.Processed) != 0 || r.Metadata != nil {
			t.Errorf("no documents recipe: %+v, want the failure %q", r, want)
		}
	}

	// (f) A render that fails fails its job in words; the worker renders the next one.
	if r := l.one(broken); r.Success || !strings.Contains(r.Error, "the PDF could not be read") {
		t.Errorf("the broken PDF: %+v", r)
	}
	if r := l.one(after); !r.Success || r.Metadata == nil || r.Metadata.Pages != 1 {
		t.Errorf("the PDF after the failures: %+v", r)
	}
	if n := dials.Load(); n != 0 {
		t.Errorf("%d connections to the SVGs' http:// images", n)
	}
}

// decodeVariant fetches a variant as a browser would and decodes it.
func decodeVariant(t *testing.T, v contracts.Variant) image.Image {
	t.Helper()
	switch v.Format {
	case contracts.FormatWebP:
		return vipsDecode(t, fetchURL(t, v.URL, "image/webp"), "webp")
	case contracts.FormatJPG:
		img, err := jpeg.Decode(bytes.NewReader(fetchURL(t, v.URL, "image/jpeg")))
		if err != nil {
			t.Fatalf("decoding %s: %v", v.Quality, err)
		}
		return img
	}
	t.Fatalf("variant %s of format %q", v.Quality, v.Format)
	return nil
}
