//! Shell completions: what a value completes to, read off the clap
//! definition; the bash and zsh scripts, written here from the `Command`; the
//! fixes clap_complete's fish script needs (elvish and PowerShell are
//! clap_complete's, given the same value hints); and tests that run the
//! checked-in scripts in real shells.
//!
//! Why not clap_complete for bash and zsh: redlock-run is used like env(1),
//! timeout(1) and flock(1), options and then a command with completions of
//! its own, and clap_complete knows nothing of that. Its bash script offers
//! redlock-run's flags after `--`, falls back to file names for every value
//! (`-o default`), and mangles a hyphenated program's subcommand case labels
//! so that nothing completes after `status`; its zsh script reads the first
//! word as the command and offers the top-level flags after `status`.
//! Patching that output would be larger and more brittle than the small,
//! table-driven scripts below, written from the same `Command` so that a new
//! flag needs no hand edit.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command as Process, Stdio};

use clap::builder::PossibleValue;
use clap::{Arg, ArgAction, Command, ValueHint};
use clap_complete::{Generator, Shell};
use redlock_run::cli;

use crate::support::tempdir;

/// What `-r/--redis` URLs start with, offered as a value starts: every form
/// a node may take.
pub const URL_SCHEMES: [&str; 7] = [
    "redis://",
    "rediss://",
    "unix://",
    "redis+sentinel://",
    "redis+cluster://",
    "rediss+sentinel://",
    "rediss+cluster://",
];

/// What the value of an option (or a positional) completes to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Values {
    /// These words and nothing else: possible values, or the lowercase words
    /// of a value name (`DURATION|forever`). None for a duration, a name or a
    /// number: anything can be typed, and file names would be wrong.
    Words(Vec<(String, Option<String>)>),
    Files,
    Dirs,
    Commands,
    /// A command and its arguments: completed by that command's completion.
    CommandLine,
    Urls,
    Hosts,
    Users,
}

/// Reads what a value is from the definition: its possible values, else its
/// value hint, else its value name, so that a new `--foo FILE` or
/// `--bar DURATION` completes right with no change here.
pub fn values(arg: &Arg) -> Values {
    let possible: Vec<PossibleValue> = if arg.get_action().takes_values() {
        arg.get_possible_values()
    } else {
        Vec::new()
    };
    let possible: Vec<_> = possible
        .iter()
        .filter(|v| !v.is_hide_set())
        .map(|v| {
            (
                v.get_name().to_string(),
                v.get_help().map(|h| h.to_string()),
            )
        })
        .collect();
    if !possible.is_empty() {
        return Values::Words(possible);
    }
    // `DURATION|forever`: the capitalised part stands for what to type, the
    // lowercase part is typed as written.
    let names: Vec<String> = arg
        .get_value_names()
        .map(|n| n.iter().map(|s| s.to_string()).collect())
        .unwrap_or_default();
    let alternatives: Vec<&str> = names.iter().flat_map(|n| n.split('|')).collect();
    let literals: Vec<(String, Option<String>)> = alternatives
        .iter()
        .filter(|a| !a.is_empty() && !a.chars().any(|c| c.is_ascii_uppercase()))
        .map(|a| (a.to_string(), None))
        .collect();
    match arg.get_value_hint() {
        ValueHint::AnyPath | ValueHint::FilePath | ValueHint::ExecutablePath => Values::Files,
        ValueHint::DirPath => Values::Dirs,
        ValueHint::CommandName | ValueHint::CommandString => Values::Commands,
        ValueHint::CommandWithArguments => Values::CommandLine,
        ValueHint::Url => Values::Urls,
        ValueHint::Hostname => Values::Hosts,
        ValueHint::Username => Values::Users,
        ValueHint::Unknown => {
            let placeholders = alternatives
                .iter()
                .filter(|a| a.chars().any(|c| c.is_ascii_uppercase()))
                .flat_map(|a| a.split(|c: char| !c.is_ascii_alphanumeric()));
            for word in placeholders {
                match word {
                    "FILE" | "PATH" => return Values::Files,
                    "DIR" | "DIRECTORY" => return Values::Dirs,
                    "URL" => return Values::Urls,
                    "COMMAND" | "CMD" | "PROGRAM" => return Values::Commands,
                    "HOST" | "HOSTNAME" => return Values::Hosts,
                    "USER" | "USERNAME" => return Values::Users,
                    _ => {}
                }
            }
            Values::Words(literals)
        }
        _ => Values::Words(literals),
    }
}

/// The value hint that says to clap_complete's shells what `values` says,
/// where the definition leaves it unsaid (no hint: those shells offer file
/// names for a duration).
fn hint_for(arg: &Arg) -> Option<ValueHint> {
    if !arg.get_action().takes_values() || arg.get_value_hint() != ValueHint::Unknown {
        return None;
    }
    Some(match values(arg) {
        Values::Files => ValueHint::AnyPath,
        Values::Dirs => ValueHint::DirPath,
        Values::Commands => ValueHint::CommandName,
        Values::CommandLine => ValueHint::CommandWithArguments,
        Values::Urls => ValueHint::Url,
        Values::Hosts => ValueHint::Hostname,
        Values::Users => ValueHint::Username,
        Values::Words(_) => ValueHint::Other,
    })
}

/// `cmd` and its subcommands with every value hint spelled out.
fn with_hints(cmd: Command) -> Command {
    let names: Vec<String> = cmd
        .get_subcommands()
        .map(|s| s.get_name().to_string())
        .collect();
    let mut cmd = cmd.mut_args(|a| match hint_for(&a) {
        Some(hint) => a.value_hint(hint),
        None => a,
    });
    for name in names {
        cmd = cmd.mut_subcommand(name, with_hints);
    }
    cmd
}

/// Every completion script, by file name under `completions/`.
pub fn scripts(bin: &str) -> Vec<(String, Vec<u8>)> {
    let mut out = vec![(Shell::Bash.file_name(bin), bash(bin).into_bytes())];
    out.push((Shell::Zsh.file_name(bin), zsh(bin).into_bytes()));
    for shell in [Shell::Fish, Shell::Elvish, Shell::PowerShell] {
        let mut buf = Vec::new();
        clap_complete::generate(shell, &mut with_hints(cli::command()), bin, &mut buf);
        buf = without_hidden(shell, bin, buf);
        if shell == Shell::Fish {
            buf = fish_fixes(bin, buf);
        }
        out.push((shell.file_name(bin), buf));
    }
    out
}

