#!/usr/bin/env bash
# Runs the go-memdb peer (../shared/peers/go-memdb/bench.go) and schedstate's port of
# its workload (benches/workload/) back to back on this machine with the same flags,
# RUNS times each, and prints the side-by-side table: median, min and max of every
# metric for both, and the ratio (> 1 means schedstate is better).
#
#   scripts/compare-peer.sh                              # 3 runs each, peer defaults (10,000 nodes)
#   NODES=2000 RUNS=1 scripts/compare-peer.sh            # smaller and faster
#   NODES=50000 scripts/compare-peer.sh -txns 2000 -mem-txns 2000   # extra flags go to both
#
# Env:
#   NODES       passed as -nodes (unset: the peer's default, 10,000)
#   RUNS        runs of each binary (3); the two alternate, go first in odd runs
#   OUT         output directory (target/compare-peer/<date-time>): per-run logs and
#               JSON, the Go binary under build/, summary.md and summary.json
#   PEER_DIR    the peer's directory (../shared/peers/go-memdb from the repository)
#   NO_INSTALL  set to fail instead of installing missing Debian packages
#
# The Go peer is built as its own run.sh does (GOPATH mode against Debian's go-memdb),
# into OUT/build, never into the peer's directory. The machine should be idle: every
# result line carries foreign_cores (other processes' CPU use during that phase).
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd)
PEER_DIR=$(cd "${PEER_DIR:-$ROOT/../shared/peers/go-memdb}" && pwd)
RUNS=${RUNS:-3}
OUT=${OUT:-$ROOT/target/compare-peer/$(date +%Y%m%d-%H%M%S)}
PKGS=(golang-go golang-github-hashicorp-go-memdb-dev)

# ---- the peer's Debian packages ---------------------------------------------
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
missing=()
for p in "${PKGS[@]}"; do installed "$p" || missing+=("$p"); done
if ((${#missing[@]})); then
    if [ -n "${NO_INSTALL:-}" ]; then
        echo "missing Debian packages: ${missing[*]} (NO_INSTALL is set)" >&2
        exit 1
    fi
    SUDO=
    if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; fi
    export DEBIAN_FRONTEND=noninteractive
    # Refresh the package lists only if one of the packages is unknown to them.
    for p in "${missing[@]}"; do
        if ! apt-cache show "$p" >/dev/null 2>&1; then
            echo "## apt-get update (no candidate for $p)"
            $SUDO apt-get update
            break
        fi
    done
    echo "## apt-get install -y ${missing[*]}"
    $SUDO apt-get install -y "${missing[@]}"
fi

mkdir -p "$OUT/build"

# ---- build the Go peer exactly as run.sh does -------------------------------
MEMDB_VER=$(dpkg-query -W -f='${Version}' golang-github-hashicorp-go-memdb-dev)
IRADIX_VER=$(dpkg-query -W -f='${Version}' golang-github-hashicorp-go-immutable-radix-dev)
echo "## $(go version); go-memdb ${MEMDB_VER}; go-immutable-radix ${IRADIX_VER}"
echo "## nproc=$(nproc); cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'); kernel=$(uname -r)"
(
    export GO111MODULE=off GOPATH=/usr/share/gocode GOFLAGS=
    go build -ldflags "-X main.memdbVersion=${MEMDB_VER}" -o "$OUT/build/bench" "$PEER_DIR/bench.go"
)
GO_BIN=$OUT/build/bench

# ---- build the Rust workload (bench profile = release + debug info) ----------
echo "## $(cargo --version); $(rustc --version)"
RS_BIN=$(cargo bench --bench workload --no-run --message-format=json-render-diagnostics |
    python3 -c '
import json, sys
exe = None
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("target", {}).get("name") == "workload" and m.get("executable"):
        exe = m["executable"]
if not exe:
    sys.exit("could not find the workload bench executable")
print(exe)
')
echo "## schedstate workload: $RS_BIN"

# ---- run both, back to back -------------------------------------------------
ARGS=()
if [ -n "${NODES:-}" ]; then ARGS+=(-nodes "$NODES"); fi
ARGS+=("$@")
echo "## flags: ${ARGS[*]:-(defaults)}; runs: $RUNS each; output: $OUT"

run_one() { # who run
    local who=$1 i=$2 bin
    if [ "$who" = go ]; then bin=$GO_BIN; else bin=$RS_BIN; fi
    echo "## run $i: $who"
    "$bin" -json "$OUT/$who-run$i.json" "${ARGS[@]}" 2>&1 | tee "$OUT/$who-run$i.txt"
}

for ((i = 1; i <= RUNS; i++)); do
    if ((i % 2)); then order=(go rs); else order=(rs go); fi
    for who in "${order[@]}"; do run_one "$who" "$i"; done
    go_line=$(grep -m1 '^# dataset' "$OUT/go-run$i.txt")
    rs_line=$(grep -m1 '^# dataset' "$OUT/rs-run$i.txt")
    if [ "$go_line" != "$rs_line" ]; then
        echo "## DATASET MISMATCH in run $i:" >&2
        echo "go: $go_line" >&2
        echo "rs: $rs_line" >&2
        exit 1
    fi
    echo "## run $i: dataset lines identical"
done

python3 "$ROOT/scripts/compare_peer.py" "$OUT"
