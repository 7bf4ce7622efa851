# bash completion for redlock-run                          -*- shell-script -*-
#
# Generated from the clap definition in src/cli.rs by tests/integration/completion.rs;
# do not edit. After a change to the definition, run
#     REDLOCK_REGENERATE=1 cargo test --test integration generated
#
# Options complete after a "-", option values by what they are (files for a
# FILE, the URL schemes for a URL, the listed words for a choice, nothing for
# a duration), and the command to run, after "--" or the options, as
# env(1) and timeout(1) do: command names, then that command's own
# completion (bash-completion's _command_offset when it is loaded).

# What the (sub)command at path $1 accepts: its options ($opts), those that
# take a value (long ones in $takes, the letters of short ones in $letters),
# its subcommands ($subs; with first=1 only before any other argument, as
# clap's args_conflicts_with_subcommands has it), how many positionals it
# has, whether the last repeats, and which one (cmdpos) starts the command
# line to run.
_redlock_run_spec()
{
    opts= takes= letters= subs= first=0 positionals=0 repeats=0 cmdpos=0
    case $1 in
    'redlock-run')
        opts='-k --key --prefix -r --redis --node-timeout --password-file --sentinel-password-file --tls-ca --tls-cert --tls-key --tls-insecure --config --no-config -t --ttl --kill-after -w --wait --wait-unfair -s --shared --hold --once-per --once-per-success --retry --retry-delay --max-runtime --leftovers --jitter --fence --replicas --restart-grace --durable --limit -E --busy-exit-code -c --command -q --quiet -v --verbose --log-format --record-command --report --metrics-file --ping --ping-busy --ping-timeout --on-failure -h --help -V --version'
        takes=' --key --prefix --redis --node-timeout --password-file --sentinel-password-file --tls-ca --tls-cert --tls-key --config --ttl --kill-after --wait --hold --once-per --once-per-success --retry --retry-delay --max-runtime --leftovers --jitter --replicas --restart-grace --limit --busy-exit-code --command --log-format --record-command --report --metrics-file --ping --ping-timeout --on-failure '
        letters='krtwEc'
        subs='status unlock history forget check config help'
        first=1 positionals=1 repeats=1 cmdpos=1
        ;;
    'redlock-run status')
        opts='-k --key --prefix -r --redis --node-timeout --password-file --sentinel-password-file --tls-ca --tls-cert --tls-key --tls-insecure --config --no-config --json --limit --keys -h --help'
        takes=' --key --prefix --redis --node-timeout --password-file --sentinel-password-file --tls-ca --tls-cert --tls-key --config --limit '
        letters='kr'
        ;;
    'redlock-run unlock')
        opts='-k --key --prefix -r --redis --node-timeout --password-file --sentinel-password-file --tls-ca --tls-cert --tls-key --tls-insecure --config --no-config --token --force -h --help'
        takes=' --key --prefix --redis --node-timeout --password-file --sentinel-password-file --tls-ca --tls-cert --tls-key --config --token '
        letters='kr'
        ;;
    'redlock-run history')
        opts='-k --key --prefix -r --redis --node-timeout --password-file --sentinel-password-file --tls-ca --tls-cert --tls-key --tls-insecure --config --no-config --json -n --count -h --help'
        takes=' --key --prefix --redis --node-timeout --password-file --sentinel-password-file --tls-ca --tls-cert --tls-key --config --count '
        letters='krn'
        ;;
    'redlock-run forget')
        opts='-k --key --prefix -r --redis --node-timeout --password-file --sentinel-password-file --tls-ca --tls-cert --tls-key --tls-insecure --config --no-config --force -h --help'
        takes=' --key --prefix --redis --node-timeout --password-file --sentinel-password-file --tls-ca --tls-cert --tls-key --config '
        letters='kr'
        ;;
    'redlock-run check')
        opts='--prefix -r --redis --node-timeout --password-file --sentinel-password-file --tls-ca --tls-cert --tls-key --tls-insecure --config --no-config --fence -w --wait -s --shared --limit --json -k --key -h --help'
        takes=' --prefix --redis --node-timeout --password-file --sentinel-password-file --tls-ca --tls-cert --tls-key --config --wait --limit --key '
        letters='rwk'
        ;;
    'redlock-run config')
        opts='--prefix -r --redis --node-timeout --password-file --sentinel-password-file --tls-ca --tls-cert --tls-key --tls-insecure --config --no-config --json -k --key -h --help'
        takes=' --prefix --redis --node-timeout --password-file --sentinel-password-file --tls-ca --tls-cert --tls-key --config --key '
        letters='rk'
        ;;
    'redlock-run help')
        subs='status unlock history forget check config help'
        ;;
    esac
}