/// clap_complete's script without the options the definition hides
/// (`--timeout`, which is there only to be refused with a better message):
/// a completion must not offer what the program refuses. Each removal is
/// checked to have applied.
fn without_hidden(shell: Shell, bin: &str, script: Vec<u8>) -> Vec<u8> {
    let text = String::from_utf8(script).expect("the script is UTF-8");
    let mut cmd = cli::command().bin_name(bin);
    cmd.build();
    let mut all = Vec::new();
    contexts(&cmd, bin, &mut all);
    let hidden: BTreeSet<String> = all
        .iter()
        .flat_map(|c| c.cmd.get_arguments().filter(|a| a.is_hide_set()))
        .filter_map(|a| a.get_long().map(str::to_string))
        .collect();
    let mut lines: Vec<&str> = text.lines().collect();
    for long in &hidden {
        let offers = |l: &str| match shell {
            Shell::Fish => {
                l.starts_with("complete -c ")
                    && (l.contains(&format!(" -l {long} ")) || l.ends_with(&format!(" -l {long}")))
            }
            Shell::Elvish => l.trim_start().starts_with(&format!("cand --{long} ")),
            Shell::PowerShell => l.contains(&format!("[CompletionResult]::new('--{long}',")),
            _ => false,
        };
        let before = lines.len();
        lines.retain(|l| !offers(l));
        assert!(
            lines.len() < before,
            "{shell}: no line offered the hidden --{long}; clap_complete changed"
        );
    }
    let mut out = lines.join("\n");
    out.push('\n');
    out.into_bytes()
}

// ---------------------------------------------------------------- bash

/// The separator of a list value: clap's, or a comma for `--redis`, which
/// the program splits itself (a Cluster's seeds and a Sentinel group's
/// sentinels are comma-separated inside one URL, so clap must not split it).
fn delimiter(arg: &clap::Arg) -> Option<char> {
    arg.get_value_delimiter()
        .or_else(|| (arg.get_value_hint() == clap::ValueHint::Url).then_some(','))
}

/// One command or subcommand, named by its path (`redlock-run status`).
struct Context {
    path: String,
    cmd: Command,
}

fn contexts(cmd: &Command, path: &str, out: &mut Vec<Context>) {
    out.push(Context {
        path: path.to_string(),
        cmd: cmd.clone(),
    });
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        contexts(sub, &format!("{path} {}", sub.get_name()), out);
    }
}

fn options(cmd: &Command) -> impl Iterator<Item = &Arg> {
    cmd.get_arguments()
        .filter(|a| !a.is_positional() && !a.is_hide_set())
}

/// `-k`, `--key` and their visible aliases.
fn spellings(arg: &Arg) -> Vec<String> {
    let shorts = arg.get_short_and_visible_aliases().unwrap_or_default();
    let longs = arg.get_long_and_visible_aliases().unwrap_or_default();
    shorts
        .into_iter()
        .map(|c| format!("-{c}"))
        .chain(longs.into_iter().map(|l| format!("--{l}")))
        .collect()
}

/// Whether the word after this option is its value. The script walks the
/// line one word per value: an option taking several would throw it off, so
/// such a definition stops the generator instead of generating nonsense.
fn takes_value(arg: &Arg) -> bool {
    if !arg.get_action().takes_values() {
        return false;
    }
    let range = arg.get_num_args().expect("the command is built");
    assert!(
        range.min_values() == 1 && range.max_values() == 1,
        "--{}: the bash generator walks one value per option, this one takes {range:?}; teach it",
        arg.get_long().unwrap_or_default()
    );
    true
}

/// A word put into the script as it is: nothing in it that the shell (or
/// `compgen -W`, which expands its word list) would read.
fn plain(word: &str) -> &str {
    assert!(
        !word.is_empty()
            && word
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.,:/+@%=".contains(c)),
        "{word:?} needs quoting the bash generator does not do"
    );
    word
}

fn words(list: impl IntoIterator<Item = impl AsRef<str>>) -> String {
    list.into_iter()
        .map(|w| plain(w.as_ref()).to_string())
        .collect::<Vec<_>>()
        .join(" ")
}

/// The shell code that completes a value of this kind: sets COMPREPLY from `$val`.
fn bash_action(values: &Values) -> String {
    match values {
        Values::Words(w) if w.is_empty() => {
            "# free text (a duration, a name, a number): nothing to offer".to_string()
        }
        Values::Words(w) => format!("_redlock_run_words '{}'", words(w.iter().map(|(w, _)| w))),
        Values::Files => "_redlock_run_files -f".into(),
        Values::Dirs => "_redlock_run_files -d".into(),
        Values::Commands => "_redlock_run_compgen -c".into(),
        // Only reached for a positional that does not start the command line.
        Values::CommandLine => "_redlock_run_compgen -c".into(),
        Values::Urls => "_redlock_run_urls".into(),
        Values::Hosts => "_redlock_run_compgen -A hostname".into(),
        Values::Users => "_redlock_run_compgen -u".into(),
    }
}

/// Case arms: patterns grouped by the code they run, in definition order.
fn case_arms(arms: &[(String, String)]) -> String {
    let mut grouped: Vec<(&str, Vec<&str>)> = Vec::new();
    for (key, action) in arms {
        match grouped.iter_mut().find(|(a, _)| a == action) {
            Some((_, keys)) => keys.push(key),
            None => grouped.push((action, vec![key])),
        }
    }
    let mut out = String::new();
    for (action, keys) in grouped {
        let patterns: Vec<String> = keys.iter().map(|k| format!("'{k}'")).collect();
        let _ = writeln!(out, "    {})", patterns.join(" | \\\n    "));
        let _ = writeln!(out, "        {action}\n        ;;");
    }
    out
}

