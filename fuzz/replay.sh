#!/usr/bin/env bash
# Replays every committed fuzz input through the fuzz targets, without cargo-fuzz.
#
#   fuzz/replay.sh            # from anywhere; exit status 0 iff every input passes
#
# The targets are built as plain binaries (stable toolchain, no sanitizer, no coverage
# instrumentation; libfuzzer-sys compiles libFuzzer with the system C++ compiler). Given
# file paths, a libFuzzer binary runs each file once and exits: non-zero if one of them
# panics or times out. Inputs live in fuzz/seeds/<target>/ (hand-made seeds and every
# crash the fuzzers found). Bounded in time: FUZZ_REPLAY_TIMEOUT seconds per target
# (default 300) on top of a 60 s limit per input.
set -euo pipefail

cd "$(dirname "$0")"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
per_target="${FUZZ_REPLAY_TIMEOUT:-300}"
targets=(commands txn persist pmap raft_rpc snapshot_install filter)

start=$(date +%s)
cargo build --manifest-path Cargo.toml --bins
bin_dir="${CARGO_TARGET_DIR:-$PWD/target}/debug"
echo "fuzz replay: built in $(($(date +%s) - start)) s"

status=0
for target in "${targets[@]}"; do
    shopt -s nullglob
    inputs=(seeds/"$target"/*)
    shopt -u nullglob
    if [ "${#inputs[@]}" -eq 0 ]; then
        echo "fuzz replay: $target: no inputs under fuzz/seeds/$target" >&2
        status=1
        continue
    fi
    t0=$(date +%s)
    log=$(mktemp)
    if timeout "$per_target" "$bin_dir/$target" -timeout=60 -rss_limit_mb=2048 \
        -artifact_prefix="${TMPDIR:-/tmp}/schedstate-fuzz-replay-" \
        "${inputs[@]}" >"$log" 2>&1; then
        ran=$(grep -c '^Executed ' "$log" || true)
        echo "fuzz replay: $target: $ran/${#inputs[@]} inputs passed in $(($(date +%s) - t0)) s"
        if [ "$ran" -ne "${#inputs[@]}" ]; then
            cat "$log" >&2
            status=1
        fi
    else
        code=$?
        echo "fuzz replay: $target FAILED (exit $code) after $(($(date +%s) - t0)) s:" >&2
        cat "$log" >&2
        status=1
    fi
    rm -f "$log"
done
echo "fuzz replay: done in $(($(date +%s) - start)) s"
exit "$status"
