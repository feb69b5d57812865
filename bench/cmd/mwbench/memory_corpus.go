package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// The memory phase's corpus (issue 23): real files from sources the tests have not used — Debian's
// wallpaper packages (photos and renders up to 18 MP, 16-bit PNGs among them) and the test data other
// Go image modules ship (libvips' and bimg's odd JPEGs, TIFFs, HEIC, AVIF, animated WebP and GIF, EXIF
// samples). Both come through their ordinary clients (apt-get download, go mod download) and are
// cached beside the bench corpus.

// outsideDebs are the Debian packages whose wallpapers join the corpus.
var outsideDebs = []string{"gnome-backgrounds", "desktop-base", "mate-backgrounds", "plasma-workspace-wallpapers", "ukui-wallpapers"}

// outsideModules are the Go modules whose test images join the corpus.
var outsideModules = []string{
	"github.com/davidbyttow/govips/v2@v2.16.0",
	"github.com/h2non/bimg@v1.1.9",
	"github.com/gen2brain/avif@v0.4.4",
	"github.com/gen2brain/heic@v0.4.5",
	"github.com/gen2brain/webp@v0.5.5",
	"github.com/evanoberholster/imagemeta@v0.3.1",
	"github.com/rwcarlsen/goexif@v0.0.0-20190401172101-9e8deecbddbd",
}

// outsideExt are the extensions of the outside corpus's media files.
var outsideExt = []string{".jpeg", ".jpg", ".png", ".gif", ".bmp", ".tif", ".tiff", ".webp", ".heic", ".heif", ".avif"}

// outsideFiles gathers (and caches under dir) the outside corpus and lists its media files, sorted.
func outsideFiles(ctx context.Context, dir string, logf func(string, ...any)) ([]string, error) {
	debDir, x := filepath.Join(dir, "debs"), filepath.Join(dir, "x")
	if _, err := os.Stat(filepath.Join(dir, "complete")); err != nil {
		logf("memory: fetching the outside corpus into %s (apt-get download %s)", dir, strings.Join(outsideDebs, " "))
		if err := os.MkdirAll(debDir, 0o755); err != nil {
			return nil, err
		}
		cmd := exec.CommandContext(ctx, "apt-get", append([]string{"download"}, outsideDebs...)...)
		cmd.Dir = debDir
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("downloading the wallpaper packages (run apt-get update first): %v\n%s", err, out)
		}
		debs, _ := filepath.Glob(filepath.Join(debDir, "*.deb"))
		for _, d := range debs {
			if out, err := exec.CommandContext(ctx, "dpkg-deb", "-x", d, x).CombinedOutput(); err != nil {
				return nil, fmt.Errorf("unpacking %s: %v\n%s", d, err, out)
			}
		}
		if err := os.WriteFile(filepath.Join(dir, "complete"), nil, 0o644); err != nil {
			return nil, err
		}
	}
	roots := []string{filepath.Join(x, "usr", "share")}
	for _, m := range outsideModules {
		out, err := exec.CommandContext(ctx, "go", "mod", "download", "-json", m).Output()
		if err != nil {
			return nil, fmt.Errorf("downloading %s for its test images: %w", m, err)
		}
		var mod struct{ Dir string }
		if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
			return nil, fmt.Errorf("reading `go mod download` of %s: %v", m, err)
		}
		roots = append(roots, mod.Dir)
	}
	var files []string
	for _, r := range roots {
		err := filepath.WalkDir(r, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !d.Type().IsRegular() {
				return err
			}
			if slices.Contains(outsideExt, strings.ToLower(filepath.Ext(p))) {
				files = append(files, p)
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("walking %s: %w", r, err)
		}
	}
	slices.Sort(files)
	if len(files) < 400 {
		return nil, fmt.Errorf("the outside corpus has only %d media files (the issue asks for at least 400)", len(files))
	}
	return files, nil
}
