#!/usr/bin/env bash
# Debian's chromium, for the test that opens MLflow's UI in a real headless browser
# (tests/test_mlflow_ui.py). Needs root or passwordless sudo; otherwise it says so and that
# one test is skipped (unless EVALSUITE_REQUIRE_BROWSER=1 makes a missing browser an error).
set -euo pipefail
if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" -eq 0 ]; then SUDO=""; elif sudo -n true 2>/dev/null; then SUDO="sudo -n"; else
  echo "setup_browser: no chromium and no root: apt-get install chromium to run the MLflow UI test" >&2
  [ -z "${EVALSUITE_REQUIRE_BROWSER:-}" ] && exit 0 || exit 1
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq chromium >/dev/null
echo "setup_browser: $(chromium --version 2>/dev/null | head -1)"
