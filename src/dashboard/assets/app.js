// Conveyor dashboard: a small hash-routed page over the JSON API under api/.
// Every piece of job data goes into the page as text (never as HTML).
'use strict';

const STATES = ['scheduled', 'pending', 'started', 'retry', 'success', 'failure', 'cancelled'];
const FINAL = new Set(['success', 'failure', 'cancelled']);
const app = document.getElementById('app');
let timer = null;        // the current view's refresh
let view = 0;            // bumped on every route change: late answers for an old view are dropped
let readOnly = true;     // until the overview says otherwise: never show actions by mistake
const samples = [];      // processed per minute, one sample per overview poll

// --- helpers -----------------------------------------------------------------

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else el.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

async function api(path, options) {
  const res = await fetch('api/' + path, Object.assign({ headers: { Accept: 'application/json' } }, options));
  let body = null;
  try { body = await res.json(); } catch (_) { /* not JSON */ }
  if (res.status === 401) { location.reload(); }
  if (!res.ok) throw new Error((body && body.error) || res.status + ' ' + res.statusText);
  return body;
}

function post(path) {
  return api(path, { method: 'POST', headers: { Accept: 'application/json', 'X-Conveyor-Csrf': '1' } });
}

function flash(message, bad) {
  const el = document.getElementById('flash');
  el.textContent = message;
  el.className = bad ? 'bad' : '';
  el.hidden = !message;
}

function ago(iso) {
  if (!iso) return '';
  const s = (Date.now() - Date.parse(iso)) / 1000;
  const a = Math.abs(s);
  const txt = a < 60 ? Math.round(a) + ' s' : a < 3600 ? Math.round(a / 60) + ' min'
    : a < 86400 ? (a / 3600).toFixed(1) + ' h' : (a / 86400).toFixed(1) + ' d';
  return s >= 0 ? txt + ' ago' : 'in ' + txt;
}

function when(iso) {
  return iso ? h('time', { datetime: iso, title: iso }, ago(iso)) : h('span', { class: 'muted' }, '—');
}

function secs(n) {
  if (n === null || n === undefined) return '';
  return n < 60 ? n.toFixed(1) + ' s' : n < 3600 ? (n / 60).toFixed(1) + ' min' : (n / 3600).toFixed(1) + ' h';
}

function badge(state) { return h('span', { class: 'badge s-' + state, 'data-state': state }, state); }
function num(n, col, opt) {
  return h('td', { class: 'num' + (n ? '' : ' zero') + (opt ? ' opt' : ''), 'data-col': col }, n);
}
function jobsHref(params) { return '#/jobs?' + new URLSearchParams(params).toString(); }
function json(value) { return h('pre', { class: 'json' }, JSON.stringify(value, null, 2)); }

function setMode(overview) {
  readOnly = overview.read_only;
  document.getElementById('mode').hidden = !readOnly;
  document.getElementById('logout').hidden = !overview.auth;
}

async function act(what, path, confirmText) {
  if (confirmText && !window.confirm(confirmText)) return false;
  try {
    await post(path);
    flash(what);
    return true;
  } catch (e) {
    flash(e.message, true);
    return false;
  }
}

// --- overview ----------------------------------------------------------------

function sparkline(values) {
  const ns = 'http://www.w3.org/2000/svg';
  const svg = document.createElementNS(ns, 'svg');
  svg.setAttribute('class', 'spark');
  svg.setAttribute('viewBox', '0 0 100 28');
  svg.setAttribute('preserveAspectRatio', 'none');
  const max = Math.max(1, ...values);
  const step = values.length > 1 ? 100 / (values.length - 1) : 100;
  const line = document.createElementNS(ns, 'polyline');
  line.setAttribute('points', values.map((v, i) => (i * step).toFixed(1) + ',' + (27 - v / max * 25).toFixed(1)).join(' '));
  svg.append(line);
  return svg;
}

function card(label, value, extra) {
  return h('div', { class: 'card' }, h('div', { class: 'n' }, value), h('div', { class: 'l' }, label), extra);
}

