#!/usr/bin/env bash
# Installs what mediaworker needs on Debian (12): ffmpeg/ffprobe, libvips (headers for cgo and the vips
# CLI used by tests), clamd and clamdscan, and headless Chromium for the console's browser test. Only what is missing is installed; it is safe to run again.
set -euo pipefail

need=()
command -v ffmpeg   >/dev/null 2>&1 || need+=(ffmpeg)
command -v ffprobe  >/dev/null 2>&1 || need+=(ffmpeg)
command -v vips     >/dev/null 2>&1 || need+=(libvips-tools)
pkg-config --exists vips 2>/dev/null || need+=(libvips-dev pkg-config)
command -v clamd    >/dev/null 2>&1 || need+=(clamav-daemon)
command -v clamdscan >/dev/null 2>&1 || need+=(clamdscan)
command -v gcc      >/dev/null 2>&1 || need+=(gcc libc6-dev)
command -v curl     >/dev/null 2>&1 || need+=(curl)
# The console's browser test (app/console_browser_test.go) drives Debian's headless Chromium.
command -v chromium >/dev/null 2>&1 || need+=(chromium fonts-dejavu-core)

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
