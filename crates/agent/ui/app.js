// The page: the login form, the hash routes (`#/overview`, `#/plugins`,
// `#/plugin/<id>`, `#/volumes`, `#/volume/<namespace>/<id>`, `#/nodes`, `#/jobs`,
// `#/job/<namespace>/<id>`), the current view's live sources, and the banners (no
// leader, a scope the token lacks, the agent unreachable).
import { get, watch } from './api.js';
import { h } from './dom.js';
import { getToken, setToken, clearToken } from './storage.js';
import { VIEWS } from './views.js';

const $ = (id) => document.getElementById(id);

/// What every view shows besides its own data: the leader as this agent knows it,
/// polled each second whatever the view.
const health = { leader: undefined, knownLeader: true, lastContact: null, unreachable: null };
/// The current view: its sources' latest data and errors, and what stops them.
let current = null;
let renderQueued = false;

function parseHash() {
  const parts = window.location.hash.replace(/^#\/?/, '').split('/').filter((p) => p !== '')
    .map(decodeURIComponent);
  const name = parts.shift() || 'overview';
  return VIEWS[name] ? { name, params: parts } : { name: 'overview', params: [] };
}

function banner(id, kind, text) {
  return h('div', { id, class: `banner ${kind}` }, h('strong', {}, `${kind === 'error' ? 'Problem' : 'Note'}: `), text);
}

function renderBanners() {
  const out = [];
  if (health.unreachable) {
    out.push(banner('banner-unreachable', 'error',
      `the agent is unreachable (${health.unreachable.message}); trying again in ${Math.round(health.unreachable.retryMs / 100) / 10} s, backing off.`));
  } else if (health.leader === '' || !health.knownLeader || noLeaderErrors().length > 0) {
    out.push(banner('banner-no-leader', 'error',
      'No leader. This agent knows no leader: a majority of the servers is unreachable. '
      + 'Consistent reads are refused until one is elected; what is shown may be out of date.'));
  }
  const denied = current ? Object.values(current.errors).filter((e) => e.status === 403 || e.status === 401) : [];
  if (denied.length > 0) {
    const what = [...new Set(denied.map((e) => `${e.path}: ${e.message}`))];
    out.push(banner('banner-scope', 'warning',
      ['Your token lacks a scope for part of this page (403): ', h('ul', {}, what.map((w) => h('li', {}, w)))]));
  }
  $('banners').replaceChildren(...out);
}

function noLeaderErrors() {
  if (!current) return [];
  return Object.values(current.errors).filter((e) => e.kind === 'NoLeader' || e.knownLeader === false);
}

function queueRender() {
  if (renderQueued) return;
  renderQueued = true;
  Promise.resolve().then(() => {
    renderQueued = false;
    renderView();
  });
}

function renderView() {
  renderBanners();
  if (!current) return;
  const main = $('main');
  // Keep the keyboard focus on the same link across a re-render.
  const focused = main.contains(document.activeElement) ? document.activeElement.getAttribute('href') : null;
  const view = VIEWS[current.name];
  const node = view.render(current.data, current.errors, health, current.params);
  main.replaceChildren(node);
  const heading = main.querySelector('h2');
  if (heading) heading.setAttribute('tabindex', '-1');
  if (current.focusHeading && heading) {
    heading.focus();
    current.focusHeading = false;
  } else if (focused) {
    const again = [...main.querySelectorAll('a')].find((a) => a.getAttribute('href') === focused);
    if (again) again.focus();
  }
  const stamp = new Date().toLocaleTimeString();
  $('live').textContent = `Live · updated ${stamp}${current.index ? ` · index ${current.index}` : ''}`;
}

function showRoute() {
  if (current) current.ctrl.abort();
  const { name, params } = parseHash();
  const view = VIEWS[name];
  const ctrl = new AbortController();
  const state = { name, params, ctrl, data: {}, errors: {}, index: 0, focusHeading: true };
  current = state;
  document.title = `${view.title}${params.length ? ` ${params[params.length - 1]}` : ''} · schedstate`;
  for (const a of document.querySelectorAll('#nav a')) {
    const here = a.dataset.view === name || a.dataset.view === `${name}s`;
    if (here) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  for (const [key, src] of Object.entries(view.sources(params))) {
    watch(src.path, src, ctrl.signal, (r) => {
      if (current !== state) return;
      if (r.ok) {
        state.data[key] = r.data;
        delete state.errors[key];
        state.index = Math.max(state.index, r.index || 0);
        if (!r.knownLeader) health.knownLeader = false;
      } else {
        state.errors[key] = r.error;
        if (r.error.status === 401 || (r.error.status === 403 && r.error.kind === 'UnknownToken')) {
          loginProblem(`The agent no longer accepts this token (${r.error.message}).`);
        }
      }
      queueRender();
    });
  }
  queueRender();
}

/// The leader, polled whatever the view (it needs no token), for the banners.
function followLeader(signal) {
  watch('/v1/status/leader', { blocking: false, periodMs: 1000 }, signal, (r) => {
    if (r.ok) {
      health.leader = r.data;
      health.knownLeader = r.knownLeader;
      health.lastContact = r.lastContact;
      health.unreachable = null;
    } else if (r.error.status === 0) {
      health.unreachable = { message: r.error.message, retryMs: r.retryMs };
    } else {
      health.leader = '';
    }
    queueRender();
  });
}

let session = null;

function startSession(who) {
  $('login').hidden = true;
  $('app').hidden = false;
  $('who').textContent = who;
  session = new AbortController();
  followLeader(session.signal);
  window.addEventListener('hashchange', showRoute, { signal: session.signal });
  if (!window.location.hash) window.history.replaceState(null, '', '#/overview');
  showRoute();
}

function stopSession() {
  if (session) session.abort();
  if (current) current.ctrl.abort();
  session = null;
  current = null;
  $('app').hidden = true;
  $('login').hidden = false;
  $('banners').replaceChildren();
  $('token').value = '';
  $('token').focus();
}

function loginProblem(text) {
  clearToken();
  stopSession();
  $('login-error').textContent = text;
}

/// Who the token is, as the agent knows it; `null` with a reason when it is refused.
async function check(token) {
  setToken(token);
  try {
    const r = await get('/v1/acl/token/self');
    const t = r.data;
    return { who: `${t.Name || t.AccessorID} (${(t.Scopes || t.Policies || []).join(', ')})` };
  } catch (e) {
    if (e.status === 0) return { problem: e.message };
    if ([401, 403, 404].includes(e.status)) return { problem: `The agent does not know this token (${e.message}).` };
    // An agent without ACL (--dev) has no tokens to check: any token reads.
    return { who: 'no ACL on this agent' };
  }
}

async function login(event) {
  event.preventDefault();
  const token = $('token').value.trim();
  $('login-error').textContent = 'Checking…';
  const r = await check(token);
  if (r.problem) {
    clearToken();
    $('login-error').textContent = r.problem;
    $('token').focus();
    return;
  }
  $('login-error').textContent = '';
  $('token').value = '';
  startSession(r.who);
}

function init() {
  $('login-form').addEventListener('submit', login);
  $('logout').addEventListener('click', () => {
    clearToken();
    stopSession();
    $('login-error').textContent = 'Logged out: the token is forgotten.';
  });
  const token = getToken();
  if (token === null) {
    stopSession();
    return;
  }
  check(token).then((r) => (r.problem ? loginProblem(r.problem) : startSession(r.who)));
}

init();