function queueRow(q) {
  const link = (state, n, col) => h('td', { class: n ? 'num' : 'num zero', 'data-col': col || state },
    n ? h('a', { href: jobsHref({ state, queue: q.queue }) }, n) : '0');
  const toggle = readOnly ? null : h('button', {
    'data-action': q.paused ? 'resume' : 'pause',
    onclick: async () => {
      const verb = q.paused ? 'resume' : 'pause';
      if (await act((q.paused ? 'Resumed ' : 'Paused ') + q.queue, 'queues/' + encodeURIComponent(q.queue) + '/' + verb)) refreshOverview();
    },
  }, q.paused ? 'Resume' : 'Pause');
  return h('tr', { 'data-queue': q.queue },
    h('td', {}, h('a', { href: jobsHref({ state: 'pending', queue: q.queue }) }, q.queue), ' ',
      q.paused ? h('span', { class: 'badge paused' }, 'paused') : null),
    link('scheduled', q.scheduled), link('pending', q.pending), link('started', q.started), link('retry', q.retry),
    h('td', { class: 'num opt' }, secs(q.oldest_pending_secs)),
    num(q.succeeded_1m, 'succeeded_1m'), num(q.failed_1m, 'failed_1m', true),
    num(q.succeeded_1h, 'succeeded_1h', true), num(q.failed_1h, 'failed_1h', true),
    link('failure', q.failed_24h, 'failed_24h'),
    h('td', {}, toggle));
}

function renderOverview(o) {
  const sum = (k) => o.queues.reduce((a, q) => a + q[k], 0);
  const capped = (n) => (n >= o.totals_cap ? n.toLocaleString() + '+' : n.toLocaleString());
  const perMin = sum('succeeded_1m') + sum('failed_1m');
  samples.push(perMin);
  if (samples.length > 60) samples.shift();
  const head = ['queue', 'scheduled', 'pending', 'started', 'retry', 'oldest pending',
    'ok / 1 min', 'failed / 1 min', 'ok / 1 h', 'failed / 1 h', 'failed / 24 h', ''];
  const opt = new Set([5, 7, 8, 9]);
  // Queues with work waiting and nobody to do it: said first, plainly.
  const orphans = o.queues.filter((q) => q.pending > 0 && q.live_workers === 0);
  const warning = orphans.length === 0 ? null : h('div', { class: 'warning', id: 'no-worker', role: 'alert' },
    h('b', {}, o.workers.live === 0 ? 'No live worker. ' : 'No live worker serves ' + (orphans.length === 1 ? 'this queue' : 'these queues') + ': '),
    orphans.flatMap((q, i) => [i ? ', ' : '', h('span', { 'data-orphan': q.queue }, q.queue + ' (' + q.pending.toLocaleString() + ' pending)')]),
    o.workers.live === 0 ? ' wait with nobody to run them.' : '.',
    ' ', h('a', { href: '#/workers' }, 'Workers'));
  app.replaceChildren(
    h('h1', {}, 'Queues'),
    warning,
    h('div', { class: 'cards' },
      card('processed / min', perMin.toLocaleString(), sparkline(samples)),
      card('live workers', h('a', { href: '#/workers', id: 'live-workers' }, o.workers.live.toLocaleString()),
        o.workers.dead ? h('div', { class: 'l error' }, o.workers.dead + ' dead') : null),
      card('waiting (pending)', sum('pending').toLocaleString()),
      card('running', sum('started').toLocaleString()),
      card('scheduled + retry', (sum('scheduled') + sum('retry')).toLocaleString()),
      card('failed, kept', h('a', { href: jobsHref({ state: 'failure' }) }, capped(o.totals.failure))),
      card('succeeded, kept', capped(o.totals.success)),
      card('jobs in table (estimate)', '≈ ' + o.totals.estimated_jobs.toLocaleString())),
    h('h2', {}, 'By queue'),
    o.queues.length === 0 ? h('p', { class: 'muted' }, 'No queue has jobs or settings yet.')
      : h('div', { class: 'scroll' }, h('table', { id: 'queues' },
        h('thead', {}, h('tr', {}, head.map((t, i) => h('th', { class: (i > 0 && i < 11 ? 'num' : '') + (opt.has(i) ? ' opt' : '') }, t)))),
        h('tbody', {}, o.queues.map(queueRow)))),
    h('p', { class: 'muted' }, 'Refreshed every 3 s. Unfinished jobs are counted exactly; finished ones over the last hour (successes) or day (failures).'));
}

async function refreshOverview() {
  const mine = view;
  try {
    const o = await api('overview');
    setMode(o);
    if (mine === view) renderOverview(o);
  } catch (e) { flash(e.message, true); }
}

// --- workers -----------------------------------------------------------------

