#!/bin/sh
# GitLab CI: one production deploy at a time across every project and pipeline that names the
# same lock on the same store (resource_group only orders the jobs of one project).
# Set DLOCK_STORE (e.g. redis://locks.internal:6379) as a group-level CI/CD variable.
# Cancel: the runner sends SIGTERM to the job's script; `exec` makes that process dlock, which
# stops the deploy (TERM, then KILL after --kill-grace) and releases before it exits.
set -eu
exec dlock run production-deploy -w 30m \
  --reason "${CI_PROJECT_PATH:-local} ${CI_JOB_URL:-}" \
  -- ${DEPLOY:-./deploy.sh}