/// `completions/<bin>.bash`.
pub fn bash(bin: &str) -> String {
    let mut cmd = cli::command().bin_name(bin);
    cmd.build();
    let mut all = Vec::new();
    contexts(&cmd, bin, &mut all);

    let mut spec = String::new();
    let mut lists = Vec::new();
    let mut arms = Vec::new();
    for Context { path, cmd } in &all {
        let opts: Vec<String> = options(cmd).flat_map(spellings).collect();
        let valued: Vec<&Arg> = options(cmd).filter(|a| takes_value(a)).collect();
        let takes: Vec<String> = valued
            .iter()
            .flat_map(|a| a.get_long_and_visible_aliases().unwrap_or_default())
            .map(|l| format!("--{l}"))
            .collect();
        let letters: String = valued
            .iter()
            .flat_map(|a| a.get_short_and_visible_aliases().unwrap_or_default())
            .collect();
        let subs: Vec<&str> = cmd
            .get_subcommands()
            .filter(|s| !s.is_hide_set())
            .flat_map(|s| s.get_name_and_visible_aliases())
            .collect();
        let positionals: Vec<&Arg> = cmd.get_positionals().filter(|a| !a.is_hide_set()).collect();
        let repeats = positionals.last().is_some_and(|a| {
            a.get_num_args().expect("built").max_values() > 1
                || matches!(a.get_action(), ArgAction::Append)
        });
        let command_line = positionals
            .iter()
            .position(|a| values(a) == Values::CommandLine)
            .map_or(0, |i| i + 1);
        // Only what differs from the defaults _redlock_run_spec starts from.
        let mut fields = Vec::new();
        for (name, value) in [
            ("opts", words(&opts)),
            (
                "takes",
                if takes.is_empty() {
                    String::new()
                } else {
                    format!(" {} ", words(&takes))
                },
            ),
            (
                "letters",
                words(letters.chars().map(String::from)).replace(' ', ""),
            ),
            ("subs", words(&subs)),
        ] {
            if !value.is_empty() {
                fields.push(format!("{name}='{value}'"));
            }
        }
        let mut numbers = Vec::new();
        for (name, n) in [
            (
                "first",
                usize::from(cmd.is_args_conflicts_with_subcommands_set()),
            ),
            ("positionals", positionals.len()),
            ("repeats", usize::from(repeats)),
            ("cmdpos", command_line),
        ] {
            if n != 0 {
                numbers.push(format!("{name}={n}"));
            }
        }
        if !numbers.is_empty() {
            fields.push(numbers.join(" "));
        }
        if !fields.is_empty() {
            let _ = writeln!(spec, "    '{path}')");
            for f in fields {
                let _ = writeln!(spec, "        {f}");
            }
            let _ = writeln!(spec, "        ;;");
        }
        for arg in valued {
            let action = bash_action(&values(arg));
            for s in spellings(arg) {
                let key = format!("{path}:{s}");
                if let Some(d) = delimiter(arg) {
                    lists.push((key.clone(), d));
                }
                arms.push((key, action.clone()));
            }
        }
        for (i, arg) in positionals.iter().enumerate() {
            arms.push((format!("{path}:#{}", i + 1), bash_action(&values(arg))));
        }
    }
    let mut delimited = String::new();
    let delimiters: BTreeSet<char> = lists.iter().map(|(_, d)| *d).collect();
    for d in delimiters {
        let d = plain(&d.to_string()).to_string();
        let keys: Vec<(String, String)> = lists
            .iter()
            .filter(|(_, x)| x.to_string() == d)
            .map(|(k, _)| {
                (
                    k.clone(),
                    format!("lead=${{val%\"${{val##*{d}}}\"}} val=${{val##*{d}}}"),
                )
            })
            .collect();
        delimited.push_str(&case_arms(&keys));
    }
    let schemes = words(URL_SCHEMES);
    BASH.replace("@BIN@", bin)
        .replace("@SPEC@", spec.trim_end())
        .replace("@LISTS@", delimited.trim_end())
        .replace("@VALUES@", case_arms(&arms).trim_end())
        .replace("@SCHEMES@", &schemes)
}

/// The script around the tables. `@NAME@` marks what `bash` fills in.
const BASH: &str = r#"# bash completion for @BIN@                          -*- shell-script -*-
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
@SPEC@
    esac
}

