// A run's page: what it is, the actions the user may take, its timeline,
// its plan as a per-resource diff, policy and task results, outputs, and its
// logs, live.
import { html } from 'htm/preact';
import { useEffect, useRef, useState } from 'preact/hooks';
import { events, followLog, get, object, post, watchObject } from './api.js';
import { diff, show } from './plan.js';
import { approvers, policyVerdict, trigger, workspaceOf } from './runs.js';
import { Action, Badge, Link, Phase, Refusal, Time, navigate, planSummary, runPath, safeText, useCan, workspacePath } from './ui.js';

const FINAL = ['Succeeded', 'Failed', 'Canceled', 'Discarded'];

export function RunPage({ ns, name }) {
  const [run, setRun] = useState(undefined);
  const [error, setError] = useState(null);
  useEffect(() => {
    setRun(undefined);
    return watchObject('terraformruns', ns, name, setRun, setError, true);
  }, [ns, name]);
  if (run === undefined) return html`<p aria-busy="true">Loading ${ns}/${name}…</p><${Refusal} error=${error} />`;
  if (run === null) return html`<h1>Run ${ns}/${name}</h1><p>There is no such run (or it was deleted).</p><${Refusal} error=${error} />`;
  const ws = workspaceOf(run);
  return html`<article aria-labelledby="run-title">
    <header class="run-header">
      <h1 id="run-title">Run ${name} <${Phase} phase=${run.status?.phase} /></h1>
      <dl class="facts">
        <div><dt>Namespace</dt><dd>${ns}</dd></div>
        <div><dt>Operation</dt><dd>${run.spec.operation || 'Apply'}</dd></div>
        <div><dt>Trigger</dt><dd>${trigger(run)}</dd></div>
        <div><dt>Workspace</dt><dd>${ws ? html`<${Link} href=${workspacePath(ns, ws)}>${ws}</${Link}>` : '-'}</dd></div>
        <div><dt>Created by</dt><dd>${run.spec.creator?.username || '(unknown)'}</dd></div>
        <div><dt>Created</dt><dd><${Time} t=${run.metadata.creationTimestamp} /></dd></div>
        <div><dt>Plan</dt><dd>${planSummary(run)}</dd></div>
        <div><dt>Policy</dt><dd>${policyVerdict(run)}</dd></div>
        <div><dt>Approved by</dt><dd>${approvers(run)}</dd></div>
      </dl>
      ${run.status?.message ? html`<p class="message">${safeText(run.status.message)}</p>` : null}
      ${run.status?.plan?.digest ? html`<p>Plan digest: <code class="digest">${run.status.plan.digest}</code></p>` : null}
      ${run.status?.source?.revision ? html`<p>Source revision: <code>${safeText(run.status.source.revision)}</code></p>` : null}
    </header>
    <${Actions} run=${run} />
    <${PlanView} run=${run} />
    <${PolicyView} run=${run} />
    <${TasksView} run=${run} />
    <${OutputsView} run=${run} />
    <${LogsView} run=${run} />
    <${Timeline} run=${run} />
  </article>`;
}

