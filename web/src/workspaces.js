// Workspaces: their status and drift, the dependency graph drawn, and one
// workspace's page with its history of runs.
import { html } from 'htm/preact';
import { useEffect, useState } from 'preact/hooks';
import { collection, object, post, watchList, watchObject } from './api.js';
import { OutputsView } from './run.js';
import { RunTable } from './runs.js';
import { Action, Badge, Link, Refusal, Time, namespaceName, navigate, runPath, safeText, useCan, useTick, workspacePath } from './ui.js';

const cond = (ws, type) => (ws.status?.conditions || []).find((c) => c.type === type);

// Condition shows a condition: good when its status is the good one; a bad
// one is a failure when its reason says so, else a wait (a run in progress,
// a dependency not ready yet).
function Condition({ ws, type, good }) {
  const c = cond(ws, type);
  if (!c) return html`<span>-</span>`;
  const tone = c.status === 'Unknown' ? 'muted' : (c.status === 'True') === good ? 'ok' : /Fail|Denied|Error|Invalid/.test(c.reason) || type === 'Drifted' ? 'bad' : 'wait';
  return html`<span title=${safeText(c.message)}><${Badge} tone=${tone}>${c.status}</${Badge}> ${c.reason}</span>`;
}

export function WorkspacesPage({ session, params }) {
  const ns = params.get('namespace') ?? session.namespace;
  const [list, setList] = useState(null);
  const [error, setError] = useState(null);
  useTick();
  const bad = ns && !namespaceName(ns);
  useEffect(() => (bad ? undefined : watchList(collection('terraformworkspaces', ns), {}, setList, setError)), [ns]);
  const sorted = (list || []).slice().sort((a, b) => `${a.metadata.namespace}/${a.metadata.name}`.localeCompare(`${b.metadata.namespace}/${b.metadata.name}`));
  return html`<section aria-labelledby="ws-title">
    <h1 id="ws-title">Workspaces</h1>
    <form class="filters" onSubmit=${(e) => e.preventDefault()}>
      <label>Namespace
        <input name="namespace" value=${ns} placeholder="all namespaces" onChange=${(e) => navigate('/workspaces?namespace=' + encodeURIComponent(e.target.value.trim()))} />
      </label>
    </form>
    ${bad ? html`<p class="refusal" role="alert">${`"${ns}" is not a namespace name: lowercase letters, digits and -, or empty for every namespace`}</p>` : html`<${Refusal} error=${error} />`}
    ${bad ? null : list === null ? html`<p aria-busy="true">Loading workspaces…</p>` : !sorted.length ? html`<p class="empty">No workspaces.</p>` : html`
      <table>
        <caption>${sorted.length} workspace${sorted.length === 1 ? '' : 's'}, live</caption>
        <thead><tr>
          ${!ns ? html`<th scope="col">Namespace</th>` : null}
          <th scope="col">Name</th><th scope="col">Ready</th><th scope="col">Drifted</th><th scope="col">Suspended</th>
          <th scope="col">Current run</th><th scope="col">Last applied</th><th scope="col">Last drift check</th>
        </tr></thead>
        <tbody>${sorted.map((w) => html`<tr key=${w.metadata.uid}>
          ${!ns ? html`<td>${w.metadata.namespace}</td>` : null}
          <td><${Link} href=${workspacePath(w.metadata.namespace, w.metadata.name)}>${w.metadata.name}</${Link}></td>
          <td><${Condition} ws=${w} type="Ready" good=${true} /></td>
          <td><${Condition} ws=${w} type="Drifted" good=${false} /></td>
          <td>${w.spec.suspend ? 'yes' : 'no'}</td>
          <td>${w.status?.currentRun ? html`<${Link} href=${runPath(w.metadata.namespace, w.status.currentRun)}>${w.status.currentRun}</${Link}>` : '-'}</td>
          <td>${w.status?.lastAppliedRun ? html`<${Link} href=${runPath(w.metadata.namespace, w.status.lastAppliedRun)}>${w.status.lastAppliedRun}</${Link}>` : '-'}</td>
          <td><${Time} t=${w.status?.lastDriftCheck} /></td>
        </tr>`)}</tbody>
      </table>
      <${Graph} workspaces=${sorted} />`}
  </section>`;
}

/**
 * The dependency graph: each workspace in the column of its depth
 * (dependencies left of what depends on them), an arrow from each
 * dependency to its dependent. A cycle (which the server refuses to run)
 * is drawn in the last column.
 */
