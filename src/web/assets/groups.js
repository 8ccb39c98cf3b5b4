// The Groups tab of a queue (#/q/<name>/groups): one page of its groups
// (docs/groups.md) with their counts, limits and pause, and Pause/Resume
// for each. Group names are chosen by producers: they only ever become
// text nodes (h() never parses HTML), in cells and in URLs through enc().

import { PAGE_SIZES, session, h, replace, enc, fmtInt, fmtDur, when, api, act, poller } from './lib.js';

const HELP = 'Due messages of different groups are claimed in turn; each group within its own concurrency and rate.';

// A group's limit: its own, else the queue's default (marked), else none.
function limitCell(own, dflt, fmt, testid) {
  if (own !== null && own !== undefined) return h('td.num', { testid }, fmt(own));
  if (dflt !== null && dflt !== undefined) return h('td.num', { testid, title: 'The default of every group without its own' }, fmt(dflt), h('span.faint', null, ' default'));
  return h('td.num', { testid }, h('span.faint', null, '—'));
}
const fmtRateLimit = (r) => `${fmtInt(r.limit)} / ${fmtDur(r.per_ms)}`;

// The tab's table and pager in `box`, refreshed by the queue view's poll.
export function groupsPanel(name, box) {
  const view = { offset: 0, limit: 50, page: null };
  box.dataset.testid = 'groups';

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
          : h('button.small', { testid: 'group-pause', title: 'Its messages wait; what is processing finishes', on: { click: () => act(`${path}/pause`, {}, `Paused group ${g.name}`) } }, 'Pause')));
    });
    if (!rows.length) {
      rows.push(h('tr', null, h('td.empty', { colspan: ro ? 6 : 7 },
        h('strong', null, p.total ? 'No groups on this page' : 'No groups'),
        'A group is listed while it has due or processing messages, a wait or a setting of its own. ', HELP)));
    }
    const sizeSel = h('select', {
      'aria-label': 'Page size',
      on: { change: (e) => { view.limit = Number(e.target.value); view.offset = 0; poller.kick(); } },
    }, PAGE_SIZES.map((n) => h('option', { value: n, selected: n === view.limit }, `${n} / page`)));
    const go = (offset) => { view.offset = Math.max(0, offset); poller.kick(); };
    const n = p.items.length;
    replace(box,
      h('div.card-head', null, h('h2', null, 'Groups'), h('span.sub.muted', { title: HELP }, `${fmtInt(p.total)} known · in name order`)),
      h('div.table-wrap', null, h('table', null,
        h('thead', null, h('tr', null,
          h('th', null, 'group'), h('th.num', null, 'ready'), h('th.num', null, 'processing'),
          h('th.num', { title: 'Most processing at once' }, 'concurrency'), h('th.num', { title: 'Most starts per window' }, 'rate'),
          h('th', { title: 'An ordered group waiting for a retry, or a group at its rate' }, 'waiting until'), ro ? null : h('th', null, ''))),
        h('tbody', null, rows))),
      h('div.pager', null,
        h('span', { testid: 'groups-range' }, n ? `${fmtInt(view.offset + 1)}–${fmtInt(view.offset + n)} of ${fmtInt(p.total)}` : `0 of ${fmtInt(p.total)}`),
        h('div.right', null, sizeSel,
          h('button.small', { testid: 'groups-prev', disabled: view.offset === 0, on: { click: () => go(view.offset - view.limit) } }, '‹ Previous'),
          h('button.small', { testid: 'groups-next', disabled: view.offset + n >= p.total, on: { click: () => go(view.offset + view.limit) } }, 'Next ›'))));
  }

  return {
    async refresh() {
      view.page = await api(`api/queues/${enc(name)}/groups?offset=${view.offset}&limit=${view.limit}`);
      render();
    },
  };
}
