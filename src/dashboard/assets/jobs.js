// Job lists: one state at a time, narrowed by queue and task, searched in
// args and error text, paged by keyset; bulk actions on what matches. And
// the jobs whose id starts with a prefix.
import { app, mode, STATES, FINAL, h, api, qs, flash, badge, when, jobsHref, shortId, table } from './lib.js';
import { bulkButtons } from './bulk.js';

const WINDOWS = [['3600', 'last hour'], ['86400', 'last 24 h'], ['604800', 'last 7 days'], ['2592000', 'last 30 days']];
const FILTER_KEYS = ['queue', 'task', 'args', 'error', 'finished_within'];

export function jobRow(j) {
  return h('tr', { 'data-job': j.id },
    h('td', {}, h('a', { class: 'job-link mono', href: '#/job/' + j.id, title: j.id }, shortId(j.id))),
    h('td', {}, j.task), h('td', {}, j.queue), h('td', {}, badge(j.state)),
    h('td', { class: 'num' }, j.attempt + ' / ' + (j.max_retries + 1)),
    h('td', { class: 'opt' }, when(j.created_at)),
    h('td', {}, when(FINAL.has(j.state) ? j.finished_at : j.state === 'started' ? j.started_at : j.run_at)),
    h('td', { class: 'err' }, j.last_error || ''));
}

function jobsTable(state, body) {
  const timeCol = !state ? 'last change' : FINAL.has(state) ? 'finished' : state === 'started' ? 'started' : 'runs';
  return table('jobs', [['id'], ['task'], ['queue'], ['state'], ['attempts', 'num'], ['created', 'opt'], [timeCol], ['last error']], body);
}

// The filter form; submitting it changes the address (and so the view).
function filterForm(state, f) {
  const field = (name, placeholder, extra) => h('input', Object.assign({ name, placeholder, value: f[name] || '', 'aria-label': placeholder }, extra));
  const form = h('form', { class: 'filters', id: 'job-filter', onsubmit: (e) => {
    e.preventDefault();
    const p = { state };
    for (const k of FILTER_KEYS) if (form[k] && form[k].value.trim()) p[k] = form[k].value.trim();
    if (!p.args && !p.error) delete p.finished_within;
    location.hash = jobsHref(p);
  } },
  field('queue', 'queue'), field('task', 'task name'),
  field('args', 'args contain (JSON), e.g. {"user": 7}', { class: 'wide', spellcheck: 'false' }),
  field('error', 'error contains', { class: 'wide' }),
  FINAL.has(state) ? h('select', { name: 'finished_within', 'aria-label': 'finished within' },
    WINDOWS.map(([v, t]) => h('option', { value: v, selected: (f.finished_within || '86400') === v }, 'finished in the ' + t))) : null,
  h('button', { type: 'submit' }, 'Search'),
  FILTER_KEYS.some((k) => f[k]) ? h('a', { href: jobsHref({ state }) }, 'clear') : null);
  return form;
}

export async function showJobs(ctx, params) {
  const state = STATES.includes(params.get('state')) ? params.get('state') : 'failure';
  const f = {};
  for (const k of FILTER_KEYS) f[k] = params.get(k) || '';
  const searching = Boolean(f.args || f.error);
  const cursors = [];   // cursors of the pages before the current one
  let cursor = '';
  const body = h('tbody');
  const pager = h('div', { class: 'pager' });
  const note = h('p', { class: 'muted', id: 'search-note' });
  const tabs = h('nav', { class: 'tabs' }, STATES.map((s) => h('a', {
    href: jobsHref(Object.assign({}, f, { state: s })), class: s === state ? 'active' : '', 'data-tab': s }, s)));
  const filter = Object.assign({ state }, f);
  app.replaceChildren(h('h1', {}, 'Jobs: ', badge(state)), tabs, filterForm(state, f),
    mode.readOnly ? null : bulkButtons(state, filter, () => { cursor = ''; cursors.length = 0; load(); }),
    note, jobsTable(state, body), pager);

  async function load() {
    try {
      const page = await api('jobs?' + qs(Object.assign({ limit: 50, cursor }, filter)));
      if (!ctx.live()) return;
      const s = page.search;
      note.textContent = !s.reads_rows ? ''
        : 'Searching args and error text reads each candidate job' +
          (s.finished_within_secs ? ' finished in the chosen window' : ' in this state') +
          ', 50 at a time, and stops after ' + s.timeout_secs + ' s: narrow it by queue or task if it does. Not refreshed automatically.';
      body.replaceChildren(...(page.jobs.length ? page.jobs.map(jobRow)
        : [h('tr', {}, h('td', { colspan: 8, class: 'muted', id: 'no-jobs' }, 'No ' + state + ' jobs' + (FILTER_KEYS.some((k) => f[k]) ? ' match.' : '.')))]));
      pager.replaceChildren(
        h('button', { disabled: cursors.length === 0, onclick: () => { cursor = cursors.pop() || ''; load(); } }, '← Newer'),
        h('span', { class: 'muted' }, 'page ' + (cursors.length + 1)),
        h('button', { disabled: !page.next, 'data-page': 'older', onclick: () => { cursors.push(cursor); cursor = page.next; load(); } }, 'Older →'));
    } catch (e) {
      flash(e.message, true);
      body.replaceChildren(h('tr', {}, h('td', { colspan: 8, class: 'error', id: 'jobs-error' }, e.message)));
    }
  }
  await load();
  // Keep the first page live; older pages, and searches (which read rows),
  // stay put while being read.
  if (!searching) ctx.every(5000, () => { if (!cursor) load(); });
}

// `#/search?id=PREFIX`: the jobs whose id starts with it.
export async function showIdSearch(ctx, params) {
  const prefix = params.get('id') || '';
  const body = h('tbody');
  const said = h('p', { class: 'muted', id: 'prefix-note' });
  app.replaceChildren(h('h1', {}, 'Jobs with an id starting ', h('code', {}, prefix)), said, jobsTable(null, body));
  try {
    const d = await api('search?' + qs({ id: prefix }));
    if (!ctx.live()) return;
    if (d.jobs.length === 1 && !d.more) { location.replace('#/job/' + d.jobs[0].id); return; }
    said.textContent = d.jobs.length === 0 ? 'No job id starts with ' + d.prefix + '.'
      : d.more ? 'The first ' + d.jobs.length + ' in id order: type more of the id to narrow it.' : d.jobs.length + ' jobs.';
    body.replaceChildren(...d.jobs.map(jobRow));
  } catch (e) {
    said.textContent = '';
    said.append(h('span', { class: 'error' }, e.message));
  }
}
