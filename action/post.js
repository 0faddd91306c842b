// The action's post step, which the runner runs even after a cancel: release, by its token,
// exactly what main saved in the step state. Nothing saved (main never acquired, or gave back
// what it had): nothing to do, so a cancelled waiter never releases somebody else's lock.
'use strict';

const lib = require('./lib');

async function post() {
  let locks = [];
  try { locks = JSON.parse(lib.state('locks') || '[]'); } catch (_) { locks = []; }
  if (locks.length === 0) {
    console.log('dlock: nothing to release (main holds no lock)');
    return;
  }
  const bin = lib.state('dlock') || lib.dlock();
  const rows = [];
  for (const h of locks) {
    const r = await lib.run(bin, [...lib.globals(), 'unlock', h.name, '--token', h.token]);
    const heldMs = Date.now() - h.acquired_at;
    if (r.code === 0) {
      console.log(`dlock: released ${h.name} after ${lib.secs(heldMs)}`);
    } else if (r.code === 1) {
      lib.command('warning', `${h.name} was lost before the end of the job (its lease ran out or was broken); nothing to release`);
    } else {
      const why = r.json && r.json.error ? r.json.error.message : `dlock exited ${r.code}`;
      lib.command('error', `could not release ${h.name}: ${why}; its lease runs out by itself`);
      process.exitCode = 1;
    }
    rows.push({
      lock: h.name, holder: lib.thisJob(), waited: lib.secs(h.waited_ms),
      held: r.code === 1 ? `${lib.secs(heldMs)} (lost)` : lib.secs(heldMs),
      fence: h.fence, previous: h.previous,
    });
  }
  lib.summary(rows);
}

post().catch((e) => {
  lib.command('error', e.message);
  process.exitCode = 1;
});
