// delayqueue dashboard: what every view shares (DOM helpers, formatting,
// the API, toasts and dialogs, the rate chart, polling). An ES module, as
// are the views; no build step.

export const STATES = ['pending', 'ready', 'processing', 'retry', 'dead'];
export const RATES = ['sent', 'acked', 'failed', 'dead'];
// The latency's tooltip (docs/operations.md §5).
export const LATENCY_HELP = 'How long the oldest due message has waited to start, wherever it waits; growing while no consumer starts them';
export const POLL_MS = 2000;
// The server samples rates every 10 s; asking more often returns the same points.
export const HISTORY_MS = 10000;
export const WINDOW_MS = 15 * 60 * 1000;
export const PAGE_SIZES = [25, 50, 100, 200];
// Hex dumps of huge payloads would freeze the tab; the copy button still copies all.
export const HEX_LIMIT = 64 * 1024;

// The mount point: location.pathname with a trailing slash. The origin is
// added explicitly because fetch refuses URLs carrying user:pass@.
export const BASE = (() => {
  const p = location.pathname;
  return location.origin + (p.endsWith('/') ? p : p + '/');
})();

export const session = { csrf: '', readOnly: false, user: null, skew: 0, loaded: false };
export const serverNow = () => Date.now() + session.skew;

// ---------- DOM helpers ----------

// h('tag.class', {attr: value, on: {click: fn}}, ...children)
export function h(spec, attrs, ...children) {
  const [tag, ...classes] = spec.split('.');
  const el = document.createElement(tag || 'div');
  if (classes.length) el.className = classes.join(' ');
  if (attrs) {
    for (const [k, v] of Object.entries(attrs)) {
      if (v === null || v === undefined || v === false) continue;
      if (k === 'on') for (const [ev, fn] of Object.entries(v)) el.addEventListener(ev, fn);
      else if (k === 'class') el.className += (el.className ? ' ' : '') + v;
      else if (k === 'text') el.textContent = v;
      else if (k === 'testid') el.dataset.testid = v;
      else if (k in el && typeof v !== 'string') el[k] = v;
      else el.setAttribute(k, v === true ? '' : v);
    }
  }
  append(el, children);
  return el;
}
export function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}
export const SVG_NS = 'http://www.w3.org/2000/svg';
export function s(tag, attrs, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, v);
  append(el, children);
  return el;
}
export const replace = (el, ...children) => { el.replaceChildren(); append(el, children); return el; };
export const enc = encodeURIComponent;

// ---------- formatting ----------

export const nf = new Intl.NumberFormat('en-US');
export const fmtInt = (n) => nf.format(n || 0);
// A count with its noun, singular for exactly one: "1 message", "2 messages".
export const countOf = (n, one, many = `${one}s`) => `${fmtInt(n)} ${n === 1 ? one : many}`;
export function fmtRate(r) {
  if (!r) return '0';
  if (r < 0.01) return '<0.01';
  if (r < 10) return String(Number(r.toFixed(2)));
  // Trailing zeros dropped, as below 10: "12", not "12.0" beside a "4".
  if (r < 100) return String(Number(r.toFixed(1)));
  return nf.format(Math.round(r));
}
export function fmtDur(ms) {
  ms = Math.abs(ms);
  if (ms < 1000) return `${Math.round(ms)}ms`;
  const sec = Math.floor(ms / 1000);
  if (sec < 60) return `${sec}s`;
  const m = Math.floor(sec / 60), d = Math.floor(sec / 86400), hr = Math.floor(sec / 3600);
  if (sec < 3600) return `${m}m ${sec % 60}s`;
  if (sec < 86400) return `${hr}h ${m % 60}m`;
  return `${d}d ${hr % 24}h`;
}
// "every 10000" (ms, as stored) reads as "every 10s"; cron specs as they are.
export function fmtSpec(spec) {
  const m = /^every (\d+)$/.exec(spec);
  return m ? `every ${fmtDur(Number(m[1]))}` : spec;
}
export function fmtBytes(n) {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KiB`;
  return `${(n / 1024 / 1024).toFixed(1)} MiB`;
}
export const pad = (n, w = 2) => String(n).padStart(w, '0');
export function fmtAbs(ms, short) {
  const d = new Date(ms);
  const time = `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  const day = `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}`;
  if (short && day === fmtAbs(Date.now(), false).slice(0, 10)) return time;
  return `${day} ${time}`;
}
export function fmtRel(ms) {
  const diff = ms - serverNow();
  if (Math.abs(diff) < 1000) return 'now';
  return diff > 0 ? `in ${fmtDur(diff)}` : `${fmtDur(diff)} ago`;
}
// "in 4m 2s 14:03:22" with the full timestamp as a tooltip.
export function when(ms, opts = {}) {
  if (ms === null || ms === undefined) return h('span.faint', null, '—');
  const overdue = opts.overdue && ms < serverNow() - 1000;
  return h('span', { title: new Date(ms).toISOString() },
    h(overdue ? 'span.overdue' : 'span', null, fmtRel(ms)),
    h('span.abs', null, fmtAbs(ms, true)));
}
export function stateBadge(state) { return h(`span.state.s-${state}`, null, state); }
export function pausedBadge() {
  return h('span.badge.badge-paused', { testid: 'paused-badge', title: 'Consumers claim nothing until resumed; sends still succeed' }, 'paused');
}
export function previewOf(m) {
  if (m.payload_text !== null && m.payload_text !== undefined) {
    const t = m.payload_text.replace(/\s+/g, ' ').trim();
    return t === '' ? h('span.faint', null, '(empty)') : t;
  }
  const bytes = b64bytes(m.payload_base64 || '').slice(0, 24);
  return h('span.faint', null, `${fmtBytes(m.payload_len)} binary: `, hexBytes(bytes));
}