# Sets COMPREPLY to the whole values that $2, a value of $1 (PATH:-o,
# PATH:--option, or PATH:#N for the Nth positional), can be completed to.
_redlock_run_value()
{
    local val=$2 lead= i
    # A list: complete its last item.
    case $1 in
@LISTS@
    esac
    case $1 in
@VALUES@
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
    _redlock_run_words '@SCHEMES@'
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
    local path=@BIN@ pending= seen=0 npos=0 dashdash=0
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

complete -F _redlock_run @BIN@
"#;

// ---------------------------------------------------------------- zsh

/// Text in single quotes, for the zsh source.
fn zsh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// A help text inside an `_arguments` spec's `[...]`.
fn zsh_help(s: &str) -> String {
    s.replace('\n', " ")
        .replace('\\', r"\\")
        .replace('[', r"\[")
        .replace(']', r"\]")
        .replace(':', r"\:")
}

/// The `_arguments` action that completes a value of this kind.
fn zsh_action(values: &Values, delimiter: Option<char>) -> String {
    let word_list = |w: &[(String, Option<String>)]| words(w.iter().map(|(w, _)| w));
    let function = match values {
        Values::Words(w) if w.is_empty() => return " ".into(),
        Values::Words(w) if delimiter.is_some() => format!("compadd - {}", word_list(w)),
        Values::Words(w) if w.iter().any(|(_, h)| h.is_some()) => {
            let pairs: Vec<String> = w
                .iter()
                .map(|(w, h)| {
                    let help = h.as_deref().unwrap_or_default();
                    let help = help
                        .replace('\\', r"\\")
                        .replace('"', "\\\"")
                        .replace('$', r"\$")
                        .replace('`', r"\`");
                    format!("{}\\:\"{help}\"", plain(w))
                })
                .collect();
            return format!("(({}))", pairs.join(" "));
        }
        Values::Words(w) => return format!("({})", word_list(w)),
        Values::Files => "_files".into(),
        Values::Dirs => "_files -/".into(),
        Values::Commands | Values::CommandLine => "_command_names -e".into(),
        Values::Urls => "_redlock-run__urls".into(),
        Values::Hosts => "_hosts".into(),
        Values::Users => "_users".into(),
    };
    match delimiter {
        Some(d) => format!("_sequence -s {} {function}", plain(&d.to_string())),
        None => function,
    }
}

/// One `_arguments` spec per option: its spellings, those it excludes, its
/// help and how its value completes.
fn zsh_option(cmd: &Command, arg: &Arg) -> String {
    let repeats = matches!(arg.get_action(), ArgAction::Append | ArgAction::Count);
    let value = takes_value(arg);
    let mut forms: Vec<String> = Vec::new();
    if let Some(s) = arg.get_short() {
        forms.push(format!("-{s}{}", if value { "+" } else { "" }));
    }
    if let Some(l) = arg.get_long() {
        forms.push(format!("--{l}{}", if value { "=" } else { "" }));
    }
    let mut excluded: Vec<String> = Vec::new();
    if !repeats {
        excluded.extend(spellings(arg));
    }
    for other in cmd.get_arg_conflicts_with(arg) {
        excluded.extend(spellings(other));
    }
    let lead = if repeats {
        "*".to_string()
    } else {
        String::new()
    };
    let exclusion = if excluded.is_empty() {
        String::new()
    } else {
        format!("({})", excluded.join(" "))
    };
    let help = zsh_help(&arg.get_help().map(|h| h.to_string()).unwrap_or_default());
    let mut rest = format!("[{help}]");
    if value {
        let name = arg
            .get_value_names()
            .and_then(|n| n.first().map(|n| n.to_string()))
            .unwrap_or_default();
        let _ = write!(
            rest,
            ":{}:{}",
            zsh_help(&name),
            zsh_action(&values(arg), delimiter(arg))
        );
    }
    // `-k+` and `--key=` need no quotes; brace expansion gives each the rest.
    let forms = if forms.len() > 1 {
        format!("{{{}}}", forms.join(","))
    } else {
        forms.concat()
    };
    let head = format!("{exclusion}{lead}");
    let head = if head.is_empty() {
        head
    } else {
        zsh_quote(&head)
    };
    format!("{head}{forms}{}", zsh_quote(&rest))
}

/// The zsh function for the (sub)command at `path`.
fn zsh_function(bin: &str, path: &str) -> String {
    let rest: Vec<&str> = path.split(' ').skip(1).collect();
    if rest.is_empty() {
        format!("_{bin}")
    } else {
        format!("_{bin}__{}", rest.join("__"))
    }
}

/// `completions/_<bin>`.
pub fn zsh(bin: &str) -> String {
    let mut cmd = cli::command().bin_name(bin);
    cmd.build();
    let mut all = Vec::new();
    contexts(&cmd, bin, &mut all);
    let mut functions = String::new();
    for Context { path, cmd } in &all {
        let name = zsh_function(bin, path);
        let subs: Vec<&Command> = cmd.get_subcommands().filter(|s| !s.is_hide_set()).collect();
        let positionals: Vec<&Arg> = cmd.get_positionals().filter(|a| !a.is_hide_set()).collect();
        let command_line = positionals.iter().any(|a| values(a) == Values::CommandLine);
        // What the script knows to do: a subcommand first, then either a
        // command line or nothing. Anything else stops the generator here.
        assert!(
            subs.is_empty()
                || (cmd.is_args_conflicts_with_subcommands_set() || options(cmd).next().is_none())
                    && (positionals.is_empty() || command_line && positionals.len() == 1),
            "{path}: the zsh generator has no rule for these subcommands and positionals; teach it"
        );
        let mut specs: Vec<String> = options(cmd).map(|a| zsh_option(cmd, a)).collect();
        for (i, arg) in positionals.iter().enumerate() {
            let last = i + 1 == positionals.len();
            let repeats = arg.get_num_args().expect("built").max_values() > 1;
            if values(arg) == Values::CommandLine {
                specs.push(format!("'*:: :_{bin}__command'"));
            } else {
                let name = arg
                    .get_value_names()
                    .and_then(|n| n.first().map(|n| n.to_string()))
                    .unwrap_or_default();
                let position = if last && repeats {
                    "*".to_string()
                } else {
                    (i + 1).to_string()
                };
                specs.push(zsh_quote(&format!(
                    "{position}:{}:{}",
                    zsh_help(&name),
                    zsh_action(&values(arg), delimiter(arg))
                )));
            }
        }
        if !subs.is_empty() && !command_line {
            specs.push("'1: :{_describe -t subcommands subcommand subcommands}'".to_string());
        }
        // Not the entry point: autoloaded, its file is its body, and the
        // definition must replace that body.
        if name != format!("_{bin}") {
            let _ = writeln!(functions, "(( $+functions[{name}] )) ||");
        }
        let _ = writeln!(functions, "{name}() {{");
        if !subs.is_empty() {
            functions.push_str("    local -a subcommands=(\n");
            for sub in &subs {
                let about = sub.get_about().map(|a| a.to_string()).unwrap_or_default();
                for n in sub.get_name_and_visible_aliases() {
                    let entry = format!("{}:{}", plain(n), about.replace('\n', " "));
                    let _ = writeln!(functions, "        {}", zsh_quote(&entry));
                }
            }
            let _ = write!(
                functions,
                r#"    )
    # Only the word right after the (sub)command's name: clap takes a
    # subcommand's name anywhere else for an argument.
    if (( CURRENT > 2 )) && (( ${{subcommands[(I)${{(b)words[2]}}:*]}} )); then
        local sub={name}__${{words[2]}}
        shift words
        (( CURRENT-- ))
        curcontext="${{curcontext%:*:*}}:{}-${{words[1]}}:"
        $sub
        return
    fi
    local first=$(( CURRENT == 2 ))
"#,
                path.replace(' ', "-")
            );
        }
        if specs.is_empty() {
            functions.push_str("    _message 'no more arguments'\n}\n\n");
            continue;
        }
        // With a command to run, its words are its own: no options after it.
        let flags = if command_line {
            "-s -S -A '-*'"
        } else {
            "-s -S"
        };
        let _ = writeln!(functions, "    _arguments {flags} : \\");
        let _ = writeln!(functions, "        {}", specs.join(" \\\n        "));
        functions.push_str("}\n\n");
    }
    ZSH.replace("@BIN@", bin)
        .replace("@FUNCTIONS@", functions.trim_end())
        .replace("@SCHEMES@", &words(URL_SCHEMES))
}

const ZSH: &str = r#"#compdef @BIN@
# zsh completion for @BIN@
#
# Generated from the clap definition in src/cli.rs by tests/integration/completion.rs;
# do not edit. After a change to the definition, run
#     REDLOCK_REGENERATE=1 cargo test --test integration generated

@FUNCTIONS@

# The command to run and its arguments, completed as if typed alone (right
# after the program's name, a subcommand too).
(( $+functions[_@BIN@__command] )) ||
_@BIN@__command() {
    # The first word: a subcommand (or an option, through _arguments); a
    # command to run comes after -- or after the options.
    if (( CURRENT == 1 && first )); then
        _describe -t subcommands subcommand subcommands
        return
    fi
    # Right after the program's name, _arguments leaves the -- in.
    if [[ $words[1] == -- ]]; then
        shift words
        (( CURRENT-- ))
    fi
    _normal
}

# The scheme; the rest is the user's, so no space after it.
(( $+functions[_@BIN@__urls] )) ||
_@BIN@__urls() {
    compadd -S '' -- @SCHEMES@
}

if [ "$funcstack[1]" = "_@BIN@" ]; then
    _@BIN@ "$@"
else
    compdef _@BIN@ @BIN@
fi
"#;

// ---------------------------------------------------------------- fish

/// clap_complete's fish script, with what it gets wrong about redlock-run
/// put right; every change is checked to have applied, so that a new
/// clap_complete that writes the script differently fails here instead of
/// shipping a script that is silently broken again.
fn fish_fixes(bin: &str, script: Vec<u8>) -> Vec<u8> {
    let name = bin.replace('-', "_");
    let mut text = String::from_utf8(script).expect("fish script is UTF-8");
    let guard = format!(
        "    argparse -s (__fish_{name}_global_optspecs) -- $cmd 2>/dev/null\n    or return\n"
    );
    // argparse fails while an option still waits for its value, which made
    // every top-level entry, that option's values included, go away and
    // fish fall back to file names. After `--`, what follows is the command.
    let fixed = format!(
        "    argparse -s (__fish_{name}_global_optspecs) -- $cmd 2>/dev/null\n    or return 0\n    contains -- -- $cmd\n    and return 1\n"
    );
    assert!(text.contains(&guard), "clap_complete's fish guard changed");
    text = text.replace(&guard, &fixed);

    let mut cmd = cli::command().bin_name(bin);
    cmd.build();
    let mut extra = String::new();
    // The URL schemes, as bash offers them.
    let mut all = Vec::new();
    contexts(&cmd, bin, &mut all);
    for Context { path, cmd } in &all {
        let condition = match path.strip_prefix(bin).map(str::trim) {
            Some("") => format!("__fish_{name}_needs_command"),
            Some(sub) if !sub.contains(' ') => format!("__fish_{name}_using_subcommand {sub}"),
            _ => continue,
        };
        for arg in options(cmd).filter(|a| values(a) == Values::Urls) {
            let mut line = format!("complete -c {bin} -n \"{condition}\"");
            if let Some(s) = arg.get_short() {
                let _ = write!(line, " -s {s}");
            }
            if let Some(l) = arg.get_long() {
                let _ = write!(line, " -l {l}");
            }
            let _ = writeln!(line, " -r -f -a '{}'", words(URL_SCHEMES));
            extra.push_str(&line);
        }
    }
    let subs = words(
        cmd.get_subcommands()
            .filter(|s| !s.is_hide_set())
            .flat_map(|s| s.get_name_and_visible_aliases()),
    );
    let _ = write!(
        extra,
        r#"
# The command to run: after `--`, or the first word after the options that
# is not one. The first word of all is a subcommand or an option: commands
# are not offered there. Prints the command's words typed so far; fails
# where no command is being typed.
function __fish_{name}_command_words
    set -l tokens (commandline -opc)
    set -e tokens[1]
    argparse -s (__fish_{name}_global_optspecs) -- $tokens 2>/dev/null
    or return 1
    if set -q argv[1]
        if test "$argv[1]" = "$tokens[1]"; and contains -- $argv[1] {subs}
            return 1
        end
    else if not contains -- -- $tokens
        set -q tokens[1]
        or return 1
        string match -q -- '-*' (commandline -ct)
        and return 1
    end
    set -q argv[1]
    and printf '%s\n' $argv
    return 0
end

# Completes it as if it were typed alone: command names, then its own completion.
function __fish_{name}_complete_command
    set -l words (__fish_{name}_command_words)
    complete -C (string join ' ' -- (string escape -- $words) (commandline -ct))
end

complete -c {bin} -n "__fish_{name}_command_words >/dev/null" -f -a "(__fish_{name}_complete_command)"
"#
    );
    text.push_str(&extra);
    text.into_bytes()
}

// ---------------------------------------------------------------- tests

const BIN: &str = "redlock-run";
const BASH_COMPLETION: &str = "/usr/share/bash-completion/bash_completion";

fn checked_in(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("completions")
        .join(name)
}

/// Fails, naming the package, when a shell the tests need is missing:
/// a test that skips would pass on a machine that checks nothing.
fn require(program: &str, package: &str) {
    let found = Process::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        found,
        "{program} is not installed; the completion tests need it (apt-get install {package}; .ci/run installs it)"
    );
}

