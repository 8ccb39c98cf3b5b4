// The live consumers (#/consumers, docs/operations.md "Live consumers"):
// each consumer process with its host, pid, version, queues and weights,
// handler slots, uptime and last heartbeat, and the messages its handlers
// run now. Entries another version or another writer left are listed
// apart with the reason. Every field is another process's text: it only
// ever becomes text nodes, and URLs through enc().

import { h, replace, enc, fmtInt, fmtDur, countOf, when, api, crumbs, serverNow } from './lib.js';

function queuesOf(c) {
  const names = c.queues.map((q) => [
    h('a', { href: `#/q/${enc(q.name)}/processing` }, q.name),
    q.weight !== 1 ? h('span.faint', null, ` ×${q.weight}`) : null,
    q.shards > 1 ? h('span.faint', null, ` (${q.shards} shards)`) : null,
  ]);
  const more = c.queues_total > c.queues.length ? h('span.faint', null, `+${fmtInt(c.queues_total - c.queues.length)} more`) : null;
  return [names.map((n, i) => [i ? ', ' : null, n]), more ? [' ', more] : null, c.strict ? h('span.badge.badge-muted', null, 'strict') : null];
}

function runningOf(c) {
  if (!c.running_total) return h('span.faint', null, 'idle');
  const rows = c.running.map((m) => h('tr', { testid: 'running-row', 'data-id': m.id },
    h('td', null, h('a', { href: `#/q/${enc(m.queue)}/m/${enc(m.id)}` }, m.id)),
    h('td', null, m.queue),
    h('td.num', null, fmtInt(m.attempt)),
    h('td', null, when(m.since_ms))));
  const more = c.running_total - c.running.length;
  return [
    h('table.inner', null,
      h('thead', null, h('tr', null, h('th', null, 'running'), h('th', null, 'queue'), h('th.num', null, 'attempt'), h('th', null, 'since'))),
      h('tbody', null, rows)),
    more > 0 ? h('p.faint', null, `and ${fmtInt(more)} more`) : null,
  ];
}

function card(c) {
  const fact = (k, v, testid) => h('div.stat', testid ? { testid } : null, h('div.k', null, k), h('div.v', null, v));
  return h('div.card', { testid: 'consumer', 'data-id': c.id },
    h('div.card-head', null, h('h2', null, `${c.host} · pid ${c.pid}`), h('span.sub.muted', null, c.id)),
    h('div.stats', null,
      fact('Version', c.version),
      fact('Queues', queuesOf(c)),
      fact('Slots', fmtInt(c.concurrency)),
      fact('Running', fmtInt(c.running_total), 'consumer-running'),
      fact('Up', fmtDur(serverNow() - c.started_ms)),
      h('div.stat', { title: `Its entry lives ${fmtDur(c.ttl_ms)} without another heartbeat` },
        h('div.k', null, 'Heartbeat'), h('div.v', null, when(c.heartbeat_ms)))),
    h('div.card-body', null, runningOf(c)));
}

export function consumersView(root) {
  const head = h('div.pagehead', null, h('h1', null, 'Consumers'));
  const sub = h('span.sub', { testid: 'consumers-count' });
  head.append(sub);
  const list = h('div.consumer-list', { testid: 'consumers' });
  const skipped = h('div');
  replace(root, h('section', { testid: 'consumers-view' }, head, list, skipped));
  crumbs({ text: 'Queues', href: '#/' }, { text: 'Consumers' });
  return {
    async refresh() {
      const data = await api('api/consumers');
      sub.textContent = countOf(data.consumers.length, 'live consumer')
        + (data.skipped.length ? `, ${countOf(data.skipped.length, 'entry', 'entries')} not read` : '');
      replace(list, data.consumers.length
        ? data.consumers.map(card)
        : h('div.card', null, h('div.empty', null, h('strong', null, 'No live consumers'),
          'A consumer appears here within one heartbeat of its start, and leaves at once when it shuts down, or one TTL after its last heartbeat when killed.')));
      replace(skipped, data.skipped.length
        ? h('div.card', { testid: 'skipped' }, h('div.card-head', null, h('h2', null, 'Entries not read')),
          h('table', null, h('tbody', null, data.skipped.map((s) => h('tr', { testid: 'skipped-row' }, h('td', null, s.id), h('td', null, s.reason))))))
        : null);
    },
    failed(e) { replace(list, h('div.card', null, h('div.empty', null, h('strong', null, 'Consumers unavailable'), e.message))); },
  };
}
