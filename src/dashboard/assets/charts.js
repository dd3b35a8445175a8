// The charts page: outcomes over the last hour, day or week from the
// persisted per-minute rollups (conveyor.stats), for every queue and task
// or one of each. They outlive the jobs: pruning leaves them.
import { app, h, api, flash, qs } from './lib.js';
import { chartBox } from './plot.js';

const WINDOWS = [['1h', '1 hour', '1-minute buckets'], ['24h', '24 hours', '10-minute buckets'], ['7d', '7 days', 'hourly buckets']];

// A <select> of `names` (plus the current value, if the window saw none).
function picker(name, all, names, current, onchange) {
  const values = current && !names.includes(current) ? [current].concat(names) : names;
  return h('select', { name, id: 'chart-' + name, 'aria-label': all, onchange },
    h('option', { value: '' }, all),
    values.map((v) => h('option', { value: v, selected: v === current }, v)));
}

export async function showCharts(ctx, query) {
  const known = WINDOWS.find(([w]) => w === query.get('window'));
  const win = known ? known[0] : '1h';
  const queue = query.get('queue') || '';
  const task = query.get('task') || '';
  const go = (change) => { location.hash = '#/charts?' + qs(Object.assign({ window: win, queue, task }, change)); };
  const boxes = ['throughput', 'failures', 'wait', 'run'].map((kind) => chartBox(kind, 'chart-' + kind));
  const filters = h('form', { class: 'filters', id: 'chart-filters', onsubmit: (e) => e.preventDefault() });
  const range = h('span', { class: 'muted', id: 'chart-range' });
  app.replaceChildren(
    h('h1', {}, 'Charts'),
    h('div', { class: 'tabs' }, WINDOWS.map(([w, label]) => h('a', {
      href: '#/charts?' + qs({ window: w, queue, task }), 'data-window': w, class: w === win ? 'active' : '',
    }, label))),
    filters,
    h('div', { class: 'charts' }, boxes.map((b) => b.el)),
    h('p', { class: 'muted' }, range, ' From the per-minute rollups in conveyor.stats, which the statements ',
      'that end attempts write and which outlive the jobs (kept 30 days by default). Percentiles are the upper ',
      'bound of the histogram bucket they fall in (1, 2, 5, 10, 20, 50 ms … 1 h).'));
  async function refresh() {
    try {
      const answer = await api('stats?' + qs({ window: win, queue, task }));
      if (!ctx.live()) return;
      const step = WINDOWS.find(([w]) => w === win)[2];
      range.textContent = new Date(answer.since).toLocaleString() + ' to ' + new Date(answer.until).toLocaleString() + ', ' + step + '.';
      if (!filters.firstChild) {
        filters.replaceChildren(
          picker('queue', 'All queues', answer.queues, queue, (e) => go({ queue: e.target.value })),
          picker('task', 'All tasks', answer.tasks, task, (e) => go({ task: e.target.value })));
      }
      for (const b of boxes) b.update(answer);
    } catch (e) { flash(e.message, true); }
  }
  await refresh();
  ctx.every(win === '1h' ? 10000 : 60000, refresh);
}