/// A command line as readline gives it to a completion function: COMP_WORDS
/// split at blanks and at COMP_WORDBREAKS' `:` and `=` (each a word of its
/// own), the cursor at the end, and the word to replace ($2): what follows
/// the last break.
struct Line {
    words: Vec<String>,
    word: String,
}

fn readline_split(line: &str) -> Line {
    let mut words: Vec<String> = Vec::new();
    for token in line.split_whitespace() {
        let mut current = String::new();
        for c in token.chars() {
            if c == ':' || c == '=' {
                if !current.is_empty() {
                    words.push(std::mem::take(&mut current));
                }
                words.push(c.to_string());
            } else {
                current.push(c);
            }
        }
        if !current.is_empty() {
            words.push(current);
        }
    }
    let word = if line.is_empty() || line.ends_with(char::is_whitespace) {
        words.push(String::new());
        String::new()
    } else if line.ends_with([':', '=']) {
        String::new()
    } else {
        words.last().cloned().unwrap_or_default()
    };
    Line { words, word }
}

/// A shell word: single-quoted.
fn sq(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// What the completion function offered for one command line: COMPREPLY,
/// and the options it set with compopt.
#[derive(Debug, Default)]
struct Reply {
    words: Vec<String>,
    compopt: Vec<String>,
}

impl Reply {
    fn has(&self, w: &str) -> bool {
        self.words.iter().any(|x| x == w)
    }
}

/// Runs the completion function of the checked-in script once per line, in
/// one `bash --norc --noprofile` working in `dir`, after sourcing
/// bash-completion when `with_bc`. `setup` runs first (a fake command's
/// completion, for instance). Returns `complete -p redlock-run` and the
/// replies.
fn complete_bash(dir: &Path, with_bc: bool, setup: &str, lines: &[&str]) -> (String, Vec<Reply>) {
    require("bash", "bash");
    let mut script = String::new();
    if with_bc {
        assert!(
            Path::new(BASH_COMPLETION).exists(),
            "{BASH_COMPLETION} is missing; the completion tests need it \
             (apt-get install bash-completion; .ci/run installs it)"
        );
        let _ = writeln!(script, "source {BASH_COMPLETION}");
    }
    let _ = writeln!(
        script,
        "source {}\nspec=$(complete -p {BIN}) || exit 3\nprintf 'spec\\t%s\\n' \"$spec\"\n\
         func=${{spec#* -F }} func=${{func%% *}}",
        sq(&checked_in("redlock-run.bash").display().to_string())
    );
    // Outside readline compopt only complains; record what was asked instead.
    script.push_str("compopt() { printf 'compopt\\t%s\\n' \"$*\"; }\n");
    script.push_str(setup);
    script.push('\n');
    for line in lines {
        let Line { words, word } = readline_split(line);
        let quoted: Vec<String> = words.iter().map(|w| sq(w)).collect();
        let cword = words.len() - 1;
        let prev = if cword > 0 {
            words[cword - 1].as_str()
        } else {
            ""
        };
        let _ = writeln!(
            script,
            "echo case\nCOMP_WORDS=({}) COMP_CWORD={cword} COMP_LINE={} COMP_POINT={} COMPREPLY=()\n\
             \"$func\" {BIN} {} {}\nprintf 'reply\\t%s\\n' \"${{COMPREPLY[@]}}\"",
            quoted.join(" "),
            sq(line),
            line.len(),
            sq(&word),
            sq(prev),
        );
    }
    let out = Process::new("bash")
        .args(["--norc", "--noprofile", "-c", &script])
        .current_dir(dir)
        .output()
        .expect("run bash");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "bash failed: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let mut spec = String::new();
    let mut replies: Vec<Reply> = Vec::new();
    for l in stdout.lines() {
        match l.split_once('\t') {
            _ if l == "case" => replies.push(Reply::default()),
            Some(("spec", s)) => spec = s.to_string(),
            Some(("reply", w)) if !w.is_empty() => replies.last_mut().unwrap().words.push(w.into()),
            Some(("compopt", o)) => {
                if let Some(r) = replies.last_mut() {
                    r.compopt.push(o.into());
                }
            }
            _ => {}
        }
    }
    assert_eq!(replies.len(), lines.len(), "one reply per line:\n{stdout}");
    (spec, replies)
}

/// Collects every failed expectation, so that one run shows them all.
#[derive(Default)]
struct Checks(Vec<String>);

impl Checks {
    fn check(&mut self, line: &str, reply: &Reply, ok: bool, what: &str) {
        if !ok {
            self.0.push(format!(
                "`{line}<TAB>` should offer {what}; got {:?} (compopt {:?})",
                reply.words, reply.compopt
            ));
        }
    }

    fn assert_none(self, shell: &str) {
        assert!(
            self.0.is_empty(),
            "{shell} completion, {} failure(s):\n  {}",
            self.0.len(),
            self.0.join("\n  ")
        );
    }
}

fn sorted(words: &[String]) -> Vec<String> {
    let mut w = words.to_vec();
    w.sort();
    w.dedup();
    w
}

fn strings<S: AsRef<str>>(words: impl IntoIterator<Item = S>) -> Vec<String> {
    let mut w: Vec<String> = words.into_iter().map(|s| s.as_ref().to_string()).collect();
    w.sort();
    w
}

/// A working directory with something for file completion to find.
fn files_dir() -> crate::support::TempDir {
    let dir = tempdir();
    fs::write(dir.join("report.json"), b"{}").expect("write");
    fs::write(dir.join("notes.txt"), b"").expect("write");
    fs::create_dir(dir.join("subdir")).expect("mkdir");
    dir
}

const FILES: [&str; 3] = ["report.json", "notes.txt", "subdir"];

fn offers_files(reply: &Reply) -> bool {
    // bash lists a directory without its slash, fish with it.
    reply.has("report.json")
        && reply
            .words
            .iter()
            .any(|w| w.trim_end_matches('/') == "subdir")
}

fn offers_no_files(reply: &Reply) -> bool {
    !reply
        .words
        .iter()
        .any(|w| FILES.contains(&w.trim_end_matches('/')))
}

/// Completion of the faketool command: what it was given, so the test can
/// see that the command line was handed over as if typed alone.
/// (bash-completion's _command_offset leaves the blank before the command in
/// COMP_LINE; completions do not care, nor does this one.)
const FAKETOOL: &str = r#"_faketool() {
    local line=${COMP_LINE#"${COMP_LINE%%[! ]*}"}
    COMPREPLY=("words=${COMP_WORDS[*]} cword=$COMP_CWORD line=$line")
}
complete -F _faketool faketool"#;

/// The cases the problem reports named, and a few around them.
fn bash_cases(with_bc: bool) {
    let dir = files_dir();
    let lines = [
        "redlock-run status --",
        "redlock-run unlock --to",
        "redlock-run -k x -- ec",
        "redlock-run -r ",
        "redlock-run --wait ",
        "redlock-run --report ",
        "redlock-run --log-format ",
        "redlock-run -k x -- faketool --ver",
        "redlock-run -k x faketool a ",
        "redlock-run -k x -- nosuchtool re",
        "redlock-run -r redis://h:6379 -k x -- ec",
        "redlock-run -r redis:",
        "redlock-run -r redis://a,re",
        "redlock-run --wait=",
        "redlock-run --log-format=j",
        "redlock-run -qvk job -- ec",
        "redlock-run -qk ",
        "redlock-run st",
        "redlock-run -k x st",
        "redlock-run -k x -c ec",
        "redlock-run help ",
        "redlock-run -",
        "redlock-run history --",
        "redlock-run --metrics-file ",
        "redlock-run --retry ",
        "redlock-run hi",
        "redlock-run ",
        "redlock-run -- ",
        "redlock-run -k x ",
        "redlock-run --ti",
    ];
    let (spec, r) = complete_bash(dir.path(), with_bc, FAKETOOL, &lines);
    let mut c = Checks::default();
    let no_flags = |r: &Reply| r.words.iter().all(|w| !w.starts_with('-'));
    let schemes = strings(URL_SCHEMES);
    // With -o default (or bashdefault) an empty reply falls back to file
    // names: the empty reply of a duration would offer them.
    if spec.contains("-o default") || spec.contains("-o bashdefault") {
        c.0.push(format!(
            "`{spec}`: an option value with nothing to offer falls back to file names"
        ));
    }
    let status_opts = [
        "--json",
        "--limit",
        "--key",
        "--prefix",
        "--redis",
        "--node-timeout",
    ];
    c.check(
        lines[0],
        &r[0],
        status_opts.iter().all(|o| r[0].has(o)) && !r[0].has("--ttl"),
        "status's options (--json --limit --key ...), not --ttl",
    );
    c.check(lines[1], &r[1], r[1].words == ["--token"], "--token");
    c.check(
        lines[2],
        &r[2],
        r[2].has("echo") && no_flags(&r[2]),
        "commands (echo), no flags",
    );
    c.check(
        lines[3],
        &r[3],
        sorted(&r[3].words) == schemes,
        "the URL schemes only",
    );
    c.check(
        lines[3],
        &r[3],
        r[3].compopt.iter().any(|o| o == "-o nospace"),
        "no space after a scheme (compopt -o nospace)",
    );
    c.check(
        lines[4],
        &r[4],
        offers_no_files(&r[4]) && r[4].words == ["forever"],
        "`forever` and no file names",
    );
    c.check(lines[5], &r[5], offers_files(&r[5]), "file names");
    c.check(
        lines[5],
        &r[5],
        r[5].compopt.iter().any(|o| o == "-o filenames"),
        "file names quoted as such (compopt -o filenames)",
    );
    c.check(
        lines[6],
        &r[6],
        sorted(&r[6].words) == ["json", "text"],
        "json text",
    );
    for (i, handed) in [
        (7, "words=faketool --ver cword=1 line=faketool --ver"),
        (8, "words=faketool a  cword=2 line=faketool a "),
    ] {
        c.check(
            lines[i],
            &r[i],
            r[i].words == [handed],
            &format!("faketool's own completion, given its command line alone ({handed:?})"),
        );
    }
    c.check(
        lines[9],
        &r[9],
        r[9].has("report.json") && no_flags(&r[9]),
        "file names, for a command without a completion",
    );
    c.check(
        lines[10],
        &r[10],
        r[10].has("echo") && no_flags(&r[10]),
        "commands: the colons of a URL do not shift the words",
    );
    c.check(
        lines[11],
        &r[11],
        r[11].words == ["//"],
        "`//`, the rest of redis://",
    );
    let after_comma: Vec<String> = URL_SCHEMES
        .iter()
        .filter(|s| s.starts_with("re"))
        .map(|s| format!("//a,{s}"))
        .collect::<Vec<_>>();
    c.check(
        lines[12],
        &r[12],
        sorted(&r[12].words) == strings(&after_comma),
        "the schemes for the list's next URL",
    );
    c.check(lines[13], &r[13], r[13].words == ["forever"], "forever");
    c.check(lines[14], &r[14], r[14].words == ["json"], "json");
    c.check(
        lines[15],
        &r[15],
        r[15].has("echo") && no_flags(&r[15]),
        "commands after short flags run together",
    );
    c.check(
        lines[16],
        &r[16],
        r[16].words.is_empty(),
        "nothing for the lock's name",
    );
    c.check(
        lines[17],
        &r[17],
        r[17].has("status"),
        "the subcommand status",
    );
    c.check(
        lines[18],
        &r[18],
        !r[18].has("status"),
        "commands but not the subcommand status, which clap takes for a command here",
    );
    c.check(lines[19], &r[19], r[19].has("echo"), "commands for -c");
    c.check(
        lines[20],
        &r[20],
        sorted(&r[20].words)
            == [
                "check", "config", "forget", "help", "history", "status", "unlock",
            ],
        "the subcommands help can explain",
    );
    c.check(
        lines[21],
        &r[21],
        r[21].has("-k") && r[21].has("--key") && r[21].has("--ttl") && !r[21].has("status"),
        "the options",
    );
    c.check(
        lines[22],
        &r[22],
        ["--json", "--count", "--key", "--redis"]
            .iter()
            .all(|o| r[22].has(o))
            && !r[22].has("--ttl")
            && !r[22].has("--limit"),
        "history's options (--json --count --key ...), not --ttl",
    );
    c.check(lines[23], &r[23], offers_files(&r[23]), "file names");
    c.check(
        lines[24],
        &r[24],
        r[24].words.is_empty(),
        "nothing for a number",
    );
    c.check(
        lines[25],
        &r[25],
        r[25].has("history"),
        "the subcommand history",
    );
    c.check(
        lines[26],
        &r[26],
        r[26].has("status") && r[26].has("check") && r[26].has("--key") && !r[26].has("echo"),
        "the subcommands and options, no command names",
    );
    c.check(
        lines[27],
        &r[27],
        r[27].has("echo") && !r[27].has("status"),
        "commands after --",
    );
    c.check(
        lines[28],
        &r[28],
        r[28].has("echo"),
        "commands after the options",
    );
    c.check(
        lines[29],
        &r[29],
        !r[29].has("--timeout"),
        "not --timeout, which the program refuses",
    );
    c.assert_none(if with_bc {
        "bash (with bash-completion)"
    } else {
        "bash"
    });
}

#[test]
fn bash_completes_commands_values_and_subcommands() {
    bash_cases(false);
}

#[test]
fn bash_completes_through_bash_completion() {
    bash_cases(true);
}

/// Every option of every (sub)command, its value as the definition says:
/// a flag added to src/cli.rs is checked here without a new line.
#[test]
fn bash_completes_every_option_of_the_definition() {
    let dir = files_dir();
    let mut cmd = cli::command().bin_name(BIN);
    cmd.build();
    let mut all = Vec::new();
    contexts(&cmd, BIN, &mut all);
    let mut lines: Vec<String> = Vec::new();
    let mut expect: Vec<(Option<Values>, Vec<String>)> = Vec::new();
    for Context { path, cmd } in &all {
        lines.push(format!("{path} --"));
        expect.push((
            None,
            strings(
                options(cmd)
                    .flat_map(spellings)
                    .filter(|s| s.starts_with("--")),
            ),
        ));
        for arg in options(cmd).filter(|a| takes_value(a)) {
            for s in spellings(arg) {
                lines.push(format!("{path} {s} "));
                expect.push((Some(values(arg)), Vec::new()));
            }
        }
    }
    let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
    let (_, r) = complete_bash(dir.path(), false, "", &refs);
    let mut c = Checks::default();
    for ((line, reply), (values, longs)) in lines.iter().zip(&r).zip(&expect) {
        match values {
            None => c.check(
                line,
                reply,
                sorted(&reply.words) == *longs,
                &format!("{longs:?}"),
            ),
            Some(Values::Files) => c.check(line, reply, offers_files(reply), "file names"),
            Some(Values::Dirs) => c.check(line, reply, reply.words == ["subdir"], "directories"),
            Some(Values::Urls) => c.check(
                line,
                reply,
                sorted(&reply.words) == strings(URL_SCHEMES),
                "the URL schemes",
            ),
            Some(Values::Words(w)) => c.check(
                line,
                reply,
                sorted(&reply.words) == strings(w.iter().map(|(w, _)| w)),
                &format!("exactly {:?}", w.iter().map(|(w, _)| w).collect::<Vec<_>>()),
            ),
            Some(Values::Commands) => c.check(line, reply, reply.has("echo"), "commands"),
            Some(other) => c.check(line, reply, !reply.words.is_empty(), &format!("{other:?}")),
        }
    }
    c.assert_none("bash");
}

// ---------------------------------------------------------------- fish and zsh

/// What each `complete -C` offered (descriptions dropped), from one fish
/// working in `dir`. `--no-config` keeps out every completion directory:
/// fish would otherwise autoload an installed redlock-run.fish (from
/// vendor_completions.d) over the one under test.
fn complete_fish(dir: &Path, setup: &str, lines: &[&str]) -> Vec<Reply> {
    require("fish", "fish");
    let script = format!(
        "source {}\n{setup}\nfor line in $argv\n    echo '<<case>>'\n    complete -C $line\nend\n",
        sq(&checked_in("redlock-run.fish").display().to_string())
    );
    let out = Process::new("fish")
        .args(["--no-config", "-c", &script])
        .args(lines)
        .current_dir(dir)
        .output()
        .expect("run fish");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stderr.trim().is_empty(),
        "fish failed: {}\n{stdout}\n{stderr}",
        out.status
    );
    replies(&stdout, lines.len())
}

