// A plan's JSON (terraform show -json, redacted by the server) as a
// per-resource diff: resources grouped by action, the attributes that
// change with their values before and after. Sensitive values stay masked
// as the plan JSON masks them.

/** The redactor's marker (pkg/runner/planjson.Sensitive). */
export const SENSITIVE = '(sensitive value)';
export const UNKNOWN = '(known after apply)';

/** The action groups, in the order a reviewer reads them. */
export const GROUPS = [
  { key: 'delete', label: 'Destroy', symbol: '-' },
  { key: 'replace', label: 'Replace', symbol: '-/+' },
  { key: 'update', label: 'Update in place', symbol: '~' },
  { key: 'create', label: 'Create', symbol: '+' },
  { key: 'read', label: 'Read', symbol: '<=' },
  { key: 'forget', label: 'Forget', symbol: '.' },
];

/** The group of a change's actions. */
export function actionOf(actions) {
  const a = actions || [];
  if (a.includes('delete') && a.includes('create')) return 'replace';
  if (a.includes('create')) return 'create';
  if (a.includes('delete')) return 'delete';
  if (a.includes('update')) return 'update';
  if (a.includes('read')) return 'read';
  if (a.includes('forget')) return 'forget';
  return 'no-op';
}

// flatten turns a value into path → leaf, with its sensitive and unknown
// marks (booleans or structures of them, as the plan JSON has them).
function flatten(value, sensitive, unknown, prefix, out) {
  if (sensitive === true) {
    out.set(prefix, { sensitive: true });
    return;
  }
  if (unknown === true) {
    out.set(prefix, { unknown: true });
    return;
  }
  if (value !== null && typeof value === 'object') {
    const keys = Array.isArray(value) ? value.map((_, i) => i) : Object.keys(value);
    if (keys.length === 0) {
      out.set(prefix, { value });
      return;
    }
    for (const k of keys) {
      const p = Array.isArray(value) ? `${prefix}[${k}]` : prefix ? `${prefix}.${k}` : String(k);
      flatten(value[k], sub(sensitive, k), sub(unknown, k), p, out);
    }
    return;
  }
  if (value === SENSITIVE) {
    out.set(prefix, { sensitive: true });
    return;
  }
  out.set(prefix, { value });
}

function sub(marks, k) {
  return marks !== null && typeof marks === 'object' ? marks[k] : undefined;
}

// The unknown marks may name attributes that the value lacks.
function addUnknown(unknown, prefix, out) {
  if (unknown === true) {
    if (!out.has(prefix)) out.set(prefix, { unknown: true });
    return;
  }
  if (unknown === null || typeof unknown !== 'object') return;
  for (const k of Array.isArray(unknown) ? unknown.map((_, i) => i) : Object.keys(unknown)) {
    const p = Array.isArray(unknown) ? `${prefix}[${k}]` : prefix ? `${prefix}.${k}` : String(k);
    addUnknown(unknown[k], p, out);
  }
}

/** How a leaf reads in the diff. */
export function show(leaf) {
  if (!leaf) return '';
  if (leaf.sensitive || leaf.value === SENSITIVE) return SENSITIVE;
  if (leaf.unknown) return UNKNOWN;
  return JSON.stringify(leaf.value);
}

/**
 * The attribute rows of one change: path, before, after, and whether the
 * path forces replacement. For an update or a replacement only the
 * attributes that change; for a create or a destroy all of them.
 */
export function attributes(change, action) {
  const before = new Map();
  const after = new Map();
  if (change.before !== null && change.before !== undefined) flatten(change.before, change.before_sensitive, undefined, '', before);
  if (change.after !== null && change.after !== undefined) flatten(change.after, change.after_sensitive, change.after_unknown, '', after);
  addUnknown(change.after_unknown, '', after);
  const replacing = (change.replace_paths || []).map((p) => pathString(p));
  const rows = [];
  const paths = [...new Set([...before.keys(), ...after.keys()])].sort();
  for (const p of paths) {
    const b = before.get(p);
    const a = after.get(p);
    const same = show(b) === show(a) && !(a && a.unknown);
    if ((action === 'update' || action === 'replace') && same) continue;
    if (b && b.value === null && !a) continue;
    if (a && a.value === null && !b) continue;
    rows.push({ path: p, before: b, after: a, forcesReplacement: replacing.some((r) => p === r || p.startsWith(r + '.') || p.startsWith(r + '[')) });
  }
  return rows;
}

function pathString(steps) {
  let s = '';
  for (const step of steps) s += typeof step === 'number' ? `[${step}]` : s ? `.${step}` : step;
  return s;
}

/** The reasons Terraform gives for an action, in words. */
const REASONS = {
  replace_because_tainted: 'it is tainted',
  replace_because_cannot_update: 'an attribute that forces replacement changes',
  replace_by_request: 'it was asked for (-replace)',
  replace_by_triggers: 'a replace_triggered_by reference changed',
  delete_because_no_resource_config: 'its configuration is gone',
  delete_because_no_module: 'its module is gone',
  delete_because_wrong_repetition: 'its count or for_each changed shape',
  delete_because_count_index: 'its count index is out of range',
  delete_because_each_key: 'its for_each key is gone',
  read_because_config_unknown: 'its configuration is known only after apply',
  read_because_dependency_pending: 'a dependency has changes pending',
};

export function reason(r) {
  return r ? REASONS[r] || r : '';
}

/** The plan's changes: the groups with their resources, no-ops counted, and the output changes. */
export function diff(plan) {
  const groups = new Map(GROUPS.map((g) => [g.key, []]));
  let unchanged = 0;
  for (const rc of plan.resource_changes || []) {
    const action = actionOf(rc.change?.actions);
    if (action === 'no-op') {
      unchanged++;
      continue;
    }
    groups.get(action).push({
      address: rc.address,
      action,
      reason: reason(rc.action_reason),
      importing: !!rc.change?.importing,
      rows: attributes(rc.change || {}, action),
    });
  }
  const outputs = [];
  for (const [name, oc] of Object.entries(plan.output_changes || {})) {
    const action = actionOf(oc.actions);
    if (action === 'no-op') continue;
    const before = action === 'create' ? undefined : oc.before_sensitive ? { sensitive: true } : { value: oc.before };
    const after = action === 'delete' ? undefined : oc.after_sensitive ? { sensitive: true } : oc.after_unknown ? { unknown: true } : { value: oc.after };
    outputs.push({ name, action, before, after });
  }
  return { groups: GROUPS.map((g) => ({ ...g, resources: groups.get(g.key) })).filter((g) => g.resources.length), unchanged, outputs };
}
