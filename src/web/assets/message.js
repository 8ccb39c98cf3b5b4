// One message (#/q/<name>/m/<id>): its details, progress, log and result,
// the actions its state allows, its payload; refreshed by the poller. A
// message that is part of a flow links to the flow's view (flow.js).

import {
  session, h, replace, enc, fmtInt, fmtBytes, when, stateBadge, b64bytes, hexBytes, hexDump, jsonNodes,
  prettyJson, api, loadSession, act, toast, confirmDialog, whenInput, crumbs, failure,
} from './lib.js';

export function messageView(root, name, id) {
  let msg = null, gone = false, mode = null, shownKey = '';
  const head = h('div.pagehead');
  const details = h('dl.details');
  const actionsCard = h('div.card');
  const payloadPre = h('pre.payload', { testid: 'payload' });
  const modeSeg = h('div.seg');
  const sizeInfo = h('span.sub');
  const copyBtn = h('button.small', { testid: 'copy', on: { click: copy } }, 'Copy');
  // Progress, log lines and result (docs/results.md): shown when there are any.
  const notesCard = h('div.card', { testid: 'message-notes', hidden: true });
  const payloadCard = h('div.card', null,
    h('div.card-head', null, h('h2', null, 'Payload'), sizeInfo, h('div.right', null, modeSeg, copyBtn)),
    payloadPre);
  const section = h('section', { testid: 'message-view', 'data-id': id },
    head,
    h('div.grid2', null,
      h('div.card', null, details),
      h('div', null, actionsCard)),
    notesCard,
    payloadCard);
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
      row('Group', m.group ? h('a', { href: `#/q/${enc(name)}/groups`, testid: 'message-group' }, m.group) : h('span.faint', null, 'none')),
      row('Headers', Object.keys(m.headers || {}).length
        ? Object.entries(m.headers).map(([k, v]) => h('div.mono', null, `${k}: ${v}`))
        : h('span.faint', null, 'none')),
      row('Last error', m.last_error || h('span.faint', null, '—'), m.last_error ? 'err' : null),
      m.lease_until_ms ? row('Lease until', when(m.lease_until_ms)) : null,
      m.dead_since_ms ? row('Died', when(m.dead_since_ms)) : null,
      row('Expires', m.expires_at_ms ? when(m.expires_at_ms) : h('span.faint', null, 'never')),
      row('Size', fmtBytes(m.payload_len)));
  }

  // The handler's progress (a bar for a number), its last log lines and
  // the result kept under the id; refreshed with the view, so live while
  // the message is processing.
  function renderNotes(m) {
    const log = m.log || [];
    const has = m.progress !== undefined || log.length || m.result_base64 !== undefined;
    notesCard.hidden = !has;
    if (!has) { replace(notesCard); return; }
    const parts = [];
    if (m.progress !== undefined) {
      const n = Number(m.progress);
      parts.push(h('div.card-head', null, h('h2', null, 'Progress')),
        h('div.card-body', { testid: 'message-progress' },
          Number.isFinite(n)
            ? [h('progress', { max: '100', value: String(n), style: 'width:60%;vertical-align:middle' }), ` ${n}%`]
            : h('pre.payload', null, prettyJson(m.progress) || m.progress)));
    }
    if (log.length) {
      parts.push(h('div.card-head', null, h('h2', null, 'Log'), h('span.sub', null, `last ${log.length} lines`)),
        h('pre.payload', { testid: 'message-log' }, log.join('\n')));
    }
    if (m.result_base64 !== undefined) {
      const text = m.result_text;
      parts.push(h('div.card-head', null, h('h2', null, 'Result'), h('span.sub', null, fmtBytes(b64bytes(m.result_base64).length))),
        h('pre.payload', { testid: 'message-result' },
          text === null || text === undefined ? hexDump(b64bytes(m.result_base64)) : prettyJson(text) || text));
    }
    replace(notesCard, parts);
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
    } else if (msg.state === 'processing') {
      const aborted = {
        aborting: 'Aborting: its handler is told; the message ends as aborted',
        cancelled: 'It was waiting again: cancelled',
        already_aborted: 'Already aborted: its handler is winding down',
        not_found: 'Not aborted: it has finished',
      };
      parts.push(h('div.actionbar', null,
        h('button.danger', {
          testid: 'abort',
          on: {
            click: async () => {
              if (!(await confirmDialog({ title: 'Abort this message?', body: `The handler running ${id} is told to stop; whatever it returns, the message ends as aborted and is not delivered again.`, yes: 'Abort message', danger: true }))) return;
              await act(`${path}/abort`, {}, (x) => aborted[x.outcome] || x.outcome);
            },
          },
        }, 'Abort message')),
      h('div.card-body.muted', { style: 'padding-top:0' }, 'A consumer holds this message; it is acked, retried or buried when the handler returns or the lease runs out. Abort tells its handler to stop and ends it as aborted.'));
    } else {
      parts.push(h('div.card-body.muted', null,
        msg.state === 'retry'
          ? 'Waiting to be delivered again after its backoff.'
          : 'Due: the next free consumer claims it.'));
    }
    replace(actionsCard, parts);
  }

  function renderHead() {
    crumbs({ text: 'Queues', href: '#/' }, { text: name, href: `#/q/${enc(name)}/pending` },
      msg ? { text: msg.state, href: `#/q/${enc(name)}/${msg.state}` } : { text: 'message' }, { text: id });
    replace(head, h('h1.mono', { style: 'font-size:16px' }, id), msg ? stateBadge(msg.state) : null,
      gone ? h('span.badge.badge-muted', null, 'gone') : null,
      inFlow ? h('div.actions', null, h('a.btn', { href: `#/q/${enc(name)}/flow/${enc(id)}`, testid: 'flow-link', title: 'The flow this message is part of: its parents and children' }, 'Flow')) : null);
  }

  // Whether it is part of a flow (a parent, or a child its parent still
  // waits for): asked once, for the head's link to the flow's view.
  let inFlow = null;
  async function checkFlow() {
    if (inFlow !== null) return;
    try {
      const t = await api(`api/queues/${enc(name)}/messages/${enc(id)}/flow`);
      inFlow = t.path.length > 0 || t.root.unfinished + t.root.finished > 0;
    } catch (e) {
      if (e.status !== 404) throw e;
      inFlow = false;
    }
  }

  return {
    async refresh() {
      if (!session.loaded) await loadSession();
      try {
        msg = await api(`api/queues/${enc(name)}/messages/${enc(id)}`);
        gone = false;
        if (msg.finished) {
          // Acked: gone from the queue, its result kept.
          const done = msg;
          msg = null;
          actionsFor = 'finished';
          renderHead();
          replace(head, h('h1.mono', { style: 'font-size:16px' }, id),
            h('span.badge.badge-muted', { testid: 'finished' }, 'finished'));
          replace(details, h('dt', null, 'State'), h('dd', null, 'Acked: its handler succeeded; the result is kept for the queue\'s result retention.'));
          // Its payload is gone with it, and nothing is left to act on.
          actionsCard.hidden = payloadCard.hidden = true;
          renderNotes(done);
          return;
        }
      } catch (e) {
        if (e.status !== 404) throw e;
        if (!msg && !gone) {
          gone = true;
          renderHead();
          replace(root.querySelector('.grid2'), h('div.card.gone', null, h('div.empty', null,
            h('strong', null, 'No such message'),
            'It was handled, cancelled, aborted or deleted, or never existed. ',
            h('a', { href: `#/q/${enc(name)}/pending` }, `Open ${name}`))));
          return;
        }
        gone = true;
        msg = null;
        actionsFor = 'gone';
        replace(actionsCard, h('div.card-body.muted', null, 'This message has left the queue: handled, cancelled, aborted or deleted.'));
        // The rows keep what was last seen; the state says it no longer holds.
        const state = details.querySelector('dd');
        if (state) replace(state, h('span.badge.badge-muted', { testid: 'state-gone' }, 'gone'), h('span.muted', null, ' the rows below as last seen'));
        renderHead();
        return;
      }
      actionsCard.hidden = payloadCard.hidden = false;
      await checkFlow();
      renderHead();
      renderDetails();
      renderNotes(msg);
      renderActions();
      renderPayload();
    },
    failed(e) { if (!msg) failure(root, e, 'Message'); },
  };
}
