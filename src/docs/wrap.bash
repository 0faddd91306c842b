
# Written by hand (src/docs/wrap.bash), after clap's script above, whose _dlock it calls:
# - after the `--` of `run`, `run-with-lock` or `multilock`, the wrapped command's own
#   completion, as bash-completion does for sudo and timeout;
# - where a lock name goes, the names `dlock list --names` prints within half a second, so a
#   store that does not answer never holds the shell up for longer.
_dlock_job() {
    local i w sub="" prev_w="" names=0 positional=0 store=()
    for ((i = 1; i < COMP_CWORD; i++)); do
        w="${COMP_WORDS[i]}"
        if [[ -z $sub ]]; then
            case "$w" in
                -*) ;;
                *) [[ " @TAKES_VALUE@ " == *" $prev_w "* ]] || sub="$w" ;;
            esac
        elif [[ $w == -- ]]; then
            case "$sub" in
                run | run-with-lock | multilock)
                    if declare -F _command_offset >/dev/null; then
                        _command_offset $((i + 1))
                    else
                        COMPREPLY=($(compgen -c -- "${COMP_WORDS[COMP_CWORD]}"))
                    fi
                    return 0
                    ;;
            esac
        elif [[ $w == --any ]]; then
            names=1
        elif [[ $w != -* && " @TAKES_VALUE@ " != *" $prev_w "* ]]; then
            positional=$((positional + 1))
        fi
        # The store options as given, so that the names come from the same store.
        case "$prev_w" in
            --store | --shard | --namespace) store+=("$prev_w" "$w") ;;
        esac
        case "$w" in
            --store=* | --shard=* | --namespace=*) store+=("$w") ;;
        esac
        prev_w="$w"
    done
    local cur="${COMP_WORDS[COMP_CWORD]}"
    case "$sub" in
        inspect | unlock | extend | run | run-with-lock | lock | wait | multilock)
            [[ $sub == multilock ]] && names=1
            # After these the word is a lock name all the same.
            [[ $prev_w == --shared || $prev_w == --any ]] && prev_w=""
            if [[ $cur != -* && " @TAKES_VALUE@ " != *" $prev_w "* ]] &&
                ((names || positional == 0)); then
                COMPREPLY=($(compgen -W "$(timeout 0.5 dlock "${store[@]}" list --names 2>/dev/null)" -- "$cur"))
                return 0
            fi
            ;;
    esac
    _dlock "$@"
}

if [[ "${BASH_VERSINFO[0]}" -eq 4 && "${BASH_VERSINFO[1]}" -ge 4 || "${BASH_VERSINFO[0]}" -gt 4 ]]; then
    complete -F _dlock_job -o nosort -o bashdefault -o default dlock
else
    complete -F _dlock_job -o bashdefault -o default dlock
fi
