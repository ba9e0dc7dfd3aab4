# Shared by scripts/setup, scripts/demo and scripts/test. Source it; do not run it.
set -euo pipefail
COETCD_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# Everything coetcd needs on Debian 12, by package name (golang-go builds the Go peers the tests
# and benchmarks run against: etcd's own recipes, from golang-etcd-server-dev's sources).
COETCD_PACKAGES=(
  cmake ninja-build g++ clang-14 libclang-rt-14-dev pkg-config openssl ca-certificates
  libboost1.81-dev libboost-test1.81-dev libboost-program-options1.81-dev
  libgrpc++-dev libabsl-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  golang-etcd-server-dev golang-github-gogo-protobuf-dev golang-github-grpc-ecosystem-grpc-gateway-dev
  etcd-server etcd-client golang-go python3 doxygen prometheus-cpp-dev
)

log() { printf '\033[1m[coetcd]\033[0m %s\n' "$*" >&2; }

# Installs whatever is missing; prints nothing when nothing is.
install_packages() {
  local missing=() p
  for p in "${COETCD_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  local sudo=()
  [ "$(id -u)" -eq 0 ] || sudo=(sudo)
  log "installing: ${missing[*]}"
  "${sudo[@]}" apt-get update -qq
  # The etcd-server package would start a system etcd where init allows; policy-rc.d stops that.
  local policy=/usr/sbin/policy-rc.d created_policy=0
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' | "${sudo[@]}" tee "$policy" >/dev/null
    "${sudo[@]}" chmod +x "$policy"
    created_policy=1
  fi
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  [ $created_policy -eq 1 ] && "${sudo[@]}" rm -f "$policy"
  return 0
}

# The g++ build every script shares (build-gcc/): optimised, with line tables but no variable
# info (-g1). Backtraces and sanitizer-free crash reports keep file:line; full -g doubled
# g++'s time on our template-heavy units (39 s against 20 s for one test), which CI pays twice
# over. For a debugger session: cmake -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g" build-gcc.
gcc_build() {
  build build-gcc g++ -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG"
}

# build DIR COMPILER [cmake args...]: configures once, then builds with two jobs.
build() {
  local dir=$1 cxx=$2
  shift 2
  if [ ! -f "$COETCD_ROOT/$dir/build.ninja" ]; then
    cmake -S "$COETCD_ROOT" -B "$COETCD_ROOT/$dir" -G Ninja -DCMAKE_CXX_COMPILER="$cxx" "$@" >/dev/null
  fi
  # Progress lines dropped; with pipefail a failed build fails the pipeline.
  ninja -C "$COETCD_ROOT/$dir" -j2 ${COETCD_TARGETS:-} | sed -E '/^\[[0-9]+\/[0-9]+\]/d'
}

# fetch_etcd35: etcd 3.5.16 (Debian 13's etcd-server and etcd-client) unpacked into a cache,
# fetched once, never installed: a private sources list and apt state under the cache, the .debs
# checked against the SHA256 of the signed index, then dpkg-deb -x. Sets ETCD35_BIN (the
# directory holding etcd and etcdctl). The system's packages stay as they are.
ETCD35_VERSION=3.5.16
fetch_etcd35() {
  local cache=${COETCD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/coetcd}/etcd-$ETCD35_VERSION
  ETCD35_BIN=$cache/root/usr/bin
  if [ -x "$ETCD35_BIN/etcd" ] && "$ETCD35_BIN/etcd" --version 2>/dev/null | grep -q "etcd Version: $ETCD35_VERSION"; then
    return 0
  fi
  log "fetching etcd $ETCD35_VERSION (Debian 13's packages) into $cache"
  rm -rf "$cache" && mkdir -p "$cache"/{lists/partial,archives/partial,debs,root}
  echo "deb http://deb.debian.org/debian trixie main" >"$cache/sources.list"
  local apt=(-o Dir::Etc::sourcelist="$cache/sources.list" -o Dir::Etc::sourceparts=/nonexistent
    -o Dir::State::Lists="$cache/lists" -o Dir::Cache="$cache" -o Dir::Cache::archives="$cache/archives"
    -o APT::Sandbox::User=root)
  apt-get "${apt[@]}" -qq update || { log "cannot read Debian 13's package index"; return 1; }
  local p deb want
  for p in etcd-server etcd-client; do
    (cd "$cache/debs" && apt-get "${apt[@]}" -qq download "$p=$ETCD35_VERSION-*") || { log "cannot download $p"; return 1; }
    deb=$(ls "$cache/debs/${p}_${ETCD35_VERSION}"-*_amd64.deb)
    want=$(apt-cache "${apt[@]}" show "$p=$(dpkg-deb -f "$deb" Version)" | awk '/^SHA256:/ {print $2; exit}')
    if [ -z "$want" ] || [ "$(sha256sum "$deb" | awk '{print $1}')" != "$want" ]; then
      log "$deb does not match the index's SHA256"
      return 1
    fi
    dpkg-deb -x "$deb" "$cache/root"
  done
  "$ETCD35_BIN/etcd" --version | grep -q "etcd Version: $ETCD35_VERSION" || { log "the unpacked etcd is not $ETCD35_VERSION"; return 1; }
}

