// The action's main step: take each lock with `dlock lock --keepalive` (a renewer holds it for
// the rest of the job), and save what was taken in the step state at once, so that post, which
// the runner runs even after a cancel, releases exactly that: never a lock this job did not get.
'use strict';

const lib = require('./lib');

async function main() {
  const names = lib.names();
  const onBusy = lib.input('on-busy', 'fail');
  if (names.length === 0) return usage('the input `name` is empty: give one lock name, or several');
  if (!['fail', 'skip'].includes(onBusy)) return usage(`on-busy is "${onBusy}": give fail or skip`);
  const bin = lib.dlock();
  lib.saveState('dlock', bin);
  const started = Date.now();
  const held = [];
  let child = null;
  let cancelled = null;
  // The runner cancels with SIGINT, then SIGTERM: dlock gets it too, withdraws its place in
  // the queue and exits; what was already taken is released below.
  for (const sig of ['SIGINT', 'SIGTERM']) {
    process.on(sig, () => {
      cancelled = sig;
      if (child) child.kill(sig);
    });
  }
  for (const name of names) {
    if (cancelled) break;
    console.log(`dlock: taking ${name}`);
    const r = await lib.run(bin, lockArgs(name), (c) => { child = c; });
    child = null;
    if (r.code === 0 && r.json && r.json.acquired) {
      held.push({
        name, token: r.json.token, fence: r.json.fence, previous: r.json.previous,
        waited_ms: Date.now() - started, acquired_at: Date.now(),
      });
      // At once: a cancel from here on must find it in post.
      lib.saveState('locks', JSON.stringify(held));
      console.log(`dlock: holding ${name} (fence ${r.json.fence}, previous ${r.json.previous})`);
      continue;
    }
    await giveBack(bin, held);
    if (cancelled) break;
    return notTaken(name, r, onBusy, Date.now() - started);
  }
  if (cancelled) {
    await giveBack(bin, held);
    lib.setOutput('acquired', 'false');
    lib.command('error', `cancelled (${cancelled}) while waiting for ${names.join(', ')}; nothing is held`);
    process.exitCode = 1;
    return;
  }
  const all = (k) => held.map((h) => h[k]).join(' ');
  lib.setOutput('acquired', 'true');
  lib.setOutput('token', all('token'));
  lib.setOutput('fence', all('fence'));
  lib.setOutput('previous', all('previous'));
  lib.setOutput('waited', ((Date.now() - started) / 1000).toFixed(1));
}

/** `dlock lock NAME --keepalive` as the inputs say. The renewer follows the runner's worker
 * (this step's parent), not this step: the hold spans the later steps, and still ends if the
 * job's runner goes away without a post step. */
function lockArgs(name) {
  const args = [...lib.globals(), '-v', 'lock', name, '--keepalive',
    '--follow', lib.input('follow', String(process.ppid)), '--ttl', lib.input('ttl', '30s')];
  const wait = lib.input('wait');
  if (wait) args.push('-w', wait);
  if (lib.input('shared', 'false') === 'true') args.push('--shared');
  const limit = lib.input('limit');
  if (limit) args.push('--limit', limit);
  const reason = lib.input('reason');
  if (reason) args.push('--reason', reason);
  return args;
}

/** Release what this step took before it stopped short (post will find nothing to do). */
async function giveBack(bin, held) {
  for (const h of held.splice(0)) {
    await lib.run(bin, [...lib.globals(), 'unlock', h.name, '--token', h.token]);
  }
  lib.saveState('locks', '[]');
}

/** Busy, timed out, or failed: say who holds it, fail or skip as on-busy says. */
function notTaken(name, r, onBusy, waitedMs) {
  lib.setOutput('acquired', 'false');
  lib.setOutput('waited', (waitedMs / 1000).toFixed(1));
  if (r.code !== 75) {
    const why = r.json && r.json.error ? r.json.error.message : `dlock exited ${r.code}`;
    lib.command('error', `dlock could not take ${name}: ${why}`);
    process.exitCode = 1;
    return;
  }
  const holder = r.json ? r.json.holder : null;
  const wait = lib.input('wait');
  const msg = `${name} is held by ${lib.holderText(holder)}` +
    (wait ? `; not taken within the wait of ${wait}` : '');
  lib.summary([{ lock: name, holder: lib.holderText(holder), waited: lib.secs(waitedMs) }]);
  if (onBusy === 'skip') {
    lib.command('notice', `${msg} (on-busy: skip)`);
    return;
  }
  lib.command('error', msg);
  process.exitCode = 1;
}

function usage(msg) {
  lib.command('error', msg);
  process.exitCode = 1;
}

main().catch((e) => {
  lib.command('error', e.message);
  process.exitCode = 1;
});
