// The overview (#/): one page of the queues, sorted and searched by the server.

import {
  STATES, RATES, LATENCY_HELP, PAGE_SIZES, h, replace, enc, fmtInt, countOf, fmtRate, fmtDur, pausedBadge, api,
  absorbOverview, rateChart, history, poller, crumbs,
} from './lib.js';

// What the server sorts by (GET api/overview?sort=), largest first but for the name.
const SORTS = [['backlog', 'largest backlog'], ['name', 'name'], ...STATES.map((st) => [st, `most ${st}`])];
// The longest queue name: a longer search is refused by the server.
const MAX_SEARCH = 128;
// Typing waits this long for the next key before asking the server.
const SEARCH_DELAY_MS = 250;

// The page asked for; kept while the tab is open, so that coming back
// from a queue shows the same page.
const want = { search: '', sort: 'backlog', limit: 50, offset: 0 };

export function overviewView(root) {
  const expanded = new Map(); // queue name → shard_status (or null while loading)
  let chartQueue = null;
  // Until a queue is picked, the chart follows the busiest one.
  let chartPicked = false;
  let data = null;
  const body = h('tbody');
  const summary = h('span.sub');
  const chartSel = h('select', { 'aria-label': 'Chart queue', on: { change: () => { chartQueue = chartSel.value; chartPicked = true; drawChart(); poller.kick(); } } });
  const chartBox = h('div.card-body');
  // The controls are built once so typing survives refreshes.
  let typing = null;
  const searchIn = h('input', {
    type: 'search', placeholder: 'Queue name starts with…', testid: 'queue-search', 'aria-label': 'Search queues by name',
    maxlength: MAX_SEARCH, value: want.search,
    on: {
      input: () => {
        clearTimeout(typing);
        typing = setTimeout(() => { want.search = searchIn.value; want.offset = 0; poller.kick(); }, SEARCH_DELAY_MS);
      },
    },
  });
  const sortSel = h('select', {
    'aria-label': 'Sort queues', testid: 'queue-sort',
    on: { change: () => { want.sort = sortSel.value; want.offset = 0; poller.kick(); } },
  }, SORTS.map(([v, text]) => h('option', { value: v, selected: v === want.sort }, `by ${text}`)));
  const pager = h('div.pager');
  const section = h('section', { testid: 'overview' },
    h('div.pagehead', null, h('h1', null, 'Queues'), summary),
    h('div.toolbar', null, h('div.search', null, searchIn), sortSel),
    h('div.card', null, h('div.table-wrap', null, h('table', null,
      h('thead', null,
        h('tr', null,
          h('th', { rowspan: 2 }, 'Queue'),
          h('th.group', { colspan: 5 }, 'Messages'),
          h('th.group.gap', { colspan: 2 }, 'Age'),
          h('th.group.gap', { colspan: 4 }, 'Rate per second')),
        h('tr', null,
          STATES.map((st) => h('th.num', null, st)),
          h('th.num.gap', { title: LATENCY_HELP }, 'latency'),
          h('th.num', { title: 'The oldest dead letter' }, 'oldest dead'),
          RATES.map((k, i) => h(i ? 'th.num' : 'th.num.gap', null, k)))),
      body)), pager),
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
      h(x.latency_ms ? 'td.num.gap.overdue' : 'td.num.gap.zero', { testid: 'latency' }, x.latency_ms ? fmtDur(x.latency_ms) : '—'),
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
  function renderPager() {
    const { total, offset, limit } = data;
    const n = data.queues.length;
    const go = (to) => { want.offset = Math.max(0, to); poller.kick(); };
    const sizeSel = h('select', {
      'aria-label': 'Queues per page', testid: 'queue-page-size',
      on: { change: (e) => { want.limit = Number(e.target.value); want.offset = 0; poller.kick(); } },
    }, PAGE_SIZES.map((k) => h('option', { value: k, selected: k === limit }, `${k} / page`)));
    replace(pager,
      h('span', { testid: 'queue-range' }, n ? `${fmtInt(offset + 1)}–${fmtInt(offset + n)} of ${fmtInt(total)}` : `0 of ${fmtInt(total)}`),
      h('div.right', null, sizeSel,
        h('button.small', { testid: 'queue-first', disabled: offset === 0, on: { click: () => go(0) } }, '« First page'),
        h('button.small', { testid: 'queue-prev', disabled: offset === 0, on: { click: () => go(offset - limit) } }, '‹ Previous'),
        h('button.small', { testid: 'queue-next', disabled: offset + n >= total, on: { click: () => go(offset + limit) } }, 'Next ›')));
  }
  function render() {
    const qs = data.queues;
    summary.textContent = data.total
      ? `${countOf(data.total, 'queue')} · ${countOf(data.messages, 'message')}`
      : '';
    if (!qs.length) {
      replace(body, h('tr', null, h('td.empty', { colspan: 12 }, data.search
        ? [h('strong', null, 'No queue matches'), `No queue name starts with “${data.search}”.`]
        : [h('strong', null, 'No queues yet'), 'A queue appears here once a message has been sent to it under this key prefix.'])));
    } else {
      replace(body, qs.map(row));
    }
    renderPager();
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
      const params = new URLSearchParams({ sort: want.sort, limit: want.limit, offset: want.offset });
      if (want.search) params.set('search', want.search);
      const o = await api(`api/overview?${params}`);
      absorbOverview(o);
      // A page past the end (queues went away): the last page instead.
      if (!o.queues.length && o.offset > 0 && o.total > 0) {
        want.offset = Math.floor((o.total - 1) / o.limit) * o.limit;
        poller.kick();
        return;
      }
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