function workerRow(w) {
  const dead = w.dead_at !== null;
  return h('tr', { 'data-worker': w.id, class: dead ? 'dead' : '' },
    h('td', { class: 'mono' }, w.id), h('td', {}, dead ? h('span', { class: 'badge s-failure' }, 'dead') : h('span', { class: 'badge s-success' }, 'live')),
    h('td', {}, w.host), h('td', { class: 'num' }, w.pid), h('td', {}, w.queues.join(', ')),
    h('td', { class: 'num', 'data-col': 'busy' }, w.busy + ' / ' + w.concurrency),
    h('td', { class: 'opt' }, when(w.started_at)), h('td', {}, when(w.last_beat_at)),
    h('td', { class: 'opt' }, dead ? when(w.dead_at) : 'every ' + secs(w.beat_interval_secs)),
    h('td', { class: 'opt mono' }, w.version));
}

async function showWorkers() {
  const mine = view;
  async function load() {
    try {
      const d = await api('workers');
      if (mine !== view) return;
      const live = d.workers.filter((w) => w.dead_at === null);
      app.replaceChildren(h('h1', {}, 'Workers'),
        h('div', { class: 'cards' },
          card('live workers', live.length.toLocaleString()),
          card('busy slots', live.reduce((a, w) => a + w.busy, 0).toLocaleString() + ' / ' + live.reduce((a, w) => a + w.concurrency, 0).toLocaleString())),
        h('h2', {}, 'Registry'),
        d.workers.length === 0 ? h('p', { class: 'muted', id: 'no-workers' }, 'No worker is registered: none is running.')
          : h('div', { class: 'scroll' }, h('table', { id: 'workers' },
            h('thead', {}, h('tr', {}, ['id', 'state', 'host', 'pid', 'queues', 'busy', 'started', 'last beat', 'beats / died', 'version']
              .map((t, i) => h('th', { class: (i === 3 || i === 5 ? 'num' : '') + (i === 6 || i >= 8 ? ' opt' : '') }, t)))),
            h('tbody', {}, d.workers.map(workerRow)))),
        h('p', { class: 'muted' }, 'Live workers first. A worker silent for three beats is dead (killed, hung or cut off); its row goes a day later. A clean stop removes it at once. Refreshed every 3 s.'));
    } catch (e) { flash(e.message, true); }
  }
  await load();
  if (mine === view) timer = setInterval(load, 3000);
}

// --- job lists ---------------------------------------------------------------

function jobRow(j) {
  return h('tr', { 'data-job': j.id },
    h('td', {}, h('a', { class: 'job-link mono', href: '#/job/' + j.id, title: j.id }, j.id.slice(0, 8) + '…' + j.id.slice(-4))),
    h('td', {}, j.task), h('td', {}, j.queue), h('td', {}, badge(j.state)),
    h('td', { class: 'num' }, j.attempt + ' / ' + (j.max_retries + 1)),
    h('td', { class: 'opt' }, when(j.created_at)),
    h('td', {}, when(FINAL.has(j.state) ? j.finished_at : j.state === 'started' ? j.started_at : j.run_at)),
    h('td', { class: 'err' }, j.last_error || ''));
}

async function showJobs(params) {
  const state = STATES.includes(params.get('state')) ? params.get('state') : 'failure';
  const queue = params.get('queue') || '';
  const task = params.get('task') || '';
  const cursors = [];   // cursors of the pages before the current one
  let cursor = '';
  const form = h('form', { class: 'filters', onsubmit: (e) => {
    e.preventDefault();
    const p = { state };
    if (form.queue.value.trim()) p.queue = form.queue.value.trim();
    if (form.task.value.trim()) p.task = form.task.value.trim();
    location.hash = jobsHref(p);
  } },
  h('input', { name: 'queue', placeholder: 'queue', value: queue, 'aria-label': 'queue' }),
  h('input', { name: 'task', placeholder: 'task name', value: task, 'aria-label': 'task' }),
  h('button', { type: 'submit' }, 'Search'),
  (queue || task) ? h('a', { href: jobsHref({ state }) }, 'clear') : null);
  const body = h('tbody');
  const pager = h('div', { class: 'pager' });
  const tabs = h('nav', { class: 'tabs' }, STATES.map((s) => h('a', {
    href: jobsHref(Object.assign({ state: s }, queue ? { queue } : {}, task ? { task } : {})),
    class: s === state ? 'active' : '', 'data-tab': s }, s)));
  const timeCol = FINAL.has(state) ? 'finished' : state === 'started' ? 'started' : 'runs';
  app.replaceChildren(h('h1', {}, 'Jobs: ', badge(state)), tabs, form,
    h('div', { class: 'scroll' }, h('table', { id: 'jobs' }, h('thead', {}, h('tr', {},
      ['id', 'task', 'queue', 'state', 'attempts', 'created', timeCol, 'last error']
        .map((t, i) => h('th', { class: i === 5 ? 'opt' : i === 4 ? 'num' : '' }, t)))), body)),
    pager);

  const mine = view;
  async function load() {
    const q = { state, limit: 50 };
    if (queue) q.queue = queue;
    if (task) q.task = task;
    if (cursor) q.cursor = cursor;
    try {
      const page = await api('jobs?' + new URLSearchParams(q).toString());
      if (mine !== view) return;
      body.replaceChildren(...(page.jobs.length ? page.jobs.map(jobRow)
        : [h('tr', {}, h('td', { colspan: 8, class: 'muted' }, 'No ' + state + ' jobs' + (queue || task ? ' match.' : '.')))]));
      pager.replaceChildren(
        h('button', { disabled: cursors.length === 0, onclick: () => { cursor = cursors.pop() || ''; load(); } }, '← Newer'),
        h('span', { class: 'muted' }, 'page ' + (cursors.length + 1)),
        h('button', { disabled: !page.next, 'data-page': 'older', onclick: () => { cursors.push(cursor); cursor = page.next; load(); } }, 'Older →'));
    } catch (e) { flash(e.message, true); }
  }
  await load();
  // Keep the first page live; older pages stay put while being read.
  if (mine === view) timer = setInterval(() => { if (!cursor) load(); }, 5000);
}

