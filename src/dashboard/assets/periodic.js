// Periodic schedules: who leads, and each schedule's last and next slot.
import { app, h, api, flash, badge, when, table, shortId } from './lib.js';

function leaderPanel(d) {
  const l = d.leader;
  let text;
  let cls = 'panel';
  if (d.leading) {
    text = [h('b', {}, 'Leading: '), 'process ' + l.pid + ' on ' + l.host, ' (Conveyor ' + l.version + '), since ', when(l.since),
      l.workers.length ? ['; its workers: ', l.workers.map((w, i) => [i ? ', ' : '', h('a', { class: 'mono', href: '#/workers' }, w)])] : null];
  } else if (d.unknown_leader) {
    text = [h('b', {}, 'A process leads '), 'but did not say which (an older Conveyor version): its slots are enqueued.'];
  } else {
    cls = 'warning';
    text = [h('b', {}, 'No process leads: '), 'no slot is enqueued until a worker with schedules runs.',
      l.host ? [' The last leader was process ' + l.pid + ' on ' + l.host + ', from ', when(l.since), '.'] : null];
  }
  return h('div', { class: cls, id: 'periodic-leader', 'data-leading': d.leading ? 'yes' : 'no' }, text);
}

function row(p, leading) {
  const last = p.last_slot ? [when(p.last_slot), ' ',
    p.last_job_id ? h('a', { class: 'mono', href: '#/job/' + p.last_job_id }, shortId(p.last_job_id)) : null, ' ',
    p.last_job_state ? badge(p.last_job_state) : (p.last_job_id ? h('span', { class: 'muted' }, 'pruned') : null)]
    : h('span', { class: 'muted' }, 'none yet');
  const next = !p.on_leader ? h('span', { class: 'error', 'data-col': 'not-led' }, 'not on the leading process: not enqueued')
    : !leading ? h('span', { class: 'muted' }, 'due ', when(p.next_slot), ', if a process leads')
      : p.next_slot && Date.parse(p.next_slot) <= Date.now() ? h('span', {}, 'due now') : when(p.next_slot);
  return h('tr', { 'data-schedule': p.name },
    h('td', {}, p.name), h('td', { class: 'mono' }, p.schedule || '—'),
    h('td', {}, p.task || '—'), h('td', { class: 'opt' }, p.queue || '—'),
    h('td', { 'data-col': 'last' }, last), h('td', { 'data-col': 'next' }, next),
    h('td', { class: 'opt' }, p.missed === 'enqueue_once' ? 'enqueue once' : p.missed || '—'));
}

export async function showPeriodic(ctx) {
  async function load() {
    try {
      const d = await api('periodic');
      if (!ctx.live()) return;
      app.replaceChildren(h('h1', {}, 'Periodic schedules'),
        leaderPanel(d),
        h('h2', {}, 'Schedules'),
        d.schedules.length === 0 ? h('p', { class: 'muted', id: 'no-schedules' }, 'No schedule is known yet: a process records its schedules when it takes the lead.')
          : table('schedules', [['name'], ['schedule'], ['task'], ['queue', 'opt'], ['last slot'], ['next slot'], ['missed slots', 'opt']],
            d.schedules.map((p) => row(p, d.leading || d.unknown_leader))),
        h('p', { class: 'muted' }, 'Schedules are registered in code on every worker; one process at a time leads and enqueues them. ' +
          'It records who it is and what it runs when it takes the lead, and each slot it enqueues. Refreshed every 5 s.'));
    } catch (e) { flash(e.message, true); }
  }
  await load();
  ctx.every(5000, load);
}
