// Conveyor dashboard: a small hash-routed page over the JSON API under api/.
// This module routes; each view is a module of its own.
import { api, flash, setMode } from './lib.js';
import { showOverview } from './overview.js';
import { showWorkers } from './workers.js';
import { showJobs, showIdSearch } from './jobs.js';
import { showJob } from './job.js';
import { showWorkflows, showWorkflow } from './workflows.js';
import { showPeriodic } from './periodic.js';
import { showQueues } from './queues.js';
import { showCharts } from './charts.js';

let view = 0;       // bumped on every route change: late answers for an old view are dropped
let timer = null;   // the current view's refresh

// What a view gets: whether it is still shown, and a refresh that stops
// when it is not.
function context() {
  const mine = ++view;
  return {
    live: () => mine === view,
    every(ms, fn) { if (mine === view) timer = setInterval(fn, ms); },
  };
}

// [path test, nav name, view]
const ROUTES = [
  [(p) => p === '/workers', 'workers', (ctx) => showWorkers(ctx)],
  [(p) => p.startsWith('/job/'), 'jobs', (ctx, p) => showJob(ctx, decodeURIComponent(p.slice(5)))],
  [(p) => p === '/jobs', 'jobs', (ctx, _, q) => showJobs(ctx, q)],
  [(p) => p === '/search', 'jobs', (ctx, _, q) => showIdSearch(ctx, q)],
  [(p) => p === '/workflows', 'workflows', (ctx, _, q) => showWorkflows(ctx, q)],
  [(p) => p.startsWith('/workflow/'), 'workflows', (ctx, p) => showWorkflow(ctx, decodeURIComponent(p.slice(10)))],
  [(p) => p === '/periodic', 'periodic', (ctx) => showPeriodic(ctx)],
  [(p) => p === '/queues', 'queues', (ctx) => showQueues(ctx)],
  [(p) => p === '/charts', 'charts', (ctx, _, q) => showCharts(ctx, q)],
];

async function route() {
  clearInterval(timer);
  timer = null;
  const ctx = context();
  const hash = location.hash.replace(/^#/, '') || '/';
  const [path, query] = hash.split('?');
  const found = ROUTES.find(([test]) => test(path));
  const nav = found ? found[1] : 'overview';
  for (const a of document.querySelectorAll('[data-nav]')) a.classList.toggle('active', a.dataset.nav === nav);
  if (found) return found[2](ctx, path, new URLSearchParams(query || ''));
  return showOverview(ctx);
}

const UUID = /^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$/i;
document.getElementById('goto').addEventListener('submit', (e) => {
  e.preventDefault();
  const id = document.getElementById('goto-id').value.trim();
  if (!id) return;
  location.hash = UUID.test(id) ? '#/job/' + id : '#/search?' + new URLSearchParams({ id }).toString();
});
window.addEventListener('hashchange', () => { flash(''); route(); });
// Learn the mode (read-only, signed in) before the first view draws buttons.
api('overview').then(setMode).catch(() => {}).finally(route);
