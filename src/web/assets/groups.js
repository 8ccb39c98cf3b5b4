// The Groups tab of a queue (#/q/<name>/groups): one page of its groups
// (docs/groups.md) with their counts, limits and pause, Pause/Resume and
// Limits for each, and a search by exact name. Group names are chosen by
// producers: they only ever become text nodes (h() never parses HTML), in
// cells and in URLs through enc().

import { PAGE_SIZES, session, h, replace, enc, fmtInt, fmtDur, when, api, act, poller, modal, toast } from './lib.js';

const HELP = 'Due messages of different groups are claimed in turn; each group within its own concurrency and rate.';

// A group's limit: its own, else the queue's default (marked), else none.
function limitCell(own, dflt, fmt, testid) {
  if (own !== null && own !== undefined) return h('td.num', { testid }, fmt(own));
  if (dflt !== null && dflt !== undefined) return h('td.num', { testid, title: 'The default of every group without its own' }, fmt(dflt), h('span.faint', null, ' default'));
  return h('td.num', { testid, title: 'No default: no limit' }, 'none', h('span.faint', null, ' default'));
}
const fmtRateLimit = (r) => `${fmtInt(r.limit)} / ${fmtDur(r.per_ms)}`;

// A whole number ≥ min from an input; '' is null (the queue's default).
function whole(input, what, min) {
  const v = input.value.trim();
  if (v === '') return null;
  const n = Number(v);
  if (!Number.isInteger(n) || n < min) throw new Error(`${what} must be a whole number ≥ ${min}, or empty for the default`);
  return n;
}

// The "Limits" dialog of group `g`: its own concurrency and rate; an empty
// field drops the group's own, so the queue's default applies.
function limitsDialog(name, g) {
  let back = null;
  const close = () => back.remove();
  const conc = h('input', { type: 'number', min: '1', step: '1', value: g.concurrency ?? '', placeholder: 'queue default', 'aria-label': 'Concurrency', testid: 'limits-concurrency' });
  const rate = h('input', { type: 'number', min: '1', step: '1', value: g.rate ? g.rate.limit : '', placeholder: 'queue default', 'aria-label': 'Rate: starts', testid: 'limits-rate' });
  const per = h('input', { type: 'number', min: '1', step: '1', value: g.rate ? g.rate.per_ms : 1000, 'aria-label': 'Rate: window in ms', testid: 'limits-per' });
  const submit = h('button.primary', { type: 'submit', testid: 'limits-submit' }, 'Save limits');
  const form = h('form', {
    on: {
      submit: async (e) => {
        e.preventDefault();
        let body;
        try {
          const n = whole(rate, 'the rate', 1);
          body = { concurrency: whole(conc, 'the concurrency', 1), rate: n === null ? null : { limit: n, per_ms: whole(per, 'the window', 1) ?? 1000 } };
        } catch (err) { toast(err.message, true); return; }
        submit.disabled = true;
        const res = await act(`api/queues/${enc(name)}/groups/${enc(g.name)}/limits`, body, `Set the limits of group ${g.name}`);
        submit.disabled = false;
        if (res) close();
      },
    },
  },
  h('h2', null, `Limits of group ${g.name}`),
  h('div.form', null,
    h('label.field', null, h('span', null, 'Concurrency'), conc, h('span.hint', null, 'Most of its messages processing at once (1: ordered). Empty: the queue\'s default.')),
    h('div.row', null,
      h('label.field', null, h('span', null, 'Rate: starts'), rate),
      h('label.field', null, h('span', null, 'per window (ms)'), per)),
    h('span.hint', null, 'Most starts in any window, by Redis\'s clock. Empty: the queue\'s default.')),
  h('div.foot', null, h('button', { type: 'button', on: { click: close } }, 'Cancel'), submit));
  back = modal(form, { testid: 'limits-form', onCancel: close });
  conc.focus();
}

