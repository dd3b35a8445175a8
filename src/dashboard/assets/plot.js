// Charts of the persisted rollups (api/stats), drawn with uPlot: vendored,
// loaded by index.html as assets/uPlot.iife.min.js (the global `uPlot`).
// Every chart comes with its numbers as text, a table of the window's
// totals (td[data-total=…] with the raw number in data-value) that is its
// legend, and all a page shows if the library did not load.
import { h } from './lib.js';

// [key in the answer's series, label, colour (a CSS variable)]
const COUNTS = {
  succeeded: ['succeeded', 'succeeded', '--ok'],
  failed: ['failed', 'failed', '--bad'],
  retried: ['retried', 'retried', '--warn'],
  rescued: ['rescued', 'rescued', '--rescued'],
  cancelled: ['cancelled', 'cancelled', '--muted'],
};
const percentiles = (prefix) => [
  [prefix + '_p50_ms', 'p50', '--accent'],
  [prefix + '_p95_ms', 'p95', '--warn'],
  [prefix + '_p99_ms', 'p99', '--bad'],
];

// What each kind of chart draws, and which totals its table shows.
const KINDS = {
  throughput: {
    title: 'Throughput',
    series: ['succeeded', 'failed', 'retried', 'rescued', 'cancelled'].map((k) => COUNTS[k]),
    totals: (t) => ['succeeded', 'failed', 'retried', 'rescued', 'cancelled'].map((k) => [k, k, t[k]]),
  },
  failures: {
    title: 'Failures',
    series: ['failed', 'retried', 'rescued', 'cancelled'].map((k) => COUNTS[k]),
    totals: (t) => ['failed', 'retried', 'rescued', 'cancelled'].map((k) => [k, k, t[k]])
      .concat([['failure_rate', 'failed of finished', rate(t)]]),
  },
  wait: { title: 'Queue wait (run at → started)', ms: true, series: percentiles('wait'), totals: (t) => timing(t.wait_ms) },
  run: { title: 'Run time (started → outcome)', ms: true, series: percentiles('run'), totals: (t) => timing(t.run_ms) },
};

function rate(t) {
  const finished = t.succeeded + t.failed;
  return finished ? (100 * t.failed / finished).toFixed(1) + ' %' : '—';
}

function timing(s) {
  return [['count', 'timed', s.count]].concat(['p50', 'p95', 'p99'].map((p) => [p, p, s[p]]));
}

// A duration of the histograms' bounds (1 ms to 1 h), shortly.
export function fmtMs(ms) {
  if (ms === null || ms === undefined) return '—';
  if (ms < 1000) return ms + ' ms';
  if (ms < 60000) return ms / 1000 + ' s';
  if (ms < 3600000) return ms / 60000 + ' min';
  return ms / 3600000 + ' h';
}

function cell(kind, key, value) {
  const shown = typeof value !== 'number' ? value
    : kind.ms && key !== 'count' ? '≤ ' + fmtMs(value) : value.toLocaleString();
  return h('td', { class: 'num', 'data-total': key, 'data-value': value === null ? '' : value }, shown ?? '—');
}

const color = (name) => getComputedStyle(document.documentElement).getPropertyValue(name).trim() || '#888';

// Tick steps of a count axis: whole numbers only.
const WHOLE = [];
for (let p = 1; p <= 1e12; p *= 10) WHOLE.push(p, 2 * p, 5 * p);