# A TCP port on 127.0.0.1 that nothing listens on (checked, not reserved).
free_port() {
  local p
  for _ in $(seq 1 200); do
    p=$((20000 + RANDOM % 30000))
    (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return 0; }
  done
  return 1
}

# start_etcd: a throwaway single-member etcd on loopback; sets ETCD_PID, ETCD_ENDPOINT, ETCD_DIR.
# free_port only sees listeners: a port some connection holds as its local end fails etcd's
# bind, and then the start is tried again on other ports (three times in all).
start_etcd() {
  local rc
  for _ in 1 2 3; do
    rc=0
    start_etcd_once || rc=$?
    [ "$rc" -eq 2 ] || return "$rc"
    log "etcd's port was taken; trying other ports"
  done
  return 1
}

# 0: up; 2: exited because a port was taken; 1: any other failure.
start_etcd_once() {
  ETCD_DIR=$(mktemp -d -t coetcd-etcd-XXXXXX)
  local client peer taken
  client=$(free_port)
  peer=$(free_port)
  ETCD_ENDPOINT="127.0.0.1:$client"
  "${COETCD_ETCD:-/usr/bin/etcd}" --name demo --data-dir "$ETCD_DIR/data" \
    --listen-client-urls "http://$ETCD_ENDPOINT" --advertise-client-urls "http://$ETCD_ENDPOINT" \
    --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
    --initial-cluster "demo=http://127.0.0.1:$peer" --logger zap --log-level warn >"$ETCD_DIR/etcd.log" 2>&1 &
  ETCD_PID=$!
  for _ in $(seq 1 100); do
    if ETCDCTL_API=3 "${COETCD_ETCDCTL:-/usr/bin/etcdctl}" --endpoints="$ETCD_ENDPOINT" --dial-timeout=1s endpoint health >/dev/null 2>&1; then
      log "etcd $("${COETCD_ETCD:-/usr/bin/etcd}" --version | head -1 | awk '{print $3}') up at $ETCD_ENDPOINT (pid $ETCD_PID)"
      return 0
    fi
    if ! kill -0 "$ETCD_PID" 2>/dev/null; then
      cat "$ETCD_DIR/etcd.log" >&2
      taken=1
      grep -q "address already in use" "$ETCD_DIR/etcd.log" && taken=2
      stop_etcd  # reaps it and removes its directory
      return "$taken"
    fi
    sleep 0.1
  done
  log "etcd did not become healthy"
  cat "$ETCD_DIR/etcd.log" >&2
  stop_etcd  # the caller's trap comes after a start that worked: this one is ours to stop
  return 1
}

stop_etcd() {
  if [ -n "${ETCD_PID:-}" ] && kill -0 "$ETCD_PID" 2>/dev/null; then
    kill "$ETCD_PID"
    wait "$ETCD_PID" 2>/dev/null || true
  fi
  [ -n "${ETCD_DIR:-}" ] && rm -rf "$ETCD_DIR"
  ETCD_PID=
}