/// Replies between `<<case>>` lines, one candidate a line, a description
/// after a tab dropped.
fn replies(stdout: &str, expected: usize) -> Vec<Reply> {
    let mut replies: Vec<Reply> = Vec::new();
    for l in stdout.lines() {
        if l == "<<case>>" {
            replies.push(Reply::default());
        } else if let Some(r) = replies.last_mut() {
            let word = l.split('\t').next().unwrap_or_default();
            if !word.is_empty() {
                r.words.push(word.to_string());
            }
        }
    }
    assert_eq!(replies.len(), expected, "one reply per line:\n{stdout}");
    replies
}

/// Loaded into `zsh -f -i`: compinit with the checked-in completions first in
/// fpath, TAB bound to a widget that completes and prints every match
/// offered, ^X to one that empties the line for the next case.
const ZSH_INIT: &str = r#"PROMPT='' RPROMPT=''
fpath=("$REDLOCK_COMPLETIONS" $fpath)
autoload -U compinit && compinit -u -D
# compadd calls that only collect matches for their caller (-O, -A, -D) are
# not offers; the others print what they add.
compadd() {
    if [[ ${(j: :)@[1,(i)(-|--)]} == *-[OAD]* ]]; then
        builtin compadd "$@"
        return
    fi
    local -a __hits
    builtin compadd -A __hits "$@"
    local __h
    for __h in $__hits; do print -r -- "<<match>>$__h"; done
    builtin compadd "$@"
}
_test_complete() {
    print -r -- '<<start>>'
    zle complete-word
    print -r -- '<<done>>'
}
_test_reset() {
    BUFFER=
    print -r -- '<<reset>>'
}
zle -N _test_complete
zle -N _test_reset
bindkey '^I' _test_complete
bindkey '^X' _test_reset
print -r -- '<<ready>>'
"#;