export function Graph({ workspaces }) {
  const key = (ns, n) => `${ns}/${n}`;
  const byKey = new Map(workspaces.map((w) => [key(w.metadata.namespace, w.metadata.name), w]));
  const deps = (w) => (w.spec.dependsOn || []).map((d) => key(w.metadata.namespace, d.name));
  if (!workspaces.some((w) => deps(w).length)) return null;
  const depth = new Map();
  const visit = (k, seen) => {
    if (depth.has(k)) return depth.get(k);
    if (seen.has(k) || !byKey.has(k)) return 0;
    seen.add(k);
    const d = Math.max(-1, ...deps(byKey.get(k)).map((x) => visit(x, seen))) + 1;
    depth.set(k, d);
    return d;
  };
  for (const k of byKey.keys()) visit(k, new Set());
  const columns = [];
  for (const [k, d] of depth) (columns[d] ||= []).push(k);
  const W = 180, H = 44, GX = 70, GY = 24;
  const pos = new Map();
  columns.forEach((col, x) => col.sort().forEach((k, y) => pos.set(k, { x: 10 + x * (W + GX), y: 10 + y * (H + GY) })));
  const width = 20 + columns.length * (W + GX) - GX;
  const height = 20 + Math.max(...columns.map((c) => c.length)) * (H + GY) - GY;
  const edges = [];
  for (const [k, w] of byKey) for (const d of deps(w)) if (pos.has(d)) edges.push([d, k]);
  const ready = (w) => cond(w, 'Ready')?.status;
  return html`<figure class="graph">
    <figcaption>Dependencies: an arrow goes from a workspace to one that depends on it.</figcaption>
    <svg viewBox=${`0 0 ${width} ${height}`} width=${width} height=${height} role="img" aria-label=${`Dependency graph of ${byKey.size} workspaces`}>
      <defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="8" markerHeight="8" orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#444" /></marker></defs>
      ${edges.map(([a, b]) => {
        const p = pos.get(a), q = pos.get(b);
        return html`<line x1=${p.x + W} y1=${p.y + H / 2} x2=${q.x} y2=${q.y + H / 2} stroke="#444" stroke-width="1.5" marker-end="url(#arrow)"><title>${b} depends on ${a}</title></line>`;
      })}
      ${[...pos].map(([k, p]) => {
        const w = byKey.get(k);
        return html`<a href=${workspacePath(w.metadata.namespace, w.metadata.name)} onClick=${(e) => { e.preventDefault(); navigate(workspacePath(w.metadata.namespace, w.metadata.name)); }}>
          <rect x=${p.x} y=${p.y} width=${W} height=${H} rx="6" class=${'node ' + (ready(w) === 'True' ? 'ok' : ready(w) === 'False' ? 'wait' : 'muted')} />
          <text x=${p.x + 10} y=${p.y + 18} class="node-name">${w.metadata.name}</text>
          <text x=${p.x + 10} y=${p.y + 35} class="node-state">Ready: ${ready(w) || '-'}</text>
        </a>`;
      })}
    </svg>
  </figure>`;
}

export function WorkspacePage({ ns, name }) {
  const [ws, setWs] = useState(undefined);
  const [runs, setRuns] = useState([]);
  const [error, setError] = useState(null);
  useTick();
  useEffect(() => watchObject('terraformworkspaces', ns, name, setWs, setError), [ns, name]);
  useEffect(() => watchList(collection('terraformruns', ns), { labelSelector: `terrarun.dev/workspace=${name}` }, setRuns, setError, true), [ns, name]);
  const can = useCan({ rerun: ['create', 'terraformworkspaces', 'rerun', ns, name] }, [ns, name]);
  const [answer, setAnswer] = useState('');
  if (ws === undefined) return html`<p aria-busy="true">Loading ${ns}/${name}…</p><${Refusal} error=${error} />`;
  if (ws === null) return html`<h1>Workspace ${ns}/${name}</h1><p>There is no such workspace.</p><${Refusal} error=${error} />`;
  const st = ws.status || {};
  const history = runs.slice().sort((a, b) => Date.parse(b.metadata.creationTimestamp) - Date.parse(a.metadata.creationTimestamp));
  return html`<article aria-labelledby="ws-page-title">
    <h1 id="ws-page-title">Workspace ${name}</h1>
    <dl class="facts">
      <div><dt>Namespace</dt><dd>${ns}</dd></div>
      <div><dt>Ready</dt><dd><${Condition} ws=${ws} type="Ready" good=${true} /></dd></div>
      <div><dt>Drifted</dt><dd><${Condition} ws=${ws} type="Drifted" good=${false} /></dd></div>
      <div><dt>Suspended</dt><dd>${ws.spec.suspend ? 'yes' : 'no'}</dd></div>
      <div><dt>Drift policy</dt><dd>${ws.spec.driftPolicy || '-'}</dd></div>
      <div><dt>Last drift check</dt><dd><${Time} t=${st.lastDriftCheck} /></dd></div>
      <div><dt>Next drift check</dt><dd>${st.nextDriftCheck ? html`<time datetime=${st.nextDriftCheck}>${st.nextDriftCheck}</time>` : '-'}</dd></div>
      <div><dt>Depends on</dt><dd>${(ws.spec.dependsOn || []).length ? ws.spec.dependsOn.map((d, i) => html`${i ? ', ' : ''}<${Link} href=${workspacePath(ns, d.name)}>${d.name}</${Link}>`) : '-'}</dd></div>
      <div><dt>Last applied revision</dt><dd>${st.lastAppliedRevision ? html`<code>${safeText(st.lastAppliedRevision)}</code>` : '-'}</dd></div>
    </dl>
    ${can.rerun ? html`<section class="actions" aria-label="Actions"><${Action} label="Rerun" title=${`Start a new run of workspace ${ns}/${name} now`} field="Reason" onAnswer=${setAnswer}
      act=${async (reason) => {
        const r = await post(object('terraformworkspaces', ns, name, 'rerun'), { apiVersion: 'terrarun.dev/v1alpha1', kind: 'TerraformWorkspaceRerun', reason });
        return `Workspace ${name} started run ${r.metadata.name}`;
      }} /><p class="answer" role="status">${answer}</p></section>` : null}
    <section aria-labelledby="ws-conditions"><h2 id="ws-conditions">Conditions</h2>
      <ul>${(st.conditions || []).map((c) => html`<li><strong>${c.type}=${c.status}</strong> ${c.reason}${c.message ? ': ' + safeText(c.message) : ''} (<${Time} t=${c.lastTransitionTime} />)</li>`)}</ul>
    </section>
    <${OutputsView} outputs=${st.outputs} />
    <section aria-labelledby="ws-history"><h2 id="ws-history">History</h2>
      <${RunTable} runs=${history} caption=${`Runs of ${name}, newest first, live`} />
    </section>
  </article>`;
}