# Sets COMPREPLY to the whole values that $2, a value of $1 (PATH:-o,
# PATH:--option, or PATH:#N for the Nth positional), can be completed to.
_redlock_run_value()
{
    local val=$2 lead= i
    # A list: complete its last item.
    case $1 in
    'redlock-run:-r' | \
    'redlock-run:--redis' | \
    'redlock-run status:-r' | \
    'redlock-run status:--redis' | \
    'redlock-run unlock:-r' | \
    'redlock-run unlock:--redis' | \
    'redlock-run history:-r' | \
    'redlock-run history:--redis' | \
    'redlock-run forget:-r' | \
    'redlock-run forget:--redis' | \
    'redlock-run check:-r' | \
    'redlock-run check:--redis' | \
    'redlock-run config:-r' | \
    'redlock-run config:--redis')
        lead=${val%"${val##*,}"} val=${val##*,}
        ;;
    esac
    case $1 in
    'redlock-run:-k' | \
    'redlock-run:--key' | \
    'redlock-run:--prefix' | \
    'redlock-run:--node-timeout' | \
    'redlock-run:-t' | \
    'redlock-run:--ttl' | \
    'redlock-run:--kill-after' | \
    'redlock-run:--hold' | \
    'redlock-run:--once-per' | \
    'redlock-run:--once-per-success' | \
    'redlock-run:--retry' | \
    'redlock-run:--retry-delay' | \
    'redlock-run:--max-runtime' | \
    'redlock-run:--jitter' | \
    'redlock-run:--replicas' | \
    'redlock-run:--restart-grace' | \
    'redlock-run:--limit' | \
    'redlock-run:-E' | \
    'redlock-run:--busy-exit-code' | \
    'redlock-run:--ping' | \
    'redlock-run:--ping-timeout' | \
    'redlock-run status:-k' | \
    'redlock-run status:--key' | \
    'redlock-run status:--prefix' | \
    'redlock-run status:--node-timeout' | \
    'redlock-run status:--limit' | \
    'redlock-run unlock:-k' | \
    'redlock-run unlock:--key' | \
    'redlock-run unlock:--prefix' | \
    'redlock-run unlock:--node-timeout' | \
    'redlock-run unlock:--token' | \
    'redlock-run history:-k' | \
    'redlock-run history:--key' | \
    'redlock-run history:--prefix' | \
    'redlock-run history:--node-timeout' | \
    'redlock-run history:-n' | \
    'redlock-run history:--count' | \
    'redlock-run forget:-k' | \
    'redlock-run forget:--key' | \
    'redlock-run forget:--prefix' | \
    'redlock-run forget:--node-timeout' | \
    'redlock-run check:--prefix' | \
    'redlock-run check:--node-timeout' | \
    'redlock-run check:--limit' | \
    'redlock-run check:-k' | \
    'redlock-run check:--key' | \
    'redlock-run config:--prefix' | \
    'redlock-run config:--node-timeout' | \
    'redlock-run config:-k' | \
    'redlock-run config:--key')
        # free text (a duration, a name, a number): nothing to offer
        ;;
    'redlock-run:-r' | \
    'redlock-run:--redis' | \
    'redlock-run status:-r' | \
    'redlock-run status:--redis' | \
    'redlock-run unlock:-r' | \
    'redlock-run unlock:--redis' | \
    'redlock-run history:-r' | \
    'redlock-run history:--redis' | \
    'redlock-run forget:-r' | \
    'redlock-run forget:--redis' | \
    'redlock-run check:-r' | \
    'redlock-run check:--redis' | \
    'redlock-run config:-r' | \
    'redlock-run config:--redis')
        _redlock_run_urls
        ;;
    'redlock-run:--password-file' | \
    'redlock-run:--sentinel-password-file' | \
    'redlock-run:--tls-ca' | \
    'redlock-run:--tls-cert' | \
    'redlock-run:--tls-key' | \
    'redlock-run:--config' | \
    'redlock-run:--report' | \
    'redlock-run:--metrics-file' | \
    'redlock-run status:--password-file' | \
    'redlock-run status:--sentinel-password-file' | \
    'redlock-run status:--tls-ca' | \
    'redlock-run status:--tls-cert' | \
    'redlock-run status:--tls-key' | \
    'redlock-run status:--config' | \
    'redlock-run unlock:--password-file' | \
    'redlock-run unlock:--sentinel-password-file' | \
    'redlock-run unlock:--tls-ca' | \
    'redlock-run unlock:--tls-cert' | \
    'redlock-run unlock:--tls-key' | \
    'redlock-run unlock:--config' | \
    'redlock-run history:--password-file' | \
    'redlock-run history:--sentinel-password-file' | \
    'redlock-run history:--tls-ca' | \
    'redlock-run history:--tls-cert' | \
    'redlock-run history:--tls-key' | \
    'redlock-run history:--config' | \
    'redlock-run forget:--password-file' | \
    'redlock-run forget:--sentinel-password-file' | \
    'redlock-run forget:--tls-ca' | \
    'redlock-run forget:--tls-cert' | \
    'redlock-run forget:--tls-key' | \
    'redlock-run forget:--config' | \
    'redlock-run check:--password-file' | \
    'redlock-run check:--sentinel-password-file' | \
    'redlock-run check:--tls-ca' | \
    'redlock-run check:--tls-cert' | \
    'redlock-run check:--tls-key' | \
    'redlock-run check:--config' | \
    'redlock-run config:--password-file' | \
    'redlock-run config:--sentinel-password-file' | \
    'redlock-run config:--tls-ca' | \
    'redlock-run config:--tls-cert' | \
    'redlock-run config:--tls-key' | \
    'redlock-run config:--config')
        _redlock_run_files -f
        ;;
    'redlock-run:-w' | \
    'redlock-run:--wait' | \
    'redlock-run check:-w' | \
    'redlock-run check:--wait')
        _redlock_run_words 'forever'
        ;;
    'redlock-run:--leftovers')
        _redlock_run_words 'wait kill'
        ;;
    'redlock-run:-c' | \
    'redlock-run:--command' | \
    'redlock-run:--on-failure' | \
    'redlock-run:#1')
        _redlock_run_compgen -c
        ;;
    'redlock-run:--log-format')
        _redlock_run_words 'text json'
        ;;
    'redlock-run:--record-command')
        _redlock_run_words 'name masked'
        ;;
    esac
    for i in "${!COMPREPLY[@]}"; do
        COMPREPLY[i]=$lead${COMPREPLY[i]}
    done
}

