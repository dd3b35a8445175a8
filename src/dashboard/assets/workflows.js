// Workflows: the top-level ones by state and kind, and one with its graph.
import { app, h, api, qs, flash, badge, when, facts, jobLink, shortId, table } from './lib.js';
import { graph } from './graph.js';

const STATES = ['running', 'success', 'failure'];
const KINDS = ['chain', 'group', 'chord'];

function progress(w) {
  const bar = h('div', { class: 'progress small', title: w.succeeded + ' succeeded, ' + w.failed + ' failed of ' + w.total },
    h('div', { class: 'ok' }), h('div', { class: 'bad' }));
  bar.children[0].style.width = (w.total ? 100 * w.succeeded / w.total : 0) + '%';
  bar.children[1].style.width = (w.total ? 100 * w.failed / w.total : 0) + '%';
  return bar;
}

function row(w) {
  return h('tr', { 'data-workflow': w.id },
    h('td', {}, h('a', { class: 'mono workflow-link', href: '#/workflow/' + w.id, title: w.id }, shortId(w.id))),
    h('td', {}, w.kind), h('td', {}, w.first_task || h('span', { class: 'muted' }, '—')), h('td', {}, badge(w.state)),
    h('td', { class: 'num', 'data-col': 'progress' }, w.succeeded + ' / ' + w.total + (w.failed ? ' (' + w.failed + ' failed)' : ''), progress(w)),
    h('td', { class: 'opt' }, when(w.created_at)), h('td', {}, when(w.finished_at)),
    h('td', { class: 'err' }, w.error || ''));
}

export async function showWorkflows(ctx, params) {
  const state = STATES.includes(params.get('state')) ? params.get('state') : '';
  const kind = KINDS.includes(params.get('kind')) ? params.get('kind') : '';
  const href = (p) => '#/workflows?' + qs(p);
  const cursors = [];
  let cursor = '';
  const body = h('tbody');
  const pager = h('div', { class: 'pager' });
  app.replaceChildren(h('h1', {}, 'Workflows'),
    h('nav', { class: 'tabs' }, ['', ...STATES].map((s) => h('a', { href: href({ state: s, kind }), class: s === state ? 'active' : '', 'data-tab': s || 'all' }, s || 'all'))),
    h('nav', { class: 'tabs' }, ['', ...KINDS].map((k) => h('a', { href: href({ state, kind: k }), class: k === kind ? 'active' : '', 'data-kind': k || 'any' }, k || 'any kind'))),
    table('workflows', [['id'], ['kind'], ['first task'], ['state'], ['progress', 'num'], ['created', 'opt'], ['finished'], ['error']], body),
    pager,
    h('p', { class: 'muted' }, 'Chains, groups and chords enqueued together, newest first (a chord that is a chain\'s step is drawn in its chain). Refreshed every 5 s.'));
  async function load() {
    try {
      const d = await api('workflows?' + qs({ state, kind, cursor, limit: 50 }));
      if (!ctx.live()) return;
      body.replaceChildren(...(d.workflows.length ? d.workflows.map(row)
        : [h('tr', {}, h('td', { colspan: 8, class: 'muted' }, 'No workflow' + (state || kind ? ' matches.' : ' yet.')))]));
      pager.replaceChildren(
        h('button', { disabled: cursors.length === 0, onclick: () => { cursor = cursors.pop() || ''; load(); } }, '← Newer'),
        h('span', { class: 'muted' }, 'page ' + (cursors.length + 1)),
        h('button', { disabled: !d.next, onclick: () => { cursors.push(cursor); cursor = d.next; load(); } }, 'Older →'));
    } catch (e) { flash(e.message, true); }
  }
  await load();
  ctx.every(5000, () => { if (!cursor) load(); });
}

function render(d) {
  const w = d.workflow;
  app.replaceChildren(
    h('h1', {}, 'Workflow: ', w.kind, ' ', h('span', { id: 'workflow-state', class: 'badge s-' + w.state, 'data-state': w.state }, w.state)),
    h('div', { class: 'panel' }, facts([
      ['id', h('span', { class: 'mono' }, w.id)],
      ['progress', h('span', { id: 'workflow-progress' }, w.succeeded + ' succeeded, ' + w.failed + ' failed of ' + w.total + (w.kind === 'chain' ? ' steps' : ' members'))],
      ['result job', d.result_job_exists ? jobLink(w.result_job_id) : h('span', { class: 'muted' }, w.result_job_id ? 'not created' + (w.state === 'running' ? ' yet' : '') : '—')],
      w.error ? ['error', h('span', { class: 'error' }, w.error)] : null,
      w.failed_job_id ? ['failed job', jobLink(w.failed_job_id)] : null,
      d.on_error.length ? ['on error', d.on_error.join(', ')] : null,
      ['created', when(w.created_at)], ['finished', when(w.finished_at)]])),
    h('h2', {}, 'Graph'),
    graph(d),
    h('p', { class: 'muted' }, 'Each box is a job: click it to open it. Dashed: not created (a chain creates a step when the one before it succeeds). ' +
      (w.state === 'running' ? 'Refreshed every 3 s.' : '')));
}

export async function showWorkflow(ctx, id) {
  let settled = false;
  async function load() {
    try {
      const d = await api('workflows/' + encodeURIComponent(id));
      if (!ctx.live()) return;
      settled = d.workflow.state !== 'running';
      render(d);
    } catch (e) {
      settled = true;
      if (ctx.live()) app.replaceChildren(h('h1', {}, 'Workflow'), h('p', { class: 'error', id: 'workflow-error' }, e.message));
    }
  }
  await load();
  ctx.every(3000, () => { if (!settled) load(); });
}
