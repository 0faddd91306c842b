#!/bin/sh
# Buildkite: the command step `docs/ci/buildkite.sh`. A lock per deploy target, shared by
# every pipeline on the store.
# Cancel: the agent sends SIGTERM, then SIGKILL once its cancel-grace-period (10 s by default)
# is over; --kill-grace 5s gives the deploy its SIGKILL from dlock first, and the release
# happens inside the agent's grace.
set -eu
exec dlock run "deploy-${BUILDKITE_PIPELINE_SLUG:-app}" -w 20m --kill-grace 5s \
  --reason "${BUILDKITE_BUILD_URL:-local}" \
  -- ${DEPLOY:-./deploy.sh}
