package main

import (
	"io"

	"github.com/mediaworker/mediaworker/transcoder"
)

// renderDocumentCommand is the hidden subcommand the worker starts itself as to render a PDF's first
// page or an SVG (transcoder.Documents): the loaders run in that child, confined and under ffmpeg's
// resource limits, never in the worker. It is not listed in the help; people have no use for it.
const renderDocumentCommand = "render-document"

func cmdRenderDocument(args []string, stdout, stderr io.Writer) int {
	return transcoder.RenderDocumentMain(args, stdout, stderr)
}
