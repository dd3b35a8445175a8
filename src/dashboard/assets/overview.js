// The overview: numbers per queue, throughput over the last hour (from the
// persisted rollups), and which queues nobody serves.
import { app, mode, h, api, flash, setMode, act, num, jobsHref, card, secs } from './lib.js';
import { chartBox } from './plot.js';

// The throughput chart is read this often (its buckets are minutes), not
// at every 3-s refresh of the numbers.
const CHART_EVERY_MS = 15000;

function queueRow(q, refresh) {
  const link = (state, n, col) => h('td', { class: n ? 'num' : 'num zero', 'data-col': col || state },
    n ? h('a', { href: jobsHref({ state, queue: q.queue }) }, n) : '0');
  const toggle = mode.readOnly ? null : h('button', {
    'data-action': q.paused ? 'resume' : 'pause',
    onclick: async () => {
      const verb = q.paused ? 'resume' : 'pause';
      if (await act((q.paused ? 'Resumed ' : 'Paused ') + q.queue, 'queues/' + encodeURIComponent(q.queue) + '/' + verb)) refresh();
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

function render(o, refresh, chart) {
  const sum = (k) => o.queues.reduce((a, q) => a + q[k], 0);
  const capped = (n) => (n >= o.totals_cap ? n.toLocaleString() + '+' : n.toLocaleString());
  const perMin = sum('succeeded_1m') + sum('failed_1m');
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
      card('processed / min', perMin.toLocaleString()),
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
        h('tbody', {}, o.queues.map((q) => queueRow(q, refresh))))),
    h('p', { class: 'muted' }, 'Refreshed every 3 s. Unfinished jobs are counted exactly; finished ones over the last hour (successes) or day (failures). Limits and rates: ',
      h('a', { href: '#/queues' }, 'Settings'), '.'),
    chart,
    h('p', { class: 'muted' }, 'From the per-minute rollups (conveyor.stats), which outlive the jobs. ',
      h('a', { href: '#/charts', id: 'more-charts' }, 'Failures, queue wait and run time over 1 hour, 24 hours or 7 days, by queue and task'), '.'));
}

export async function showOverview(ctx) {
  // Kept across refreshes: the chart is moved into each new rendering, not drawn again.
  const throughput = chartBox('throughput', 'overview-throughput', { title: 'Throughput, last hour', height: 130 });
  let chartAt = 0;
  async function refresh() {
    try {
      const o = await api('overview');
      setMode(o);
      if (!ctx.live()) return;
      render(o, refresh, throughput.el);
      if (Date.now() - chartAt >= CHART_EVERY_MS) {
        chartAt = Date.now();
        const answer = await api('stats?window=1h');
        if (ctx.live()) throughput.update(answer);
      }
    } catch (e) { flash(e.message, true); }
  }
  await refresh();
  ctx.every(3000, refresh);
}
