// A flow's tree (#/q/<name>/flow/<id>, docs/workflows.md): opened from any
// of its messages, the tree from its root, each message with its state (or,
// once no longer stored, how it ended) and a link to its own view. A node
// lists at most 50 children; "Show more" loads the next page, and the pages
// loaded so are kept across refreshes. Queue names and ids are producers'
// text: they only ever become text nodes, and URLs through enc().

import { h, replace, enc, fmtInt, stateBadge, api, loadSession, session, crumbs, failure, toast } from './lib.js';

const GONE_HELP = {
  acked: 'Acked: its handler succeeded, as its parent recorded.',
  dead: 'Became a dead letter, as its parent recorded.',
  cancelled: 'Cancelled or deleted, as its parent recorded.',
  gone: 'No longer stored, and no parent keeps how it ended.',
};

const keyOf = (n) => `${n.queue}\u0000${n.id}`;

// A page may repeat a child of an earlier one (a child that finished
// between them): each once.
function once(nodes) {
  const seen = new Set();
  return nodes.filter((n) => !seen.has(keyOf(n)) && seen.add(keyOf(n)));
}

function badge(n) {
  if (n.state) return stateBadge(n.state);
  const word = n.outcome || 'gone';
  return h(`span.state.s-${word}`, { title: GONE_HELP[word] }, word);
}

export function flowView(root, name, id) {
  let tree = null;
  // Node -> {children, next}: the pages "Show more" loaded.
  const loaded = new Map();
  const head = h('div.pagehead');
  const info = h('span.sub', { testid: 'flow-info' });
  const body = h('div.card-body');
  replace(root, h('section', { testid: 'flow-view', 'data-id': id },
    head,
    h('div.card', null, h('div.card-head', null, h('h2', null, 'Flow'), info), body)));

  async function more(n, button) {
    const had = loaded.get(keyOf(n));
    button.disabled = true;
    try {
      const page = await api(`api/queues/${enc(n.queue)}/messages/${enc(n.id)}/flow/children?cursor=${enc(had ? had.next : n.next)}`);
      loaded.set(keyOf(n), { children: (had ? had.children : []).concat(page.children), next: page.next });
      render();
    } catch (e) {
      toast(e.message, true);
      button.disabled = false;
    }
  }

  function nodeEl(n) {
    const focus = n.queue === tree.queue && n.id === tree.id;
    const had = loaded.get(keyOf(n));
    const kids = once(n.children.concat(had ? had.children : []));
    const next = had ? had.next : n.next;
    const total = n.unfinished + n.finished;
    const left = Math.max(0, total - kids.length);
    const row = h(focus ? 'div.flow-node.focus' : 'div.flow-node', {
      testid: 'flow-node', 'data-queue': n.queue, 'data-id': n.id, 'data-state': n.state || n.outcome || 'gone',
    },
    badge(n),
    h('a.mono', { href: `#/q/${enc(n.queue)}/m/${enc(n.id)}`, title: `Open ${n.id} of queue ${n.queue}` }, n.id),
    h('span.faint', null, n.queue),
    total ? h('span.sub', null, `${fmtInt(n.finished)} of ${fmtInt(total)} children finished`) : null,
    n.has_result ? h('span.badge.badge-ok', { title: 'Its parent keeps a copy of its result' }, 'result') : null,
    focus ? h('span.badge.badge-muted', null, 'this message') : null);
    const items = kids.map((c) => h('li', null, nodeEl(c)));
    if (left > 0 && next) {
      items.push(h('li', null, h('button.small', {
        testid: 'flow-more', on: { click: (e) => more(n, e.currentTarget) },
      }, `Show more (${fmtInt(left)} not shown)`)));
    }
    return [row, items.length ? h('ul.flow-tree', null, items) : null];
  }

  function render() {
    crumbs({ text: 'Queues', href: '#/' }, { text: name, href: `#/q/${enc(name)}/pending` },
      { text: id, href: `#/q/${enc(name)}/m/${enc(id)}` }, { text: 'flow' });
    const top = tree.path.length ? tree.path[tree.path.length - 1] : null;
    replace(head, h('h1', { style: 'font-size:16px' }, 'Flow of ', h('span.mono', null, id)),
      h('div.actions', null, h('a.btn', { href: `#/q/${enc(name)}/m/${enc(id)}`, testid: 'flow-back' }, 'Message')));
    const notes = [top
      ? `Its root is ${top.id} of ${top.queue}, ${tree.path.length} ${tree.path.length === 1 ? 'level' : 'levels'} up.`
      : 'It is the root.'];
    if (tree.parents.length > 1) notes.push(`It is also a child of ${tree.parents.slice(1).map((p) => `${p.id} (${p.queue})`).join(', ')}.`);
    if (tree.truncated) notes.push('More messages than one read shows: the deepest are listed without their children.');
    info.textContent = notes.join(' ');
    replace(body, h('ul.flow-tree.flow-root', null, h('li', null, nodeEl(tree.root))));
  }

  return {
    async refresh() {
      if (!session.loaded) await loadSession();
      tree = await api(`api/queues/${enc(name)}/messages/${enc(id)}/flow`);
      render();
    },
    failed(e) { if (!tree) failure(root, e, 'Flow'); },
  };
}