// The tab's table and pager in `box`, refreshed by the queue view's poll.
export function groupsPanel(name, box) {
  // search: an exact group name shown alone instead of the page.
  const view = { offset: 0, limit: 50, page: null, search: null };
  box.dataset.testid = 'groups';
  // The search is built once so typing survives refreshes.
  const searchIn = h('input', {
    type: 'search', placeholder: 'Group name (exact)', testid: 'groups-search', 'aria-label': 'Search groups by name',
    on: { keydown: (e) => { if (e.key === 'Enter') search(); } },
  });
  const sub = h('span.sub.muted', { title: HELP, testid: 'groups-sub' });
  const head = h('div.card-head', null, h('h2', null, 'Groups'), sub,
    h('div.right.search', null, searchIn,
      h('button.small', { testid: 'groups-search-go', on: { click: () => search() } }, 'Find')));
  const content = h('div');
  replace(box, head, content);
  function search() { view.search = searchIn.value.trim() || null; poller.kick(); }

  function render() {
    const p = view.page;
    const ro = session.readOnly;
    const rows = p.items.map((g) => {
      const path = `api/queues/${enc(name)}/groups/${enc(g.name)}`;
      return h('tr', { testid: 'group-row', 'data-group': g.name },
        h('td.name', null, h('strong', null, g.name),
          g.paused ? h('span.badge.badge-paused', { testid: 'group-paused', title: 'Its messages wait until resumed; the other groups go on' }, 'paused') : null),
        h(g.ready ? 'td.num' : 'td.num.zero', { testid: 'group-ready' }, fmtInt(g.ready)),
        h(g.processing ? 'td.num' : 'td.num.zero', { testid: 'group-processing' }, fmtInt(g.processing)),
        limitCell(g.concurrency, p.default_concurrency, fmtInt, 'group-concurrency'),
        limitCell(g.rate, p.default_rate, fmtRateLimit, 'group-rate'),
        h('td.when', null, when(g.waiting_until_ms)),
        ro ? null : h('td.actions', null, g.paused
          ? h('button.small.primary', { testid: 'group-resume', on: { click: () => act(`${path}/resume`, {}, `Resumed group ${g.name}`) } }, 'Resume')
          : h('button.small', { testid: 'group-pause', title: 'Its messages wait; what is processing finishes', on: { click: () => act(`${path}/pause`, {}, `Paused group ${g.name}`) } }, 'Pause'),
          ' ',
          h('button.small', { testid: 'group-limits', title: 'Set or drop its own concurrency and rate', on: { click: () => limitsDialog(name, g) } }, 'Limits')));
    });
    if (!rows.length) {
      rows.push(h('tr', null, h('td.empty', { colspan: ro ? 6 : 7 },
        h('strong', null, p.error || (view.search ? `No group named ${view.search}` : (p.total ? 'No groups on this page' : 'No groups'))),
        'A group is listed while it has due or processing messages, a wait or a setting of its own. ', HELP)));
    }
    const sizeSel = h('select', {
      'aria-label': 'Page size',
      on: { change: (e) => { view.limit = Number(e.target.value); view.offset = 0; poller.kick(); } },
    }, PAGE_SIZES.map((n) => h('option', { value: n, selected: n === view.limit }, `${n} / page`)));
    const go = (offset) => { view.offset = Math.max(0, offset); poller.kick(); };
    const n = p.items.length;
    sub.textContent = view.search ? `the group named ${view.search} · Find with an empty box for every group` : `${fmtInt(p.total)} known · in name order`;
    replace(content,
      h('div.table-wrap', null, h('table', null,
        h('thead', null, h('tr', null,
          h('th', null, 'group'), h('th.num', null, 'ready'), h('th.num', null, 'processing'),
          h('th.num', { title: 'Most processing at once' }, 'concurrency'), h('th.num', { title: 'Most starts per window' }, 'rate'),
          h('th', { title: 'An ordered group waiting for a retry, or a group at its rate' }, 'waiting until'), ro ? null : h('th', null, ''))),
        h('tbody', null, rows))),
      view.search ? null : h('div.pager', null,
        h('span', { testid: 'groups-range' }, n ? `${fmtInt(view.offset + 1)}–${fmtInt(view.offset + n)} of ${fmtInt(p.total)}` : `0 of ${fmtInt(p.total)}`),
        h('div.right', null, sizeSel,
          h('button.small', { testid: 'groups-prev', disabled: view.offset === 0, on: { click: () => go(view.offset - view.limit) } }, '‹ Previous'),
          h('button.small', { testid: 'groups-next', disabled: view.offset + n >= p.total, on: { click: () => go(view.offset + view.limit) } }, 'Next ›'))));
  }

  // One group by name as a page of one row (none when unknown).
  async function oneGroup(group) {
    try {
      const g = await api(`api/queues/${enc(name)}/groups/${enc(group)}`);
      return { total: 1, items: [g], default_concurrency: g.default_concurrency, default_rate: g.default_rate };
    } catch (e) {
      if (e.status !== 404 && e.status !== 400) throw e;
      // Unknown (404) or not a valid name (400): no row, and why.
      return { total: 0, items: [], default_concurrency: null, default_rate: null, error: e.status === 400 ? e.message : null };
    }
  }

  return {
    async refresh() {
      view.page = view.search ? await oneGroup(view.search) : await api(`api/queues/${enc(name)}/groups?offset=${view.offset}&limit=${view.limit}`);
      render();
    },
  };
}
