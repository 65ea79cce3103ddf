#!/usr/bin/env bash
# Debian's Chromium for the dashboard's browser test (member-runtime
# test/redis/dashboard.test.ts drives /usr/bin/chromium with playwright-core;
# no browser download). Installs it when missing; prints its version.
set -uo pipefail
SUDO=""
if [ "$(id -u)" != "0" ] && command -v sudo >/dev/null 2>&1; then SUDO="sudo"; fi
if ! [ -x /usr/bin/chromium ]; then
  printf '\n== installing chromium (apt-get)\n'
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -y -qq && $SUDO apt-get install -y -qq chromium >/dev/null \
    || { echo "could not install chromium: run 'apt-get install chromium'"; exit 1; }
fi
/usr/bin/chromium --version