/** The actions the run allows now and the user may take. */
function Actions({ run }) {
  const { namespace: ns, name } = run.metadata;
  const ws = workspaceOf(run);
  const can = useCan(
    {
      approve: ['create', 'terraformruns', 'approve', ns, name],
      discard: ['create', 'terraformruns', 'discard', ns, name],
      cancel: ['create', 'terraformruns', 'cancel', ns, name],
      override: ['create', 'terraformruns', 'override', ns, name],
      ...(ws ? { rerun: ['create', 'terraformworkspaces', 'rerun', ns, ws] } : {}),
    },
    [ns, name, ws],
  );
  const [answer, setAnswer] = useState('');
  const phase = run.status?.phase || 'Pending';
  const digest = run.status?.plan?.digest || '';
  const waiting = phase === 'AwaitingApproval' && !!digest;
  const held = policyVerdict(run) === 'Held';
  const kind = (k) => ({ apiVersion: 'terrarun.dev/v1alpha1', kind: k });
  // approve, discard and cancel answer with the server's own sentence.
  const short = '?result=short';
  const actions = [];
  if (waiting && !held && can.approve) {
    actions.push(html`<${Action} label="Approve" tone="primary" title=${`Approve the plan of ${ns}/${name} and apply exactly it`} digest=${digest} field="Comment" onAnswer=${setAnswer}
      act=${async (comment) => {
        const r = await post(object('terraformruns', ns, name, 'approve') + short, { ...kind('TerraformRunApproval'), planDigest: digest, comment });
        return r.message;
      }} />`);
  }
  if (waiting && held && can.override) {
    actions.push(html`<${Action} label="Override" tone="warn" title=${`Override the soft-mandatory policy failures of ${ns}/${name}`} digest=${digest} field="Justification" required=${true} onAnswer=${setAnswer}
      act=${async (justification) => {
        const r = await post(object('terraformruns', ns, name, 'override'), { ...kind('TerraformRunOverride'), planDigest: digest, justification });
        return r.status?.message || `Override of plan ${digest} recorded`;
      }} />`);
  }
  if (waiting && can.discard) {
    actions.push(html`<${Action} label="Discard" title=${`Discard the plan of ${ns}/${name}: it will not be applied`} digest=${digest} field="Comment" onAnswer=${setAnswer}
      act=${async (comment) => {
        const r = await post(object('terraformruns', ns, name, 'discard') + short, { ...kind('TerraformRunDiscard'), comment });
        return r.message;
      }} />`);
  }
  if (!FINAL.includes(phase) && can.cancel) {
    actions.push(html`<${Action} label="Cancel" tone="danger" title=${`Cancel run ${ns}/${name}: stop its stage in flight`} digest=${digest} field="Comment" onAnswer=${setAnswer}
      act=${async (comment) => {
        const r = await post(object('terraformruns', ns, name, 'cancel') + short, { ...kind('TerraformRunCancel'), comment });
        return r.message;
      }} />`);
  }
  if (ws && can.rerun) {
    actions.push(html`<${Action} label="Rerun" title=${`Start a new run of workspace ${ns}/${ws} now`} field="Reason" onAnswer=${setAnswer}
      act=${async (reason) => {
        const r = await post(object('terraformworkspaces', ns, ws, 'rerun'), { ...kind('TerraformWorkspaceRerun'), reason });
        setTimeout(() => navigate(runPath(ns, r.metadata.name)), 1500);
        return `Workspace ${ws} started run ${r.metadata.name}`;
      }} />`);
  }
  if (!can.checked) return html`<section class="actions" aria-label="Actions" aria-busy="true">Checking what you may do…</section>`;
  return html`<section class="actions" aria-label="Actions" data-checked="true">
    ${actions.length ? actions : FINAL.includes(phase) ? 'The run has ended.' : 'No action on this run is open to you now (your RBAC roles, or its phase).'}
    <p class="answer" role="status">${safeText(answer)}</p>
  </section>`;
}

/** The plan as a per-resource diff, fetched again when the digest changes. */
function PlanView({ run }) {
  const { namespace: ns, name } = run.metadata;
  const digest = run.status?.plan?.digest || '';
  const [plan, setPlan] = useState(null);
  const [text, setText] = useState(null);
  const [error, setError] = useState(null);
  useEffect(() => {
    setPlan(null);
    setText(null);
    setError(null);
    if (!digest) return;
    get(object('terraformruns', ns, name, 'plan') + '?format=json').then(setPlan, setError);
  }, [ns, name, digest]);
  if (!digest) return html`<section aria-labelledby="plan-title"><h2 id="plan-title">Plan</h2><p>No plan yet.</p></section>`;
  const d = plan && typeof plan === 'object' ? diff(plan) : null;
  return html`<section aria-labelledby="plan-title" class="plan">
    <h2 id="plan-title">Plan <small>${planSummary(run)}</small></h2>
    <${Refusal} error=${error} />
    ${!d && !error ? html`<p aria-busy="true">Loading the plan…</p>` : null}
    ${d && !d.groups.length && !d.outputs.length ? html`<p>No changes: the infrastructure matches the configuration.</p>` : null}
    ${d ? d.groups.map((g) => html`<section class=${'group ' + g.key} aria-label=${g.label}>
      <h3><span class="symbol" aria-hidden="true">${g.symbol}</span> ${g.label} (${g.resources.length})</h3>
      ${g.resources.map((r) => html`<details open class="resource" data-address=${r.address}>
        <summary><code>${r.address}</code>${r.reason ? html` <span class="reason">because ${r.reason}</span>` : null}${r.importing ? html` <${Badge}>import</${Badge}>` : null}</summary>
        ${r.rows.length ? html`<table class="attributes">
          <thead><tr><th scope="col">Attribute</th><th scope="col">Before</th><th scope="col">After</th></tr></thead>
          <tbody>${r.rows.map((a) => html`<tr class=${a.forcesReplacement ? 'forces' : ''}>
            <th scope="row"><code>${a.path}</code>${a.forcesReplacement ? html` <span class="forces-note">forces replacement</span>` : null}</th>
            <td class=${cellClass(a.before)}>${safeText(show(a.before))}</td>
            <td class=${cellClass(a.after)}>${safeText(show(a.after))}</td>
          </tr>`)}</tbody>
        </table>` : html`<p class="empty">No attribute changes.</p>`}
      </details>`)}
    </section>`) : null}
    ${d && d.unchanged ? html`<p class="empty">${d.unchanged} resource${d.unchanged === 1 ? '' : 's'} unchanged.</p>` : null}
    ${d && d.outputs.length ? html`<section aria-label="Output changes"><h3>Output changes (${d.outputs.length})</h3>
      <table class="attributes"><thead><tr><th scope="col">Output</th><th scope="col">Before</th><th scope="col">After</th></tr></thead>
      <tbody>${d.outputs.map((o) => html`<tr><th scope="row"><code>${o.name}</code></th><td class=${cellClass(o.before)}>${safeText(show(o.before))}</td><td class=${cellClass(o.after)}>${safeText(show(o.after))}</td></tr>`)}</tbody></table>
    </section>` : null}
    <details class="plan-text" onToggle=${(e) => e.target.open && text === null && get(object('terraformruns', ns, name, 'plan') + '?format=text').then((t) => setText(String(t)), (err) => setText(err.message))}>
      <summary>The plan as terraform shows it</summary>
      <pre>${text === null ? 'Loading…' : safeText(text)}</pre>
    </details>
  </section>`;
}