// --- job detail --------------------------------------------------------------

function facts(pairs) {
  return h('dl', { class: 'facts' }, pairs.filter((p) => p).flatMap(([k, v]) => [h('dt', {}, k), h('dd', {}, v)]));
}

function workflowPanel(w, parent, members, jobId) {
  if (!w) return null;
  const pct = (n) => (w.total ? (100 * n / w.total) : 0) + '%';
  const bar = h('div', { class: 'progress', title: w.succeeded + ' succeeded, ' + w.failed + ' failed of ' + w.total },
    h('div', { class: 'ok' }), h('div', { class: 'bad' }));
  bar.children[0].style.width = pct(w.succeeded);
  bar.children[1].style.width = pct(w.failed);
  const link = (id) => (id ? h('a', { class: 'mono', href: '#/job/' + id }, id) : '—');
  return h('section', {}, h('h2', {}, 'Workflow'), h('div', { class: 'panel', id: 'workflow' },
    facts([['kind', w.kind], ['state', badge(w.state)], ['id', h('span', { class: 'mono' }, w.id)],
      ['progress', h('span', {}, w.succeeded + ' succeeded, ' + w.failed + ' failed of ' + w.total)],
      ['result job', w.result_job_exists ? link(w.result_job_id)
        : h('span', { class: 'muted', id: 'result-job' }, w.result_job_id ? 'never created: the workflow ended before its last step' : '—')], w.error ? ['error', h('span', { class: 'error' }, w.error)] : null,
      w.failed_job_id ? ['failed job', link(w.failed_job_id)] : null,
      parent ? ['inside', h('span', {}, parent.kind + ' ' + parent.state + ' (' + parent.succeeded + '/' + parent.total + ')')] : null,
      ['created', when(w.created_at)], ['finished', when(w.finished_at)]]),
    bar,
    h('div', { class: 'scroll' }, h('table', {}, h('thead', {}, h('tr', {}, ['#', 'job', 'task', 'state'].map((t) => h('th', {}, t)))),
      h('tbody', {}, members.map((m) => h('tr', { class: m.id === jobId ? 'current' : '' },
        h('td', {}, m.workflow_index === null ? 'callback' : m.workflow_index),
        h('td', {}, m.id === jobId ? h('b', { class: 'mono' }, 'this job') : link(m.id)),
        h('td', {}, m.task), h('td', {}, badge(m.state)))))))));
}

