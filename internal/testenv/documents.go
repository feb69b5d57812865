package testenv

import (
	"bytes"
	"fmt"
	"image/color"
	"strings"
)

// Documents for the document renderer's tests (transcoder) and the document kind's (pipeline, app).

// PDFOpts describes a PDF MakePDF writes.
type PDFOpts struct {
	Width, Height float64      // of every page, in points (72 to the inch); A4 is 595 × 842
	Fills         []color.RGBA // one page per colour, filled with it and labelled "Page n"
	// Comment is written as a PDF comment after the header (an EICAR string, say): readers skip it,
	// a scanner reading the bytes finds it.
	Comment string
}

// MakePDF writes a PDF by hand, with a correct cross-reference table so poppler reads it without
// repairing it: each page filled with its colour, its label in Helvetica 24 pt 20 pt from the bottom
// left.
func MakePDF(o PDFOpts) []byte {
	var b bytes.Buffer
	var offsets []int
	obj := func(body string) {
		offsets = append(offsets, b.Len())
		fmt.Fprintf(&b, "%d 0 obj\n%s\nendobj\n", len(offsets), body)
	}
	b.WriteString("%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
	if o.Comment != "" {
		b.WriteString("%" + o.Comment + "\n")
	}
	obj("<< /Type /Catalog /Pages 2 0 R >>")
	var kids []string
	for i := range o.Fills {
		kids = append(kids, fmt.Sprintf("%d 0 R", 4+2*i))
	}
	obj(fmt.Sprintf("<< /Type /Pages /Kids [%s] /Count %d >>", strings.Join(kids, " "), len(o.Fills)))
	obj("<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
	for i, c := range o.Fills {
		obj(fmt.Sprintf("<< /Type /Page /Parent 2 0 R /MediaBox [0 0 %g %g] /Resources << /Font << /F1 3 0 R >> >> /Contents %d 0 R >>",
			o.Width, o.Height, 5+2*i))
		content := fmt.Sprintf("%.3f %.3f %.3f rg 0 0 %g %g re f 0 g BT /F1 24 Tf 20 20 Td (Page %d) Tj ET",
			float64(c.R)/255, float64(c.G)/255, float64(c.B)/255, o.Width, o.Height, i+1)
		obj(fmt.Sprintf("<< /Length %d >>\nstream\n%s\nendstream", len(content), content))
	}
	xref := b.Len()
	fmt.Fprintf(&b, "xref\n0 %d\n0000000000 65535 f \n", len(offsets)+1)
	for _, off := range offsets {
		fmt.Fprintf(&b, "%010d 00000 n \n", off)
	}
	fmt.Fprintf(&b, "trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n", len(offsets)+1, xref)
	return b.Bytes()
}

// HostileSVG is a 200 × 100 SVG, all #1414e6 blue, that also carries a script and three images a
// renderer must not load: file://secret (a path outside the job's scratch directory) and url (a
// loopback listener that counts connections) by href and by xlink:href.
func HostileSVG(secret, url string) []byte {
	return []byte(`<?xml version="1.0"?>
<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink" width="200" height="100">
  <script type="text/javascript">document.location = "` + url + `?script";</script>
  <rect width="200" height="100" fill="#1414e6"/>
  <image xlink:href="file://` + secret + `" x="0" y="0" width="100" height="100"/>
  <image href="` + url + `" x="100" y="0" width="100" height="100"/>
  <image xlink:href="` + url + `?xlink" x="50" y="0" width="100" height="100"/>
</svg>`)
}
