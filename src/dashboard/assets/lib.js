// Conveyor dashboard: what every view shares. Every piece of job data goes
// into the page as text (never as HTML).

export const STATES = ['scheduled', 'pending', 'started', 'retry', 'success', 'failure', 'cancelled'];
export const FINAL = new Set(['success', 'failure', 'cancelled']);
export const app = document.getElementById('app');
// Until the overview says otherwise: never show actions by mistake.
export const mode = { readOnly: true, auth: false };

export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else el.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

// A query string of the non-empty values of `params`.
export function qs(params) {
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v !== null && v !== undefined && v !== '') p.set(k, v);
  }
  return p.toString();
}

export async function api(path, options) {
  const res = await fetch('api/' + path, Object.assign({ headers: { Accept: 'application/json' } }, options));
  let body = null;
  try { body = await res.json(); } catch (_) { /* not JSON */ }
  if (res.status === 401) { location.reload(); }
  if (!res.ok) throw new Error((body && body.error) || res.status + ' ' + res.statusText);
  return body;
}

// A POST of an action, with the header the server requires of them.
export function post(path, params) {
  const query = params ? '?' + qs(params) : '';
  return api(path + query, { method: 'POST', headers: { Accept: 'application/json', 'X-Conveyor-Csrf': '1' } });
}

export function flash(message, bad) {
  const el = document.getElementById('flash');
  el.textContent = message;
  el.className = bad ? 'bad' : '';
  el.hidden = !message;
}

export function ago(iso) {
  if (!iso) return '';
  const s = (Date.now() - Date.parse(iso)) / 1000;
  const a = Math.abs(s);
  const txt = a < 60 ? Math.round(a) + ' s' : a < 3600 ? Math.round(a / 60) + ' min'
    : a < 86400 ? (a / 3600).toFixed(1) + ' h' : (a / 86400).toFixed(1) + ' d';
  return s >= 0 ? txt + ' ago' : 'in ' + txt;
}

export function when(iso) {
  return iso ? h('time', { datetime: iso, title: iso }, ago(iso)) : h('span', { class: 'muted' }, '—');
}

export function secs(n) {
  if (n === null || n === undefined) return '';
  return n < 60 ? +n.toFixed(1) + ' s' : n < 3600 ? +(n / 60).toFixed(1) + ' min'
    : n < 86400 ? +(n / 3600).toFixed(1) + ' h' : +(n / 86400).toFixed(1) + ' d';
}

export function badge(state) { return h('span', { class: 'badge s-' + state, 'data-state': state }, state); }
export function num(n, col, opt) {
  return h('td', { class: 'num' + (n ? '' : ' zero') + (opt ? ' opt' : ''), 'data-col': col }, n);
}
export function jobsHref(params) { return '#/jobs?' + qs(params); }
export function json(value) { return h('pre', { class: 'json' }, JSON.stringify(value, null, 2)); }
export function jobLink(id) { return id ? h('a', { class: 'mono', href: '#/job/' + id }, id) : '—'; }
export function shortId(id) { return id.slice(0, 8) + '…' + id.slice(-4); }

export function card(label, value, extra) {
  return h('div', { class: 'card' }, h('div', { class: 'n' }, value), h('div', { class: 'l' }, label), extra);
}

export function facts(pairs) {
  return h('dl', { class: 'facts' }, pairs.filter((p) => p).flatMap(([k, v]) => [h('dt', {}, k), h('dd', {}, v)]));
}

// A table; `body` is a <tbody> (filled later) or its rows.
export function table(id, head, body) {
  return h('div', { class: 'scroll' }, h('table', { id },
    h('thead', {}, h('tr', {}, head.map(([t, cls]) => h('th', { class: cls || '' }, t)))),
    body instanceof Node ? body : h('tbody', {}, body)));
}

export function setMode(overview) {
  mode.readOnly = overview.read_only;
  mode.auth = overview.auth;
  document.getElementById('mode').hidden = !mode.readOnly;
  document.getElementById('logout').hidden = !mode.auth;
}

// Runs an action; says how it went. `params` go in the query string.
export async function act(what, path, confirmText, params) {
  if (confirmText && !window.confirm(confirmText)) return false;
  try {
    await post(path, params);
    flash(what);
    return true;
  } catch (e) {
    flash(e.message, true);
    return false;
  }
}
