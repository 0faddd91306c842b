#!/usr/bin/env bash
# The action's scenarios, each job played by runner.sh against the store in DLOCK_STORE (the
# integration test runs this on a file store and on Redis; dlock must be on PATH):
#   cancel   a job cancelled while it waits (SIGINT, then SIGTERM, as the runner sends),
#            then its post: the other job's lock stays held
#   contend  two jobs for one lock: the second waits for the first's post, then holds;
#            a third that will not wait fails (on-busy: fail) or skips (on-busy: skip)
#   lost     post after the lease was broken by another client: a warning, no failure
# Prints what the runner would show (the step logs, outputs, summaries); exits 1 at the
# first check that fails.
set -uo pipefail
# Job control: a background step keeps SIGINT (a non-interactive shell would start it with
# SIGINT ignored), so the cancel below is the runner's.
set -m
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
runner=$here/runner.sh

fail() {
  echo "FAIL: $*"
  for log in "$work"/*.log; do echo "--- $log"; cat "$log"; done
  exit 1
}
ok() { echo "ok: $*"; }
out() { sed -n "s/^$2=//p" "$work/$1/output" | tail -1; }
show() {
  echo "--- $1: step log"; cat "$work/$1.log"
  echo "--- $1: outputs"; cat "$work/$1/output"
  [ -s "$work/$1/summary.md" ] && { echo "--- $1: job summary"; cat "$work/$1/summary.md"; }
  return 0
}
# Wait (at most 30 s) until a command succeeds.
until_ok() { for _ in $(seq 300); do "$@" && return 0; sleep 0.1; done; "$@"; }
# A job's step: INPUT_NAME=deploy and the given inputs, log to $work/JOB.log. This script
# plays the runner's worker, which lives through all of a job's steps: the hold follows it
# (the action's default follows the step's parent, which a step run with & here is not).
step() {
  local s=$1 job=$2; shift 2
  env INPUT_NAME="${NAME:-deploy}" INPUT_TTL=5s INPUT_FOLLOW=$$ "$@" "$runner" "$s" "$work/$job" \
    >>"$work/$job.log" 2>&1
}
# The same in the background, $! being the action's node process itself (runner.sh execs it).
bg_step() {
  local s=$1 job=$2; shift 2
  env INPUT_NAME="${NAME:-deploy}" INPUT_TTL=5s INPUT_FOLLOW=$$ "$@" "$runner" "$s" "$work/$job" \
    >>"$work/$job.log" 2>&1 &
}

cancel() {
  step main a || fail "job a's main: $(cat "$work/a.log")"
  local ta; ta=$(out a token)
  bg_step main b; local b=$!
  until_ok grep -q "waiting for deploy" "$work/b.log" || fail "job b never waited"
  # The runner's cancel: SIGINT, then SIGTERM 7.5 s later if the step still runs.
  kill -INT $b
  for _ in $(seq 75); do kill -0 $b 2>/dev/null || break; sleep 0.1; done
  kill -TERM $b 2>/dev/null && echo "job b still ran 7.5 s after SIGINT: SIGTERM"
  wait $b; local code=$?
  [ $code -ne 0 ] || fail "a cancelled main succeeded"
  grep -q "cancelled (SIGINT) while waiting" "$work/b.log" || fail "job b's main did not stop on SIGINT"
  [ "$(out b acquired)" = false ] || fail "job b's output acquired is not false"
  step post b || fail "job b's post failed"
  grep -q "nothing to release" "$work/b.log" || fail "job b's post did not say it had nothing to release"
  dlock check deploy --token "$ta" || fail "job a's lock was released by the cancelled job b"
  ok "cancelled job b released nothing; job a still holds deploy"
  step post a || fail "job a's post"
  dlock lock deploy -n >/dev/null 2>&1 || fail "deploy still held after job a's post"
  dlock unlock deploy --force >/dev/null 2>&1
  show a; show b
}

contend() {
  step main a INPUT_REASON="release 1.4" || fail "job a's main"
  bg_step main b INPUT_WAIT=60s; local b=$!
  until_ok grep -q "waiting for deploy" "$work/b.log" || fail "job b never waited"
  # c will not wait: on-busy fail names the holder and fails; d skips.
  step main c INPUT_WAIT=0 && fail "job c took a held lock"
  grep -q "::error::deploy is held by .*release 1.4" "$work/c.log" || fail "job c's error does not name the holder"
  step main d INPUT_WAIT=0 INPUT_ON-BUSY=skip || fail "job d (on-busy: skip) failed"
  [ "$(out d acquired)" = false ] || fail "job d says acquired"
  grep -q "::notice::deploy is held by" "$work/d.log" || fail "job d's notice"
  step post c; step post d
  step post a || fail "job a's post"
  wait $b || fail "job b's main failed: $(cat "$work/b.log")"
  [ "$(out b acquired)" = true ] || fail "job b did not acquire"
  [ "$(out b previous)" = released ] || fail "job b's previous is $(out b previous)"
  step post b || fail "job b's post"
  grep -q "| lock | holder | waited | held | fence | previous |" "$work/b/summary.md" || fail "no summary table"
  dlock lock deploy -n >/dev/null 2>&1 || fail "deploy still held after both posts"
  dlock unlock deploy --force >/dev/null 2>&1
  ok "two jobs took deploy in turn; the busy ones failed or skipped naming the holder"
  show a; show b; show c; show d
}

lost() {
  step main a || fail "job a's main"
  dlock unlock deploy --force >/dev/null 2>&1 || fail "force unlock"
  step post a || fail "post after a lost lease failed the job"
  grep -q "::warning::deploy was lost" "$work/a.log" || fail "post did not warn of the lost lease"
  grep -q "(lost)" "$work/a/summary.md" || fail "the summary does not show the loss"
  ok "post after the lease was lost warns and succeeds"
  show a
}

several() {
  NAME="db cache" step main a || fail "job a's main (two names)"
  dlock lock cache -n >/dev/null 2>&1 && fail "cache free while job a holds it"
  dlock lock db -n >/dev/null 2>&1 && fail "db free while job a holds it"
  NAME="db cache" step post a || fail "job a's post"
  dlock lock db -n >/dev/null 2>&1 || fail "db still held"
  dlock unlock db --force >/dev/null 2>&1
  ok "several names: all taken, all released"
}

for scenario in "${@:-cancel contend lost several}"; do
  for s in $scenario; do
    rm -rf "${work:?}"/*
    echo "=== $s"
    $s
  done
done
