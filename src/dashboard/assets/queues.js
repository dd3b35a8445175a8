// Queue settings for every worker at once: pause, concurrency limit, rate limit.
import { app, mode, h, api, flash, setMode, act, secs, table } from './lib.js';

const UNITS = [['1', 's'], ['60', 'min'], ['3600', 'h'], ['86400', 'day']];

// A rate period in the largest unit that divides it.
function period(s) {
  const [u] = UNITS.slice().reverse().find(([u]) => s >= +u && Number.isInteger(s / +u)) || ['1'];
  return [String(s / +u), u];
}

function rateText(q) {
  if (!q.rate_limit) return 'none';
  return q.rate_limit + ' per ' + secs(q.rate_period_secs) + ' (' + (q.rate_window_count || 0) + ' started in this window)';
}

function editor(q, reload) {
  const path = 'queues/' + encodeURIComponent(q.queue) + '/';
  const limit = h('input', { name: 'limit', type: 'number', min: '1', step: '1', value: q.concurrency_limit || '', placeholder: 'none', 'aria-label': 'concurrency limit' });
  const [n, unit] = q.rate_limit ? period(q.rate_period_secs) : ['1', '60'];
  const rate = h('input', { name: 'rate', type: 'number', min: '1', step: '1', value: q.rate_limit || '', placeholder: 'none', 'aria-label': 'rate limit' });
  const every = h('input', { name: 'every', type: 'number', min: '0.001', step: 'any', value: n, 'aria-label': 'rate period' });
  const units = h('select', { name: 'unit', 'aria-label': 'rate period unit' }, UNITS.map(([v, t]) => h('option', { value: v, selected: v === unit }, t)));
  const form = h('form', { class: 'inline', 'data-settings': q.queue, onsubmit: async (e) => {
    e.preventDefault();
    const l = limit.value.trim() || 'none';
    const r = rate.value.trim() || 'none';
    const p = r === 'none' ? { limit: 'none' } : { limit: r, period: String(+every.value * +units.value) };
    const ok = await act('Saved ' + q.queue, path + 'limit', null, { limit: l })
      && await act('Saved ' + q.queue + ': at most ' + (l === 'none' ? 'unlimited' : l) + ' running, rate ' + (r === 'none' ? 'unlimited' : r + ' per ' + secs(+p.period)), path + 'rate', null, p);
    if (ok) reload();
  } },
  h('label', {}, 'limit ', limit, ' running'), h('label', {}, 'rate ', rate, ' per ', every, units),
  h('button', { type: 'submit', class: 'primary', 'data-action': 'save' }, 'Save'));
  return form;
}

function row(q, reload) {
  const toggle = h('button', { 'data-action': q.paused ? 'resume' : 'pause', onclick: async () => {
    if (await act((q.paused ? 'Resumed ' : 'Paused ') + q.queue, 'queues/' + encodeURIComponent(q.queue) + '/' + (q.paused ? 'resume' : 'pause'))) reload();
  } }, q.paused ? 'Resume' : 'Pause');
  return h('tr', { 'data-queue': q.queue },
    h('td', {}, q.queue), h('td', { 'data-col': 'paused' }, q.paused ? h('span', { class: 'badge paused' }, 'paused') : 'claiming'),
    h('td', { class: 'num', 'data-col': 'started' }, q.started),
    h('td', { 'data-col': 'limit' }, q.concurrency_limit ? String(q.concurrency_limit) : 'none'),
    h('td', { 'data-col': 'rate' }, rateText(q)),
    mode.readOnly ? null : h('td', {}, toggle), mode.readOnly ? null : h('td', {}, editor(q, reload)));
}

export async function showQueues(ctx) {
  async function load() {
    try {
      const o = await api('overview');
      setMode(o);
      if (!ctx.live()) return;
      const head = [['queue'], ['claims'], ['running', 'num'], ['concurrency limit'], ['rate limit']];
      if (!mode.readOnly) head.push([''], ['change']);
      const add = mode.readOnly ? null : h('form', { class: 'filters', id: 'add-queue', onsubmit: (e) => {
        e.preventDefault();
        const name = e.target.queue.value.trim();
        if (name) app.querySelector('tbody').append(row({ queue: name, paused: false, started: 0 }, load));
      } }, h('input', { name: 'queue', placeholder: 'another queue', 'aria-label': 'queue name' }), h('button', { type: 'submit' }, 'Add'));
      app.replaceChildren(h('h1', {}, 'Queue settings'),
        table('queue-settings', head, o.queues.map((q) => row(q, load))), add,
        h('p', { class: 'muted' }, 'Shared by every worker (conveyor.queues): a paused queue is not claimed from; a concurrency limit caps its running jobs across all workers; ' +
          'a rate limit caps its starts per period, counted in fixed windows. Empty means no limit. Changes apply at every worker\'s next claim.'));
    } catch (e) { flash(e.message, true); }
  }
  await load();
}
