#!/usr/bin/env python3
"""Reads a schedstate agent through python-nomad (Nomad's Python client) and checks
every value against what the test wrote.

Run by crates/server/tests/server/nomad_compat.rs (see scripts/nomad-compat/README.md):

    AGENT=https://127.0.0.1:PORT CACERT=ca.pem TOKEN=secret EXPECTED=expected.json \
        python3 python_nomad_check.py

EXPECTED is a JSON file the test writes: the nodes, allocations, plugins and volumes
it put in, the leader's address, the peers. Jobs are registered, read, stopped and
purged here, through python-nomad's own calls, against the first plugin (which no job
runs before); so are a volume (registered, read, deregistered), node drain and
eligibility, an allocation stop and ACL tokens (created, listed, read, read as
self, updated, deleted). Exit status 0 when every check passed;
otherwise each failure is printed and the status is 1.
"""

import json
import os
import sys
import threading
import time
from urllib.parse import urlparse

import nomad
import nomad.api.exceptions
from nomad.api.base import Requester

FAILURES = []
CHECKS = [0]


def check(what, got, want):
    CHECKS[0] += 1
    if got != want:
        FAILURES.append(f"{what}: got {got!r}, want {want!r}")


class Raw(Requester):
    """Any path of the API through python-nomad's own request machinery (its CSI
    calls are not in python-nomad 2.1.0)."""

    ENDPOINT = ""

    def get(self, endpoint, *rest, params=None):
        # python-nomad builds the URL from the class's ENDPOINT and the arguments.
        self.ENDPOINT = endpoint
        return self.request(*rest, method="get", params=params)

    def write(self, method, endpoint, *rest, json=None, params=None):
        self.ENDPOINT = endpoint
        return self.request(*rest, method=method, json=json, params=params)


def check_volume_writes(raw, plugin_id):
    """A CSI volume registered and deregistered through python-nomad's request
    machinery (2.1.0 has no CSI calls), as Nomad's `CSIVolumeRegisterRequest`, and
    read back field by field."""
    vol_id = "vol-python"
    written = {
        "ID": vol_id, "Name": "python's volume", "Namespace": "default",
        "ExternalID": "ext-python-1", "PluginID": plugin_id,
        "RequestedCapabilities": [
            {"AccessMode": "single-node-writer", "AttachmentMode": "file-system"},
        ],
        "MountOptions": {"FSType": "xfs", "MountFlags": ["noatime"]},
        "Secrets": {"key": "s3cr3t"},
        "Parameters": {"iops": "3000"},
        "Context": {"zone": "a"},
        "Topologies": None, "ReadAllocs": None, "WriteAllocs": None,
    }
    answer = raw.write("put", "volume", "csi", vol_id, json={"Volumes": [written]}).json()
    check("volume register answers an index", answer.get("Index", 0) > 0, True)
    got = raw.get("volume", "csi", vol_id).json()
    for field in ("ID", "Name", "Namespace", "ExternalID", "PluginID", "Parameters", "Context"):
        check(f"registered volume {field}", got[field], written[field])
    check(
        "registered volume RequestedCapabilities",
        [{k: c[k] for k in ("AccessMode", "AttachmentMode")} for c in got["RequestedCapabilities"]],
        written["RequestedCapabilities"],
    )
    check("registered volume FSType", got["MountOptions"]["FSType"], "xfs")
    check("registered volume MountFlags", got["MountOptions"]["MountFlags"], ["[REDACTED]"])
    check("registered volume Secrets", got["Secrets"], None)
    check("registered volume Allocations", got["Allocations"], [])
    listed = raw.get("volumes", params={"type": "csi"}).json()
    check("registered volume listed", vol_id in [v["ID"] for v in listed], True)
    raw.write("delete", "volume", "csi", vol_id)
    try:
        raw.get("volume", "csi", vol_id)
        FAILURES.append("a deregistered volume was found")
    except nomad.api.exceptions.URLNotFoundNomadException as e:
        check("deregistered volume is a 404", e.nomad_resp.status_code, 404)