function options(kind, width, height, onCursor) {
  const axis = { stroke: color('--muted'), grid: { stroke: color('--line'), width: 1 }, ticks: { stroke: color('--line'), width: 1 } };
  const counts = { range: (u, min, max) => [0, max > 0 ? Math.ceil(max * 1.1) : 1] };
  const log = { distr: 3, log: 10, range: (u, min, max) => (min > 0 && max > 0 ? uPlot.rangeLog(min, max, 10, true) : [1, 1000]) };
  return {
    width,
    height,
    // The table under the chart is its legend (and shows the hovered bucket).
    legend: { show: false },
    hooks: { setCursor: [(u) => onCursor(u.cursor.idx)] },
    scales: { y: kind.ms ? log : counts },
    // A log scale labels some ticks only (the others come as null).
    axes: [axis, Object.assign({}, axis, kind.ms ? { values: (u, vals) => vals.map((v) => (v ? fmtMs(v) : '')), size: 64 } : { incrs: WHOLE })],
    series: [{}].concat(kind.series.map(([, label, css]) => ({
      label,
      stroke: color(css),
      width: 1.5,
      // A percentile is often alone between empty buckets: always a dot.
      points: kind.ms ? { show: true, size: 7, fill: color(css) } : { show: false },
    }))),
  };
}

// The legend's colour square of a series (set through the CSSOM, which the
// page's CSP allows; a style attribute it would not).
function swatch(css) {
  const el = h('span', { class: 'swatch' });
  el.style.background = color(css);
  return el;
}

// A chart of `kind` ('throughput', 'failures', 'wait', 'run') with the id
// `id` (options: `title` of its own, `height` in pixels, 180 by default):
// { el, update(answer of api/stats) }. Drawn on the first update (once the element is in the page
// and has a width), then given new data. Its table: the series (with their
// colours), the window's totals, and the bucket under the pointer.
export function chartBox(kindName, id, { title, height = 180 } = {}) {
  const kind = KINDS[kindName];
  const plot = h('div', { class: 'plot' });
  const totals = h('table', { class: 'chart-totals', id: id + '-totals' });
  const el = h('section', { class: 'chart panel', id, 'data-chart': kindName },
    h('h2', {}, title || kind.title), plot, totals);
  let chart = null;
  let width = 0;
  let answer = null;
  let hovered = h('tr', { class: 'hovered', hidden: true });
  new ResizeObserver(() => {
    const w = plot.clientWidth;
    if (chart && w > 0 && w !== width) { width = w; chart.setSize({ width: w, height }); }
  }).observe(plot);
  // The series a column of the table shows, if any (by label).
  const seriesOf = (label) => kind.series.find(([, l]) => l === label);
  function onCursor(i) {
    const columns = answer ? kind.totals(answer.totals) : [];
    hovered.hidden = i === null || i === undefined || !answer;
    if (hovered.hidden) return;
    const at = new Date(answer.at[i] * 1000);
    hovered.replaceChildren(h('th', {}, at.toLocaleString([], { dateStyle: 'short', timeStyle: 'short' })),
      columns.map(([, label]) => {
        const s = seriesOf(label);
        const v = s ? answer.series[s[0]][i] : '';
        return h('td', { class: 'num' }, v === null ? '—' : kind.ms && s ? '≤ ' + fmtMs(v) : v.toLocaleString());
      }));
  }
  function update(next) {
    answer = next;
    const columns = kind.totals(answer.totals);
    hovered = h('tr', { class: 'hovered', hidden: true });
    totals.replaceChildren(
      h('tr', {}, h('th', {}), columns.map(([, label]) => {
        const s = seriesOf(label);
        return h('th', { class: 'num' }, s ? swatch(s[2]) : null, label);
      })),
      h('tr', {}, h('th', {}, 'last ' + answer.window), columns.map(([key, , value]) => cell(kind, key, value))),
      hovered);
    if (typeof window.uPlot !== 'function') {
      plot.replaceChildren(h('p', { class: 'muted' }, 'The chart library did not load; the numbers are below.'));
      return;
    }
    const data = [answer.at].concat(kind.series.map(([key]) => answer.series[key]));
    if (!chart) {
      width = plot.clientWidth || 600;
      chart = new uPlot(options(kind, width, height, onCursor), data, plot);
    } else {
      chart.setData(data);
    }
  }
  return { el, update };
}
