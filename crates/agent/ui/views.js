// The views: each names the API resources it follows (`sources`) and renders them
// (`render(data, errors)`, called again on every change). Read-only: no view has a
// control that writes.
import { h, link, route, table, ratioBar, yesNo, facts } from './dom.js';

const CLAIM_MODES = ['read', 'write', 'gc'];
const CLAIM_STATES = ['taken', 'node-detached', 'controller-detached', 'ready-to-free', 'unpublishing'];

/// A section whose resource failed: why, in words (the banner says it too).
function failed(error, what) {
  if (!error) return h('p', { class: 'loading', role: 'status' }, `Loading ${what}…`);
  const why = error.status === 403
    ? `your token may not read ${what} (${error.message})`
    : `${what} could not be read: ${error.message}`;
  return h('p', { class: 'problem' }, h('strong', {}, 'Not shown: '), why);
}

function count(list) {
  return Array.isArray(list) ? String(list.length) : '–';
}

/// `{plugin id: CSIInfo}` as `id (healthy)`, `id (unhealthy: why)`.
function instances(map) {
  const ids = Object.keys(map || {});
  if (ids.length === 0) return '–';
  return h('ul', { class: 'inline' }, ids.map((id) => {
    const i = map[id];
    return h('li', { class: i.Healthy ? 'ok' : 'bad' }, link(route('plugin', id), id),
      i.Healthy ? ' (healthy)' : ` (unhealthy: ${i.HealthDescription || 'no reason given'})`);
  }));
}

export const overview = {
  title: 'Overview',
  sources: () => ({
    raft: { path: '/v1/operator/raft/configuration', blocking: false, periodMs: 2000 },
    self: { path: '/v1/agent/self', blocking: false, periodMs: 2000 },
    nodes: { path: '/v1/nodes' },
    allocations: { path: '/v1/allocations?namespace=*' },
    jobs: { path: '/v1/jobs?namespace=*' },
    plugins: { path: '/v1/plugins' },
    volumes: { path: '/v1/volumes?namespace=*' },
  }),
  render(d, e, meta) {
    const stats = d.self && d.self.stats ? d.self.stats : null;
    const sched = stats ? stats.schedstate || {} : {};
    const raft = stats ? stats.raft || {} : {};
    const servers = d.raft
      ? table('servers-table', 'Servers (the Raft configuration)', ['ID', 'Address', 'Role', 'Voter'],
        d.raft.servers.map((s) => ({
          class: s.leader ? 'leader' : null,
          cells: [String(s.id), s.address, s.leader ? 'leader' : 'follower', yesNo(s.voter, 'voter', 'learner')],
        })), 'No servers')
      : failed(e.raft, 'the servers (operator scope)');
    return h('div', {},
      h('h2', {}, 'Overview'),
      h('section', { 'aria-labelledby': 'h-cluster' },
        h('h3', { id: 'h-cluster' }, 'Cluster'),
        facts('cluster-facts', [
          ['Leader', meta.leader === undefined ? '…' : (meta.leader || 'none (no leader)')],
          ['This agent', stats ? `server ${sched.id} (${raft.state || '?'})` : 'needs the operator scope'],
          ['Term', stats ? sched.term : '–'],
          ['Applied index', stats ? sched.last_applied : '–'],
          ['Last contact with the leader (at the last change)', meta.lastContact == null ? '–' : `${meta.lastContact} ms`],
        ]),
        servers),
      h('section', { 'aria-labelledby': 'h-counts' },
        h('h3', { id: 'h-counts' }, 'State'),
        facts('counts', [
          ['Nodes', count(d.nodes)],
          ['Allocations', count(d.allocations)],
          ['Jobs', count(d.jobs)],
          ['CSI plugins', count(d.plugins)],
          ['CSI volumes', count(d.volumes)],
        ])));
  },
};

export const plugins = {
  title: 'Plugins',
  sources: () => ({ plugins: { path: '/v1/plugins' } }),
  render(d, e) {
    if (!d.plugins) return h('div', {}, h('h2', {}, 'CSI plugins'), failed(e.plugins, 'plugins'));
    return h('div', {}, h('h2', {}, 'CSI plugins'),
      table('plugins-table', 'Every plugin: healthy instances of what its jobs expect',
        ['ID', 'Provider', 'Controllers Healthy/Expected', 'Nodes Healthy/Expected'],
        d.plugins.map((p) => {
          const short = p.ControllersHealthy < p.ControllersExpected || p.NodesHealthy < p.NodesExpected;
          return {
            class: short ? 'unhealthy' : null,
            cells: [
              { value: p.ID, node: link(route('plugin', p.ID), p.ID) },
              p.Provider,
              ratioBar(p.ControllersHealthy, p.ControllersExpected, 'controllers'),
              ratioBar(p.NodesHealthy, p.NodesExpected, 'nodes'),
            ],
          };
        }), 'No CSI plugins'));
  },
};