_redlock_run_words()
{
    mapfile -t COMPREPLY < <(compgen -W "$1" -- "$val")
}

_redlock_run_compgen()
{
    mapfile -t COMPREPLY < <(compgen "$@" -- "$val")
}

_redlock_run_files()
{
    compopt -o filenames 2>/dev/null
    mapfile -t COMPREPLY < <(compgen "$1" -- "$val")
}

# The scheme; the rest is the user's, so no space after it.
_redlock_run_urls()
{
    compopt -o nospace 2>/dev/null
    _redlock_run_words 'redis:// rediss:// unix:// redis+sentinel:// redis+cluster:// rediss+sentinel:// rediss+cluster://'
}

# COMP_WORDBREAKS cuts redis://h:6379 into 5 words of COMP_WORDS and
# --wait=5 into 3. Joins them back into the program's arguments: $words,
# with the index in COMP_WORDS ($at) where each starts, and the offset in
# COMP_LINE of every word of COMP_WORDS ($offsets).
_redlock_run_split()
{
    local line=${COMP_LINE:0:COMP_POINT} i w gap
    words=() at=() offsets=()
    for ((i = 0; i <= COMP_CWORD; i++)); do
        w=${COMP_WORDS[i]}
        gap=${line%%[![:space:]]*}
        line=${line#"$gap"}
        # The cursor may be inside the current word: only what is before it counts.
        ((i < COMP_CWORD)) || w=$line
        [[ $line == "$w"* ]] || return 1
        offsets[i]=$((COMP_POINT - ${#line}))
        if [[ -n $gap || ${#words[@]} -eq 0 ]]; then
            words+=("$w") at+=("$i")
        else
            words[${#words[@]} - 1]+=$w
        fi
        line=${line#"$w"}
    done
}

# The candidates complete all of $1; readline replaces only $2, what follows
# the last COMP_WORDBREAKS character. Make them fit.
_redlock_run_fit()
{
    local cut= add= i
    if [[ $1 == *"$2" ]]; then
        cut=${1:0:${#1}-${#2}}
    elif [[ $2 == *"$1" ]]; then
        add=${2:0:${#2}-${#1}}
    else
        return
    fi
    for i in "${!COMPREPLY[@]}"; do
        [[ ${COMPREPLY[i]} == "$cut"* ]] && COMPREPLY[i]=$add${COMPREPLY[i]#"$cut"}
    done
}

# Completes the command to run, which starts at COMP_WORDS[$1], as if it
# were typed alone: through bash-completion when it is loaded (which loads
# the command's own completion on demand); else command names, then the
# completion the command already has, else file names. $2 is the word
# being completed.
_redlock_run_command_line()
{
    if declare -F _comp_command_offset >/dev/null; then
        _comp_command_offset "$1"
    elif declare -F _command_offset >/dev/null; then
        _command_offset "$1"
    elif (($1 == COMP_CWORD)); then
        compopt -o filenames 2>/dev/null
        mapfile -t COMPREPLY < <(compgen -d -c -- "$2")
    else
        local cmd=${COMP_WORDS[$1]} spec func
        spec=$(complete -p -- "$cmd" 2>/dev/null) ||
            spec=$(complete -p -- "${cmd##*/}" 2>/dev/null)
        if [[ $spec == *" -F "* ]]; then
            func=${spec#* -F }
            func=${func%% *}
            # What the command's completion sees is its own command line.
            ((COMP_POINT -= ${offsets[$1]:-0}))
            COMP_LINE=${COMP_LINE:${offsets[$1]:-0}}
            COMP_WORDS=("${COMP_WORDS[@]:$1}")
            ((COMP_CWORD -= $1))
            "$func" "$cmd" "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD - 1]}"
        else
            compopt -o filenames 2>/dev/null
            mapfile -t COMPREPLY < <(compgen -f -- "$2")
        fi
    fi
}

_redlock_run()
{
    COMPREPLY=()
    local words at offsets i j w
    if ! _redlock_run_split; then
        words=("${COMP_WORDS[@]:0:COMP_CWORD+1}") at=() offsets=()
        for ((i = 0; i <= COMP_CWORD; i++)); do
            at+=("$i")
        done
    fi
    local cword=$((${#words[@]} - 1))
    local cur=${words[cword]}
    # $2 is the current word with its quotes removed; when nothing was
    # joined to it, it is the whole argument.
    ((at[cword] == COMP_CWORD)) && cur=$2

    local opts takes letters subs first positionals repeats cmdpos
    local path=redlock-run pending= seen=0 npos=0 dashdash=0
    _redlock_run_spec "$path"
    for ((i = 1; i < cword; i++)); do
        w=${words[i]}
        if [[ -n $pending ]]; then
            pending=
        elif ((dashdash)) || [[ $w != -?* ]]; then
            if ((!dashdash && !npos && !(first && seen))) && [[ " $subs " == *" $w "* ]]; then
                path+=" $w"
                _redlock_run_spec "$path"
                seen=0
                continue
            fi
            ((npos++))
            if ((cmdpos && npos >= cmdpos)); then
                # The command to run has started: the rest of the line is its.
                _redlock_run_command_line "${at[i]}" "$2"
                return
            fi
        elif [[ $w == -- ]]; then
            dashdash=1
        elif [[ $w == --* ]]; then
            seen=1
            [[ $w != *=* && $takes == *" $w "* ]] && pending=$w
        else
            seen=1
            # Short flags run together: the first that takes a value takes
            # the rest of the word, or else the next word.
            for ((j = 1; j < ${#w}; j++)); do
                if [[ $letters == *"${w:j:1}"* ]]; then
                    ((j + 1 < ${#w})) || pending=-${w:j:1}
                    break
                fi
            done
        fi
    done

    if [[ -n $pending ]]; then
        _redlock_run_value "$path:$pending" "$cur"
        _redlock_run_fit "$cur" "$2"
    elif ((!dashdash)) && [[ $cur == --*=* ]]; then
        _redlock_run_value "$path:${cur%%=*}" "${cur#*=}"
        _redlock_run_fit "${cur#*=}" "$2"
    elif ((!dashdash)) && [[ $cur == -* ]]; then
        local val=$cur
        _redlock_run_words "$opts"
    else
        local sub=$((!dashdash && !npos && !(first && seen)))
        ((npos++))
        if ((sub && cword == 1)) && [[ -n $subs ]]; then
            # The first word: a subcommand or an option. A command to run
            # comes after -- or after the options, never among the subcommands.
            local val=$cur
            _redlock_run_words "$subs $opts"
            return
        elif ((cmdpos && npos >= cmdpos)); then
            _redlock_run_command_line "${at[cword]}" "$2"
        elif ((npos <= positionals || repeats)); then
            ((npos > positionals)) && npos=$positionals
            _redlock_run_value "$path:#$npos" "$cur"
            _redlock_run_fit "$cur" "$2"
        fi
        if ((sub)) && [[ -n $subs ]]; then
            mapfile -t -O "${#COMPREPLY[@]}" COMPREPLY < <(compgen -W "$subs" -- "$cur")
        fi
    fi
}

complete -F _redlock_run redlock-run