def check_acl_tokens(n, kwargs):
    """ACL tokens through python-nomad's own calls: created, listed, read, read as
    self, updated, deleted — in Nomad's `ACLToken` shape, each value compared with
    what was written."""
    acl = n.acl
    try:
        acl.generate_bootstrap()
        FAILURES.append("a second bootstrap was accepted")
    except nomad.api.exceptions.BaseNomadException as e:
        check("a second bootstrap is refused", e.nomad_resp.json()["kind"], "AclAlreadyBootstrapped")
    written = {"Name": "python-reader", "Type": "client", "Policies": ["read", "write"],
               "Global": False, "ExpirationTTL": 3600 * 10**9}
    made = acl.create_token(written)
    accessor, secret = made["AccessorID"], made["SecretID"]
    check("token secret shown on create", len(secret), 36)
    for field in ("Name", "Type"):
        check(f"created token {field}", made[field], written[field])
    check("created token Policies", made["Policies"], ["read", "write"])
    check("created token Roles", made["Roles"], [])
    check("created token Global (one region)", made["Global"], True)
    check("created token ExpirationTTL", made["ExpirationTTL"], written["ExpirationTTL"])
    check("created token CreateIndex", made["CreateIndex"] > 0, True)
    check("created token ModifyIndex", made["ModifyIndex"], made["CreateIndex"])
    check("created token ExpirationTime is set", isinstance(made["ExpirationTime"], str), True)

    info = acl.get_token(accessor)
    check("read token SecretID (never shown)", info["SecretID"], "")
    for field in ("AccessorID", "Name", "Type", "Policies", "Roles", "Global", "CreateTime",
                  "ExpirationTime", "ExpirationTTL", "CreateIndex", "ModifyIndex"):
        check(f"read token {field}", info[field], made[field])
    listed = {t["AccessorID"]: t for t in acl.get_tokens()}
    check("token listed", accessor in listed, True)
    stub = listed.get(accessor, {})
    check("listed token has no SecretID", "SecretID" in stub, False)
    for field in ("Name", "Type", "Policies", "Global", "CreateTime", "ExpirationTime",
                  "CreateIndex", "ModifyIndex"):
        check(f"listed token {field}", stub.get(field), made[field])
    check(
        "the management token's type",
        sorted({t["Type"] for t in listed.values()}),
        ["client", "management"],
    )

    holder = nomad.Nomad(**dict(kwargs, token=secret))
    me = holder.acl.get_self_token()
    check("self AccessorID", me["AccessorID"], accessor)
    check("self SecretID (the one presented)", me["SecretID"], secret)
    check("self Policies", me["Policies"], ["read", "write"])

    # Updated as a python-nomad user does it: the token read, changed, sent back.
    info["Name"] = "python-reader-2"
    info["Policies"] = ["read"]
    updated = acl.update_token(accessor, info)
    check("updated token Name", updated["Name"], "python-reader-2")
    check("updated token Policies", updated["Policies"], ["read"])
    check("updated token ModifyIndex", updated["ModifyIndex"] > made["ModifyIndex"], True)
    for field in ("AccessorID", "CreateTime", "ExpirationTime", "CreateIndex"):
        check(f"updated token keeps {field}", updated[field], made[field])
    again = acl.get_token(accessor)
    check("updated token read back", (again["Name"], again["Policies"]), ("python-reader-2", ["read"]))
    check("the holder reads", len(holder.nodes.get_nodes()) > 0, True)
    try:
        holder.node.eligible_node(sorted(x["ID"] for x in holder.nodes.get_nodes())[0], ineligible=True)
        FAILURES.append("a read-only token wrote")
    except nomad.api.exceptions.URLNotAuthorizedNomadException as e:
        check("a read-only token's write is a 403", e.nomad_resp.json()["kind"], "PermissionDenied")

    # Refused: an unknown policy (Nomad's ACL policies are not schedstate's).
    try:
        acl.create_token({"Name": "x", "Type": "client", "Policies": ["node-write"]})
        FAILURES.append("an unknown policy was accepted")
    except nomad.api.exceptions.BadRequestNomadException as e:
        check("an unknown policy is a 400", e.nomad_resp.json()["kind"], "UnknownPolicy")

    check("token deleted", acl.delete_token(accessor), True)
    try:
        holder.acl.get_self_token()
        FAILURES.append("a deleted token's self was found")
    except nomad.api.exceptions.URLNotFoundNomadException as e:
        check("a deleted token's self is a 404", e.nomad_resp.status_code, 404)
    try:
        holder.nodes.get_nodes()
        FAILURES.append("a deleted token was accepted")
    except nomad.api.exceptions.URLNotAuthorizedNomadException as e:
        check("a deleted token is a 403", e.nomad_resp.status_code, 403)
    try:
        acl.get_token(accessor)
        FAILURES.append("a deleted token was read")
    except nomad.api.exceptions.URLNotFoundNomadException as e:
        check("a deleted token reads as a 404", e.nomad_resp.status_code, 404)