function renderJob(d, reload) {
  const j = d.job;
  const buttons = readOnly ? [] : [
    (j.state === 'failure' || j.state === 'cancelled') ? h('button', { class: 'primary', 'data-action': 'retry',
      onclick: async () => { if (await act('Re-queued', 'jobs/' + j.id + '/retry')) reload(); } }, 'Retry') : null,
    !FINAL.has(j.state) ? h('button', { 'data-action': 'cancel',
      onclick: async () => { if (await act('Cancel requested', 'jobs/' + j.id + '/cancel', 'Cancel this job?')) reload(); } }, 'Cancel') : null,
    j.state !== 'started' ? h('button', { class: 'danger', 'data-action': 'delete',
      onclick: async () => { if (await act('Deleted', 'jobs/' + j.id + '/delete', 'Delete this job for good?')) location.hash = jobsHref({ state: j.state }); } }, 'Delete') : null,
  ];
  const errors = j.errors.length === 0 ? h('p', { class: 'muted' }, 'No failed attempt.')
    : h('div', { class: 'scroll' }, h('table', { id: 'job-errors' },
      h('thead', {}, h('tr', {}, ['attempt', 'at', 'worker', 'error'].map((t) => h('th', {}, t)))),
      h('tbody', {}, j.errors.map((e) => h('tr', {}, h('td', { class: 'num' }, e.attempt), h('td', {}, when(e.at)),
        h('td', { class: 'mono' }, e.worker_id || ''), h('td', { class: 'err' }, e.error))))));
  app.replaceChildren(
    h('h1', {}, j.task, ' ', h('span', { id: 'job-state', class: 'badge s-' + j.state, 'data-state': j.state }, j.state)),
    h('p', { class: 'mono muted', id: 'job-id' }, j.id),
    h('div', { class: 'actions' }, buttons),
    h('div', { class: 'grid2' },
      h('section', {}, h('h2', {}, 'Timeline'), h('div', { class: 'panel' }, facts([
        ['queue', h('a', { href: jobsHref({ state: j.state, queue: j.queue }) }, j.queue)],
        ['attempt', j.attempt + ' of at most ' + (j.max_retries + 1)], ['priority', j.priority],
        ['created', when(j.created_at)], ['run at', when(j.run_at)], ['started', when(j.started_at)],
        ['finished', when(j.finished_at)],
        j.lease_expires_at ? ['lease until', when(j.lease_expires_at)] : null,
        j.worker_id ? ['worker', h('span', { class: 'mono' }, j.worker_id)] : null,
        ['timeout', j.timeout_secs ? secs(j.timeout_secs) : 'default'],
        ['backoff', 'base ' + secs(j.retry_backoff_base_secs) + (j.retry_backoff_secs ? ', last ' + secs(j.retry_backoff_secs) : '')],
        j.last_error ? ['last error', h('span', { class: 'error', id: 'last-error' }, j.last_error)] : null]))),
      h('section', {}, h('h2', {}, 'Arguments'), json(j.args),
        h('h2', {}, 'Result'), j.result === null ? h('p', { class: 'muted' }, 'None.') : json(j.result))),
    h('h2', {}, 'Errors, every attempt'), errors,
    h('div', {}, workflowPanel(d.workflow, d.parent_workflow, d.workflow_jobs, j.id)),
    h('div', { class: 'grid2' },
      h('section', {}, h('h2', {}, 'Headers'), json(j.headers)),
      (j.on_success || j.on_error) ? h('section', {}, h('h2', {}, 'Callbacks'), json({ on_success: j.on_success, on_error: j.on_error })) : null));
}

async function showJob(id) {
  let settled = false;   // final (or gone): nothing more to follow
  const mine = view;
  async function reload() {
    try {
      const d = await api('jobs/' + encodeURIComponent(id));
      if (mine !== view) return;
      settled = FINAL.has(d.job.state);
      renderJob(d, reload);
    } catch (e) {
      settled = true;
      if (mine === view) app.replaceChildren(h('h1', {}, 'Job'), h('p', { class: 'error', id: 'job-error' }, e.message));
    }
  }
  await reload();
  // Follow the job while it moves (an action moves it again).
  if (mine === view) timer = setInterval(() => { if (!settled) reload(); }, 2000);
}

// --- routing -----------------------------------------------------------------

async function route() {
  clearInterval(timer);
  timer = null;
  const mine = ++view;
  const hash = location.hash.replace(/^#/, '') || '/';
  const [path, query] = hash.split('?');
  for (const a of document.querySelectorAll('[data-nav]')) {
    const nav = path.startsWith('/job') ? 'jobs' : path === '/workers' ? 'workers' : 'overview';
    a.classList.toggle('active', a.dataset.nav === nav);
  }
  if (path === '/workers') return showWorkers();
  if (path.startsWith('/job/')) return showJob(decodeURIComponent(path.slice(5)));
  if (path === '/jobs') return showJobs(new URLSearchParams(query || ''));
  await refreshOverview();
  if (mine === view) timer = setInterval(refreshOverview, 3000);
}

document.getElementById('goto').addEventListener('submit', (e) => {
  e.preventDefault();
  const id = document.getElementById('goto-id').value.trim();
  if (id) location.hash = '#/job/' + id;
});
window.addEventListener('hashchange', () => { flash(''); route(); });
// Learn the mode (read-only, signed in) before the first view draws buttons.
api('overview').then(setMode).catch(() => {}).finally(route);
