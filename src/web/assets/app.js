// delayqueue dashboard: vanilla JS, no build step. Hash routes:
//   #/                 overview
//   #/consumers        the live consumers
//   #/q/<name>/<state> a queue's tab (pending|ready|processing|retry|dead)
//   #/q/<name>/groups  a queue's groups
//   #/q/<name>/m/<id>  one message
//   #/q/<name>/flow/<id> the flow a message is part of
// Every request goes to a URL relative to the mount point, so the page works
// under any prefix (/, /admin/queues, /admin/queues/).
// This module holds the queue view and the router; lib.js what the views
// share; overview.js the overview; consumers.js the live consumers; groups.js the Groups tab; message.js one
// message; flow.js a flow's tree.

import {
  STATES, LATENCY_HELP, PAGE_SIZES, session, h, replace, enc, fmtInt, countOf, fmtRate, fmtDur, fmtSpec,
  when, pausedBadge, previewOf, api, loadSession, act, toast, confirmDialog, sendDialog, rateChart,
  history, poller, crumbs, failure,
} from './lib.js';
import { overviewView } from './overview.js';
import { groupsPanel } from './groups.js';
import { messageView } from './message.js';
import { flowView } from './flow.js';
import { consumersView } from './consumers.js';

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

// `state` is a message state or 'groups' (the Groups tab).
function queueView(root, name, state) {
  const view = { order: 'asc', limit: 50, cursors: [null], next: null, search: null, selected: new Set(), info: null, page: null };
  const head = h('div.pagehead');
  const stats = h('div.stats');
  const chartBox = h('div.card-body');
  const tabs = h('nav.tabs');
  const toolbar = h('div.toolbar');
  const tableBox = h('div.card');
  const groups = state === 'groups' ? groupsPanel(name, tableBox) : null;
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
    const stat = (k, v, small, attrs) => h('div.stat', attrs || null, h('div.k', null, k), h('div.v', null, v, small ? h('small', null, small) : null));
    replace(stats,
      stat('Sent', fmtRate(q.rates.sent), ' /s'),
      stat('Acked', fmtRate(q.rates.acked), ' /s'),
      stat('Failed', fmtRate(q.rates.failed), ' /s'),
      stat('Latency', q.latency_ms ? h('span.overdue', null, fmtDur(q.latency_ms)) : h('span.faint', null, '—'), null, { title: LATENCY_HELP, testid: 'latency' }),
      stat('Next due', q.next_due_ms !== null && q.next_due_ms !== undefined ? `in ${fmtDur(q.next_due_ms)}` : h('span.faint', null, '—')),
      stat('Oldest dead', q.oldest_dead_ms ? fmtDur(q.oldest_dead_ms) : h('span.faint', null, '—')),
      stat('Total sent', fmtInt(t.sent)),
      stat('Total acked', fmtInt(t.acked)),
      stat('Dead / expired', `${fmtInt(t.dead)} / ${fmtInt(t.expired)}`));
    replace(tabs, STATES.map((st) => {
      const n = q.counts[st] || 0;
      return h(`a.tab-${st}${st === state ? '.on' : ''}`, { href: `#/q/${enc(name)}/${st}`, testid: `tab-${st}`, title: STATE_HELP[st] },
        st, h(n ? 'span.n.nz' : 'span.n', null, fmtInt(n)));
    }), h(`a.tab-groups${groups ? '.on' : ''}`, { href: `#/q/${enc(name)}/groups`, testid: 'tab-groups', title: 'Per-group counts, limits and pause' }, 'groups'));
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
      const list = groups ? groups.refresh() : view.search ? null
        : api(`api/queues/${enc(name)}/messages?state=${state}&limit=${view.limit}&order=${view.order}${cursor ? `&cursor=${enc(cursor)}` : ''}`);
      const [info, page, scheds] = await Promise.all([api(`api/queues/${enc(name)}`), list, api(`api/queues/${enc(name)}/schedules`)]);
      view.info = info;
      if (page && !groups) view.page = page;
      renderHead();
      if (!groups) renderTable();
      renderSchedules(scheds.items);
      replace(chartBox, rateChart(await history(name), chartBox.clientWidth - 28));
    },
    failed(e) { if (!view.info) failure(root, e, 'Queue'); },
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
    if (parts[0] === 'consumers') {
      view = consumersView(app);
    } else if (parts[0] === 'q' && parts[1]) {
      const name = decodeURIComponent(parts[1]);
      const rest = () => decodeURIComponent(parts.slice(3).join('/'));
      if (parts[2] === 'm' && parts.length > 3) view = messageView(app, name, rest());
      else if (parts[2] === 'flow' && parts.length > 3) view = flowView(app, name, rest());
      else view = queueView(app, name, STATES.includes(parts[2]) || parts[2] === 'groups' ? parts[2] : 'pending');
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