def main():
    agent = urlparse(os.environ["AGENT"])
    expected = json.load(open(os.environ["EXPECTED"]))
    kwargs = dict(
        host=agent.hostname,
        port=agent.port,
        secure=agent.scheme == "https",
        verify=os.environ.get("CACERT", False),
        token=os.environ["TOKEN"],
        region="global",
        timeout=10,
    )
    n = nomad.Nomad(**kwargs)
    raw = Raw(
        address=None,
        uri=f"{agent.scheme}://{agent.hostname}",
        port=agent.port,
        token=os.environ["TOKEN"],
        verify=os.environ.get("CACERT", False),
        region="global",
        timeout=10,
    )

    # Status, regions, the agent itself.
    check("leader", n.status.leader.get_leader(), expected["leader"])
    check("peers", sorted(n.status.peers.get_peers()), sorted(expected["peers"]))
    check("regions", n.regions.get_regions(), ["global"])
    me = n.agent.get_agent()
    check("agent region", me["config"]["Region"], "global")
    check("agent is a server", me["config"]["Server"]["Enabled"], True)
    # Go's `map[string]map[string]string`: every value of `stats` a string.
    check(
        "agent stats are strings",
        sorted(
            f"{section}.{key}"
            for section, values in me["stats"].items()
            for key, value in values.items()
            if not isinstance(value, str)
        ),
        [],
    )
    check("agent stats.nomad.server", me["stats"]["nomad"]["server"], "true")
    check("agent stats.nomad.leader_addr", me["stats"]["nomad"]["leader_addr"], expected["leader"])
    check("agent stats.nomad.known_regions", me["stats"]["nomad"]["known_regions"], "1")

    # Nodes: the list, `in`, one node, its allocations, prefix and pagination.
    want_nodes = {x["ID"]: x for x in expected["nodes"]}
    listed = n.nodes.get_nodes()
    check("node ids", sorted(x["ID"] for x in listed), sorted(want_nodes))
    for stub in listed:
        w = want_nodes[stub["ID"]]
        for field in ("Name", "Status", "Drain", "SchedulingEligibility"):
            check(f"node {stub['ID']} {field}", stub[field], w[field])
    first = sorted(want_nodes)[0]
    check("node in nodes", first in n.nodes, True)
    check("missing node in nodes", "no-such-node" in n.nodes, False)
    for node_id, w in want_nodes.items():
        node = n.node.get_node(node_id)
        for field in ("Name", "Status", "Drain", "SchedulingEligibility"):
            check(f"node {node_id} {field}", node[field], w[field])
        for plugin_id, fp in w["CSINodePlugins"].items():
            got = node["CSINodePlugins"][plugin_id]
            for field in ("PluginID", "AllocID", "Healthy", "Provider", "ProviderVersion"):
                check(f"node {node_id} plugin {plugin_id} {field}", got[field], fp[field])
        allocs = n.node.get_allocations(node_id)
        check(
            f"node {node_id} allocations",
            sorted(a["ID"] for a in allocs),
            sorted(a["ID"] for a in expected["allocations"] if a["NodeID"] == node_id),
        )
    check(
        "nodes by prefix",
        sorted(x["ID"] for x in n.nodes.get_nodes(prefix=first)),
        sorted(i for i in want_nodes if i.startswith(first)),
    )
    seen, token = [], None
    for _ in range(len(want_nodes) + 1):
        resp = raw.get("nodes", params={"per_page": 1, "next_token": token})
        page = resp.json()
        check("a page holds one node", len(page), 1)
        seen += [x["ID"] for x in page]
        token = resp.headers.get("X-Nomad-NextToken")
        if not token:
            break
    check("pages cover every node once", seen, sorted(want_nodes))

    check(
        "nodes by filter",
        sorted(x["ID"] for x in n.nodes.get_nodes(filter_='Status == "down" or Drain == true')),
        sorted(i for i, w in want_nodes.items() if w["Status"] == "down" or w["Drain"]),
    )

    # Allocations: every namespace, one namespace, one allocation.
    want_allocs = {a["ID"]: a for a in expected["allocations"]}
    every = n.allocations.get_allocations(namespace="*")
    check("alloc ids (*)", sorted(a["ID"] for a in every), sorted(want_allocs))
    in_default = n.allocations.get_allocations()
    check(
        "alloc ids (default)",
        sorted(a["ID"] for a in in_default),
        sorted(i for i, a in want_allocs.items() if a["Namespace"] == "default"),
    )
    check(
        "allocs by filter",
        sorted(a["ID"] for a in n.allocations.get_allocations(
            namespace="*", filter_='ClientStatus == running and JobID matches "^job-(web|plugin)"'
        )),
        sorted(
            i for i, a in want_allocs.items()
            if a["ClientStatus"] == "running" and a["JobID"].startswith(("job-web", "job-plugin"))
        ),
    )
    try:
        n.nodes.get_nodes(filter_="Status ==")
        FAILURES.append("a bad filter was accepted")
    except nomad.api.exceptions.BaseNomadException as e:
        check("a bad filter is a 400", e.nomad_resp.status_code, 400)
    for alloc_id, w in want_allocs.items():
        a = n.allocation.get_allocation(alloc_id)
        for field in ("Namespace", "JobID", "TaskGroup", "NodeID", "DesiredStatus", "ClientStatus"):
            check(f"alloc {alloc_id} {field}", a[field], w[field])

    # CSI plugins and volumes (type=csi, as Nomad's clients send it).
    want_plugins = {p["ID"]: p for p in expected["plugins"]}
    plugins = raw.get("plugins", params={"type": "csi"}).json()
    check("plugin ids", sorted(p["ID"] for p in plugins), sorted(want_plugins))
    for p in plugins:
        w = want_plugins[p["ID"]]
        for field in ("Provider", "ControllersHealthy", "ControllersExpected", "NodesHealthy", "NodesExpected"):
            check(f"plugin {p['ID']} {field}", p[field], w[field])
        full = raw.get("plugin", "csi", p["ID"]).json()
        check(f"plugin {p['ID']} nodes", sorted(full["Nodes"]), sorted(w["Nodes"]))
        check(
            f"plugin {p['ID']} allocations",
            sorted(a["ID"] for a in full["Allocations"]),
            sorted(w["Allocations"]),
        )
    want_volumes = {v["ID"]: v for v in expected["volumes"]}
    volumes = raw.get("volumes", params={"type": "csi", "namespace": "*"}).json()
    check("volume ids", sorted(v["ID"] for v in volumes), sorted(want_volumes))
    for v in volumes:
        w = want_volumes[v["ID"]]
        full = raw.get("volume", "csi", v["ID"], params={"namespace": w["Namespace"]}).json()
        for field in ("Namespace", "PluginID", "Provider", "AccessMode", "AttachmentMode", "Schedulable"):
            check(f"volume {v['ID']} {field}", full[field], w[field])
        check(f"volume {v['ID']} readers", sorted(full["ReadAllocs"]), sorted(w["ReadAllocs"]))
        # Nomad's read: the claiming allocations' stubs, and never a secret.
        check(
            f"volume {v['ID']} Allocations",
            sorted(a["ID"] for a in full["Allocations"]),
            sorted(w["ReadAllocs"] + w.get("WriteAllocs", [])),
        )
        for a in full["Allocations"]:
            for field in ("NodeID", "JobID", "ClientStatus"):
                check(f"volume {v['ID']} allocation {a['ID']} {field}", a[field], want_allocs[a["ID"]][field])
        check(f"volume {v['ID']} Secrets", full["Secrets"], None)

    # Jobs through python-nomad's own calls: registered, read back, the plugins'
    # expected counts following them (nothing expected before), stopped, purged.
    jobs_before = n.jobs.get_jobs()
    check("no jobs yet", jobs_before, [])
    plugin_id = sorted(want_plugins)[0]

    def plugin_counts():
        p = raw.get("plugin", "csi", plugin_id).json()
        return (p["ControllersExpected"], p["NodesExpected"])

    def plugin_job(job_id, count, kind):
        return {"Job": {
            "ID": job_id, "Name": job_id, "Type": "service", "Datacenters": ["dc1"],
            "TaskGroups": [{"Name": kind, "Count": count, "Tasks": [{
                "Name": "plugin", "Driver": "docker",
                "Config": {"image": "public.ecr.aws/ebs-csi-driver/aws-ebs-csi-driver:v1.25.0"},
                "CSIPluginConfig": {"ID": plugin_id, "Type": kind, "MountDir": "/csi"},
            }]}],
        }}

    check("expected before any job", plugin_counts(), (0, 0))
    nodes_job = f"{plugin_id}-nodes"
    ctrl_job = f"{plugin_id}-controller"
    registered = n.jobs.register_job(plugin_job(nodes_job, 4, "node"))
    check("register answers an index", registered["Index"] > 0, True)
    check("register answers no evaluation", registered["EvalID"], "")
    check("register's JobModifyIndex", registered["JobModifyIndex"], registered["Index"])
    n.job.register_job(ctrl_job, plugin_job(ctrl_job, 2, "controller"))
    listed = n.jobs.get_jobs()
    check("job ids", [j["ID"] for j in listed], sorted([ctrl_job, nodes_job]))
    for j in listed:
        check(f"job {j['ID']} Type", j["Type"], "service")
        check(f"job {j['ID']} Status", j["Status"], "pending")
        check(f"job {j['ID']} Stop", j["Stop"], False)
    check("jobs by prefix", [j["ID"] for j in n.jobs.get_jobs(prefix=nodes_job)], [nodes_job])
    check("job in jobs", nodes_job in n.jobs, True)
    check("job in job", nodes_job in n.job, True)
    check("missing job in job", "no-such-job" in n.job, False)
    job = n.job.get_job(nodes_job)
    check("job Namespace", job["Namespace"], "default")
    check("job Version", job["Version"], 0)
    check("job Count", job["TaskGroups"][0]["Count"], 4)
    # The job comes back whole, as registered (what the store does not use included).
    task = job["TaskGroups"][0]["Tasks"][0]
    config = task["CSIPluginConfig"]
    check("job CSIPluginConfig", {k: config.get(k) for k in ("ID", "Type", "MountDir")},
          {"ID": plugin_id, "Type": "node", "MountDir": "/csi"})
    check("job task Driver", task["Driver"], "docker")
    check("job task Config", task["Config"],
          {"image": "public.ecr.aws/ebs-csi-driver/aws-ebs-csi-driver:v1.25.0"})
    check("job Datacenters", job["Datacenters"], ["dc1"])
    check("job allocations", n.job.get_allocations(nodes_job), [])
    check("expected follows the jobs", plugin_counts(), (2, 4))
    plugin = raw.get("plugin", "csi", plugin_id).json()
    check("NodeJobs", plugin["NodeJobs"]["default"][nodes_job]["Expected"], 4)
    check("ControllerJobs", plugin["ControllerJobs"]["default"][ctrl_job]["Expected"], 2)
    # An update: a new version, a new expectation.
    n.job.register_job(nodes_job, plugin_job(nodes_job, 3, "node"))
    check("updated Version", n.job.get_job(nodes_job)["Version"], 1)
    check("expected after the update", plugin_counts(), (2, 3))
    # A bad job: a 400, nothing registered.
    try:
        n.jobs.register_job(plugin_job("bad", -1, "node"))
        FAILURES.append("a negative count was accepted")
    except nomad.api.exceptions.BaseNomadException as e:
        check("a negative count is a 400", e.nomad_resp.status_code, 400)
    check("the bad job is not there", "bad" in n.job, False)
    # Stopped: dead, kept, expecting nothing; purged: gone.
    stopped = n.job.deregister_job(nodes_job)
    check("deregister answers an index", stopped["Index"] > registered["Index"], True)
    job = n.job.get_job(nodes_job)
    check("stopped Status", job["Status"], "dead")
    check("stopped Stop", job["Stop"], True)
    check("expected after the stop", plugin_counts(), (2, 0))
    n.job.deregister_job(nodes_job, purge=True)
    check("purged job in job", nodes_job in n.job, False)
    n.job.deregister_job(ctrl_job, purge=True)
    check("no jobs left", n.jobs.get_jobs(), [])
    check("expected after the purges", plugin_counts(), (0, 0))
    try:
        n.job.deregister_job("no-such-job", purge=True)
        FAILURES.append("purging an unknown job was accepted")
    except nomad.api.exceptions.URLNotFoundNomadException as e:
        check("purging an unknown job is a 404", e.nomad_resp.status_code, 404)

    # A blocking query returns on the write that changes what it read, with its index.
    node_id = first
    resp = raw.get("node", node_id)
    index = int(resp.headers["X-Nomad-Index"])
    check("KnownLeader header", resp.headers.get("X-Nomad-KnownLeader"), "true")
    check("LastContact header present", "X-Nomad-LastContact" in resp.headers, True)
    answer = {}

    def block():
        r = raw.get("node", node_id, params={"index": index, "wait": "20s"})
        answer["index"] = int(r.headers["X-Nomad-Index"])
        answer["node"] = r.json()
        answer["at"] = time.monotonic()

    waiter = threading.Thread(target=block)
    waiter.start()
    time.sleep(0.5)
    check("the blocked query waits", "index" in answer, False)
    written = n.node.eligible_node(node_id, ineligible=True)
    waiter.join(25)
    check("the blocked query answered", "index" in answer, True)
    if "index" in answer:
        check("blocked answer index", answer["index"], written["NodeModifyIndex"])
        check("blocked answer eligibility", answer["node"]["SchedulingEligibility"], "ineligible")
    n.node.eligible_node(node_id, eligible=True)

    # Stop an allocation through the client's own call.
    running = sorted(i for i, a in want_allocs.items() if a["DesiredStatus"] == "run")[-1]
    stopped = n.allocation.stop_allocation(running)
    check("stop answers an index", stopped["Index"] > 0, True)
    check("stopped", n.allocation.get_allocation(running)["DesiredStatus"], "stop")

    # Drain on and off through the client's own call: as in Nomad, a drain marks the
    # node ineligible and carries a DrainStrategy; ending it with MarkEligible undoes both.
    n.node.drain_node_with_spec(node_id, {"Deadline": 0}, None)
    node = n.node.get_node(node_id)
    check("drained", node["Drain"], True)
    check("drained is ineligible", node["SchedulingEligibility"], "ineligible")
    check("DrainStrategy Deadline", (node.get("DrainStrategy") or {}).get("Deadline"), 0)
    n.node.drain_node_with_spec(node_id, None, True)
    node = n.node.get_node(node_id)
    check("drain off", node["Drain"], False)
    check("drain off, marked eligible", node["SchedulingEligibility"], "eligible")
    check("no DrainStrategy", node.get("DrainStrategy"), None)

    # Eligibility while draining: refused as Nomad refuses it, the node unchanged.
    n.node.drain_node_with_spec(node_id, {"Deadline": 0}, None)
    try:
        n.node.eligible_node(node_id, eligible=True)
        FAILURES.append("a draining node was made eligible")
    except nomad.api.exceptions.BadRequestNomadException as e:
        check("eligible while draining is a 400", e.nomad_resp.status_code, 400)
        check("eligible while draining kind", e.nomad_resp.json()["kind"], "NodeDraining")
    check("still ineligible", n.node.get_node(node_id)["SchedulingEligibility"], "ineligible")
    n.node.drain_node_with_spec(node_id, None, True)
    check("eligible after the drain", n.node.get_node(node_id)["SchedulingEligibility"], "eligible")

    check_volume_writes(raw, sorted(want_plugins)[0])
    check_acl_tokens(n, kwargs)

    # A token no server knows: Nomad's 403 ("ACL token not found"), and 404 on self.
    stranger = nomad.Nomad(**dict(kwargs, token="no-such-token-of-this-cluster"))
    try:
        stranger.nodes.get_nodes()
        FAILURES.append("an unknown token was accepted")
    except nomad.api.exceptions.URLNotAuthorizedNomadException as e:
        check("an unknown token is a 403", e.nomad_resp.status_code, 403)
    try:
        stranger.acl.get_self_token()
        FAILURES.append("an unknown token's self was found")
    except nomad.api.exceptions.URLNotFoundNomadException as e:
        check("an unknown token's self is a 404", e.nomad_resp.status_code, 404)

    # The event stream, through python-nomad's own follower: Nomad's envelope.
    stream, stop, events = n.event.stream.get_stream(index=0, topic={"Node": "*"}, timeout=30)
    stream.daemon = True
    stream.start()
    try:
        batch = events.get(timeout=20)
        event = batch["Events"][0]
        check("event topic", event["Topic"], "Node")
        check("event type", event["Type"], "NodeRegistration")
        check("event index", event["Index"], batch["Index"])
        check("event payload", event["Payload"]["Node"]["ID"] in want_nodes, True)
        check("event key", event["Key"], event["Payload"]["Node"]["ID"])
    except Exception as e:  # noqa: BLE001 - report any failure as a check
        FAILURES.append(f"event stream: {e!r}")
    stop.set()

    print(f"python-nomad {getattr(nomad, '__version__', '?')}: {CHECKS[0]} checks, {len(FAILURES)} failed")
    for f in FAILURES:
        print("FAIL", f)
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
