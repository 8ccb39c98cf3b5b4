// delayqueue dashboard: vanilla JS, no build step. Hash routes:
//   #/                 overview
//   #/q/<name>/<state> a queue's tab (pending|ready|processing|retry|dead)
//   #/q/<name>/m/<id>  one message
// Every request goes to a URL relative to the mount point, so the page works
// under any prefix (/, /admin/queues, /admin/queues/).
'use strict';

(() => {
  const STATES = ['pending', 'ready', 'processing', 'retry', 'dead'];
  const RATES = ['sent', 'acked', 'failed', 'dead'];
  const POLL_MS = 2000;
  // The server samples rates every 10 s; asking more often returns the same points.
  const HISTORY_MS = 10000;
  const WINDOW_MS = 15 * 60 * 1000;
  const PAGE_SIZES = [25, 50, 100, 200];
  // Hex dumps of huge payloads would freeze the tab; the copy button still copies all.
  const HEX_LIMIT = 64 * 1024;

  // The mount point: location.pathname with a trailing slash. The origin is
  // added explicitly because fetch refuses URLs carrying user:pass@.
  const BASE = (() => {
    const p = location.pathname;
    return location.origin + (p.endsWith('/') ? p : p + '/');
  })();

  const session = { csrf: '', readOnly: false, user: null, skew: 0, loaded: false };
  const serverNow = () => Date.now() + session.skew;

  // ---------- DOM helpers ----------

  // h('tag.class', {attr: value, on: {click: fn}}, ...children)
  function h(spec, attrs, ...children) {
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
  function append(el, children) {
    for (const c of children.flat(Infinity)) {
      if (c === null || c === undefined || c === false) continue;
      el.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return el;
  }
  const SVG_NS = 'http://www.w3.org/2000/svg';
  function s(tag, attrs, ...children) {
    const el = document.createElementNS(SVG_NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, v);
    append(el, children);
    return el;
  }
  const replace = (el, ...children) => { el.replaceChildren(); append(el, children); return el; };
  const enc = encodeURIComponent;

  // ---------- formatting ----------

  const nf = new Intl.NumberFormat('en-US');
  const fmtInt = (n) => nf.format(n || 0);
  // A count with its noun, singular for exactly one: "1 message", "2 messages".
  const countOf = (n, one, many = `${one}s`) => `${fmtInt(n)} ${n === 1 ? one : many}`;
  function fmtRate(r) {
    if (!r) return '0';
    if (r < 0.01) return '<0.01';
    if (r < 10) return String(Number(r.toFixed(2)));
    // Trailing zeros dropped, as below 10: "12", not "12.0" beside a "4".
    if (r < 100) return String(Number(r.toFixed(1)));
    return nf.format(Math.round(r));
  }
  function fmtDur(ms) {
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
  function fmtSpec(spec) {
    const m = /^every (\d+)$/.exec(spec);
    return m ? `every ${fmtDur(Number(m[1]))}` : spec;
  }
  function fmtBytes(n) {
    if (n < 1024) return `${n} B`;
    if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KiB`;
    return `${(n / 1024 / 1024).toFixed(1)} MiB`;
  }
  const pad = (n, w = 2) => String(n).padStart(w, '0');
  function fmtAbs(ms, short) {
    const d = new Date(ms);
    const time = `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
    const day = `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}`;
    if (short && day === fmtAbs(Date.now(), false).slice(0, 10)) return time;
    return `${day} ${time}`;
  }
  function fmtRel(ms) {
    const diff = ms - serverNow();
    if (Math.abs(diff) < 1000) return 'now';
    return diff > 0 ? `in ${fmtDur(diff)}` : `${fmtDur(diff)} ago`;
  }
  // "in 4m 2s 14:03:22" with the full timestamp as a tooltip.
  function when(ms, opts = {}) {
    if (ms === null || ms === undefined) return h('span.faint', null, '—');
    const overdue = opts.overdue && ms < serverNow() - 1000;
    return h('span', { title: new Date(ms).toISOString() },
      h(overdue ? 'span.overdue' : 'span', null, fmtRel(ms)),
      h('span.abs', null, fmtAbs(ms, true)));
  }
  function stateBadge(state) { return h(`span.state.s-${state}`, null, state); }
  function pausedBadge() {
    return h('span.badge.badge-paused', { testid: 'paused-badge', title: 'Consumers claim nothing until resumed; sends still succeed' }, 'paused');
  }
  function previewOf(m) {
    if (m.payload_text !== null && m.payload_text !== undefined) {
      const t = m.payload_text.replace(/\s+/g, ' ').trim();
      return t === '' ? h('span.faint', null, '(empty)') : t;
    }
    const bytes = b64bytes(m.payload_base64 || '').slice(0, 24);
    return h('span.faint', null, `${fmtBytes(m.payload_len)} binary: `, hexBytes(bytes));
  }

  // ---------- payload decoding ----------

  function b64bytes(b64) {
    try {
      const bin = atob(b64);
      const out = new Uint8Array(bin.length);
      for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
      return out;
    } catch (_) {
      return new Uint8Array(0);
    }
  }
  const hexBytes = (bytes) => Array.from(bytes, (b) => pad(b.toString(16))).join(' ');
  function hexDump(bytes) {
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
  function jsonNodes(text) {
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
  function prettyJson(text) {
    try { return JSON.stringify(JSON.parse(text), null, 2); } catch (_) { return null; }
  }

  // ---------- HTTP ----------

  class ApiError extends Error {
    constructor(status, message) { super(message); this.status = status; }
  }
  async function api(path, opts = {}) {
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
  function absorbOverview(o) {
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
  async function loadSession() {
    const o = await api('api/overview');
    absorbOverview(o);
    return o;
  }
  // An action: POST, toast the result or the server's error, then refresh the view.
  // A stale CSRF token (the server restarted) is fetched again once.
  async function act(path, body, okText) {
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

  function toast(text, isError) {
    const box = document.getElementById('toasts');
    const el = h(isError ? 'div.toast.err' : 'div.toast', { testid: 'toast', role: isError ? 'alert' : 'status' },
      h('span.msg', null, text),
      h('button', { 'aria-label': 'Dismiss', on: { click: () => el.remove() } }, '✕'));
    box.append(el);
    while (box.children.length > 4) box.firstChild.remove();
    setTimeout(() => el.remove(), isError ? 10000 : 5000);
  }

  function modal(content, opts = {}) {
    const back = h('div.backdrop', { on: { mousedown: (e) => { if (e.target === back) opts.onCancel(); } } });
    const box = h(opts.wide ? 'div.modal.wide' : 'div.modal', { role: 'dialog', 'aria-modal': 'true', testid: opts.testid }, content);
    back.append(box);
    back.addEventListener('keydown', (e) => { if (e.key === 'Escape') { e.preventDefault(); opts.onCancel(); } });
    document.body.append(back);
    return back;
  }

  // An in-page confirmation (not window.confirm): resolves true or false.
  function confirmDialog({ title, body, yes = 'Confirm', danger = false }) {
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
  function whenInput(defaultDelay, testid) {
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

  function sendDialog(queue) {
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
  function rateChart(history, width) {
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
  function niceMax(v) {
    if (v <= 0) return 1;
    const e = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 1.5, 2, 3, 5, 10]) if (v <= m * e) return m * e;
    return 10 * e;
  }

  // History of one queue, fetched at most every HISTORY_MS.
  const historyCache = new Map();
  // A failure leaves the chart empty rather than failing the whole view.
  async function history(queue) {
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
  const poller = {
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
  function live(state, err) {
    const el = document.getElementById('live');
    el.className = `live ${state}`;
    el.querySelector('.live-text').textContent =
      state === 'on' ? 'live · 2s' : state === 'hidden' ? 'paused' : 'offline';
    el.title = err || (state === 'on' ? 'Refreshing every 2 s while this tab is visible' : 'Live updates paused while the tab is hidden');
  }

  function crumbs(...parts) {
    const el = document.getElementById('crumbs');
    replace(el, parts.map((p, i) => [
      i ? h('span.sep', null, '/') : null,
      p.href ? h('a', { href: p.href }, p.text) : h('span.here', null, p.text),
    ]));
  }
  function failure(box, e, what) {
    if (e.status === 404) {
      replace(box, h('div.card', null, h('div.empty', null, h('strong', null, `${what} not found`),
        e.message.replace(/^404: /, ''), h('p', null, h('a', { href: '#/' }, 'Back to the overview')))));
      return true;
    }
    toast(e.message, true);
    return false;
  }

  // ---------- overview ----------

  function overviewView(root) {
    const expanded = new Map(); // queue name → shard_status (or null while loading)
    let chartQueue = null;
    // Until a queue is picked, the chart follows the busiest one.
    let chartPicked = false;
    let data = null;
    const body = h('tbody');
    const summary = h('span.sub');
    const chartSel = h('select', { 'aria-label': 'Chart queue', on: { change: () => { chartQueue = chartSel.value; chartPicked = true; drawChart(); poller.kick(); } } });
    const chartBox = h('div.card-body');
    const section = h('section', { testid: 'overview' },
      h('div.pagehead', null, h('h1', null, 'Queues'), summary),
      h('div.card', null, h('div.table-wrap', null, h('table', null,
        h('thead', null,
          h('tr', null,
            h('th', { rowspan: 2 }, 'Queue'),
            h('th.group', { colspan: 5 }, 'Messages'),
            h('th.group.gap', { colspan: 2 }, 'Age'),
            h('th.group.gap', { colspan: 4 }, 'Rate per second')),
          h('tr', null,
            STATES.map((st) => h('th.num', null, st)),
            h('th.num.gap', { title: 'How long the oldest due message has waited' }, 'oldest overdue'),
            h('th.num', { title: 'The oldest dead letter' }, 'oldest dead'),
            RATES.map((k, i) => h(i ? 'th.num' : 'th.num.gap', null, k)))),
        body))),
      h('div.card', null,
        h('div.card-head', null, h('h2', null, 'Rates'), h('span.sub.muted', null, 'last 15 minutes, per second'), h('div.right', null, chartSel)),
        chartBox));
    replace(root, section);
    crumbs({ text: 'Queues' });

    let hist = null;
    function drawChart() {
      if (!data || !data.queues.length) { replace(chartBox, h('div.chart-empty', null, 'No queue to chart yet.')); return; }
      replace(chartBox, rateChart(hist && hist.queue === chartQueue ? hist.data : null, chartBox.clientWidth - 28));
      for (const tr of body.querySelectorAll('tr[data-queue]')) tr.classList.toggle('chart-on', tr.dataset.queue === chartQueue);
    }

    function countCell(q, st, counts) {
      const n = counts[st] || 0;
      const td = h(n ? 'td.num' : 'td.num.zero', { testid: `count-${st}`, 'data-value': n });
      td.append(q ? h('a', { href: `#/q/${enc(q)}/${st}`, on: { click: (e) => e.stopPropagation() } }, fmtInt(n)) : fmtInt(n));
      return td;
    }
    function ageCells(x) {
      return [
        h(x.oldest_overdue_ms ? 'td.num.gap.overdue' : 'td.num.gap.zero', null, x.oldest_overdue_ms ? fmtDur(x.oldest_overdue_ms) : '—'),
        h(x.oldest_dead_ms ? 'td.num' : 'td.num.zero', null, x.oldest_dead_ms ? fmtDur(x.oldest_dead_ms) : '—'),
      ];
    }
    function row(q) {
      const isOpen = expanded.has(q.name);
      const toggle = q.shards > 1
        ? h('button.icon', {
          title: isOpen ? 'Hide shards' : 'Show each shard',
          'aria-expanded': String(isOpen),
          testid: 'shards-toggle',
          on: {
            click: (e) => {
              e.stopPropagation();
              if (expanded.has(q.name)) expanded.delete(q.name); else expanded.set(q.name, null);
              render();
              poller.kick();
            },
          },
        }, isOpen ? '▾' : '▸')
        : h('span', { style: 'display:inline-block;width:22px' });
      const tr = h('tr.clickable', {
        testid: 'queue-row', 'data-queue': q.name, title: 'Click to chart this queue',
        on: { click: () => { chartQueue = q.name; chartPicked = true; chartSel.value = q.name; drawChart(); poller.kick(); } },
      },
      h('td.name', null, toggle,
        h('a.qlink', { href: `#/q/${enc(q.name)}/pending`, on: { click: (e) => e.stopPropagation() } }, q.name),
        q.shards > 1 ? h('span.badge.badge-muted', null, `${q.shards} shards`) : null,
        q.paused ? pausedBadge() : null),
      STATES.map((st) => countCell(q.name, st, q.counts)),
      ageCells(q),
      RATES.map((k, i) => h((q.rates[k] ? 'td.num' : 'td.num.zero') + (i ? '' : '.gap'), null, fmtRate(q.rates[k]))));
      const rows = [tr];
      if (isOpen) {
        const shards = expanded.get(q.name);
        if (!shards) rows.push(h('tr.shard-row', null, h('td.name', { colspan: 12 }, 'loading shards…')));
        else {
          for (const sh of shards) {
            rows.push(h('tr.shard-row', { testid: 'shard-row', 'data-shard': sh.shard },
              h('td.name', null, `shard ${sh.shard}`, sh.paused ? pausedBadge() : null),
              STATES.map((st) => countCell(null, st, sh.counts)),
              ageCells(sh),
              h('td.gap', { colspan: 4 })));
          }
        }
      }
      return rows;
    }
    // The queue with the most traffic, so the chart shows something; the
    // one charted stays while it has at least 2/3 of the most, so it does not flicker.
    function busiest(qs) {
      const rate = (q) => RATES.reduce((a, k) => a + (q.rates[k] || 0), 0);
      let best = null, most = -1;
      for (const q of qs) if (rate(q) > most) { best = q.name; most = rate(q); }
      const current = qs.find((q) => q.name === chartQueue);
      return current && rate(current) >= (2 / 3) * most ? current.name : best;
    }
    function render() {
      const qs = data.queues;
      const total = qs.reduce((a, q) => a + STATES.reduce((b, st) => b + (q.counts[st] || 0), 0), 0);
      summary.textContent = qs.length
        ? `${countOf(qs.length, 'queue')} · ${countOf(total, 'message')}`
        : '';
      if (!qs.length) {
        replace(body, h('tr', null, h('td.empty', { colspan: 12 },
          h('strong', null, 'No queues yet'),
          'A queue appears here once a message has been sent to it under this key prefix.')));
      } else {
        replace(body, qs.map(row));
      }
      const names = qs.map((q) => q.name);
      if (!chartPicked || !names.includes(chartQueue)) chartQueue = busiest(qs);
      if (chartSel.options.length !== names.length || names.some((n, i) => chartSel.options[i].value !== n)) {
        replace(chartSel, names.map((n) => h('option', { value: n }, n)));
      }
      chartSel.value = chartQueue || '';
      chartSel.hidden = names.length < 2;
      drawChart();
    }

    return {
      async refresh() {
        const o = await api('api/overview');
        absorbOverview(o);
        data = o;
        const names = new Set(o.queues.map((q) => q.name));
        for (const name of [...expanded.keys()]) {
          if (!names.has(name)) { expanded.delete(name); continue; }
          const d = await api(`api/queues/${enc(name)}?shards=1`);
          expanded.set(name, d.shard_status || []);
        }
        render();
        const q = chartQueue || (o.queues[0] && o.queues[0].name);
        if (q) {
          hist = { queue: q, data: await history(q) };
          if (q === chartQueue) drawChart();
        }
      },
      failed() {
        if (!data) replace(body, h('tr', null, h('td.empty', { colspan: 12 }, h('strong', null, 'Cannot load the queues'), 'Retrying every 2 s.')));
      },
    };
  }

  // ---------- queue ----------

  const STATE_HELP = {
    pending: 'Waiting for their due time.',
    ready: 'Due, waiting for a consumer to claim them.',
    processing: 'Claimed by a consumer; back to retry when the lease runs out unacknowledged.',
    retry: 'Failed or released; delivered again after the backoff.',
    dead: 'Out of retries (or skipped, or expired): kept until requeued or deleted.',
  };
  const TIME_COL = { pending: 'due', ready: 'due', processing: 'lease until', retry: 'due', dead: 'died' };
  function timeOf(m, state) {
    if (state === 'processing') return when(m.lease_until_ms);
    if (state === 'dead') return when(m.dead_since_ms);
    return when(m.due_ms, { overdue: state !== 'pending' });
  }

  function queueView(root, name, state) {
    const view = { order: 'asc', limit: 50, cursors: [null], next: null, search: null, selected: new Set(), info: null, page: null };
    const head = h('div.pagehead');
    const stats = h('div.stats');
    const chartBox = h('div.card-body');
    const tabs = h('nav.tabs');
    const toolbar = h('div.toolbar');
    const tableBox = h('div.card');
    // Shown only when the queue has schedules.
    const schedBox = h('div.card', { testid: 'schedules', hidden: true });
    const section = h('section', { testid: 'queue-view', 'data-queue': name },
      head,
      h('div.grid2', null,
        h('div.card', null, stats),
        h('div.card', null, h('div.card-head', null, h('h2', null, 'Rates'), h('span.sub.muted', null, 'last 15 minutes, per second')), chartBox)),
      tabs, toolbar, tableBox, schedBox);
    replace(root, section);
    crumbs({ text: 'Queues', href: '#/' }, { text: name, href: `#/q/${enc(name)}/pending` }, { text: state });

    // Search and the page controls are built once so typing survives refreshes.
    const searchIn = h('input', {
      type: 'search', placeholder: 'Search by id or payload text', testid: 'search', 'aria-label': 'Search',
      on: { keydown: (e) => { if (e.key === 'Enter') runSearch(null); } },
    });
    const searchGo = h('button', { testid: 'search-go', on: { click: () => runSearch(null) } }, 'Search');
    const orderBtn = h('button', { testid: 'order', title: 'Sort by time', on: { click: () => { view.order = view.order === 'asc' ? 'desc' : 'asc'; firstPage(); } } });
    const selInfo = h('span.sel');
    const searchBox = h('div.search', null, searchIn, searchGo);
    const spacer = h('span.spacer');
    const bulk = {
      requeueSel: h('button', { testid: 'requeue-selected', on: { click: () => bulkAct('requeue', false) } }, 'Requeue selected'),
      deleteSel: h('button.danger', { testid: 'delete-selected', on: { click: () => bulkAct('delete', false) } }, 'Delete selected'),
      requeueAll: h('button', { testid: 'requeue-all', on: { click: () => bulkAct('requeue', true) } }, 'Requeue all'),
      deleteAll: h('button.danger', { testid: 'delete-all', on: { click: () => bulkAct('delete', true) } }, 'Delete all'),
    };
    const canSelect = () => state === 'dead' && !session.readOnly;

    function firstPage() { view.cursors = [null]; view.selected.clear(); poller.kick(); }
    async function runSearch(cursor) {
      const q = searchIn.value.trim();
      if (!q) { view.search = null; poller.kick(); return; }
      searchGo.disabled = true;
      try {
        const r = await api(`api/queues/${enc(name)}/search?state=${state}&q=${enc(q)}${cursor ? `&cursor=${enc(cursor)}` : ''}`);
        const prev = cursor && view.search ? view.search : { items: [], scanned: 0 };
        view.search = { q, items: prev.items.concat(r.items), scanned: prev.scanned + (r.scanned || 0), next: r.next, id_match: r.id_match };
        view.selected.clear();
        renderTable();
      } catch (e) {
        toast(e.message, true);
      } finally {
        searchGo.disabled = false;
      }
    }
    function clearSearch() { searchIn.value = ''; view.search = null; view.selected.clear(); poller.kick(); }

    async function bulkAct(kind, all) {
      const ids = [...view.selected];
      const n = all ? (view.info ? view.info.counts.dead : 0) : ids.length;
      if (!all && !ids.length) return;
      const what = all ? `all ${countOf(n, 'dead letter')}` : countOf(n, 'selected dead letter');
      if (kind === 'delete' || all) {
        const ok = await confirmDialog(kind === 'delete'
          ? { title: `Delete ${what}?`, body: `They are removed from Redis for good. Queue: ${name}.`, yes: 'Delete', danger: true }
          : { title: `Requeue ${what}?`, body: `They become ready now and are delivered to the consumers of ${name} with their retries restored.`, yes: 'Requeue' });
        if (!ok) return;
      }
      const res = await act(`api/queues/${enc(name)}/dead/${kind}`, all ? { all: true } : { ids },
        (r) => `${kind === 'delete' ? 'Deleted' : 'Requeued'} ${countOf(r.count, 'message')}`);
      if (res) { view.selected.clear(); if (view.search) clearSearch(); }
    }

    function renderHead() {
      const q = view.info;
      const actions = [];
      if (!session.readOnly) {
        actions.push(h('button', { testid: 'send-open', on: { click: () => sendDialog(name) } }, 'Send message'));
        actions.push(q.paused
          ? h('button.primary', { testid: 'resume', on: { click: () => act(`api/queues/${enc(name)}/resume`, {}, `Resumed ${name}`) } }, 'Resume')
          : h('button', { testid: 'pause', title: 'Consumers stop claiming within one fetch interval', on: { click: () => act(`api/queues/${enc(name)}/pause`, {}, `Paused ${name}: consumers claim nothing until resumed`) } }, 'Pause'));
      }
      const total = STATES.reduce((a, st) => a + (q.counts[st] || 0), 0);
      replace(head,
        h('h1', null, name),
        q.paused ? pausedBadge() : null,
        q.shards > 1 ? h('span.badge.badge-muted', null, `${q.shards} shards`) : null,
        h('span.sub', null, countOf(total, 'message')),
        h('div.actions', null, actions));
      const t = q.totals || {};
      const stat = (k, v, small) => h('div.stat', null, h('div.k', null, k), h('div.v', null, v, small ? h('small', null, small) : null));
      replace(stats,
        stat('Sent', fmtRate(q.rates.sent), ' /s'),
        stat('Acked', fmtRate(q.rates.acked), ' /s'),
        stat('Failed', fmtRate(q.rates.failed), ' /s'),
        stat('Oldest overdue', q.oldest_overdue_ms ? h('span.overdue', null, fmtDur(q.oldest_overdue_ms)) : h('span.faint', null, '—')),
        stat('Next due', q.next_due_ms !== null && q.next_due_ms !== undefined ? `in ${fmtDur(q.next_due_ms)}` : h('span.faint', null, '—')),
        stat('Oldest dead', q.oldest_dead_ms ? fmtDur(q.oldest_dead_ms) : h('span.faint', null, '—')),
        stat('Total sent', fmtInt(t.sent)),
        stat('Total acked', fmtInt(t.acked)),
        stat('Dead / expired', `${fmtInt(t.dead)} / ${fmtInt(t.expired)}`));
      replace(tabs, STATES.map((st) => {
        const n = q.counts[st] || 0;
        return h(`a.tab-${st}${st === state ? '.on' : ''}`, { href: `#/q/${enc(name)}/${st}`, testid: `tab-${st}`, title: STATE_HELP[st] },
          st, h(n ? 'span.n.nz' : 'span.n', null, fmtInt(n)));
      }));
    }

    function renderToolbar() {
      orderBtn.textContent = `${TIME_COL[state]} ${view.order === 'asc' ? '↑ oldest first' : '↓ newest first'}`;
      const items = [searchBox, orderBtn, spacer];
      if (state === 'dead' && !session.readOnly) {
        const n = view.selected.size;
        selInfo.textContent = n ? `${n} selected` : '';
        bulk.requeueSel.disabled = bulk.deleteSel.disabled = !n;
        const dead = view.info ? view.info.counts.dead : 0;
        bulk.requeueAll.disabled = bulk.deleteAll.disabled = !dead;
        items.push(selInfo, bulk.requeueSel, bulk.deleteSel, bulk.requeueAll, bulk.deleteAll);
      }
      if (toolbar.childElementCount !== items.length) replace(toolbar, items);
    }

    function renderTable() {
      const sel = canSelect();
      const searching = !!view.search;
      const items = searching ? view.search.items : view.page ? view.page.items : [];
      const present = new Set(items.map((m) => m.id));
      for (const id of [...view.selected]) if (!present.has(id)) view.selected.delete(id);
      renderToolbar();

      const all = sel ? h('input', {
        type: 'checkbox', 'aria-label': 'Select all on this page', testid: 'select-all',
        checked: items.length > 0 && items.every((m) => view.selected.has(m.id)),
        on: { change: (e) => { for (const m of items) { if (e.target.checked) view.selected.add(m.id); else view.selected.delete(m.id); } renderTable(); } },
      }) : null;
      const headRow = h('tr', null,
        sel ? h('th.check', null, all) : null,
        h('th', null, 'id'), h('th', null, TIME_COL[state]), h('th.num', null, 'attempts'),
        h('th', null, 'last error'), h('th', null, 'payload'));
      const cols = sel ? 6 : 5;
      const rows = items.map((m) => {
        const href = `#/q/${enc(name)}/m/${enc(m.id)}`;
        const isSel = view.selected.has(m.id);
        return h(isSel ? 'tr.clickable.selected' : 'tr.clickable', {
          testid: 'message-row', 'data-id': m.id,
          on: { click: (e) => { if (!e.target.closest('input,a')) location.hash = href; } },
        },
        sel ? h('td.check', null, h('input', {
          type: 'checkbox', testid: 'select', 'aria-label': `Select ${m.id}`, checked: isSel,
          on: { change: (e) => { if (e.target.checked) view.selected.add(m.id); else view.selected.delete(m.id); renderTable(); } },
        })) : null,
        h('td.id', { title: m.id }, h('a', { href }, m.id)),
        h('td.when', null, timeOf(m, state)),
        h(m.attempts ? 'td.num' : 'td.num.zero', null, fmtInt(m.attempts)),
        h('td.err', { title: m.last_error || '' }, m.last_error || h('span.faint', null, '—')),
        h('td.preview', { title: m.payload_text || '' }, previewOf(m)));
      });
      if (!rows.length) {
        rows.push(h('tr', null, h('td.empty', { colspan: cols },
          searching
            ? [h('strong', null, 'No match yet'), view.search.next ? 'Nothing in the messages scanned so far: continue to scan further.' : `Nothing in ${state} matches “${view.search.q}”.`]
            : [h('strong', null, `No ${state} messages`), STATE_HELP[state]])));
      }
      const table = h('div.table-wrap', null, h('table', null, h('thead', null, headRow), h('tbody', null, rows)));
      const parts = [];
      if (searching) {
        const sr = view.search;
        parts.push(h('div.searchinfo', { testid: 'search-info' },
          h('span', null, `${countOf(sr.items.length, 'match', 'matches')} for “${sr.q}”`,
            sr.id_match ? ' (exact id)' : '', ` · scanned ${fmtInt(sr.scanned)}`),
          sr.next ? h('button.small', { testid: 'search-more', on: { click: () => runSearch(sr.next) } }, 'Continue scanning') : h('span.faint', null, 'scan complete'),
          h('span.spacer', { style: 'flex:1' }),
          h('button.small.ghost', { on: { click: clearSearch } }, 'Clear search')));
      }
      parts.push(table);
      if (!searching && view.page) {
        const pageNo = view.cursors.length;
        const from = (pageNo - 1) * view.limit;
        const total = view.page.total;
        const sizeSel = h('select', {
          'aria-label': 'Page size',
          on: { change: (e) => { view.limit = Number(e.target.value); firstPage(); } },
        }, PAGE_SIZES.map((n) => h('option', { value: n, selected: n === view.limit }, `${n} / page`)));
        parts.push(h('div.pager', null,
          h('span', null, items.length ? `${fmtInt(from + 1)}–${fmtInt(from + items.length)} of ${fmtInt(total)}` : `0 of ${fmtInt(total)}`),
          h('div.right', null, sizeSel,
            h('button.small', { testid: 'page-first', disabled: pageNo === 1, on: { click: firstPage } }, '« First page'),
            h('button.small', {
              testid: 'page-prev', disabled: pageNo === 1,
              on: { click: () => { view.cursors.pop(); view.selected.clear(); poller.kick(); } },
            }, '‹ Previous'),
            h('button.small', {
              testid: 'page-next', disabled: !view.page.next,
              on: { click: () => { view.cursors.push(view.page.next); view.selected.clear(); poller.kick(); } },
            }, 'Next ›'))));
      }
      replace(tableBox, parts);
    }

    async function triggerSchedule(s) {
      const ok = await confirmDialog({ title: `Trigger ${s.name} now?`, body: `One message with the schedule's payload is sent to ${name}, due now. Its timing does not change.`, yes: 'Trigger' });
      if (ok) await act(`api/queues/${enc(name)}/schedules/${enc(s.name)}/trigger`, {}, (r) => `Triggered ${s.name}: ${r.id}`);
    }

    function renderSchedules(items) {
      schedBox.hidden = !items.length;
      if (!items.length) { replace(schedBox); return; }
      const ro = session.readOnly;
      const rows = items.map((s) => {
        const path = `api/queues/${enc(name)}/schedules/${enc(s.name)}`;
        const actions = ro ? null : h('td.actions', null,
          s.paused
            ? h('button.small.primary', { testid: 'schedule-resume', on: { click: () => act(`${path}/resume`, {}, `Resumed schedule ${s.name}`) } }, 'Resume')
            : h('button.small', { testid: 'schedule-pause', title: 'Fires sent ahead are withdrawn', on: { click: () => act(`${path}/pause`, {}, `Paused schedule ${s.name}`) } }, 'Pause'),
          h('button.small', { testid: 'schedule-trigger', title: 'Send one fire now', on: { click: () => triggerSchedule(s) } }, 'Trigger now'));
        return h('tr', { testid: 'schedule-row', 'data-schedule': s.name },
          h('td.name', null, h('strong', null, s.name), s.paused ? h('span.badge.badge-paused', { testid: 'schedule-paused', title: 'Fires nothing until resumed' }, 'paused') : null),
          h('td.spec', { title: s.spec }, fmtSpec(s.spec)),
          h('td', null, s.timezone),
          h('td.when', { testid: 'schedule-next' }, s.paused ? h('span.faint', null, 'paused') : when(s.next_fire_ms)),
          h('td.when', null, when(s.last_fire_ms)),
          h(s.fired ? 'td.num' : 'td.num.zero', null, fmtInt(s.fired)),
          actions);
      });
      replace(schedBox,
        h('div.card-head', null, h('h2', null, 'Schedules'), h('span.sub.muted', null, `${fmtInt(items.length)} · each fire is a message with id {name}@<fire time>`)),
        h('div.table-wrap', null, h('table', null,
          h('thead', null, h('tr', null,
            h('th', null, 'name'), h('th', null, 'spec'), h('th', null, 'time zone'), h('th', null, 'next fire'),
            h('th', { title: 'The latest fire sent: fires are sent ahead of their time' }, 'last sent'), h('th.num', null, 'fires'), ro ? null : h('th', null, ''))),
          h('tbody', null, rows))));
    }

    return {
      async refresh() {
        if (!session.loaded) await loadSession();
        const cursor = view.cursors[view.cursors.length - 1];
        const list = view.search ? null
          : api(`api/queues/${enc(name)}/messages?state=${state}&limit=${view.limit}&order=${view.order}${cursor ? `&cursor=${enc(cursor)}` : ''}`);
        const [info, page, scheds] = await Promise.all([api(`api/queues/${enc(name)}`), list, api(`api/queues/${enc(name)}/schedules`)]);
        view.info = info;
        if (page) view.page = page;
        renderHead();
        renderTable();
        renderSchedules(scheds.items);
        replace(chartBox, rateChart(await history(name), chartBox.clientWidth - 28));
      },
      failed(e) { if (!view.info) failure(root, e, 'Queue'); },
    };
  }

  // ---------- message ----------

  function messageView(root, name, id) {
    let msg = null, gone = false, mode = null, shownKey = '';
    const head = h('div.pagehead');
    const details = h('dl.details');
    const actionsCard = h('div.card');
    const payloadPre = h('pre.payload', { testid: 'payload' });
    const modeSeg = h('div.seg');
    const sizeInfo = h('span.sub');
    const copyBtn = h('button.small', { testid: 'copy', on: { click: copy } }, 'Copy');
    const section = h('section', { testid: 'message-view', 'data-id': id },
      head,
      h('div.grid2', null,
        h('div.card', null, details),
        h('div', null, actionsCard)),
      h('div.card', null,
        h('div.card-head', null, h('h2', null, 'Payload'), sizeInfo, h('div.right', null, modeSeg, copyBtn)),
        payloadPre));
    replace(root, section);
    let actionsFor = null;

    function payloadText() {
      if (!msg) return '';
      const bytes = () => b64bytes(msg.payload_base64 || '');
      if (mode === 'json') return prettyJson(msg.payload_text) || msg.payload_text;
      if (mode === 'text') return msg.payload_text;
      return hexDump(bytes());
    }
    function renderPayload() {
      const modes = [];
      if (msg.payload_text !== null && msg.payload_text !== undefined) {
        if (msg.payload_json || prettyJson(msg.payload_text) !== null) modes.push('json');
        modes.push('text');
      }
      modes.push('hex');
      if (!modes.includes(mode)) mode = modes[0];
      replace(modeSeg, modes.map((m) => h(m === mode ? 'button.small.on' : 'button.small', {
        testid: `payload-${m}`, on: { click: () => { mode = m; shownKey = ''; renderPayload(); } },
      }, m === 'json' ? 'JSON' : m === 'text' ? 'Text' : 'Hex')));
      sizeInfo.textContent = fmtBytes(msg.payload_len);
      // Unchanged payloads are not redrawn, so a text selection survives the refresh.
      const key = `${mode}:${msg.payload_base64}`;
      if (key === shownKey) return;
      shownKey = key;
      payloadPre.className = mode === 'hex' ? 'payload hex' : 'payload';
      const text = payloadText();
      if (mode === 'json') replace(payloadPre, jsonNodes(text));
      else replace(payloadPre, text === '' ? h('span.faint', null, '(empty payload)') : text);
    }
    async function copy() {
      const text = mode === 'hex' && msg ? hexBytes(b64bytes(msg.payload_base64 || '')) : payloadText();
      try {
        if (navigator.clipboard && window.isSecureContext) await navigator.clipboard.writeText(text);
        else {
          // Plain-HTTP pages have no Clipboard API: copy through a hidden textarea.
          const ta = h('textarea', { style: 'position:fixed;left:-9999px;top:0' });
          ta.value = text;
          document.body.append(ta);
          ta.select();
          const ok = document.execCommand('copy');
          ta.remove();
          if (!ok) throw new Error('the browser refused');
        }
        toast(`Copied ${mode === 'hex' ? 'hex' : 'payload'} (${fmtBytes(new Blob([text]).size)})`);
      } catch (e) {
        toast(`Copy failed: ${e.message}`, true);
      }
    }

    function renderDetails() {
      const m = msg;
      const row = (k, v, cls) => [h('dt', null, k), h(cls ? `dd.${cls}` : 'dd', null, v)];
      const deliveries = m.retry_count === null || m.retry_count === undefined
        ? h('span.faint', null, '—')
        : `${fmtInt(m.deliveries_left)} of ${fmtInt(m.retry_count + 1)}`;
      replace(details,
        row('State', stateBadge(m.state)),
        m.state !== 'dead' || m.due_ms ? row(m.state === 'dead' ? 'Was due' : 'Due', when(m.due_ms, { overdue: m.state !== 'pending' && m.state !== 'dead' })) : null,
        row('Sent', when(m.sent_ms)),
        row('Attempts', fmtInt(m.attempts)),
        row('Deliveries left', deliveries),
        row('Backoff', m.backoff || h('span.faint', null, "the consumer's default")),
        row('Priority', m.priority ? String(m.priority) : h('span.faint', null, '0 (default, lowest)')),
        row('Headers', Object.keys(m.headers || {}).length
          ? Object.entries(m.headers).map(([k, v]) => h('div.mono', null, `${k}: ${v}`))
          : h('span.faint', null, 'none')),
        row('Last error', m.last_error || h('span.faint', null, '—'), m.last_error ? 'err' : null),
        m.lease_until_ms ? row('Lease until', when(m.lease_until_ms)) : null,
        m.dead_since_ms ? row('Died', when(m.dead_since_ms)) : null,
        row('Expires', m.expires_at_ms ? when(m.expires_at_ms) : h('span.faint', null, 'never')),
        row('Size', fmtBytes(m.payload_len)));
    }

    function renderActions() {
      // Rebuilt only when the state changes, so a half-typed reschedule survives refreshes.
      const key = `${msg ? msg.state : 'gone'}:${session.readOnly}`;
      if (key === actionsFor) return;
      actionsFor = key;
      const path = `api/queues/${enc(name)}/messages/${enc(id)}`;
      const back = () => { location.hash = `#/q/${enc(name)}/${msg ? msg.state : 'pending'}`; };
      if (!msg) { replace(actionsCard); return; }
      const parts = [h('div.card-head', null, h('h2', null, 'Actions'))];
      if (session.readOnly) {
        parts.push(h('div.card-body.muted', null, 'Read-only dashboard: actions are disabled.'));
      } else if (msg.state === 'pending') {
        const whenIn = whenInput('60', 'reschedule-delay');
        parts.push(h('div.actionbar', null,
          h('button.primary', {
            testid: 'run-now', title: 'Make it due now',
            on: { click: () => act(`${path}/run`, {}, (r) => (r.done ? 'Due now: a consumer will claim it' : 'Not pending any more')) },
          }, 'Run now'),
          h('button.danger', {
            testid: 'cancel',
            on: {
              click: async () => {
                if (!(await confirmDialog({ title: 'Cancel this message?', body: `${id} is removed and will not be delivered.`, yes: 'Cancel message', danger: true }))) return;
                const r = await act(`${path}/cancel`, {}, (x) => (x.done ? 'Cancelled' : 'Not cancelled: it was no longer pending'));
                if (r && r.done) back();
              },
            },
          }, 'Cancel message')));
        parts.push(h('div.inline-form', null,
          h('span.muted', null, 'Reschedule'), whenIn.el,
          h('button', {
            testid: 'reschedule',
            on: {
              click: () => {
                let w;
                try { w = whenIn.value(); } catch (e) { toast(e.message, true); return; }
                act(`${path}/reschedule`, w.at_ms !== null ? { at_ms: w.at_ms } : { delay_ms: w.delay_ms },
                  (r) => (r.done ? 'Rescheduled' : 'Not rescheduled: it was no longer pending'));
              },
            },
          }, 'Reschedule')),
        h('div.card-body.muted', { style: 'padding-top:0' }, 'Run now makes it due at once; reschedule moves its due time; cancel removes it.'));
      } else if (msg.state === 'dead') {
        parts.push(h('div.actionbar', null,
          h('button.primary', {
            testid: 'requeue',
            on: {
              click: async () => {
                if (!(await confirmDialog({ title: 'Requeue this dead letter?', body: `${id} becomes ready now, with its retries restored.`, yes: 'Requeue' }))) return;
                const r = await act(`api/queues/${enc(name)}/dead/requeue`, { ids: [id] }, (x) => (x.count ? `Requeued ${id}` : 'Not requeued: it was no longer dead'));
                if (r) back();
              },
            },
          }, 'Requeue'),
          h('button.danger', {
            testid: 'delete',
            on: {
              click: async () => {
                if (!(await confirmDialog({ title: 'Delete this dead letter?', body: `${id} is removed from Redis for good.`, yes: 'Delete', danger: true }))) return;
                const r = await act(`api/queues/${enc(name)}/dead/delete`, { ids: [id] }, (x) => (x.count ? `Deleted ${id}` : 'Not deleted: it was no longer dead'));
                if (r) back();
              },
            },
          }, 'Delete')),
        h('div.card-body.muted', { style: 'padding-top:0' }, 'Requeue makes it ready now, with its retries restored; delete removes it for good.'));
      } else {
        parts.push(h('div.card-body.muted', null,
          msg.state === 'processing'
            ? 'A consumer holds this message; it is acked, retried or buried when the handler returns or the lease runs out.'
            : msg.state === 'retry'
              ? 'Waiting to be delivered again after its backoff.'
              : 'Due: the next free consumer claims it.'));
      }
      replace(actionsCard, parts);
    }

    function renderHead() {
      crumbs({ text: 'Queues', href: '#/' }, { text: name, href: `#/q/${enc(name)}/pending` },
        msg ? { text: msg.state, href: `#/q/${enc(name)}/${msg.state}` } : { text: 'message' }, { text: id });
      replace(head, h('h1.mono', { style: 'font-size:16px' }, id), msg ? stateBadge(msg.state) : null,
        gone ? h('span.badge.badge-muted', null, 'gone') : null);
    }

    return {
      async refresh() {
        if (!session.loaded) await loadSession();
        try {
          msg = await api(`api/queues/${enc(name)}/messages/${enc(id)}`);
          gone = false;
        } catch (e) {
          if (e.status !== 404) throw e;
          if (!msg && !gone) {
            gone = true;
            renderHead();
            replace(root.querySelector('.grid2'), h('div.card.gone', null, h('div.empty', null,
              h('strong', null, 'No such message'),
              'It was handled, cancelled or deleted, or never existed. ',
              h('a', { href: `#/q/${enc(name)}/pending` }, `Open ${name}`))));
            return;
          }
          gone = true;
          msg = null;
          actionsFor = 'gone';
          replace(actionsCard, h('div.card-body.muted', null, 'This message has left the queue: handled, cancelled or deleted.'));
          renderHead();
          return;
        }
        renderHead();
        renderDetails();
        renderActions();
        renderPayload();
      },
      failed(e) { if (!msg) failure(root, e, 'Message'); },
    };
  }

  // ---------- router ----------

  function route() {
    const raw = location.hash.replace(/^#\/?/, '');
    const parts = raw.split('/');
    const app = document.getElementById('app');
    // Dialogs belong to the view they were opened from.
    document.querySelectorAll('.backdrop').forEach((b) => b.remove());
    let view;
    try {
      if (parts[0] === 'q' && parts[1]) {
        const name = decodeURIComponent(parts[1]);
        if (parts[2] === 'm' && parts.length > 3) view = messageView(app, name, decodeURIComponent(parts.slice(3).join('/')));
        else view = queueView(app, name, STATES.includes(parts[2]) ? parts[2] : 'pending');
      } else {
        view = overviewView(app);
      }
    } catch (_) {
      // A malformed %-escape in the hash: show the overview.
      view = overviewView(app);
    }
    window.scrollTo(0, 0);
    poller.start(view);
  }
  window.addEventListener('hashchange', route);
  // index.html adds this script from the head, before the body exists.
  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', route);
  else route();
})();
