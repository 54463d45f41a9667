#!/usr/bin/env bash
# Debian's headless Chromium for tests/e2e/test_report_browser.py. Idempotent: does nothing when it is installed;
# needs root and apt (CI runs `make test` as root on a fresh Debian machine). Without it the browser tests skip.
set -euo pipefail
if [ -x /usr/bin/chromium ]; then
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "install_chromium.sh: not root or no apt-get; the browser tests will skip (apt-get install chromium)" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -q >/dev/null
apt-get install -y -q --no-install-recommends chromium >/dev/null
echo "install_chromium.sh: installed $(/usr/bin/chromium --version 2>/dev/null)"