// ---------- payload decoding ----------

export function b64bytes(b64) {
  try {
    const bin = atob(b64);
    const out = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
    return out;
  } catch (_) {
    return new Uint8Array(0);
  }
}
export const hexBytes = (bytes) => Array.from(bytes, (b) => pad(b.toString(16))).join(' ');
export function hexDump(bytes) {
  const lines = [];
  const n = Math.min(bytes.length, HEX_LIMIT);
  for (let off = 0; off < n; off += 16) {
    const row = bytes.subarray(off, Math.min(off + 16, n));
    const hex = hexBytes(row).padEnd(47, ' ');
    const ascii = Array.from(row, (b) => (b >= 32 && b < 127 ? String.fromCharCode(b) : '.')).join('');
    lines.push(`${off.toString(16).padStart(8, '0')}  ${hex}  ${ascii}`);
  }
  if (bytes.length > n) lines.push(`… ${countOf(bytes.length - n, 'more byte')} (use copy for all)`);
  return lines.join('\n');
}
// Pretty JSON with key/string/number/literal spans; text nodes keep it safe.
export function jsonNodes(text) {
  const out = [];
  const re = /("(?:\\.|[^"\\])*")(\s*:)?|\b(true|false|null)\b|(-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)/g;
  let last = 0, m;
  while ((m = re.exec(text))) {
    if (m.index > last) out.push(text.slice(last, m.index));
    if (m[1] && m[2]) out.push(h('span.k', null, m[1]), m[2]);
    else if (m[1]) out.push(h('span.s', null, m[1]));
    else if (m[3]) out.push(h('span.b', null, m[3]));
    else out.push(h('span.n', null, m[4]));
    last = re.lastIndex;
  }
  out.push(text.slice(last));
  return out;
}
export function prettyJson(text) {
  try { return JSON.stringify(JSON.parse(text), null, 2); } catch (_) { return null; }
}

// ---------- HTTP ----------

export class ApiError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}
export async function api(path, opts = {}) {
  const init = { method: opts.method || 'GET', headers: { accept: 'application/json' }, cache: 'no-store', credentials: 'same-origin' };
  if (opts.body !== undefined) {
    init.headers['content-type'] = 'application/json';
    init.body = JSON.stringify(opts.body);
  }
  if (init.method !== 'GET') init.headers['x-csrf-token'] = session.csrf;
  let res;
  try {
    res = await fetch(BASE + path, init);
  } catch (e) {
    throw new ApiError(0, `dashboard unreachable (${e.message})`);
  }
  const text = await res.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch (_) { data = null; }
  if (!res.ok) {
    const msg = (data && data.error) || text.trim() || res.statusText;
    throw new ApiError(res.status, `${res.status}: ${msg}`);
  }
  return data;
}
export function absorbOverview(o) {
  session.csrf = o.csrf || '';
  session.readOnly = !!o.read_only;
  session.user = o.user || null;
  if (typeof o.now_ms === 'number') session.skew = o.now_ms - Date.now();
  session.loaded = true;
  document.getElementById('ro-badge').hidden = !session.readOnly;
  const u = document.getElementById('user');
  u.hidden = !session.user;
  u.textContent = session.user || '';
}
export async function loadSession() {
  // The session's fields come with any page of the overview: the smallest.
  const o = await api('api/overview?limit=1');
  absorbOverview(o);
  return o;
}
// An action: POST, toast the result or the server's error, then refresh the view.
// A stale CSRF token (the server restarted) is fetched again once.
export async function act(path, body, okText) {
  try {
    let res;
    try {
      res = await api(path, { method: 'POST', body: body || {} });
    } catch (e) {
      if (e.status !== 403 || !/csrf/i.test(e.message)) throw e;
      await loadSession();
      res = await api(path, { method: 'POST', body: body || {} });
    }
    const text = typeof okText === 'function' ? okText(res) : okText;
    if (text) toast(text);
    return res;
  } catch (e) {
    toast(e.message, true);
    return null;
  } finally {
    poller.kick();
  }
}

