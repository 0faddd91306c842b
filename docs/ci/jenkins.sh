#!/bin/sh
# Jenkins: `sh 'docs/ci/jenkins.sh'` in a pipeline stage. The script goes on after the locked
# part (a smoke test), so dlock runs in the background and the shell forwards the abort.
# Cancel: an aborted build's processes get SIGTERM; the trap passes it to dlock, which stops
# the deploy and releases; the script then exits with dlock's code.
set -eu
dlock run "deploy-${TARGET_ENV:-staging}" -w 20m --reason "${BUILD_URL:-local}" \
  -- ${DEPLOY:-./deploy.sh} &
pid=$!
trap 'kill -TERM "$pid" 2>/dev/null' TERM INT HUP
status=0
wait "$pid" || status=$?
# A trapped signal ends the first wait early: wait again for dlock's own end.
if kill -0 "$pid" 2>/dev/null; then wait "$pid" || status=$?; fi
trap - TERM INT HUP
[ "$status" -eq 0 ] || exit "$status"
${SMOKE_TEST:-true}
