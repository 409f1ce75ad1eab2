#!/usr/bin/env python3
"""Side-by-side table of go-memdb peer runs and schedstate workload runs.

usage: compare_peer.py OUT_DIR

Reads OUT_DIR/go-run*.json (the peer's bench.go -json output) and OUT_DIR/rs-run*.json
(benches/workload/ -json output), and writes OUT_DIR/summary.md and
OUT_DIR/summary.json with, per (workload, metric): median, min and max over the runs of
each, and the ratio of the medians oriented so that > 1 means schedstate is better
(go/schedstate for times and memory, schedstate/go for rates). Rows that only one side
reports are listed with the other side empty.
"""
import json
import os

# The peer's name in the table (PEER_NAME=nomad-raft for scripts/compare-raft-peer.sh).
PEER = os.environ.get("PEER_NAME", "go-memdb")
import re
import statistics
import sys

# Metrics where a ratio means nothing (counts, sizes of the workload, load figures).
NO_RATIO = {
    "ops", "allocs", "txns", "allocs_per_node", "allocs_per_plugin", "missing_per_plugin",
    "watch_chans", "watch_chans_per_plugin", "foreign_cores", "true_wakes_same_plugin",
    "wakes_table_iter", "true_wakes_absent_key_created", "heap_inuse_empty_mib",
    "heap_alloc_empty_mib", "rss_empty_mib",
}
# Rows that exist on both sides but do not measure the same thing.
CAVEATS = {
    ("bulk_load", "commit_ms_total"): "go: one commit per -batch nodes; schedstate: two per batch",
    ("bulk_load", "txns"): "go: -batch nodes per txn; schedstate: upsert_allocs + upsert_nodes per batch",
    ("blocking_wake_many", "watch_chans"): "go: channels (absent keys share one); schedstate: watched keys",
    ("plugin_denormalize_ws", "watch_chans_per_plugin"): "go: channels; schedstate: watched keys",
    ("watch_granularity", "wakes_missing_key_watch"): "false wakes of a watch on an absent key (target 0)",
}


def load(out, who):
    files = sorted(
        (f for f in os.listdir(out) if re.fullmatch(rf"{who}-run\d+\.json", f)),
        key=lambda f: int(re.search(r"\d+", f).group()),
    )
    docs = []
    for f in files:
        with open(os.path.join(out, f)) as fh:
            docs.append(json.load(fh))
    return docs


def collect(docs):
    """(ordered list of (name, metric), {(name, metric): [values]})."""
    order, values = [], {}
    for d in docs:
        for r in d["results"]:
            items = [("ns_per_op", r["ns_per_op"])] + list(r.get("extra", {}).items())
            for metric, v in items:
                key = (r["name"], metric)
                if key not in values:
                    order.append(key)
                    values[key] = []
                values[key].append(v)
    # ns_per_op of 0 marks a result line without a timing (memory, granularity).
    order = [k for k in order if not (k[1] == "ns_per_op" and all(v == 0 for v in values[k]))]
    return order, values


def merged_order(go_order, rs_order):
    """Workloads in the port's order (the peer's, with the port's extra workloads next
    to their relatives), then any only the peer has; per workload the peer's metrics
    first."""
    workloads = list(dict.fromkeys([n for n, _ in rs_order] + [n for n, _ in go_order]))
    keys = []
    for name in workloads:
        mine = []
        for k in go_order + rs_order:
            if k[0] == name and k not in mine:
                mine.append(k)
        # ns_per_op first, foreign_cores last (JSON objects come back key-sorted).
        mine.sort(key=lambda k: (k[1] != "ns_per_op", k[1] == "foreign_cores"))
        keys += mine
    return keys


def ratio(metric, go, rs):
    if go is None or rs is None or metric in NO_RATIO:
        return None
    if metric.endswith("_per_s"):
        return rs / go if go else None
    # Times, memory, false wakes: lower is better.
    if rs == 0:
        return float("inf") if go > 0 else None
    return go / rs


def fmt(v):
    if v is None:
        return ""
    if isinstance(v, float) and v == float("inf"):
        return "∞"
    if float(v).is_integer() and abs(v) < 1e15:
        return f"{int(v):,}"
    if abs(v) >= 100:
        return f"{v:,.1f}"
    return f"{v:,.2f}"


def fmt_ratio(r):
    if r is None:
        return ""
    if r == float("inf"):
        return "∞ (schedstate 0)"
    return f"{r:.2f}×"


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    go_docs, rs_docs = load(out, "go"), load(out, "rs")
    if not go_docs or not rs_docs:
        sys.exit(f"need go-run*.json and rs-run*.json in {out}")
    go_order, go_vals = collect(go_docs)
    rs_order, rs_vals = collect(rs_docs)
    keys = merged_order(go_order, rs_order)

    def stats(vals):
        if not vals:
            return None
        return {"median": statistics.median(vals), "min": min(vals), "max": max(vals), "runs": vals}

    rows = []
    for key in keys:
        g, r = stats(go_vals.get(key)), stats(rs_vals.get(key))
        rt = ratio(key[1], g and g["median"], r and r["median"])
        rows.append({"workload": key[0], "metric": key[1], "go": g, "schedstate": r,
                     "ratio": None if rt is None or rt == float("inf") else rt,
                     "ratio_text": fmt_ratio(rt), "note": CAVEATS.get(key, "")})

    def rng(s):
        if s is None:
            return ""
        if len(s["runs"]) == 1:
            return "–"
        return f"{fmt(s['min'])} – {fmt(s['max'])}"

    gm, rm = go_docs[0]["meta"], rs_docs[0]["meta"]
    lines = [
        f"go-memdb: {gm.get('go', '?')}, go-memdb {gm.get('go_memdb', '?')}, GOMAXPROCS={gm.get('gomaxprocs', '?')}, "
        f"{len(go_docs)} run(s); schedstate {rm.get('schedstate', '?')} ({rm.get('profile', '?')}), "
        f"{len(rs_docs)} run(s); nodes={gm.get('nodes')} allocs/node={gm.get('allocs_per_node')} "
        f"plugins={gm.get('plugins')} seed={gm.get('seed')}",
        "",
        f"ratio = {PEER} median / schedstate median for times and memory, schedstate / {PEER} for rates: "
        "> 1 means schedstate is better. foreign_cores = other processes' CPU during the phase (contamination).",
        "",
        f"| workload | metric | {PEER} median | schedstate median | ratio | {PEER} min – max | schedstate min – max | note |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for row in rows:
        g, r = row["go"], row["schedstate"]
        lines.append(
            f"| {row['workload']} | {row['metric']} | {fmt(g and g['median'])} | {fmt(r and r['median'])} | "
            f"{row['ratio_text']} | {rng(g)} | {rng(r)} | {row['note']} |"
        )
    md = "\n".join(lines) + "\n"
    with open(os.path.join(out, "summary.md"), "w") as fh:
        fh.write(md)
    with open(os.path.join(out, "summary.json"), "w") as fh:
        json.dump({"go_meta": gm, "schedstate_meta": rm, "rows": rows}, fh, indent=2)
    print(md)


if __name__ == "__main__":
    main()
