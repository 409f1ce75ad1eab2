#!/usr/bin/env python3
"""A rolling upgrade by hand, measured: three agents of an older release under a
steady write load, replaced one at a time by a newer release (followers first, the
leader last), each stopped with SIGTERM (it hands the leadership over first) and
started again on the same directory and port.

    scripts/rolling-upgrade.py OLD_SERVER_BIN NEW_SERVER_BIN

OLD_SERVER_BIN / NEW_SERVER_BIN are `schedstate-server` binaries (`cargo build
--release -p schedstate-server` in a worktree of each release). The agents run in
--dev mode on 127.0.0.1 (no ACL, no TLS: what is measured is the upgrade).

What it prints and checks:
- every write the agents acknowledged is on all three servers at the end, and the
  three hold the same nodes (nothing lost);
- the longest pause between acknowledged writes, in all and around each step;
- while servers of both releases run, a job registration (a format-3 command: its
  definition) is refused with 409 FormatNotEnabled and nothing changes; once the last
  server is upgraded, the cluster's format reaches 3 and the same registration is
  taken and read back whole.
Exits non-zero when a check fails. Every agent is stopped on the way out.
"""

import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid

WRITERS = 4
SETTLE = 3.0  # seconds of load between steps


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def call(port, method, path, body=None, timeout=5.0, headers=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method)
    req.add_header("Content-Type", "application/json")
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        text = e.read()
        try:
            return e.code, json.loads(text)
        except ValueError:
            return e.code, text.decode(errors="replace")


class Cluster:
    def __init__(self, root):
        self.root = root
        self.ports = [free_port() for _ in range(3)]
        self.procs = [None, None, None]
        self.bins = [None, None, None]
        self.logs = []

    def peers(self):
        return ",".join(f"{i + 1}=127.0.0.1:{p}" for i, p in enumerate(self.ports))

    def start(self, i, binary):
        log = open(os.path.join(self.root, f"agent-{i + 1}.log"), "ab")
        self.logs.append(log)
        self.procs[i] = subprocess.Popen(
            [binary, "agent", "--id", str(i + 1), "--bind", f"127.0.0.1:{self.ports[i]}",
             "--data", os.path.join(self.root, f"s{i + 1}"), "--peers", self.peers(), "--dev"],
            stdout=log, stderr=log)
        self.bins[i] = binary

    def stop(self, i, sig=signal.SIGTERM):
        p = self.procs[i]
        if p and p.poll() is None:
            p.send_signal(sig)
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.procs[i] = None

    def stop_all(self):
        for i in range(3):
            self.stop(i, signal.SIGKILL)

    def self_stats(self, i):
        try:
            status, body = call(self.ports[i], "GET", "/v1/agent/self", timeout=2)
        except OSError:
            return None
        if status != 200:
            return None
        return body["stats"]["schedstate"]

    def leader(self):
        for i in range(3):
            s = self.self_stats(i)
            if s and s.get("leader"):
                return int(s["leader"]) - 1
        return None

    def wait(self, what, check, limit=60):
        start = time.time()
        while time.time() - start < limit:
            got = check()
            if got is not None and got is not False:
                return got
            time.sleep(0.1)
        raise SystemExit(f"timed out: {what}")


class Writers:
    """Steady writes of one node each, to a random server, under an idempotency key
    (a retry after an unknown outcome applies once). Records every acknowledgement."""

    def __init__(self, cluster):
        self.cluster = cluster
        self.stop = threading.Event()
        self.acked = []  # (time, node id)
        self.lock = threading.Lock()
        self.refused = []
        self.slow = []  # (sent, took, port, status, answer) of writes over 0.5 s
        self.threads = [threading.Thread(target=self.run, args=(w,), daemon=True)
                        for w in range(WRITERS)]

    def run(self, w):
        seq = 0
        while not self.stop.is_set():
            node_id = f"up-{w}-{seq}"
            key = str(uuid.uuid4())
            body = {"UpsertNode": {"node": {
                "id": node_id, "name": f"host-{node_id}", "status": "ready", "drain": False,
                "eligible": True, "create_index": 0, "modify_index": 0}}}
            while not self.stop.is_set():
                port = random.choice(self.cluster.ports)
                sent = time.time()
                try:
                    status, answer = call(port, "POST", "/v1/commands", body, timeout=3,
                                          headers={"Idempotency-Key": key})
                except OSError as e:
                    status, answer = None, repr(e)
                if time.time() - sent > 0.5:
                    with self.lock:
                        self.slow.append((sent, time.time() - sent, port, status, str(answer)[:200]))
                if status == 200:
                    with self.lock:
                        self.acked.append((time.time(), node_id))
                    break
                if status not in (None, 429, 500, 502, 503, 504):
                    self.refused.append(f"write of {node_id} answered {status}")
                    return
                time.sleep(0.02)
            seq += 1
            time.sleep(0.005)

    def start(self):
        for t in self.threads:
            t.start()

    def halt(self):
        self.stop.set()
        for t in self.threads:
            t.join()

    def longest_pause(self, since, until):
        with self.lock:
            times = sorted(t for t, _ in self.acked if since <= t <= until)
        if len(times) < 2:
            return until - since
        gaps = [b - a for a, b in zip(times, times[1:])]
        return max(gaps + [times[0] - since, until - times[-1]])


