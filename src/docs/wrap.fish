
# Written by hand (src/docs/wrap.fish), after clap's completions above:
# - after the `--` of `run`, `run-with-lock` or `multilock`, the wrapped command's own
#   completion, as fish does for sudo;
# - lock names, those `dlock list --names` prints within half a second, so a store that does
#   not answer never holds the shell up for longer.
function __fish_dlock_wrapped
    set -l cmd (commandline -opc)
    contains -- (__fish_dlock_needs_command) run run-with-lock multilock
    or return 1
    set -l at (contains -i -- -- $cmd)
    or return 1
    # Called with the words after `--` (and the one being typed), fish completes that command.
    if test "$argv[1]" = complete
        set -l rest $cmd[(math $at + 1)..-1] (commandline -ct)
        complete -C (string join -- ' ' (string escape -- $rest))
    end
end

function __fish_dlock_held
    set -l cmd (commandline -opc)
    set -l store
    for i in (seq 2 (count $cmd))
        contains -- $cmd[(math $i - 1)] --store --shard --namespace
        and set -a store $cmd[(math $i - 1)] $cmd[$i]
        string match -q -r -- '^--(store|shard|namespace)=' $cmd[$i]
        and set -a store $cmd[$i]
    end
    timeout 0.5 dlock $store list --names 2>/dev/null
end

complete -c dlock -n __fish_dlock_wrapped -f -a '(__fish_dlock_wrapped complete)'
complete -c dlock -n 'not __fish_dlock_wrapped; and __fish_dlock_using_subcommand inspect unlock extend run run-with-lock lock wait multilock' -f -a '(__fish_dlock_held)'