function cellClass(leaf) {
  if (!leaf) return 'absent';
  if (leaf.sensitive || leaf.value === '(sensitive value)') return 'sensitive';
  if (leaf.unknown) return 'unknown';
  return '';
}

function PolicyView({ run }) {
  const pol = run.status?.policy;
  if (!pol || !(pol.policies || []).length) return null;
  return html`<section aria-labelledby="policy-title">
    <h2 id="policy-title">Policy <small>${policyVerdict(run)}</small></h2>
    <table>
      <thead><tr><th scope="col">Policy</th><th scope="col">Validation</th><th scope="col">Enforcement</th><th scope="col">Outcome</th><th scope="col">Message</th></tr></thead>
      <tbody>${(pol.results || []).map((r) => html`<tr>
        <td>${r.policy}</td><td>${r.validation}</td><td>${r.enforcement}</td>
        <td><${Badge} tone=${r.outcome === 'Passed' ? 'ok' : 'bad'}>${r.outcome}</${Badge}></td><td>${safeText(r.message)}</td>
      </tr>`)}</tbody>
    </table>
    ${(pol.approvals || []).length ? html`<ul>${pol.approvals.map((a) => html`<li>${a.policy}/${a.rule}: ${a.requiredApprovals} approval(s)${a.groups?.length ? ' from ' + a.groups.join(', ') : ''}${a.message ? ' — ' + safeText(a.message) : ''}</li>`)}</ul>` : null}
    ${(pol.overrides || []).length ? html`<ul>${pol.overrides.map((o) => html`<li>Overridden by ${o.overriddenBy} for <code>${o.planDigest}</code>: ${safeText(o.justification)}</li>`)}</ul>` : null}
  </section>`;
}

