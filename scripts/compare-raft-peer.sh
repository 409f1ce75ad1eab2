#!/usr/bin/env bash
# Runs the nomad-raft peer (../shared/peers/nomad-raft/raftbench.go: hashicorp/raft +
# raft-boltdb + go-memdb, three servers over loopback TCP) and schedstate-raft's port
# of its workload (crates/raft/benches/raft_workload.rs) back to back on this machine
# with the same flags, RUNS times each, and prints the side-by-side table (medians,
# min – max, ratio > 1 = schedstate better).
#
#   scripts/compare-raft-peer.sh                         # 3 runs each, peer defaults
#   RUNS=1 scripts/compare-raft-peer.sh -nodes 300 -secs 1 -failovers 2   # smoke
#
# Env: RUNS (3), OUT (target/compare-raft-peer/<date-time>), PEER_DIR
# (../shared/peers/nomad-raft), NO_INSTALL (fail instead of installing Debian packages).
# Extra arguments go to both binaries. schedstate's own timeouts are its defaults
# (ServerOptions: heartbeat 40 ms, election 100-200 ms); pass -nomad-timeouts to the
# schedstate side alone (RS_ARGS=-nomad-timeouts) to compare with the peer's settings.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd)
PEER_DIR=$(cd "${PEER_DIR:-$ROOT/../shared/peers/nomad-raft}" && pwd)
RUNS=${RUNS:-3}
OUT=${OUT:-$ROOT/target/compare-raft-peer/$(date +%Y%m%d-%H%M%S)}
PKGS=(golang-go golang-github-hashicorp-go-memdb-dev golang-github-hashicorp-raft-dev golang-github-hashicorp-raft-boltdb-dev)

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
    $SUDO apt-get install -y "${missing[@]}" || { $SUDO apt-get update && $SUDO apt-get install -y "${missing[@]}"; }
fi
mkdir -p "$OUT/build"

# ---- the peer, built as its run.sh does, into OUT/build ---------------------
ver() { dpkg-query -W -f='${Version}' "$1"; }
(
    export GO111MODULE=off GOPATH=/usr/share/gocode GOFLAGS=
    go build -ldflags "-X main.memdbVersion=$(ver golang-github-hashicorp-go-memdb-dev) -X main.raftVersion=$(ver golang-github-hashicorp-raft-dev) -X main.raftBoltdbVersion=$(ver golang-github-hashicorp-raft-boltdb-dev) -X main.boltVersion=$(ver golang-github-boltdb-bolt-dev) -X main.msgpackVersion=$(ver golang-github-hashicorp-go-msgpack-dev)" \
        -o "$OUT/build/raftbench" "$PEER_DIR/raftbench.go"
)
GO_BIN=$OUT/build/raftbench
echo "## $(go version); $(cargo --version); nproc=$(nproc)"

# ---- schedstate's port (bench profile) --------------------------------------
RS_BIN=$(cargo bench -p schedstate-raft --bench raft_workload --no-run --message-format=json-render-diagnostics |
    python3 -c '
import json, sys
exe = None
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("target", {}).get("name") == "raft_workload" and m.get("executable"):
        exe = m["executable"]
if not exe:
    sys.exit("could not find the raft_workload bench executable")
print(exe)
')
echo "## schedstate raft_workload: $RS_BIN; flags: ${*:-(defaults)}; runs: $RUNS each; output: $OUT"

run_one() { # who run
    local who=$1 i=$2
    shift 2
    echo "## run $i: $who"
    if [ "$who" = go ]; then
        "$GO_BIN" -json "$OUT/go-run$i.json" "$@" 2>&1 | tee "$OUT/go-run$i.txt"
    else
        # shellcheck disable=SC2086
        "$RS_BIN" -json "$OUT/rs-run$i.json" "$@" ${RS_ARGS:-} 2>&1 | tee "$OUT/rs-run$i.txt"
    fi
}

for ((i = 1; i <= RUNS; i++)); do
    if ((i % 2)); then order=(go rs); else order=(rs go); fi
    for who in "${order[@]}"; do run_one "$who" "$i" "$@"; done
    go_line=$(grep -m1 '^# dataset' "$OUT/go-run$i.txt")
    rs_line=$(grep -m1 '^# dataset' "$OUT/rs-run$i.txt")
    if [ "$go_line" != "$rs_line" ]; then
        echo "## DATASET MISMATCH in run $i:" >&2
        echo "go: $go_line" >&2
        echo "rs: $rs_line" >&2
        exit 1
    fi
done

PEER_NAME=nomad-raft python3 "$ROOT/scripts/compare_peer.py" "$OUT"