/// Types each line and a TAB into an interactive zsh on a terminal (ZLE
/// needs one), waiting for the markers ZSH_INIT prints rather than for a
/// time, and prints the matches of each case after a `<<case>>` line.
const ZSH_DRIVER: &str = r#"
import os, pty, select, sys, time
init, lines = sys.argv[1], sys.argv[2:]
pid, fd = pty.fork()
if pid == 0:
    os.environ["TERM"] = "dumb"
    os.execvp("zsh", ["zsh", "-f", "-i"])
buf = b""
def until(marker, limit=30):
    global buf
    end = time.time() + limit
    while marker not in buf:
        left = end - time.time()
        if left <= 0:
            sys.exit("no %r from zsh in %ds; last output: %r" % (marker, limit, buf[-2000:]))
        if select.select([fd], [], [], left)[0]:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                chunk = b""
            if not chunk:
                sys.exit("zsh exited; last output: %r" % buf[-2000:])
            buf += chunk
    i = buf.index(marker) + len(marker)
    out, buf = buf[:i], buf[i:]
    return out
os.write(fd, b"source '%s'\n" % init.encode())
until(b"<<ready>>")
for line in lines:
    os.write(fd, line.encode() + b"\t")
    out = until(b"<<done>>")
    print("<<case>>")
    for l in out[out.index(b"<<start>>"):].split(b"\n"):
        l = l.strip(b"\r")
        if l.startswith(b"<<match>>"):
            print(l[len(b"<<match>>"):].decode())
    os.write(fd, b"\x18")
    until(b"<<reset>>")
