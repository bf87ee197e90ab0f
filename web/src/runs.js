// The runs list: every run the user may list, live (list then watch), with
// filters by namespace, workspace and phase kept in the address.
import { html } from 'htm/preact';
import { useEffect, useState } from 'preact/hooks';
import { collection, watchList } from './api.js';
import { Link, Phase, Refusal, Time, namespaceName, navigate, planSummary, runPath, useTick, workspacePath } from './ui.js';

export const PHASES = ['Pending', 'Queued', 'Planning', 'AwaitingApproval', 'Applying', 'Succeeded', 'Failed', 'Canceled', 'Discarded'];

/** Why a run exists: its workspace's trigger, or Direct. */
export const trigger = (run) => run.metadata.annotations?.['terrarun.dev/trigger'] || 'Direct';
export const workspaceOf = (run) => run.metadata.labels?.['terrarun.dev/workspace'] || '';

/** The policy verdict: the server's (its table's Policy column). */
export const policyVerdict = (run) => run.columns?.Policy || '-';

export function approvers(run) {
  const list = run.status?.approvals?.length ? run.status.approvals : run.status?.approval ? [run.status.approval] : [];
  return list.map((a) => a.approvedBy).join(', ') || '-';
}

const byNewest = (a, b) => Date.parse(b.metadata.creationTimestamp) - Date.parse(a.metadata.creationTimestamp) || a.metadata.name.localeCompare(b.metadata.name);

/** The runs table, used by the runs page and a workspace's history. */
export function RunTable({ runs, showNamespace, caption }) {
  useTick();
  if (!runs.length) return html`<p class="empty">No runs.</p>`;
  return html`<table class="runs">
    <caption>${caption}</caption>
    <thead>
      <tr>
        ${showNamespace ? html`<th scope="col">Namespace</th>` : null}
        <th scope="col">Name</th><th scope="col">Workspace</th><th scope="col">Operation</th><th scope="col">Trigger</th>
        <th scope="col">Phase</th><th scope="col">Plan</th><th scope="col">Policy</th><th scope="col">Approved by</th><th scope="col">Age</th>
      </tr>
    </thead>
    <tbody>
      ${runs.map((r) => {
        const ws = workspaceOf(r);
        return html`<tr key=${r.metadata.uid} data-run=${r.metadata.namespace + '/' + r.metadata.name}>
          ${showNamespace ? html`<td>${r.metadata.namespace}</td>` : null}
          <td><${Link} href=${runPath(r.metadata.namespace, r.metadata.name)}>${r.metadata.name}</${Link}></td>
          <td>${ws ? html`<${Link} href=${workspacePath(r.metadata.namespace, ws)}>${ws}</${Link}>` : '-'}</td>
          <td>${r.spec.operation || 'Apply'}</td>
          <td>${trigger(r)}</td>
          <td class="phase"><${Phase} phase=${r.status?.phase} /></td>
          <td class="plan">${planSummary(r)}</td>
          <td>${policyVerdict(r)}</td>
          <td>${approvers(r)}</td>
          <td><${Time} t=${r.metadata.creationTimestamp} /></td>
        </tr>`;
      })}
    </tbody>
  </table>`;
}

/** The runs page: filters, then the live table. */
export function RunsPage({ session, params }) {
  const ns = params.get('namespace') ?? session.namespace;
  const workspace = params.get('workspace') || '';
  const phase = params.get('phase') || '';
  const [runs, setRuns] = useState(null);
  const [error, setError] = useState(null);
  const bad = ns && !namespaceName(ns);
  useEffect(() => {
    setRuns(null);
    if (bad) return;
    const sel = workspace ? { labelSelector: `terrarun.dev/workspace=${workspace}` } : {};
    return watchList(collection('terraformruns', ns), sel, setRuns, setError, true);
  }, [ns, workspace]);
  const set = (k, v) => {
    const p = new URLSearchParams(params);
    p.set(k, v);
    if (!v && k !== 'namespace') p.delete(k);
    navigate('/?' + p.toString());
  };
  const shown = (runs || []).filter((r) => !phase || (r.status?.phase || 'Pending') === phase).sort(byNewest);
  return html`<section aria-labelledby="runs-title">
    <h1 id="runs-title">Runs</h1>
    <form class="filters" onSubmit=${(e) => e.preventDefault()}>
      <label>Namespace
        <input name="namespace" value=${ns} placeholder="all namespaces" onChange=${(e) => set('namespace', e.target.value.trim())} />
      </label>
      <label>Workspace
        <input name="workspace" value=${workspace} placeholder="any" onChange=${(e) => set('workspace', e.target.value.trim())} />
      </label>
      <label>Phase
        <select name="phase" value=${phase} onChange=${(e) => set('phase', e.target.value)}>
          <option value="">any</option>
          ${PHASES.map((p) => html`<option value=${p}>${p}</option>`)}
        </select>
      </label>
    </form>
    ${bad ? html`<p class="refusal" role="alert">${`"${ns}" is not a namespace name: lowercase letters, digits and -, or empty for every namespace`}</p>` : html`<${Refusal} error=${error} />`}
    ${bad ? null : runs === null ? html`<p aria-busy="true">Loading runs…</p>` : html`<${RunTable} runs=${shown} showNamespace=${!ns} caption=${`${shown.length} run${shown.length === 1 ? '' : 's'}${ns ? ' in ' + ns : ' in every namespace'}, newest first, live`} />`}
  </section>`;
}