// ---------- toasts and dialogs ----------

export function toast(text, isError) {
  const box = document.getElementById('toasts');
  const el = h(isError ? 'div.toast.err' : 'div.toast', { testid: 'toast', role: isError ? 'alert' : 'status' },
    h('span.msg', null, text),
    h('button', { 'aria-label': 'Dismiss', on: { click: () => el.remove() } }, '✕'));
  box.append(el);
  while (box.children.length > 4) box.firstChild.remove();
  setTimeout(() => el.remove(), isError ? 10000 : 5000);
}

export function modal(content, opts = {}) {
  const back = h('div.backdrop', { on: { mousedown: (e) => { if (e.target === back) opts.onCancel(); } } });
  const box = h(opts.wide ? 'div.modal.wide' : 'div.modal', { role: 'dialog', 'aria-modal': 'true', testid: opts.testid }, content);
  back.append(box);
  back.addEventListener('keydown', (e) => { if (e.key === 'Escape') { e.preventDefault(); opts.onCancel(); } });
  document.body.append(back);
  return back;
}

// An in-page confirmation (not window.confirm): resolves true or false.
export function confirmDialog({ title, body, yes = 'Confirm', danger = false }) {
  return new Promise((resolve) => {
    let back = null;
    const done = (v) => { back.remove(); resolve(v); };
    const yesBtn = h(danger ? 'button.danger.solid' : 'button.primary', { testid: 'confirm-yes', on: { click: () => done(true) } }, yes);
    back = modal([
      h('h2', null, title),
      h('div.body', null, h('p', null, body)),
      h('div.foot', null,
        h('button', { testid: 'confirm-no', on: { click: () => done(false) } }, 'Cancel'),
        yesBtn),
    ], { testid: 'confirm', onCancel: () => done(false) });
    yesBtn.focus();
  });
}

// "Delay" (number + unit) or "At" (local date-time) → {delay_ms} | {at_ms}.
export function whenInput(defaultDelay, testid) {
  const mode = { v: 'delay' };
  const num = h('input', { type: 'number', min: '0', step: 'any', value: defaultDelay, 'aria-label': 'Delay', testid });
  const unit = h('select', { 'aria-label': 'Unit' },
    [['ms', 1], ['seconds', 1000], ['minutes', 60000], ['hours', 3600000], ['days', 86400000]]
      .map(([n, f]) => h('option', { value: f, selected: n === 'seconds' }, n)));
  const at = h('input', { type: 'datetime-local', step: '1', 'aria-label': 'Time', hidden: true });
  const bDelay = h('button.on', { type: 'button', on: { click: () => set('delay') } }, 'Delay');
  const bAt = h('button', { type: 'button', on: { click: () => set('at') } }, 'At time');
  function set(v) {
    mode.v = v;
    bDelay.classList.toggle('on', v === 'delay');
    bAt.classList.toggle('on', v === 'at');
    num.hidden = unit.hidden = v !== 'delay';
    at.hidden = v !== 'at';
    if (v === 'at' && !at.value) {
      const d = new Date(serverNow() + 60000);
      at.value = `${fmtAbs(d.getTime()).replace(' ', 'T')}`;
    }
  }
  const el = h('div.whenrow', null, h('div.seg', null, bDelay, bAt), num, unit, at);
  return {
    el,
    focus: () => num.focus(),
    value() {
      if (mode.v === 'at') {
        const t = new Date(at.value).getTime();
        if (!Number.isFinite(t)) throw new Error('enter a date and time');
        return { delay_ms: null, at_ms: t };
      }
      const n = Number(num.value || 0);
      if (!Number.isFinite(n) || n < 0) throw new Error('the delay must be a number ≥ 0');
      return { delay_ms: Math.round(n * Number(unit.value)), at_ms: null };
    },
  };
}

