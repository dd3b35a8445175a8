// One job: state, timeline, arguments, result, every attempt's error, its
// workflow; retry, cancel, delete.
import { app, mode, FINAL, h, api, act, badge, when, secs, json, facts, jobsHref, jobLink } from './lib.js';

function workflowPanel(w, parent, members, jobId) {
  if (!w) return null;
  const pct = (n) => (w.total ? (100 * n / w.total) : 0) + '%';
  const bar = h('div', { class: 'progress', title: w.succeeded + ' succeeded, ' + w.failed + ' failed of ' + w.total },
    h('div', { class: 'ok' }), h('div', { class: 'bad' }));
  bar.children[0].style.width = pct(w.succeeded);
  bar.children[1].style.width = pct(w.failed);
  return h('section', {}, h('h2', {}, 'Workflow'), h('div', { class: 'panel', id: 'workflow' },
    facts([['kind', w.kind], ['state', badge(w.state)],
      ['id', h('a', { class: 'mono', id: 'workflow-graph-link', href: '#/workflow/' + w.id, title: 'the graph' }, w.id)],
      ['progress', h('span', {}, w.succeeded + ' succeeded, ' + w.failed + ' failed of ' + w.total)],
      ['result job', w.result_job_exists ? jobLink(w.result_job_id)
        : h('span', { class: 'muted', id: 'result-job' }, w.result_job_id ? 'never created: the workflow ended before its last step' : '—')], w.error ? ['error', h('span', { class: 'error' }, w.error)] : null,
      w.failed_job_id ? ['failed job', jobLink(w.failed_job_id)] : null,
      parent ? ['inside', h('a', { href: '#/workflow/' + parent.id }, parent.kind + ' ' + parent.state + ' (' + parent.succeeded + '/' + parent.total + ')')] : null,
      ['created', when(w.created_at)], ['finished', when(w.finished_at)]]),
    bar,
    h('div', { class: 'scroll' }, h('table', {}, h('thead', {}, h('tr', {}, ['#', 'job', 'task', 'state'].map((t) => h('th', {}, t)))),
      h('tbody', {}, members.map((m) => h('tr', { class: m.id === jobId ? 'current' : '' },
        h('td', {}, m.workflow_index === null ? 'callback' : m.workflow_index),
        h('td', {}, m.id === jobId ? h('b', { class: 'mono' }, 'this job') : jobLink(m.id)),
        h('td', {}, m.task), h('td', {}, badge(m.state)))))))));
}

function render(d, reload) {
  const j = d.job;
  const buttons = mode.readOnly ? [] : [
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

export async function showJob(ctx, id) {
  let settled = false;   // final (or gone): nothing more to follow
  async function reload() {
    try {
      const d = await api('jobs/' + encodeURIComponent(id));
      if (!ctx.live()) return;
      settled = FINAL.has(d.job.state);
      render(d, reload);
    } catch (e) {
      settled = true;
      if (ctx.live()) app.replaceChildren(h('h1', {}, 'Job'), h('p', { class: 'error', id: 'job-error' }, e.message));
    }
  }
  await reload();
  // Follow the job while it moves (an action moves it again).
  ctx.every(2000, () => { if (!settled) reload(); });
}
