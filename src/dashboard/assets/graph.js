// A workflow's graph: steps left to right (a chain), each a job or a fan
// (the members of a group or chord, then a chord's callback), drawn as HTML
// boxes joined by SVG curves measured from where the boxes landed. The
// shapes are fixed (a chain of jobs and chords, nesting one level deep), so
// columns lay them out; no general graph layout is needed.
import { h } from './lib.js';

const SVG = 'http://www.w3.org/2000/svg';

// A job's box: a link to it, or a dashed box for a job not created (yet).
function node(n, notCreated) {
  const state = n.exists ? n.state : 'none';
  const label = n.exists ? n.state : notCreated;
  const body = [
    h('span', { class: 'wf-task' }, n.task || '?'),
    h('span', { class: 'badge s-' + state, 'data-state': state }, label),
    n.exists && n.attempt > 1 ? h('span', { class: 'muted' }, 'attempt ' + n.attempt) : null,
  ];
  const attrs = { class: 'wf-node' + (n.exists ? '' : ' wf-absent'), 'data-node': n.id || '', 'data-state': state,
    title: (n.id || '') + (n.queue ? ' · queue ' + n.queue : '') };
  return n.exists ? h('a', Object.assign({ href: '#/job/' + n.id }, attrs), body) : h('div', attrs, body);
}

function fan(step, notCreated, focus) {
  const w = step.workflow;
  const title = step.type + (w ? ' · ' + w.state + ' · ' + w.succeeded + '/' + w.total + (w.failed ? ', ' + w.failed + ' failed' : '')
    : ' · ' + step.total + ' members, ' + notCreated);
  const members = step.members.map((m) => node(m, notCreated));
  if (step.more > 0) members.push(h('div', { class: 'wf-node wf-more', 'data-more': step.more }, '… ' + step.more.toLocaleString() + ' more'));
  const callback = step.callback ? node(step.callback, notCreated) : null;
  const box = h('div', { class: 'wf-fan' + (focus === step.id ? ' wf-focus' : ''), 'data-fan': step.type, 'data-workflow': step.id },
    h('div', { class: 'wf-fan-title' }, title),
    h('div', { class: 'wf-fan-body' }, h('div', { class: 'wf-col' }, members), callback ? h('div', { class: 'wf-col' }, callback) : null));
  const entries = members;
  const exits = callback ? [callback] : members;
  const inner = callback ? members.map((m) => [m, callback]) : [];
  return { el: box, entries, exits, inner };
}

// Curves from the right edge of `a` to the left edge of `b`, in `canvas`.
function draw(canvas, svg, edges) {
  const base = canvas.getBoundingClientRect();
  svg.setAttribute('width', canvas.offsetWidth);
  svg.setAttribute('height', canvas.offsetHeight);
  svg.replaceChildren(...edges.map(([a, b]) => {
    const ra = a.getBoundingClientRect();
    const rb = b.getBoundingClientRect();
    const x1 = ra.right - base.left;
    const y1 = ra.top + ra.height / 2 - base.top;
    const x2 = rb.left - base.left;
    const y2 = rb.top + rb.height / 2 - base.top;
    const dx = Math.max(12, (x2 - x1) / 2);
    const path = document.createElementNS(SVG, 'path');
    path.setAttribute('d', `M${x1},${y1} C${x1 + dx},${y1} ${x2 - dx},${y2} ${x2},${y2}`);
    return path;
  }));
}

// The graph of `d` (GET api/workflows/{id}); `focus` is a chord to outline.
export function graph(d) {
  const notCreated = d.workflow.state === 'running' ? 'not yet created' : 'never created';
  const parts = d.steps.map((s) => (s.type === 'job'
    ? (() => { const n = node(s.node, notCreated); return { el: h('div', { class: 'wf-col' }, n), entries: [n], exits: [n], inner: [] }; })()
    : fan(s, notCreated, d.focus)));
  const edges = parts.flatMap((p) => p.inner);
  parts.forEach((p, i) => {
    if (i > 0) for (const a of parts[i - 1].exits) for (const b of p.entries) edges.push([a, b]);
  });
  const svg = document.createElementNS(SVG, 'svg');
  svg.setAttribute('class', 'wf-edges');
  svg.setAttribute('aria-hidden', 'true');
  const canvas = h('div', { class: 'wf-canvas' }, svg, parts.map((p) => p.el));
  const redraw = () => {
    if (!canvas.isConnected) { window.removeEventListener('resize', redraw); return; }
    draw(canvas, svg, edges);
  };
  window.addEventListener('resize', redraw);
  requestAnimationFrame(redraw);
  return h('div', { class: 'wf-graph scroll', id: 'workflow-graph', 'data-steps': d.steps.length }, canvas);
}

