// What the action's main and post steps share: reading inputs, finding dlock, running it,
// and the runner's files (step state, outputs, job summary). Plain Node: no npm packages at
// run time, so nothing is installed or committed besides these files.
'use strict';

const fs = require('fs');
const path = require('path');
const cp = require('child_process');

/** An input as the runner passes it (INPUT_NAME, upper-cased, spaces as underscores). */
function input(name, fallback = '') {
  const v = process.env[`INPUT_${name.replace(/ /g, '_').toUpperCase()}`];
  return v === undefined || v.trim() === '' ? fallback : v.trim();
}

/** The lock names: one a line, or separated by spaces or commas; sorted and unique, so two
 * jobs that take overlapping sets take them in the same order and cannot deadlock. */
function names() {
  const list = input('name').split(/[\s,]+/).filter(Boolean);
  return [...new Set(list)].sort();
}

/** Append `key=value` (or the heredoc form for several lines) to one of the runner's files. */
function appendTo(envVar, key, value) {
  const file = process.env[envVar];
  if (!file) return;
  const text = String(value);
  if (text.includes('\n')) {
    const delim = `dlock_${Math.random().toString(36).slice(2)}`;
    fs.appendFileSync(file, `${key}<<${delim}\n${text}\n${delim}\n`);
  } else {
    fs.appendFileSync(file, `${key}=${text}\n`);
  }
}

const setOutput = (k, v) => appendTo('GITHUB_OUTPUT', k, v);
const saveState = (k, v) => appendTo('GITHUB_STATE', k, v);
/** A value main saved, as the runner gives it to post (STATE_key). */
const state = (k) => process.env[`STATE_${k}`] || '';

/** A workflow command: ::error::, ::notice::, ::warning:: (its text escaped as the runner
 * wants it, so a holder's reason cannot end the line or start another command). */
function command(kind, text) {
  const esc = String(text).replace(/%/g, '%25').replace(/\r/g, '%0D').replace(/\n/g, '%0A');
  process.stdout.write(`::${kind}::${esc}\n`);
}

/** The dlock binary: one on PATH as it is; else one `cargo install`ed from this action's
 * repository at its ref, kept under the runner's tool cache by that ref. */
function dlock() {
  const given = input('dlock');
  if (given) return given;
  const onPath = cp.spawnSync('dlock', ['--version'], { stdio: 'ignore' });
  if (onPath.status === 0) return 'dlock';
  const repo = process.env.GITHUB_ACTION_REPOSITORY;
  const ref = process.env.GITHUB_ACTION_REF;
  if (!repo || !ref) {
    throw new Error('dlock is not on PATH, and this action\'s repository and ref are unknown: install dlock first');
  }
  const cache = process.env.RUNNER_TOOL_CACHE || path.join(process.env.HOME || '/tmp', '.cache');
  const root = path.join(cache, 'dlock', ref.replace(/[^A-Za-z0-9._-]/g, '_'));
  const bin = path.join(root, 'bin', 'dlock');
  if (!fs.existsSync(bin)) {
    const server = process.env.GITHUB_SERVER_URL || 'https://github.com';
    const args = ['install', '--locked', '--git', `${server}/${repo}`, '--rev', ref, '--root', root, 'dlock'];
    console.log(`dlock is not on PATH: cargo ${args.join(' ')}`);
    const r = cp.spawnSync('cargo', args, { stdio: 'inherit' });
    if (r.status !== 0) throw new Error('cargo install of dlock failed');
  }
  return bin;
}

/** dlock's global flags: the store(s) and namespace. */
function globals() {
  const out = ['--json'];
  for (const s of input('store').split(/[\s]+/).filter(Boolean)) out.push('--store', s);
  const ns = input('namespace');
  if (ns) out.push('--namespace', ns);
  return out;
}

/** Run dlock to its end: its exit code and its one JSON object (null if none). stderr goes to
 * the step log as it comes (the waiting line). `onChild` gets the process, to forward a cancel. */
function run(bin, args, onChild) {
  return new Promise((resolve) => {
    const child = cp.spawn(bin, args, { stdio: ['ignore', 'pipe', 'inherit'] });
    if (onChild) onChild(child);
    let out = '';
    child.stdout.on('data', (d) => { out += d; });
    child.on('error', (e) => resolve({ code: 127, json: null, error: e.message }));
    child.on('close', (code, signal) => {
      let json = null;
      try { json = JSON.parse(out.trim().split('\n').pop()); } catch (_) { /* none */ }
      resolve({ code: code === null ? 128 + (signal === 'SIGKILL' ? 9 : 15) : code, json });
    });
  });
}

/** A holder as the log and the summary name it: user@host pid N, its reason and CI link. */
function holderText(h) {
  if (!h) return 'someone else';
  let s = `${h.user || '?'}@${h.host || '?'} pid ${h.pid === null || h.pid === undefined ? '?' : h.pid}`;
  if (h.reason) s += ` (${h.reason})`;
  if (h.ci) s += ` ${h.ci}`;
  return s;
}

/** This job's link, as dlock records it for the holder's `ci`. */
function thisJob() {
  const e = process.env;
  if (e.GITHUB_SERVER_URL && e.GITHUB_REPOSITORY && e.GITHUB_RUN_ID) {
    return `${e.GITHUB_SERVER_URL}/${e.GITHUB_REPOSITORY}/actions/runs/${e.GITHUB_RUN_ID}`;
  }
  return 'this job';
}

/** Seconds, as the summary shows them: 12.3s. */
const secs = (ms) => (ms === null || ms === undefined ? '—' : `${(ms / 1000).toFixed(1)}s`);

/** Rows into $GITHUB_STEP_SUMMARY: lock, holder, waited, held, fence, previous. */
function summary(rows) {
  const file = process.env.GITHUB_STEP_SUMMARY;
  if (!file || rows.length === 0) return;
  const cell = (v) => String(v === null || v === undefined ? '—' : v).replace(/\|/g, '\\|').replace(/\n/g, ' ');
  let md = '| lock | holder | waited | held | fence | previous |\n|---|---|---|---|---|---|\n';
  for (const r of rows) {
    md += `| ${[r.lock, r.holder, r.waited, r.held, r.fence, r.previous].map(cell).join(' | ')} |\n`;
  }
  fs.appendFileSync(file, md);
}

module.exports = {
  input, names, setOutput, saveState, state, command, dlock, globals, run,
  holderText, thisJob, secs, summary,
};
