// Shared pieces of the pages: links, badges, ages, the confirmation dialog
// of an action.
import { html } from 'htm/preact';
import { useEffect, useRef, useState } from 'preact/hooks';
import { canI } from './api.js';

/** Navigates within the app (history API). */
export function navigate(to) {
  history.pushState(null, '', to);
  dispatchEvent(new PopStateEvent('popstate'));
}

/** A link within the app. */
export function Link({ href, children, ...rest }) {
  const click = (e) => {
    if (e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
    e.preventDefault();
    navigate(href);
  };
  return html`<a href=${href} onClick=${click} ...${rest}>${children}</a>`;
}

export const runPath = (ns, name) => `/namespaces/${ns}/terraformruns/${name}`;
export const workspacePath = (ns, name) => `/namespaces/${ns}/terraformworkspaces/${name}`;

const phaseTone = {
  Succeeded: 'ok',
  Failed: 'bad',
  Canceled: 'muted',
  Discarded: 'muted',
  AwaitingApproval: 'wait',
  Applying: 'busy',
  Planning: 'busy',
  Queued: 'muted',
  Pending: 'muted',
};

export function Phase({ phase }) {
  const p = phase || 'Pending';
  return html`<span class=${'badge ' + (phaseTone[p] || 'muted')}>${p}</span>`;
}

export function Badge({ tone, children }) {
  return html`<span class=${'badge ' + (tone || 'muted')}>${children}</span>`;
}

/** How long ago t was, as kubectl says it (5m, 2h, 3d). */
export function age(t, now = Date.now()) {
  if (!t) return '-';
  const s = Math.max(0, Math.floor((now - Date.parse(t)) / 1000));
  if (s < 120) return `${s}s`;
  if (s < 7200) return `${Math.floor(s / 60)}m`;
  if (s < 172800) return `${Math.floor(s / 3600)}h`;
  return `${Math.floor(s / 86400)}d`;
}

export function Time({ t }) {
  if (!t) return html`<span>-</span>`;
  return html`<time datetime=${t} title=${t}>${age(t)} ago</time>`;
}

/** Re-renders every few seconds, so that ages move. */
export function useTick(ms = 5000) {
  const [, set] = useState(0);
  useEffect(() => {
    const id = setInterval(() => set((n) => n + 1), ms);
    return () => clearInterval(id);
  }, [ms]);
}

/** The run's plan summary: +add ~change -destroy, or -. */
export function planSummary(run) {
  const p = run.status?.plan;
  if (!p || !p.digest) return '-';
  return `+${p.add} ~${p.change} -${p.destroy}`;
}

export const shortDigest = (d) => (d ? d.replace(/^sha256:/, '').slice(0, 12) : '');

/** Control characters of what a run wrote, made visible instead of obeyed. */
export function safeText(s) {
  return String(s ?? '')
    .replace(/\x1b\[[0-9;?]*[ -/]*[@-~]/g, '') // SGR colours and other CSI sequences
    .replace(/[\x00-\x08\x0b-\x1f\x7f\u202a-\u202e\u2066-\u2069]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

/**
 * Whether the user may do each of checks ({key: [verb, resource,
 * subresource, ns, name]}), asked again when deps change; checked is true
 * once the server answered them all.
 */
export function useCan(checks, deps) {
  const [can, setCan] = useState({ checked: false });
  useEffect(() => {
    let live = true;
    Promise.all(
      Object.entries(checks).map(async ([k, args]) => {
        try {
          return [k, await canI(...args)];
        } catch {
          return [k, false];
        }
      }),
    ).then((pairs) => live && setCan({ ...Object.fromEntries(pairs), checked: true }));
    return () => {
      live = false;
    };
  }, deps);
  return can;
}

/**
 * An action's button and its confirmation dialog: the dialog says what the
 * action does and to which plan digest, takes the text field the action
 * records, and on confirm calls act(text). A refusal shows in the dialog,
 * verbatim; the answer to a success goes to onAnswer, which keeps it shown
 * when the action is no longer open.
 */
export function Action({ label, title, digest, field, required, act, tone, onAnswer }) {
  const dialog = useRef(null);
  const [text, setText] = useState('');
  const [busy, setBusy] = useState(false);
  const [answer, setAnswer] = useState(null);
  const open = () => {
    setText('');
    setAnswer(null);
    dialog.current.showModal();
  };
  const confirm = async (e) => {
    e.preventDefault();
    setBusy(true);
    try {
      const msg = await act(text);
      setAnswer(null);
      dialog.current.close();
      onAnswer(msg);
    } catch (err) {
      setAnswer({ ok: false, msg: err.message });
    } finally {
      setBusy(false);
    }
  };
  const id = `action-${label.toLowerCase()}`;
  return html`<span class="action">
    <button type="button" class=${tone || ''} data-action=${label.toLowerCase()} onClick=${open}>${label}</button>
    <dialog ref=${dialog} aria-labelledby=${id + '-title'}>
      <form method="dialog" onSubmit=${confirm}>
        <h2 id=${id + '-title'}>${title}</h2>
        ${digest ? html`<p>Plan digest: <code class="digest">${digest}</code></p>` : null}
        ${field
          ? html`<label for=${id + '-text'}>${field}${required ? ' (required)' : ''}</label>
              <textarea id=${id + '-text'} rows="3" value=${text} required=${required} onInput=${(e) => setText(e.target.value)}></textarea>`
          : null}
        ${answer && !answer.ok ? html`<p class="refusal" role="alert">${safeText(answer.msg)}</p>` : null}
        <div class="buttons">
          <button type="button" onClick=${() => dialog.current.close()}>Back</button>
          <button type="submit" class=${tone || 'primary'} disabled=${busy}>${label} ${digest ? shortDigest(digest) : ''}</button>
        </div>
      </form>
    </dialog>
  </span>`;
}

/** Whether s may name a namespace (a DNS label), so that it is safe in a path. */
export const namespaceName = (s) => /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/.test(s);

/** An error of the server, verbatim but for its control characters (safeText). */
export function Refusal({ error }) {
  if (!error) return null;
  return html`<p class="refusal" role="alert">${safeText(error.message)}</p>`;
}
