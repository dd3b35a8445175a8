// Bulk actions on everything a job list's filter matches: counted first,
// confirmed with the count, then done a page at a time (the server acts on
// at most 1,000 jobs per request) with progress, and a tally at the end.
import { FINAL, h, api, post, qs, flash } from './lib.js';

const ACTIONS = {
  retry: { label: 'Retry all…', verb: 'Re-queue', done: 'Re-queued', applies: (s) => s === 'failure' || s === 'cancelled' },
  cancel: { label: 'Cancel all…', verb: 'Cancel', done: 'Cancelled', applies: (s) => !FINAL.has(s) },
  delete: { label: 'Delete all…', verb: 'Delete', done: 'Deleted', applies: (s) => s !== 'started' },
};

// "300 failed jobs", not "300 failure jobs".
const ADJECTIVE = { failure: 'failed', success: 'succeeded', retry: 'retrying', started: 'running' };

function described(filter) {
  const parts = [];
  if (filter.queue) parts.push('queue ' + filter.queue);
  if (filter.task) parts.push('task ' + filter.task);
  if (filter.args) parts.push('args containing ' + filter.args);
  if (filter.error) parts.push('error containing "' + filter.error + '"');
  return parts.length ? ' matching ' + parts.join(', ') : '';
}

// The buttons for the actions that apply to jobs in `state`.
export function bulkButtons(state, filter, reload) {
  const names = Object.keys(ACTIONS).filter((a) => ACTIONS[a].applies(state));
  return h('div', { class: 'actions bulk' }, names.map((a) => h('button', {
    'data-bulk': a, class: a === 'delete' ? 'danger' : '', onclick: () => start(a, state, filter, reload),
  }, ACTIONS[a].label)));
}

async function start(action, state, filter, reload) {
  const a = ACTIONS[action];
  let count;
  try {
    count = await api('bulk?' + qs(Object.assign({ action }, filter)));
  } catch (e) { flash(e.message, true); return; }
  const n = count.matched;
  if (n === 0) { flash('No ' + (ADJECTIVE[state] || state) + ' job' + described(filter) + ': nothing to do.'); return; }
  const shown = n.toLocaleString() + (count.capped ? '+' : '');
  const progress = h('p', { id: 'bulk-progress', class: 'muted', role: 'status' });
  const confirm = h('button', { id: 'bulk-confirm', class: action === 'delete' ? 'danger' : 'primary' }, a.verb + ' ' + shown);
  const keep = h('button', { id: 'bulk-keep' }, 'Keep them');
  const dialog = h('dialog', { id: 'bulk-dialog', 'aria-labelledby': 'bulk-count' },
    h('p', { id: 'bulk-count', 'data-count': n }, a.verb + ' ' + shown + ' ' + (ADJECTIVE[state] || state) + ' job' + (n === 1 ? '' : 's') + described(filter) + '?'),
    h('p', { class: 'muted' }, 'Done 1,000 at a time, newest first' + (count.capped ? ', for the first ' + n.toLocaleString() : '') +
      '. A job that changes state meanwhile is skipped and counted.' + (action === 'delete' ? ' Deleted jobs are gone for good.' : '')),
    h('div', { class: 'actions' }, keep, confirm), progress);
  document.body.append(dialog);
  dialog.addEventListener('close', () => dialog.remove());
  keep.addEventListener('click', () => dialog.close());
  confirm.addEventListener('click', async () => {
    confirm.disabled = true;
    keep.disabled = true;
    const t = { listed: 0, acted: 0, stopping: 0, skipped: 0 };
    let cursor = '';
    try {
      while (t.listed < n) {
        const r = await post('bulk/' + action, Object.assign({}, filter, { max: n - t.listed, cursor }));
        for (const k of Object.keys(t)) t[k] += r[k];
        progress.textContent = a.done + ' ' + t.acted.toLocaleString() + ' of ' + shown + '…';
        if (!r.next || r.listed === 0) break;
        cursor = r.next;
      }
      flash(a.done + ' ' + t.acted.toLocaleString() + ' job(s)' +
        (t.stopping ? '; ' + t.stopping.toLocaleString() + ' running job(s) asked to stop' : '') +
        '; skipped ' + t.skipped.toLocaleString() + '.');
    } catch (e) {
      flash('Stopped after ' + t.acted.toLocaleString() + ' job(s): ' + e.message, true);
    }
    dialog.close();
    reload();
  });
  dialog.showModal();
}
