
# Written by hand (src/docs/wrap.zsh), in place of clap's dispatch, calling clap's _dlock above:
# - after the `--` of `run`, `run-with-lock` or `multilock`, the wrapped command's own
#   completion, as zsh does for sudo and nice;
# - where a lock name goes, the names `dlock list --names` prints within half a second, so a
#   store that does not answer never holds the shell up for longer.
_dlock_job() {
    local i w sub="" prev_w="" names=0 positional=0
    local -a store
    local takes=" @TAKES_VALUE@ "
    for ((i = 2; i < CURRENT; i++)); do
        w="${words[i]}"
        if [[ -z $sub ]]; then
            [[ $w == -* || $takes == *" $prev_w "* ]] || sub="$w"
        elif [[ $w == -- && $sub == (run|run-with-lock|multilock) ]]; then
            shift $i words
            (( CURRENT -= i ))
            _normal
            return
        elif [[ $w == --any ]]; then
            names=1
        elif [[ $w != -* && $takes != *" $prev_w "* ]]; then
            (( positional++ ))
        fi
        # The store options as given, so that the names come from the same store.
        [[ $prev_w == (--store|--shard|--namespace) ]] && store+=("$prev_w" "$w")
        [[ $w == (--store|--shard|--namespace)=* ]] && store+=("$w")
        prev_w="$w"
    done
    if [[ $sub == (inspect|unlock|extend|run|run-with-lock|lock|wait|multilock) ]]; then
        [[ $sub == multilock ]] && names=1
        # After these the word is a lock name all the same.
        [[ $prev_w == (--shared|--any) ]] && prev_w=""
        if [[ ${words[CURRENT]} != -* && $takes != *" $prev_w "* ]] &&
            (( names || positional == 0 )); then
            local -a held
            held=(${(f)"$(timeout 0.5 dlock "${store[@]}" list --names 2>/dev/null)"})
            compadd -a held
            return
        fi
    fi
    _dlock "$@"
}

compdef _dlock_job dlock
if [ "$funcstack[1]" = "_dlock" ]; then
    _dlock_job "$@"
fi