os.write(fd, b"exit\n")
"#;

fn complete_zsh(dir: &Path, setup: &str, lines: &[&str]) -> Vec<Reply> {
    require("zsh", "zsh");
    require("python3", "python3");
    let work = tempdir();
    let init = work.join("init.zsh");
    fs::write(&init, format!("{ZSH_INIT}{setup}\n")).expect("write init.zsh");
    let out = Process::new("python3")
        .arg("-c")
        .arg(ZSH_DRIVER)
        .arg(&init)
        .args(lines)
        .current_dir(dir)
        .env("REDLOCK_COMPLETIONS", checked_in(""))
        .env("HOME", work.path())
        .env("ZDOTDIR", work.path())
        .output()
        .expect("run python3");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "driving zsh failed: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    replies(&stdout, lines.len())
}

/// What both fish and zsh must get right, the cases of the problem reports.
fn other_shell_cases(shell: &str, run: impl Fn(&Path, &[&str]) -> Vec<Reply>) {
    let dir = files_dir();
    let lines = [
        "redlock-run status --",
        "redlock-run unlock --to",
        "redlock-run -k x -- ec",
        "redlock-run -r ",
        "redlock-run --wait ",
        "redlock-run --report ",
        "redlock-run --log-format ",
        "redlock-run -k x -- faketool ",
        "redlock-run -k x faketool ",
        "redlock-run st",
        "redlock-run status -r ",
        "redlock-run history --",
        "redlock-run --metrics-file ",
        "redlock-run ",
        "redlock-run -- ec",
        "redlock-run -k x ec",
        "redlock-run --ti",
    ];
    let r = run(dir.path(), &lines);
    let mut c = Checks::default();
    let no_flags = |r: &Reply| r.words.iter().all(|w| !w.starts_with('-'));
    let status_opts = [
        "--json",
        "--limit",
        "--key",
        "--prefix",
        "--redis",
        "--node-timeout",
    ];
    c.check(
        lines[0],
        &r[0],
        status_opts.iter().all(|o| r[0].has(o)) && !r[0].has("--ttl"),
        "status's options (--json --limit --key ...), not --ttl",
    );
    c.check(
        lines[1],
        &r[1],
        r[1].has("--token") && !r[1].has("--ttl"),
        "--token",
    );
    c.check(
        lines[2],
        &r[2],
        r[2].has("echo") && no_flags(&r[2]),
        "commands (echo), no flags",
    );
    c.check(
        lines[3],
        &r[3],
        sorted(&r[3].words) == strings(URL_SCHEMES),
        "the URL schemes only",
    );
    c.check(lines[4], &r[4], offers_no_files(&r[4]), "no file names");
    c.check(lines[5], &r[5], offers_files(&r[5]), "file names");
    c.check(
        lines[6],
        &r[6],
        sorted(&r[6].words) == ["json", "text"],
        "json text",
    );
    for i in [7, 8] {
        c.check(
            lines[i],
            &r[i],
            r[i].words == ["words=faketool"],
            "faketool's own completion, given its command line alone",
        );
    }
    c.check(lines[9], &r[9], r[9].has("status"), "the subcommand status");
    c.check(
        lines[10],
        &r[10],
        sorted(&r[10].words) == strings(URL_SCHEMES),
        "the URL schemes for status",
    );
    c.check(
        lines[11],
        &r[11],
        r[11].has("--json") && r[11].has("--count") && !r[11].has("--ttl"),
        "history's options (--json --count ...), not --ttl",
    );
    c.check(lines[12], &r[12], offers_files(&r[12]), "file names");
    c.check(
        lines[13],
        &r[13],
        r[13].has("status") && r[13].has("check") && !r[13].has("echo"),
        "the subcommands, no command names",
    );
    c.check(
        lines[14],
        &r[14],
        r[14].has("echo") && !r[14].has("check"),
        "commands after --",
    );
    c.check(
        lines[15],
        &r[15],
        r[15].has("echo"),
        "commands after the options",
    );
    c.check(
        lines[16],
        &r[16],
        !r[16].has("--timeout") && r[16].words.iter().all(|w| w.starts_with("--ti")),
        "not --timeout, which the program refuses",
    );
    c.assert_none(shell);
}

/// fish describes `status` as redlock-run's subcommand, not as fish's own
/// builtin of that name.
#[test]
fn fish_describes_status_as_the_subcommand() {
    require("fish", "fish");
    let script = format!(
        "source {}\ncomplete -C 'redlock-run '\n",
        sq(&checked_in("redlock-run.fish").display().to_string())
    );
    let out = Process::new("fish")
        .args(["--no-config", "-c", &script])
        .output()
        .expect("run fish");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let status: Vec<&str> = stdout
        .lines()
        .filter(|l| l.split('\t').next() == Some("status"))
        .collect();
    let about = cli::command()
        .find_subcommand("status")
        .and_then(|s| s.get_about().map(|a| a.to_string()))
        .expect("status's about");
    assert!(
        status.len() == 1 && about.starts_with(status[0].split('\t').nth(1).unwrap_or("-")),
        "{status:?}\n{stdout}"
    );
}

#[test]
fn fish_loads_and_completes() {
    // `complete -C` runs faketool's completion for the line handed over.
    let setup = "complete -c faketool -f -a '(echo words=(commandline -opc))'";
    other_shell_cases("fish", |dir, lines| complete_fish(dir, setup, lines));
}

#[test]
fn zsh_loads_and_completes() {
    require("zsh", "zsh");
    // Sourced as the README's install puts it in fpath, without an error.
    let out = Process::new("zsh")
        .args([
            "-f",
            "-c",
            &format!(
                "autoload -U compinit && compinit -u -D && source {} && print -r -- $_comps[{BIN}]",
                sq(&checked_in("_redlock-run").display().to_string())
            ),
        ])
        .output()
        .expect("run zsh");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stderr.is_empty() && out.stdout == b"_redlock-run\n",
        "zsh: {}\n{}\n{stderr}",
        out.status,
        String::from_utf8_lossy(&out.stdout)
    );
    let setup =
        "_faketool() { compadd -- words=${(j: :)words[1,CURRENT-1]} }\ncompdef _faketool faketool";
    other_shell_cases("zsh", |dir, lines| complete_zsh(dir, setup, lines));
}
