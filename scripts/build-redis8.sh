#!/usr/bin/env bash
# Builds Redis 8.x from Debian's own source package (experimental, else
# unstable) into a cache directory outside the checkout, for the tests that
# exercise the native XACKDEL (>= 8.2) and XREADGROUP ... CLAIM (>= 8.4) paths.
#
#   scripts/build-redis8.sh            # builds once, then reuses the cache
#   SHARDLINE_REDIS8_DIR=/opt/r8 scripts/build-redis8.sh
#
# Only Debian's registry is needed: the upstream tarball vendors its deps
# (lua, jemalloc, hiredis); the optional modules (RedisJSON, RediSearch, ...)
# need the network and are not built (BUILD_WITH_MODULES stays unset).
# Prints the directory holding bin/redis-server on its last line.
set -euo pipefail

DIR="${SHARDLINE_REDIS8_DIR:-$HOME/.cache/shardline/redis-8}"
BIN="$DIR/bin/redis-server"

log() { printf '== %s\n' "$*" >&2; }

cached() { [ -x "$BIN" ] && "$BIN" --version | grep -q ' v=8\.'; }

if cached; then
  log "cached: $("$BIN" --version)"
  echo "$DIR"
  exit 0
fi

# One build at a time (two worktrees' tests on a fresh machine): the second
# waits, then finds the first one's build.
mkdir -p "$(dirname "$DIR")"
exec 9>"$DIR.lock"
if ! flock -n 9; then
  log "another build of $DIR is running; waiting for it"
  flock 9
fi
if cached; then
  log "cached: $("$BIN" --version)"
  echo "$DIR"
  exit 0
fi

SUDO=""
if [ "$(id -u)" != "0" ] && command -v sudo >/dev/null 2>&1; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive

# A deb-src entry for the suites that carry Redis 8 (sources only: no binary
# package from them is ever installed).
SRC_LIST=/etc/apt/sources.list.d/shardline-redis-src.sources
if [ ! -f "$SRC_LIST" ]; then
  log "adding deb-src for experimental and unstable ($SRC_LIST)"
  $SUDO tee "$SRC_LIST" >/dev/null <<'EOF'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: experimental unstable
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
fi
$SUDO apt-get update -qq

# apt-get source needs dpkg-source (dpkg-dev); the build needs a C toolchain.
# Debian's build-deps (debhelper, systemd, tcl, system lua/jemalloc) are for
# the .deb packaging and the upstream test suite; the plain make needs none.
missing=()
for p in dpkg-dev gcc make pkg-config; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  log "installing ${missing[*]}"
  $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
chmod 755 "$WORK" # lets apt's _apt user write the download
cd "$WORK"
got=""
for suite in experimental unstable; do
  if apt-get source -qq "redis/$suite" >/dev/null 2>&1; then
    got="$suite"
    break
  fi
done
[ -n "$got" ] || { echo "could not get Debian's redis source package" >&2; exit 1; }
SRC="$(find "$WORK" -maxdepth 1 -type d -name 'redis-*' | head -1)"
version="$(basename "$SRC" | sed 's/^redis-//')"
case "$version" in
  8.*) ;;
  *) echo "Debian's redis source in $got is $version, not 8.x" >&2; exit 1 ;;
esac

log "building redis $version from Debian $got ($(nproc) jobs; about 5 min on 2 cores)"
start=$(date +%s)
# progress every 20 s: files compiled so far and the time taken
(
  while sleep 20; do
    log "building redis $version: $(grep -c -E '^ *CC |-c .*-o [^ ]+\.o( |$)' "$WORK/build.log" 2>/dev/null || echo 0) files compiled, $(( $(date +%s) - start )) s"
  done
) &
ticker=$!
trap 'kill $ticker 2>/dev/null || true; rm -rf "$WORK"' EXIT
make -C "$SRC" -j"$(nproc)" BUILD_TLS=no >"$WORK/build.log" 2>&1 \
  || { tail -40 "$WORK/build.log" >&2; exit 1; }
kill $ticker 2>/dev/null || true
rm -rf "$DIR"
mkdir -p "$DIR"
log "installing into $DIR"
make -C "$SRC" PREFIX="$DIR" install >>"$WORK/build.log" 2>&1
log "built in $(( $(date +%s) - start )) s: $("$BIN" --version)"
echo "$DIR"