export function sendDialog(queue) {
  let back = null;
  const close = () => back.remove();
  const payload = h('textarea', { rows: 8, placeholder: '{"order_id": 42}', 'aria-label': 'Payload', testid: 'send-payload' });
  const whenIn = whenInput('0', 'send-delay');
  const id = h('input', { placeholder: 'generated when empty', 'aria-label': 'Message id', testid: 'send-id' });
  const retries = h('input', { type: 'number', min: '0', step: '1', placeholder: 'queue default', 'aria-label': 'Retry count', testid: 'send-retries' });
  const submit = h('button.primary', { type: 'submit', testid: 'send-submit' }, 'Send message');
  const form = h('form', {
    on: {
      submit: async (e) => {
        e.preventDefault();
        let w;
        try { w = whenIn.value(); } catch (err) { toast(err.message, true); return; }
        const body = {
          payload: payload.value,
          delay_ms: w.delay_ms,
          at_ms: w.at_ms,
          id: id.value.trim() || null,
          retry_count: retries.value === '' ? null : Number(retries.value),
        };
        submit.disabled = true;
        const res = await act(`api/queues/${enc(queue)}/messages`, body, (r) => `Sent ${r.id}`);
        submit.disabled = false;
        if (res) close();
      },
    },
  },
  h('h2', null, `Send a message to ${queue}`),
  h('div.form', null,
    h('label.field', null, h('span', null, 'Payload'), payload, h('span.hint', null, 'Sent as UTF-8 text; JSON is shown pretty-printed.')),
    h('label.field', null, h('span', null, 'When'), whenIn.el, h('span.hint', null, 'A delay from now, or a local date and time.')),
    h('div.row', null,
      h('label.field', null, h('span', null, 'Id (optional)'), id),
      h('label.field', null, h('span', null, 'Retry count (optional)'), retries))),
  h('div.foot', null, h('button', { type: 'button', on: { click: close } }, 'Cancel'), submit));
  back = modal(form, { wide: true, testid: 'send-form', onCancel: close });
  payload.focus();
}

// ---------- chart ----------

// A hand-drawn SVG line chart of the rates over the last 15 minutes.
export function rateChart(history, width) {
  const points = (history && history.points) || [];
  const last = points[points.length - 1] || {};
  const legend = h('div.legend', null, RATES.map((k) =>
    h('span', null, h('i', { style: `background: var(--c-${k === 'dead' ? 'dead-rate' : k})` }), k, ' ', h('b', null, fmtRate(last[k])), '/s')));
  if (points.length < 2) {
    return [legend, h('div.chart-empty', null, 'Collecting samples: the chart starts once the server has sampled the rates twice (every 10 s by default).')];
  }
  const W = Math.max(320, Math.round(width || 640)), H = 150, L = 40, R = 10, T = 8, B = 20;
  const end = Math.max(points[points.length - 1].t_ms, serverNow());
  // Until 15 minutes have been sampled, the axis spans what there is (at least 30 s).
  const span = Math.max(30000, Math.min(WINDOW_MS, end - points[0].t_ms));
  const start = end - span;
  let max = 0;
  for (const p of points) for (const k of RATES) max = Math.max(max, p[k] || 0);
  max = niceMax(max);
  const x = (t) => L + ((t - start) / span) * (W - L - R);
  const y = (v) => T + (1 - v / max) * (H - T - B);
  const svg = s('svg', { class: 'chart', viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': 'Rates over the last 15 minutes' });
  for (let i = 0; i <= 3; i++) {
    const v = (max * i) / 3;
    svg.append(s('line', { class: 'grid', x1: L, x2: W - R, y1: y(v), y2: y(v) }),
      s('text', { class: 'axis', x: L - 5, y: y(v) + 3, 'text-anchor': 'end' }, String(Number(v.toPrecision(3)))));
  }
  for (let i = 0; i <= 3; i++) {
    const ago = (span * (3 - i)) / 3;
    const label = i === 3 ? 'now' : ago >= 60000 ? `-${Math.round(ago / 60000)}m` : `-${Math.round(ago / 1000)}s`;
    svg.append(s('text', { class: 'axis', x: x(end - ago), y: H - 5, 'text-anchor': ['start', 'middle', 'middle', 'end'][i] }, label));
  }
  const shown = points.filter((p) => p.t_ms >= start);
  for (const k of RATES) {
    const pts = shown.map((p) => `${x(p.t_ms).toFixed(1)},${y(p[k] || 0).toFixed(1)}`);
    if (pts.length < 2) continue;
    if (k === 'sent') {
      svg.append(s('path', { class: `area ${k}`, d: `M${pts[0]} L${pts.join(' L')} L${x(shown[shown.length - 1].t_ms)},${y(0)} L${x(shown[0].t_ms)},${y(0)} Z` }));
    }
    svg.append(s('polyline', { class: `line ${k}`, points: pts.join(' ') }));
  }
  // Hover: a cursor line and the values at the nearest sample, in the legend.
  const cursor = s('line', { class: 'cursor', y1: T, y2: H - B, visibility: 'hidden' });
  svg.append(cursor);
  svg.addEventListener('mousemove', (e) => {
    const r = svg.getBoundingClientRect();
    const t = start + (((e.clientX - r.left) / r.width) * W - L) / (W - L - R) * span;
    let best = shown[0];
    for (const p of shown) if (Math.abs(p.t_ms - t) < Math.abs(best.t_ms - t)) best = p;
    cursor.setAttribute('x1', x(best.t_ms));
    cursor.setAttribute('x2', x(best.t_ms));
    cursor.setAttribute('visibility', 'visible');
    legend.querySelectorAll('b').forEach((b, i) => { b.textContent = fmtRate(best[RATES[i]]); });
  });
  svg.addEventListener('mouseleave', () => {
    cursor.setAttribute('visibility', 'hidden');
    legend.querySelectorAll('b').forEach((b, i) => { b.textContent = fmtRate(last[RATES[i]]); });
  });
  return [legend, svg];
}
export function niceMax(v) {
  if (v <= 0) return 1;
  const e = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 1.5, 2, 3, 5, 10]) if (v <= m * e) return m * e;
  return 10 * e;
}