/// `ControllerJobs`/`NodeJobs` (namespace → id → description) as rows.
function pluginJobs(p) {
  const rows = new Map();
  for (const [kind, map] of [['c', p.ControllerJobs], ['n', p.NodeJobs]]) {
    for (const byId of Object.values(map || {})) {
      for (const j of Object.values(byId)) {
        const key = `${j.Namespace}/${j.ID}`;
        const r = rows.get(key) || { ns: j.Namespace, id: j.ID, c: 0, n: 0 };
        r[kind] += j.Expected;
        rows.set(key, r);
      }
    }
  }
  return [...rows.values()];
}

export const plugin = {
  title: 'Plugin',
  sources: ([id]) => ({ plugin: { path: `/v1/plugin/csi/${encodeURIComponent(id)}` } }),
  render(d, e, meta, [id]) {
    const p = d.plugin;
    if (!p) return h('div', {}, h('h2', {}, `Plugin ${id}`), failed(e.plugin, `plugin ${id}`));
    const allocs = new Map((p.Allocations || []).map((a) => [a.ID, a]));
    const rows = [];
    for (const [kind, map] of [['controller', p.Controllers], ['node', p.Nodes]]) {
      for (const [node, i] of Object.entries(map || {})) {
        const a = allocs.get(i.AllocID);
        rows.push({
          class: i.Healthy ? null : 'unhealthy',
          cells: [node, kind, { value: i.Healthy ? 'healthy' : 'unhealthy', class: i.Healthy ? 'ok' : 'bad' },
            i.HealthDescription || '', i.AllocID || '–',
            a ? `${a.JobID} / ${a.TaskGroup} (${a.ClientStatus})` : '–'],
        });
      }
    }
    return h('div', {},
      h('h2', {}, `Plugin ${p.ID}`),
      facts('plugin-facts', [
        ['Provider', p.Provider], ['Version', p.Version],
        ['Controller required', yesNo(p.ControllerRequired)],
        ['Controllers', ratioBar(p.ControllersHealthy, p.ControllersExpected, 'controllers').node],
        ['Nodes', ratioBar(p.NodesHealthy, p.NodesExpected, 'nodes').node],
      ]),
      table('instances-table', 'Instances by node (unhealthy ones marked)',
        ['Node ID', 'Kind', 'Health', 'Description', 'Alloc ID', 'Allocation'], rows, 'No instances'),
      table('plugin-jobs-table', 'Jobs expecting instances',
        ['Job ID', 'Namespace', 'Controllers Expected', 'Nodes Expected'],
        pluginJobs(p).map((j) => [{ value: j.id, node: link(route('job', j.ns, j.id), j.id) },
          j.ns, String(j.c), String(j.n)]), 'No jobs expect instances'));
  },
};

export const volumes = {
  title: 'Volumes',
  sources: () => ({ volumes: { path: '/v1/volumes?namespace=*' } }),
  render(d, e) {
    if (!d.volumes) return h('div', {}, h('h2', {}, 'CSI volumes'), failed(e.volumes, 'volumes'));
    return h('div', {}, h('h2', {}, 'CSI volumes'),
      table('volumes-table', 'Every volume in every namespace',
        ['ID', 'Namespace', 'Plugin', 'Schedulable', 'Access Mode', 'Attachment Mode', 'Readers', 'Writers'],
        d.volumes.map((v) => [
          { value: v.ID, node: link(route('volume', v.Namespace, v.ID), v.ID) },
          v.Namespace, { value: v.PluginID, node: link(route('plugin', v.PluginID), v.PluginID) },
          yesNo(v.Schedulable, 'schedulable', 'unschedulable'),
          v.AccessMode || '–', v.AttachmentMode || '–',
          String(v.CurrentReaders), String(v.CurrentWriters),
        ]), 'No CSI volumes'));
  },
};

function claimRows(claims, allocs, past) {
  return Object.values(claims || {}).map((c) => {
    const a = allocs.get(c.AllocationID);
    const mode = CLAIM_MODES[c.Mode] || String(c.Mode);
    return [
      c.AllocationID, past ? `past (${mode})` : mode, c.NodeID || '–',
      a ? `${a.Namespace}/${a.JobID} / ${a.TaskGroup}` : '–',
      a ? a.ClientStatus : '–', CLAIM_STATES[c.State] || String(c.State),
    ];
  });
}