def job(job_id):
    return {"Job": {
        "ID": job_id, "Name": job_id, "Type": "service", "Datacenters": ["dc1"],
        "TaskGroups": [{"Name": "web", "Count": 1, "Tasks": [{
            "Name": "web", "Driver": "docker", "Config": {"image": "nginx:1.27"}}]}],
    }}


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    old, new = (os.path.abspath(p) for p in sys.argv[1:])
    root = tempfile.mkdtemp(prefix="rolling-upgrade-")
    cluster = Cluster(root)
    failures = []
    try:
        for i in range(3):
            cluster.start(i, old)
        cluster.wait("a leader", cluster.leader)
        writers = Writers(cluster)
        writers.start()
        time.sleep(SETTLE)
        steps = []
        refusals = []
        leader = cluster.leader()
        order = [i for i in range(3) if i != leader] + [leader]
        for n, i in enumerate(order):
            began = time.time()
            cluster.stop(i)
            cluster.start(i, new)
            cluster.wait(f"server {i + 1} back", lambda: cluster.self_stats(i))
            time.sleep(SETTLE)
            steps.append((i + 1, writers.longest_pause(began, time.time())))
            if n < 2:
                # Both releases run: through an upgraded server, a registration that
                # needs format 3 (its definition) is refused and changes nothing. (An
                # old server takes it as its release does, without the definition.)
                for j in order[:n + 1]:
                    status, body = call(cluster.ports[j], "PUT", "/v1/jobs", job(f"web-{n}"))
                    if status != 409 or "FormatNotEnabled" not in json.dumps(body):
                        failures.append(f"mixed cluster: job register through server {j + 1} "
                                        f"answered {status} {body}")
                    else:
                        refusals.append(body.get("message", ""))
                    status, _ = call(cluster.ports[j], "GET", f"/v1/job/web-{n}")
                    if status != 404:
                        failures.append(f"a refused registration left a job behind ({status})")
        # Every server reads format 3: the leader raises the cluster's format.
        cluster.wait("cluster format 3", lambda: all(
            (cluster.self_stats(i) or {}).get("cluster_format") == "3" for i in range(3)))
        status, body = call(cluster.ports[0], "PUT", "/v1/jobs", job("web"))
        if status != 200:
            failures.append(f"upgraded cluster: job register answered {status} {body}")
        time.sleep(SETTLE)
        writers.halt()
        end = time.time()
        failures.extend(writers.refused)
        if not writers.acked:
            raise SystemExit(f"no write acknowledged: {writers.refused}")
        # Nothing lost: every acknowledged node on every server.
        acked = {node for _, node in writers.acked}
        last = max(int(cluster.self_stats(i)["last_applied"]) for i in range(3))
        cluster.wait("all applied", lambda: all(
            int(cluster.self_stats(i)["last_applied"]) >= last for i in range(3)))
        held = []
        for i in range(3):
            status, nodes = call(cluster.ports[i], "GET", "/v1/nodes?stale", timeout=30)
            held.append({n["ID"] for n in nodes})
            missing = acked - held[-1]
            if missing:
                failures.append(f"server {i + 1} lacks {len(missing)} acknowledged writes")
        if not (held[0] == held[1] == held[2]):
            failures.append("the servers hold different nodes")
        for i in range(3):
            status, body = call(cluster.ports[i], "GET", "/v1/job/web?stale")
            driver = (body or {}).get("TaskGroups", [{}])[0].get("Tasks", [{}])[0].get("Driver")
            if status != 200 or driver != "docker":
                failures.append(f"server {i + 1}: the job read back {status} driver={driver}")
        print(f"rolling upgrade {old} -> {new}: {WRITERS} writers, "
              f"{len(acked)} writes acknowledged, "
              + ("none lost" if not failures else "FAILED"))
        for server, pause in steps:
            print(f"  server {server} upgraded: longest write pause {pause * 1000:.0f} ms")
        print(f"  longest write pause over the run: "
              f"{writers.longest_pause(writers.acked[0][0], end) * 1000:.0f} ms")
        print(f"  cluster format: {[cluster.self_stats(i)['cluster_format'] for i in range(3)]}")
        if refusals:
            print(f"  a mixed cluster refuses a job definition: 409 {refusals[0]}")
        for sent, took, port, status, answer in writers.slow[:10]:
            server = cluster.ports.index(port) + 1
            print(f"  slow write: {took * 1000:.0f} ms to server {server} "
                  f"(+{sent - writers.acked[0][0]:.1f} s): {status} {answer}")
        for f in failures:
            print(f"  FAILED: {f}")
        print(f"  logs in {root}")
    finally:
        cluster.stop_all()
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