// History of one queue, fetched at most every HISTORY_MS.
export const historyCache = new Map();
// A failure leaves the chart empty rather than failing the whole view.
export async function history(queue) {
  const c = historyCache.get(queue);
  if (c && Date.now() - c.at < HISTORY_MS) return c.data;
  let data = null;
  try { data = await api(`api/queues/${enc(queue)}/history`); } catch (_) { data = null; }
  historyCache.set(queue, { at: Date.now(), data });
  return data;
}

// ---------- polling ----------

// One refresh at a time: a tick runs the view's refresh, then schedules the
// next one POLL_MS later; kick() refreshes now, or right after the running one.
export const poller = {
  view: null, timer: null, running: false, again: false,
  start(view) { this.view = view; this.kick(); },
  kick() {
    if (this.running) { this.again = true; return; }
    clearTimeout(this.timer);
    this.tick();
  },
  async tick() {
    if (document.visibilityState !== 'visible' || !this.view) { live('hidden'); return; }
    this.running = true;
    const view = this.view;
    try {
      await view.refresh();
      live('on');
    } catch (e) {
      live('off', e.message);
      if (view === this.view) view.failed(e);
    } finally {
      this.running = false;
      if (this.again) { this.again = false; this.tick(); } else this.timer = setTimeout(() => this.tick(), POLL_MS);
    }
  },
};
document.addEventListener('visibilitychange', () => {
  if (document.visibilityState === 'visible') poller.kick();
  else clearTimeout(poller.timer);
});
export function live(state, err) {
  const el = document.getElementById('live');
  el.className = `live ${state}`;
  el.querySelector('.live-text').textContent =
    state === 'on' ? 'live · 2s' : state === 'hidden' ? 'paused' : 'offline';
  el.title = err || (state === 'on' ? 'Refreshing every 2 s while this tab is visible' : 'Live updates paused while the tab is hidden');
}

export function crumbs(...parts) {
  const el = document.getElementById('crumbs');
  replace(el, parts.map((p, i) => [
    i ? h('span.sep', null, '/') : null,
    p.href ? h('a', { href: p.href }, p.text) : h('span.here', null, p.text),
  ]));
}
export function failure(box, e, what) {
  if (e.status === 404) {
    replace(box, h('div.card', null, h('div.empty', null, h('strong', null, `${what} not found`),
      e.message.replace(/^404: /, ''), h('p', null, h('a', { href: '#/' }, 'Back to the overview')))));
    return true;
  }
  toast(e.message, true);
  return false;
}
