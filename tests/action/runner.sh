#!/usr/bin/env bash
# Plays the GitHub Actions runner for one step of this repository's action, without GitHub:
#   tests/action/runner.sh main JOBDIR    runs action/main.js
#   tests/action/runner.sh post JOBDIR    runs action/post.js with main's state
# The inputs come from INPUT_* in the environment, as the runner passes them. GITHUB_STATE,
# GITHUB_OUTPUT and GITHUB_STEP_SUMMARY are files in JOBDIR; post gets main's state as
# STATE_<key> variables, as the runner exports it. main is exec'd, so a signal sent to this
# script's pid is the runner's cancel reaching the action's node process.
set -euo pipefail
step=$1 job=$2
root=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$job"
export GITHUB_OUTPUT=$job/output GITHUB_STEP_SUMMARY=$job/summary.md
touch "$job/state" "$job/output" "$job/summary.md"
case $step in
  main)
    export GITHUB_STATE=$job/state
    exec node "$root/action/main.js"
    ;;
  post)
    export GITHUB_STATE=$job/post-state
    # key=value lines, or key<<DELIM ... DELIM blocks; a later value of a key wins.
    while IFS= read -r line; do
      if [[ $line == *"<<"* && $line != *=* ]]; then
        key=${line%%<<*} delim=${line#*<<} value=""
        while IFS= read -r l && [[ $l != "$delim" ]]; do value+="${value:+$'\n'}$l"; done
      else
        key=${line%%=*} value=${line#*=}
      fi
      export "STATE_$key=$value"
    done <"$job/state"
    exec node "$root/action/post.js"
    ;;
  *)
    echo "usage: $0 main|post JOBDIR" >&2
    exit 64
    ;;
esac
