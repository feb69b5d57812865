#!/usr/bin/env bash
# Regenerates the settings reference of docs/operations.md from the code (cmd/mediaworker/settingsdoc.go),
# so the page lists exactly what `run` and its config file accept; the test fails when they differ. Run it
# after changing a setting.
set -euo pipefail
cd "$(dirname "$0")/.."
MW_UPDATE_DOCS=1 go test -count=1 ./cmd/mediaworker -run 'TestSettingsDoc$'
