// Building the page from data: elements with text content only (no HTML strings:
// nothing the agent answers is ever parsed as markup).

/// An element: `attrs` as attributes (`class`, `text` for its text, `false`/`null`
/// left out), then its children (strings become text).
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') el.className = v;
    else if (k === 'text') el.textContent = String(v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

/// A link to a view of this page.
export function link(hash, text) {
  return h('a', { href: hash }, text);
}

/// `#/<parts…>` with each part encoded.
export function route(...parts) {
  return `#/${parts.map(encodeURIComponent).join('/')}`;
}

/// A table: a caption, column headers, and rows of cells (a cell is a string, a node,
/// or `{value, node}`: `data-value` holds the value the test and screen readers read).
export function table(id, caption, headers, rows, empty) {
  if (rows.length === 0) return h('p', { class: 'empty', id }, empty);
  return h('table', { id },
    h('caption', {}, caption),
    h('thead', {}, h('tr', {}, headers.map((t) => h('th', { scope: 'col' }, t)))),
    h('tbody', {}, rows.map((r) => h('tr', { class: r.class || null },
      (r.cells || r).map((c) => {
        if (c && typeof c === 'object' && 'value' in c) {
          return h('td', { 'data-value': c.value, class: c.class || null }, c.node ?? c.value);
        }
        return h('td', { 'data-value': c instanceof Node ? c.textContent : c }, c);
      })))));
}

/// How healthy `healthy` of `expected` is, in words (never by colour alone).
export function healthWord(healthy, expected) {
  if (expected === 0) return healthy > 0 ? 'unexpected' : 'none expected';
  if (healthy >= expected) return 'healthy';
  if (healthy === 0) return 'none healthy';
  return 'degraded';
}

/// `healthy/expected` as text, a bar, and a word.
export function ratioBar(healthy, expected, what) {
  const word = healthWord(healthy, expected);
  const fill = h('span', { class: 'fill' });
  const pct = expected > 0 ? Math.min(100, (100 * healthy) / expected) : (healthy > 0 ? 100 : 0);
  // CSSOM, not a style attribute: the Content-Security-Policy allows no inline style.
  fill.style.width = `${pct}%`;
  const state = word === 'healthy' ? 'ok' : word === 'degraded' ? 'warn'
    : word === 'none healthy' ? 'bad' : 'none';
  return {
    value: `${healthy}/${expected}`,
    class: `ratio ${state}`,
    node: h('span', { class: 'ratio-cell' },
      h('span', { class: 'ratio-text' }, `${healthy}/${expected}`),
      h('span', { class: `bar ${state}`, 'aria-hidden': 'true' }, fill),
      h('span', { class: 'word', 'aria-label': `${what}: ${word}` }, word)),
  };
}

/// A yes/no cell in words.
export function yesNo(b, yes = 'yes', no = 'no') {
  return b ? yes : no;
}

/// Key–value pairs as a description list.
export function facts(id, pairs) {
  return h('dl', { class: 'facts', id },
    pairs.map(([k, v]) => [h('dt', {}, k), h('dd', { 'data-key': k }, v)]));
}