export const volume = {
  title: 'Volume',
  sources: ([ns, id]) => ({
    volume: { path: `/v1/volume/csi/${encodeURIComponent(id)}?namespace=${encodeURIComponent(ns)}` },
  }),
  render(d, e, meta, [ns, id]) {
    const v = d.volume;
    if (!v) return h('div', {}, h('h2', {}, `Volume ${id}`), failed(e.volume, `volume ${ns}/${id}`));
    const allocs = new Map((v.Allocations || []).map((a) => [a.ID, a]));
    const caps = (v.RequestedCapabilities || []).map((c) => `${c.AccessMode} / ${c.AttachmentMode}`);
    const current = [...claimRows(v.WriteClaims, allocs, false), ...claimRows(v.ReadClaims, allocs, false)];
    return h('div', {},
      h('h2', {}, `Volume ${v.ID}`),
      facts('volume-facts', [
        ['Namespace', v.Namespace], ['Name', v.Name], ['External ID', v.ExternalID],
        ['Plugin', link(route('plugin', v.PluginID), v.PluginID)], ['Provider', v.Provider || '–'],
        ['Schedulable', yesNo(v.Schedulable)],
        ['Access mode', v.AccessMode || '– (no claim)'], ['Attachment mode', v.AttachmentMode || '– (no claim)'],
        ['Requested capabilities', caps.join(', ') || '–'],
      ]),
      table('claims-table', 'Current claims (writers first) with their allocations and nodes',
        ['Alloc ID', 'Mode', 'Node ID', 'Job / Group', 'Alloc Status', 'State'], current, 'No current claims'),
      table('past-claims-table', 'Past claims, being released',
        ['Alloc ID', 'Mode', 'Node ID', 'Job / Group', 'Alloc Status', 'State'],
        claimRows(v.PastClaims, allocs, true), 'No past claims'));
  },
};

export const nodes = {
  title: 'Nodes',
  sources: () => ({ nodes: { path: '/v1/nodes?full=true' } }),
  render(d, e) {
    if (!d.nodes) return h('div', {}, h('h2', {}, 'Nodes'), failed(e.nodes, 'nodes'));
    return h('div', {}, h('h2', {}, 'Nodes'),
      table('nodes-table', 'Client nodes with the CSI plugins each fingerprints',
        ['ID', 'Name', 'Status', 'Drain', 'Eligibility', 'CSI Controllers', 'CSI Nodes'],
        d.nodes.map((n) => ({
          class: n.Status !== 'ready' || n.Drain ? 'unhealthy' : null,
          cells: [n.ID, n.Name, n.Status, yesNo(n.Drain, 'draining', 'no'), n.SchedulingEligibility,
            { value: Object.keys(n.CSIControllerPlugins || {}).join(','), node: instances(n.CSIControllerPlugins) },
            { value: Object.keys(n.CSINodePlugins || {}).join(','), node: instances(n.CSINodePlugins) }],
        })), 'No nodes'));
  },
};

/// What a job's group asks of plugins: `plugin:type` per task that runs one.
function groupPlugins(g) {
  const out = (g.Tasks || []).filter((t) => t.CSIPluginConfig)
    .map((t) => `${t.CSIPluginConfig.ID}:${t.CSIPluginConfig.Type} ×${g.Count}`);
  return out.length ? out.join(', ') : '–';
}

export const jobs = {
  title: 'Jobs',
  sources: () => ({ jobs: { path: '/v1/jobs?namespace=*&full=true' } }),
  render(d, e) {
    if (!d.jobs) return h('div', {}, h('h2', {}, 'Jobs'), failed(e.jobs, 'jobs'));
    const rows = [];
    for (const j of d.jobs) {
      const groups = j.TaskGroups || [];
      rows.push([
        { value: j.ID, node: link(route('job', j.Namespace, j.ID), j.ID) }, j.Namespace, j.Type, j.Status,
        groups.map((g) => `${g.Name} ×${g.Count}`).join(', ') || '–',
        groups.map(groupPlugins).filter((s) => s !== '–').join('; ') || '–',
      ]);
    }
    return h('div', {}, h('h2', {}, 'Jobs'),
      table('jobs-table', 'Jobs in every namespace, their groups and the plugins they run',
        ['ID', 'Namespace', 'Type', 'Status', 'Groups', 'Plugins expected (plugin:type ×count)'], rows, 'No jobs'));
  },
};

export const job = {
  title: 'Job',
  sources: ([ns, id]) => {
    const q = `?namespace=${encodeURIComponent(ns)}`;
    return {
      job: { path: `/v1/job/${encodeURIComponent(id)}${q}` },
      allocs: { path: `/v1/job/${encodeURIComponent(id)}/allocations${q}` },
    };
  },
  render(d, e, meta, [ns, id]) {
    const j = d.job;
    if (!j) return h('div', {}, h('h2', {}, `Job ${id}`), failed(e.job, `job ${ns}/${id}`));
    return h('div', {},
      h('h2', {}, `Job ${j.ID}`),
      facts('job-facts', [['Namespace', j.Namespace], ['Type', j.Type], ['Status', j.Status],
        ['Version', String(j.Version)], ['Stopped', yesNo(j.Stop)]]),
      table('groups-table', 'Task groups and the plugins they run',
        ['Group', 'Count', 'Plugins (plugin:type ×count)'],
        (j.TaskGroups || []).map((g) => [g.Name, String(g.Count), groupPlugins(g)]), 'No groups'),
      d.allocs
        ? table('job-allocs-table', 'Allocations', ['ID', 'Node ID', 'Group', 'Desired', 'Status'],
          d.allocs.map((a) => [a.ID, a.NodeID, a.TaskGroup, a.DesiredStatus, a.ClientStatus]), 'No allocations')
        : failed(e.allocs, 'allocations'));
  },
};

/// The views by the first part of the hash (`#/plugins`, `#/plugin/<id>`, …).
export const VIEWS = { overview, plugins, plugin, volumes, volume, nodes, jobs, job };
