#!/usr/bin/env bash
# Installs Debian's chromium for the console's real-browser tests
# (test/e2e, chromedp). A browser download is never used: the Debian
# package only.
set -euo pipefail
if command -v chromium >/dev/null || command -v chromium-browser >/dev/null; then exit 0; fi
SUDO=
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null || { echo "browser.sh: chromium is missing; as root: apt-get install chromium" >&2; exit 1; }
  SUDO=sudo
fi
echo "browser: installing chromium (Debian package)" >&2
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
