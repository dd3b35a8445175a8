// The worker registry.
import { app, h, api, flash, card, when, secs } from './lib.js';

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

export async function showWorkers(ctx) {
  async function load() {
    try {
      const d = await api('workers');
      if (!ctx.live()) return;
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
  ctx.every(3000, load);
}