const httpURL = (u) => (/^https?:\/\//i.test(u || '') ? u : '');

function TasksView({ run }) {
  const tasks = run.status?.tasks || [];
  if (!tasks.length) return null;
  return html`<section aria-labelledby="tasks-title">
    <h2 id="tasks-title">Run tasks</h2>
    <table>
      <thead><tr><th scope="col">Task</th><th scope="col">Stage</th><th scope="col">Enforcement</th><th scope="col">Status</th><th scope="col">Message</th></tr></thead>
      <tbody>${tasks.map((t) => html`<tr>
        <td>${t.task}</td><td>${t.stage}</td><td>${t.enforcement}</td><td>${t.status}</td>
        <td>${safeText(t.message)}${httpURL(t.url) ? html` <a href=${httpURL(t.url)} rel="noopener noreferrer" target="_blank">details</a>` : null}</td>
      </tr>`)}</tbody>
    </table>
  </section>`;
}

/** Outputs; sensitive ones hidden (the server omits their values). */
export function OutputsView({ run, outputs }) {
  const list = outputs || run?.status?.outputs || [];
  if (!list.length) return null;
  return html`<section aria-labelledby="outputs-title">
    <h2 id="outputs-title">Outputs</h2>
    <table class="outputs">
      <thead><tr><th scope="col">Name</th><th scope="col">Value</th></tr></thead>
      <tbody>${list.map((o) => html`<tr>
        <th scope="row"><code>${o.name}</code></th>
        <td class=${o.sensitive ? 'sensitive' : ''}>${o.sensitive || o.valueOmitted === 'Sensitive' ? '(sensitive, hidden)' : o.valueOmitted === 'TooLarge' ? '(too large to show: kubectl terrarun outputs)' : safeText(JSON.stringify(o.value))}</td>
      </tr>`)}</tbody>
    </table>
  </section>`;
}

/** A stage attempt's log, followed live; the latest attempt unless the user picks one. */
function LogsView({ run }) {
  const { namespace: ns, name } = run.metadata;
  const stages = run.status?.stages || [];
  const latest = stages.length ? `${stages[stages.length - 1].name}/${stages[stages.length - 1].attempt}` : '';
  const [picked, setPicked] = useState('');
  const chosen = picked || latest;
  const [text, setText] = useState('');
  const [state, setState] = useState('');
  const pre = useRef(null);
  useEffect(() => {
    setText('');
    if (!chosen) return;
    const [stage, attempt] = chosen.split('/');
    setState('following');
    return followLog(ns, name, stage, attempt, (t) => setText((s) => s + t), (err) => setState(err ? `stopped: ${err.message}` : 'ended'));
  }, [ns, name, chosen]);
  useEffect(() => {
    const el = pre.current;
    if (el && el.scrollHeight - el.scrollTop - el.clientHeight < 80) el.scrollTop = el.scrollHeight;
  }, [text]);
  return html`<section aria-labelledby="logs-title" class="logs">
    <h2 id="logs-title">Logs</h2>
    ${stages.length ? html`<label>Stage
      <select value=${chosen} onChange=${(e) => setPicked(e.target.value === latest ? '' : e.target.value)}>
        ${stages.map((s) => html`<option value=${`${s.name}/${s.attempt}`}>${s.name}, attempt ${s.attempt}</option>`)}
      </select></label> <span class="log-state" aria-live="polite">${state}</span>` : html`<p>No stage has started.</p>`}
    ${chosen ? html`<pre ref=${pre} class="log" tabindex="0" aria-label="Log of the ${chosen.replace('/', ' stage, attempt ')}">${safeTextKeepLines(text)}</pre>` : null}
  </section>`;
}

const safeTextKeepLines = (t) => t.split('\n').map(safeText).join('\n');

/** Phases, stages, attempts, approvals, overrides, conditions and Events, in time order. */
function Timeline({ run }) {
  const { namespace: ns, name } = run.metadata;
  const [evs, setEvs] = useState([]);
  const rv = run.metadata.resourceVersion;
  useEffect(() => {
    events(ns, 'TerraformRun', name).then((l) => setEvs(l.items || []), () => setEvs([]));
  }, [ns, name, rv]);
  const st = run.status || {};
  const items = [{ t: run.metadata.creationTimestamp, what: `Created by ${run.spec.creator?.username || '(unknown)'}` }];
  for (const s of st.stages || []) {
    if (s.startTime) items.push({ t: s.startTime, what: `${s.name} stage, attempt ${s.attempt}, started` });
    if (s.completionTime) items.push({ t: s.completionTime, what: `${s.name} stage, attempt ${s.attempt}, ended${s.exitCode !== undefined ? ` (exit code ${s.exitCode})` : ''}${s.reason ? ': ' + s.reason : ''}` });
  }
  if (st.plan?.completedAt) items.push({ t: st.plan.completedAt, what: `Plan ${planSummary(run)} (${st.plan.digest})` });
  for (const a of st.approvals?.length ? st.approvals : st.approval ? [st.approval] : []) items.push({ t: a.approvedAt, what: `Approved by ${a.approvedBy} (${a.planDigest})${a.comment ? ': ' + a.comment : ''}` });
  for (const o of st.policy?.overrides || []) items.push({ t: o.overriddenAt, what: `Policy overridden by ${o.overriddenBy}: ${o.justification}` });
  for (const c of st.conditions || []) items.push({ t: c.lastTransitionTime, what: `${c.type}=${c.status} ${c.reason}${c.message ? ': ' + c.message : ''}` });
  for (const e of evs) items.push({ t: e.lastTimestamp || e.eventTime || e.firstTimestamp, what: `${e.type === 'Warning' ? 'Warning ' : ''}${e.reason}: ${e.message}${e.count > 1 ? ` (×${e.count})` : ''}`, warn: e.type === 'Warning' });
  if (st.completionTime) items.push({ t: st.completionTime, what: `Ended ${st.phase}` });
  items.sort((a, b) => Date.parse(a.t || 0) - Date.parse(b.t || 0));
  return html`<section aria-labelledby="timeline-title">
    <h2 id="timeline-title">Timeline</h2>
    <ol class="timeline">${items.map((i) => html`<li class=${i.warn ? 'warn' : ''}><${Time} t=${i.t} /> ${safeText(i.what)}</li>`)}</ol>
  </section>`;
}
