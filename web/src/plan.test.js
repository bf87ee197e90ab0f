// Tests of the plan diff (node --test web/src, in make unit): a real plan of
// the project's own testdata, unredacted, whose sensitive values must be
// masked by the plan's marks alone (the server's redactor also replaces a
// secret's value where no mark covers it: tags.owner here); and the shapes a
// plan takes for replacements, updates and destroys.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { SENSITIVE, UNKNOWN, actionOf, diff, show } from './plan.js';

const real = JSON.parse(readFileSync(new URL('../../pkg/runner/planjson/testdata/real_plan.json', import.meta.url)));

test('a real plan: every resource, grouped, the secret masked by its marks', () => {
  const d = diff(real);
  assert.deepEqual(d.groups.map((g) => g.key), ['create']);
  assert.deepEqual(d.groups[0].resources.map((r) => r.address).sort(), ['module.inner.terraform_data.inner', 'terraform_data.plain', 'terraform_data.with_secret']);
  const shown = JSON.stringify(d.groups.flatMap((g) => g.resources.flatMap((r) => r.rows.map((a) => [a.path, show(a.before), show(a.after)]))).concat(d.outputs.map((o) => [o.name, show(o.before), show(o.after)])));
  assert.ok(!shown.includes('\\"hunter2-very-secret\\"'), `a value marked sensitive is shown: ${shown}`);
  const secret = d.groups[0].resources.find((r) => r.address === 'terraform_data.with_secret');
  const row = (p) => secret.rows.find((a) => a.path === p);
  assert.equal(show(row('input.password').after), SENSITIVE);
  assert.equal(show(row('input.list[1]').after), SENSITIVE);
  assert.equal(show(row('input.list[0]').after), '"a"');
  assert.equal(show(row('input.name').after), '"db"');
  assert.equal(show(d.outputs.find((o) => o.name === 'password').after), SENSITIVE);
  assert.equal(show(d.outputs.find((o) => o.name === 'name').after), '"visible"');
});

test('a replacement, an update and a destroy', () => {
  const d = diff({
    resource_changes: [
      {
        address: 'aws_instance.web',
        action_reason: 'replace_because_cannot_update',
        change: {
          actions: ['delete', 'create'],
          before: { ami: 'ami-1', tags: { team: 'a' }, id: 'i-1' },
          after: { ami: 'ami-2', tags: { team: 'a' } },
          after_unknown: { id: true },
          before_sensitive: {},
          after_sensitive: {},
          replace_paths: [['ami']],
        },
      },
      { address: 'x.updated', change: { actions: ['update'], before: { a: 1, b: SENSITIVE }, after: { a: 2, b: SENSITIVE }, before_sensitive: { b: true }, after_sensitive: { b: true } } },
      { address: 'x.gone', action_reason: 'delete_because_no_resource_config', change: { actions: ['delete'], before: { a: 1 }, after: null } },
      { address: 'x.same', change: { actions: ['no-op'], before: { a: 1 }, after: { a: 1 } } },
    ],
  });
  assert.deepEqual(d.groups.map((g) => g.key), ['delete', 'replace', 'update']);
  assert.equal(d.unchanged, 1);
  const [gone] = d.groups[0].resources;
  assert.equal(gone.reason, 'its configuration is gone');
  assert.deepEqual(gone.rows.map((a) => [a.path, show(a.before), show(a.after)]), [['a', '1', '']]);
  const [web] = d.groups[1].resources;
  assert.equal(web.reason, 'an attribute that forces replacement changes');
  assert.deepEqual(web.rows.map((a) => [a.path, show(a.before), show(a.after), a.forcesReplacement]), [
    ['ami', '"ami-1"', '"ami-2"', true],
    ['id', '"i-1"', UNKNOWN, false],
  ]);
  // A sensitive attribute that keeps its (hidden) value is no change.
  assert.deepEqual(d.groups[2].resources[0].rows.map((a) => a.path), ['a']);
});

test('actions', () => {
  assert.equal(actionOf(['create', 'delete']), 'replace');
  assert.equal(actionOf(['read']), 'read');
  assert.equal(actionOf(['no-op']), 'no-op');
  assert.equal(actionOf(undefined), 'no-op');
});
