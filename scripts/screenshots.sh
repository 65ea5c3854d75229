#!/usr/bin/env bash
# Refreshes the dashboard screenshots the README shows (docs/screenshots/):
# the browser test saves them while it runs. Needs what that test needs
# (chromium, chromium-driver, axe-core under .ci/node; see .ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
export JOBSTORE_SCREENSHOTS="$PWD/docs/screenshots"
JOBSTORE_REQUIRE_BACKENDS=browser cargo test -p jobstore --test dashboard
ls -l "$JOBSTORE_SCREENSHOTS"
