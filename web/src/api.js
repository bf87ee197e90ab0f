// The cluster, through the web view's proxy (/k8s): every request goes out
// with the user's kubeconfig credentials, and every refusal comes back as the
// API server wrote it.

const base = '/k8s';
export const group = '/apis/terrarun.dev/v1alpha1';

/**
 * The session key, which every API request carries besides the session
 * cookie: the login's redirect hands it to this page alone, in the address's
 * fragment (#key=...), which no server sees; the page keeps it in its
 * origin's storage, which no other port's page reads, and drops it from
 * the address.
 */
const keyName = 'terrarun-ui-key';
const sessionKey = (() => {
  const m = location.hash.match(/^#key=([A-Za-z0-9_-]+)$/);
  if (m) {
    localStorage.setItem(keyName, m[1]);
    history.replaceState(history.state, '', location.pathname + location.search);
  }
  return localStorage.getItem(keyName) || '';
})();
const keyHeader = { 'X-Terrarun-Ui-Key': sessionKey };

/** An API refusal: the server's Status message, verbatim. */
export class ApiError extends Error {
  constructor(code, message, status) {
    super(message);
    this.code = code;
    this.status = status;
  }
}

/** The Accept header of a list or watch in the server's table form, each row with its object. */
const asTable = 'application/json;as=Table;v=v1;g=meta.k8s.io, application/json';

async function request(method, path, body, accept = 'application/json') {
  const headers = { ...keyHeader, Accept: accept };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const res = await fetch(base + path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: 'same-origin',
  });
  const text = await res.text();
  let obj = null;
  try {
    obj = JSON.parse(text);
  } catch {
    // plain text: a plan or a log
  }
  if (!res.ok) {
    throw new ApiError(res.status, (obj && obj.message) || text || `${res.status} ${res.statusText}`, obj);
  }
  return obj === null ? text : obj;
}

export const get = (path) => request('GET', path);
export const post = (path, body) => request('POST', path, body);

/** The path of a kind's collection, in ns or (ns empty) every namespace. */
export function collection(kind, ns) {
  return ns ? `${group}/namespaces/${ns}/${kind}` : `${group}/${kind}`;
}

/** The path of one object, or of its subresource. */
export function object(kind, ns, name, sub) {
  return `${group}/namespaces/${ns}/${kind}/${name}${sub ? '/' + sub : ''}`;
}

function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== '') q.set(k, v);
  const s = q.toString();
  return s ? '?' + s : '';
}

/** Reads a streamed response line by line until it ends or signal aborts. */
async function lines(res, onLine) {
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += value;
    let i;
    while ((i = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, i);
      buf = buf.slice(i + 1);
      if (line.trim()) onLine(line);
    }
  }
}

/**
 * Lists path and then watches it, as an informer does: onItems gets every
 * item after each change, onError a refusal. It lists again when the watch
 * ends or its resource version expires. It returns the function that stops.
 * With table, it asks for the server's table form: each item is the object
 * with its row's cells by column name in item.columns (what the server's
 * rules say of it, such as the policy verdict).
 */
export function watchList(path, params, onItems, onError, table = false) {
  const ctl = new AbortController();
  const items = new Map();
  const key = (o) => `${o.metadata.namespace}/${o.metadata.name}`;
  const emit = () => onItems([...items.values()]);
  let names = [];
  const rows = (obj) => {
    if (!table) return obj.items || [obj];
    if (obj.columnDefinitions?.length) names = obj.columnDefinitions.map((c) => c.name);
    return (obj.rows || []).map((r) => ({ ...r.object, columns: Object.fromEntries(names.map((n, i) => [n, r.cells[i]])) }));
  };
  const accept = table ? asTable : 'application/json';
  const p = table ? { ...params, includeObject: 'Object' } : params;
  (async () => {
    while (!ctl.signal.aborted) {
      try {
        const list = await request('GET', path + query(p), undefined, accept);
        items.clear();
        for (const o of rows(list)) items.set(key(o), o);
        emit();
        onError(null);
        let rv = list.metadata.resourceVersion;
        for (;;) {
          const res = await fetch(base + path + query({ ...p, watch: 'true', resourceVersion: rv }), {
            headers: { ...keyHeader, Accept: accept },
            credentials: 'same-origin',
            signal: ctl.signal,
          });
          if (!res.ok) throw new ApiError(res.status, (await res.json().catch(() => ({}))).message || res.statusText);
          let expired = false;
          await lines(res, (line) => {
            const ev = JSON.parse(line);
            if (ev.type === 'ERROR') {
              expired = true;
              return;
            }
            for (const o of rows(ev.object)) {
              rv = o.metadata.resourceVersion || rv;
              if (ev.type === 'ADDED' || ev.type === 'MODIFIED') items.set(key(o), o);
              else if (ev.type === 'DELETED') items.delete(key(o));
            }
            emit();
          });
          if (expired) break; // list again
        }
      } catch (err) {
        if (ctl.signal.aborted) return;
        onError(err);
      }
      await new Promise((r) => setTimeout(r, 2000));
    }
  })();
  return () => ctl.abort();
}

/** Watches one object: onObject gets it after each change. */
export function watchObject(kind, ns, name, onObject, onError, table = false) {
  return watchList(collection(kind, ns), { fieldSelector: `metadata.name=${name}` }, (items) => onObject(items[0] || null), onError, table);
}

/**
 * Streams a run's log: onText gets each piece as it comes; it resolves when
 * the stage attempt's log ends. It returns the function that stops.
 */
export function followLog(ns, name, stage, attempt, onText, onEnd) {
  const ctl = new AbortController();
  (async () => {
    try {
      const res = await fetch(base + object('terraformruns', ns, name, 'logs') + query({ stage, attempt, follow: 'true' }), {
        headers: keyHeader,
        credentials: 'same-origin',
        signal: ctl.signal,
      });
      if (!res.ok) {
        const text = await res.text();
        let msg = text;
        try {
          msg = JSON.parse(text).message || text;
        } catch {
          // plain text
        }
        onEnd(new ApiError(res.status, msg));
        return;
      }
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        onText(value);
      }
      onEnd(null);
    } catch (err) {
      if (!ctl.signal.aborted) onEnd(err);
    }
  })();
  return () => ctl.abort();
}

/** Whether the user may verb resource/subresource (name) in ns: the server's SelfSubjectAccessReview. */
export async function canI(verb, resource, subresource, ns, name) {
  const review = await post('/apis/authorization.k8s.io/v1/selfsubjectaccessreviews', {
    apiVersion: 'authorization.k8s.io/v1',
    kind: 'SelfSubjectAccessReview',
    spec: { resourceAttributes: { group: 'terrarun.dev', verb, resource, subresource, namespace: ns, name } },
  });
  return !!review.status?.allowed;
}

/** Who the server says the user is. */
export async function whoAmI() {
  const review = await post('/apis/authentication.k8s.io/v1/selfsubjectreviews', {
    apiVersion: 'authentication.k8s.io/v1',
    kind: 'SelfSubjectReview',
  });
  return review.status?.userInfo?.username || '';
}

/** The web view's own answer: the kubeconfig's context and namespace. */
export async function session() {
  const res = await fetch('/ui/session', { headers: keyHeader, credentials: 'same-origin' });
  if (!res.ok) throw new ApiError(res.status, (await res.json().catch(() => ({}))).message || res.statusText);
  return res.json();
}

/** Events about an object. */
export function events(ns, kind, name) {
  return get(`/api/v1/namespaces/${ns}/events` + query({ fieldSelector: `involvedObject.kind=${kind},involvedObject.name=${name}` }));
}

export { query };
