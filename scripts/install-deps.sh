#!/usr/bin/env bash
# Installs what mediaworker needs on Debian (12): ffmpeg/ffprobe, libvips (headers for cgo and the vips
# CLI), clamd and clamdscan. With --test (scripts/test.sh) also what only the tests use: headless
# Chromium for the console's browser test, exiftool for the privacy test, Node.js for the ThumbHash
# reference decoder, strace for the document renderer's test. Only what is missing is installed; it is safe to run again.
set -euo pipefail
tests=false
[ "${1:-}" = "--test" ] && tests=true

need=()
command -v ffmpeg   >/dev/null 2>&1 || need+=(ffmpeg)
command -v ffprobe  >/dev/null 2>&1 || need+=(ffmpeg)
command -v vips     >/dev/null 2>&1 || need+=(libvips-tools)
pkg-config --exists vips 2>/dev/null || need+=(libvips-dev pkg-config)
command -v clamd    >/dev/null 2>&1 || need+=(clamav-daemon)
command -v clamdscan >/dev/null 2>&1 || need+=(clamdscan)
command -v gcc      >/dev/null 2>&1 || need+=(gcc libc6-dev)
command -v curl     >/dev/null 2>&1 || need+=(curl)
if $tests; then
  # The console's browser test (app/console_browser_test.go) drives Debian's headless Chromium.
  command -v chromium >/dev/null 2>&1 || need+=(chromium fonts-dejavu-core)
  # The privacy test (transcoder/privacy_test.go) reads every variant's metadata with exiftool.
  command -v exiftool >/dev/null 2>&1 || need+=(libimage-exiftool-perl)
  # The facts test decodes ThumbHashes with the reference implementation (npm thumbhash).
  command -v npm >/dev/null 2>&1 || need+=(nodejs npm)
  # The HDR still test (transcoder/image_hdr_test.go) writes 10-bit PQ/HLG AVIF and HEIC files.
  command -v avifenc >/dev/null 2>&1 || need+=(libavif-bin)
  command -v heif-enc >/dev/null 2>&1 || need+=(libheif-examples)
  # The document renderer's test (transcoder/document_test.go) watches the render child's system calls.
  command -v strace >/dev/null 2>&1 || need+=(strace)
fi

if ((${#need[@]})); then
  sudo=""
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || { echo "install-deps: need root (or sudo) to install: ${need[*]}" >&2; exit 1; }
    sudo=sudo
  fi
  echo "install-deps: installing ${need[*]}" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

if ! command -v go >/dev/null 2>&1; then
  echo "install-deps: Go 1.26 or later is required (https://go.dev/dl); it is not on PATH" >&2
  exit 1
fi
echo "install-deps: ok ($(ffmpeg -version | head -1 | cut -d' ' -f1-3), vips $(pkg-config --modversion vips), $(clamd --version))" >&2
