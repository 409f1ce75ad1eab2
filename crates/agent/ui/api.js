// The agent's public API, read with the user's token; nothing here writes: every
// request is a GET. `watch` follows one resource: a blocking query (`?index=N&wait=`)
// for what answers with `X-Nomad-Index` and wakes on change, a poll for the rest,
// and exponential back-off while the agent is unreachable or answers an error.
import { getToken } from './storage.js';

/// How long a blocking query waits for a change (the agent's default is 5 minutes).
const WAIT = '30s';
/// The back-off while the agent is unreachable: from the first to the last delay.
const BACKOFF_MIN_MS = 250;
const BACKOFF_MAX_MS = 8000;

export class ApiError extends Error {
  constructor(status, kind, message, path) {
    super(message);
    this.status = status;
    this.kind = kind;
    this.path = path;
  }
}

/// One GET of `path` (`index`: a blocking query from that index). Resolves to the
/// answer's JSON with its index, known-leader flag and last contact; rejects with an
/// `ApiError` (status 0: unreachable).
export async function get(path, { index = 0, signal } = {}) {
  const url = new URL(path, window.location.origin);
  if (index > 0) {
    url.searchParams.set('index', String(index));
    url.searchParams.set('wait', WAIT);
  }
  const headers = { Accept: 'application/json' };
  const token = getToken();
  if (token) headers['X-Nomad-Token'] = token;
  let resp;
  try {
    resp = await fetch(url, {
      headers,
      signal,
      cache: 'no-store',
      credentials: 'omit',
      redirect: 'error',
      referrerPolicy: 'no-referrer',
    });
  } catch (e) {
    if (signal && signal.aborted) throw e;
    throw new ApiError(0, 'Unreachable', `the agent did not answer (${e.message})`, path);
  }
  const meta = {
    index: Number(resp.headers.get('X-Nomad-Index') || 0),
    knownLeader: resp.headers.get('X-Nomad-KnownLeader') !== 'false',
    lastContact: resp.headers.get('X-Nomad-LastContact'),
  };
  if (!resp.ok) {
    let body = {};
    try {
      body = await resp.json();
    } catch {
      body = {};
    }
    const err = new ApiError(resp.status, body.kind || resp.statusText,
      body.message || `${resp.status} ${resp.statusText}`, path);
    err.knownLeader = meta.knownLeader;
    throw err;
  }
  return { data: await resp.json(), ...meta };
}

function sleep(ms, signal) {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const t = setTimeout(resolve, ms);
    signal.addEventListener('abort', () => { clearTimeout(t); resolve(); }, { once: true });
  });
}

/// Follows `path` until `signal` aborts, calling `report({ok: true, data, ...})` on
/// each new answer and `report({ok: false, error, retryMs})` on each failure.
/// `blocking`: a blocking query; otherwise polled every `periodMs`.
export function watch(path, { blocking = true, periodMs = 1000 }, signal, report) {
  (async () => {
    let index = 0;
    let delay = 0;
    let last = null;
    while (!signal.aborted) {
      try {
        const r = await get(path, { index: blocking ? index : 0, signal });
        // Reported only when it changed (or the previous try failed): a blocking
        // query that timed out answers the same index, a poll the same data, and
        // the page is not built again for nothing.
        const seen = blocking ? String(r.index) : JSON.stringify([r.data, r.knownLeader]);
        if (delay !== 0 || seen !== last) report({ ok: true, ...r });
        delay = 0;
        last = seen;
        // An index that went backwards (a restored snapshot) starts over.
        index = r.index > 0 ? r.index : 0;
        if (!blocking || index === 0) await sleep(periodMs, signal);
      } catch (e) {
        if (signal.aborted) return;
        delay = Math.min(delay ? delay * 2 : BACKOFF_MIN_MS, BACKOFF_MAX_MS);
        report({ ok: false, error: e, retryMs: delay });
        await sleep(delay, signal);
      }
    }
  })();
}
