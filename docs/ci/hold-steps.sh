#!/bin/sh
# A lock held across several steps or jobs' scripts (GitLab's before_script and after_script,
# two Jenkins `sh` steps): `begin` takes it with a renewer left behind, `end` releases it.
#   docs/ci/hold-steps.sh begin    # prints nothing; the token goes to $DLOCK_TOKEN_FILE
#   docs/ci/hold-steps.sh end      # safe to run always, as after_script is
# Cancel: `end` runs anyway (after_script does after a cancel). If `begin` was cancelled while
# it waited, the token file is empty and `end` releases nothing: never another job's lock.
set -eu
file=${DLOCK_TOKEN_FILE:-.dlock-token}
lock=${LOCK:-production}
case ${1:-} in
  begin)
    # --follow none: the step's shell ends here, the hold must not end with it.
    exec dlock lock "$lock" --keepalive --follow none -w 30m --reason "${CI_JOB_URL:-local}" >"$file"
    ;;
  end)
    [ -s "$file" ] || exit 0
    dlock unlock "$lock" --token "$(cat "$file")"
    rm -f "$file"
    ;;
  *)
    echo "usage: $0 begin|end" >&2
    exit 64
    ;;
esac
