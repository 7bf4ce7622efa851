//! The man page and the shell completions, generated from
//! `redlock_run::cli::command()` and checked in under `man/` and
//! `completions/`.
//!
//! The generators live in the tests, not in the release binary: `clap_mangen`
//! and `clap_complete` are dev-dependencies only. The completion scripts come
//! from `completion.rs` (bash and zsh written there, fish, elvish and
//! PowerShell by clap_complete). The test renders every file
//! in memory and fails when a checked-in copy differs; to refresh them after a
//! change to the CLI, run
//!
//! ```text
//! REDLOCK_REGENERATE=1 cargo test --test integration generated
//! ```
//!
//! Output is deterministic (no date, no paths, no timestamps), so the check
//! only fails when the CLI itself changed.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use clap::Command;
use clap_mangen::Man;
use clap_mangen::roff::{Inline, Roff, bold, italic, roman};
use redlock_run::{cli, exit};

const BIN: &str = "redlock-run";
const REDLOCK_URL: &str = "https://redis.io/docs/latest/develop/use/patterns/distributed-locks/";
const REGENERATE: &str = "REDLOCK_REGENERATE";
const STALE: &str = "man/ or completions/ are stale: run `REDLOCK_REGENERATE=1 cargo test --test integration generated`";

#[test]
fn generated_files_are_current() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let files = generate();
    if std::env::var_os(REGENERATE).is_some_and(|v| v == "1") {
        for (path, contents) in &files {
            let path = root.join(path);
            let dir = path.parent().expect("generated paths have a directory");
            fs::create_dir_all(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
            fs::write(&path, contents).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        }
        return;
    }
    let stale: Vec<String> = files
        .iter()
        .filter(|(path, contents)| {
            fs::read(root.join(path)).ok().as_deref() != Some(contents.as_slice())
        })
        .map(|(path, _)| path.display().to_string())
        .collect();
    assert!(
        stale.is_empty(),
        "{STALE}\n(differ or missing: {})",
        stale.join(", ")
    );
}

#[test]
fn generation_is_deterministic() {
    assert!(generate() == generate(), "two generations differ");
}

#[test]
fn man_page_has_every_section_once() {
    let page = String::from_utf8(man_page()).expect("roff output is UTF-8");
    for section in [
        "NAME",
        "SYNOPSIS",
        "DESCRIPTION",
        "OPTIONS",
        "SUBCOMMANDS",
        "EXIT STATUS",
        "ENVIRONMENT",
        "EXAMPLES",
        "SEE ALSO",
    ] {
        let heading = format!("\n.SH {}\n", roff_arg(section));
        assert_eq!(
            page.matches(&heading).count(),
            1,
            "{section} must appear once in the man page"
        );
    }
    // The after-help text is taken apart into EXAMPLES and EXIT STATUS; it must
    // not also show up raw (clap_mangen would put it under EXTRA).
    assert!(!page.contains(".SH EXTRA"));
    // (The subsections' own "Exit status:" label is followed by its list.)
    assert!(!page.contains("Exit status:\n "));
    assert!(!page.contains("Examples:"));
    // Written once at the top, not once per composed part.
    assert_eq!(
        page.matches(".ie \\n(.g").count(),
        1,
        "roff preamble repeated"
    );
}

/// Under `.SS status` and `.SS unlock`: every option the subcommand takes
/// (read off the clap definition, so a new one is checked without a new
/// line here) and every exit status of its table in src/exit.rs, which
/// agrees with the statuses its one-line help names.
#[test]
fn man_page_gives_each_subcommand_its_options_and_exit_statuses() {
    let page = String::from_utf8(man_page()).expect("roff output is UTF-8");
    let mut cmd = cli::command().bin_name(BIN);
    cmd.build();
    let roff_flag = |f: &str| format!("\\fB{}\\fR", f.replace('-', "\\-"));
    for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
        let name = sub.get_name();
        let start = page
            .find(&format!("\n.SS {name}\n"))
            .unwrap_or_else(|| panic!("no .SS {name}"));
        let rest = &page[start + 1..];
        let end = rest[1..].find("\n.S").map_or(rest.len(), |i| i + 1);
        let section = &rest[..end];
        // The line after each .TP: an option's (or a status's) heading.
        let headings: Vec<&str> = section
            .split(".TP\n")
            .skip(1)
            .filter_map(|item| item.lines().next())
            .collect();
        for arg in sub
            .get_arguments()
            .filter(|a| !a.is_hide_set() && !a.is_positional())
        {
            let flags = arg
                .get_short()
                .map(|s| format!("-{s}"))
                .into_iter()
                .chain(arg.get_long().map(|l| format!("--{l}")));
            for flag in flags {
                let flag_heading = |h: &&str| {
                    h.split(", ")
                        .any(|part| part.starts_with(&roff_flag(&flag)))
                };
                assert!(
                    headings.iter().any(flag_heading),
                    "{name}: {flag} missing from its subsection:\n{section}"
                );
            }
        }
        let table = subcommand_exit_table(name);
        let codes: Vec<&str> = table
            .lines()
            .skip(1)
            .filter_map(|l| l.split_whitespace().next())
            .collect();
        for code in &codes {
            assert!(
                section.contains(&format!(".TP\n\\fB{code}\\fR\n")),
                "{name}: exit status {code} missing from its subsection:\n{section}"
            );
        }
        let about = sub.get_about().map(|a| a.to_string()).unwrap_or_default();
        if let Some((_, said)) = about.split_once("exit ") {
            for n in said
                .split(|c: char| !c.is_ascii_digit())
                .filter(|n| !n.is_empty())
            {
                assert!(
                    codes.contains(&n),
                    "{name}'s help names exit status {n}, which src/exit.rs does not list"
                );
            }
        }
    }
}

/// Every generated file, by path relative to the package root.
fn generate() -> Vec<(PathBuf, Vec<u8>)> {
    let mut files = vec![(PathBuf::from("man").join(format!("{BIN}.1")), man_page())];
    for (name, contents) in crate::completion::scripts(BIN) {
        files.push((PathBuf::from("completions").join(name), contents));
    }
    files
}

/// `man/redlock-run.1`: clap_mangen renders OPTIONS (and AUTHORS, should the
/// command get one); the other sections are written here from the same
/// `Command`, so that the page reads like a Debian one: a whatis-style NAME,
/// clap's usage with values as the SYNOPSIS (clap_mangen's omits them), flags
/// in bold in the prose, and the after-help text taken apart into EXAMPLES and
/// EXIT STATUS instead of dumped raw under EXTRA.
fn man_page() -> Vec<u8> {
    let mut cmd = cli::command().bin_name(BIN);
    cmd.build();
    let man = Man::new(cmd.clone());

    let mut page = Page::default();
    page.push(&title(&cmd));
    page.push(&name_section(&cmd));
    page.push(&synopsis_section(&mut cmd));
    page.push(&description_section(&cmd));
    page.part(|w| man.render_options_section(w));
    subcommands_section(&mut page, &cmd);
    page.push(&exit_status_section());
    page.push(&environment_section(&cmd));
    for (heading, lines) in after_help_blocks(&cmd) {
        match heading.as_deref() {
            // Rendered from `exit::TABLE` itself.
            Some(h) if h.eq_ignore_ascii_case("exit status") => {}
            Some(h) if h.eq_ignore_ascii_case("examples") => page.push(&examples_section(&lines)),
            other => page.push(&verbatim_section(other.unwrap_or("NOTES"), &lines)),
        }
    }
    page.push(&see_also_section());
    if cmd.get_author().is_some() {
        page.part(|w| man.render_authors_section(w));
    }
    page.finish()
}

/// Concatenates rendered parts. Every `Roff` render starts with the same
/// apostrophe-string preamble; only the first one is kept.
#[derive(Default)]
struct Page(Vec<u8>);

impl Page {
    fn part(&mut self, render: impl FnOnce(&mut Vec<u8>) -> std::io::Result<()>) {
        let mut out = Vec::new();
        render(&mut out).expect("rendering into memory cannot fail");
        let preamble = Roff::new().render();
        match out.strip_prefix(preamble.as_bytes()) {
            Some(body) if !self.0.is_empty() => self.0.extend_from_slice(body),
            _ => self.0.extend_from_slice(&out),
        }
    }

    fn push(&mut self, roff: &Roff) {
        self.part(|w| roff.to_writer(w));
    }

    /// The page without trailing blanks (clap_mangen leaves one after each
    /// "environment variable. "), which lint tools flag. A blank after a
    /// backslash is an escaped space and stays.
    fn finish(self) -> Vec<u8> {
        let text = String::from_utf8(self.0).expect("roff output is UTF-8");
        let mut out = String::with_capacity(text.len());
        for line in text.lines() {
            let trimmed = line.trim_end_matches(' ');
            out.push_str(if trimmed.ends_with('\\') {
                line
            } else {
                trimmed
            });
            out.push('\n');
        }
        out.into_bytes()
    }
}

/// `.TH REDLOCK-RUN 1 "" "redlock-run 0.1.0" "User Commands"`. Written here
/// because `Man::render_title` leaves an empty date unquoted, which shifts the
/// source and manual into the wrong fields. The date stays empty so that the
/// page only changes when the CLI does.
fn title(cmd: &Command) -> Roff {
    let source = format!("{BIN} {}", cmd.get_version().unwrap_or_default());
    let mut roff = Roff::new();
    roff.control(
        "TH",
        [
            BIN.to_uppercase().as_str(),
            "1",
            "\"\"",
            source.trim_end(),
            "User Commands",
        ],
    );
    roff
}

/// `name \- summary` on one line, lower-case and without a full stop, as
/// whatis(1) and lexgrog(1) expect.
fn name_section(cmd: &Command) -> Roff {
    let about = cmd
        .get_about()
        .or_else(|| cmd.get_long_about())
        .map(|s| s.to_string())
        .unwrap_or_default();
    let about = about
        .lines()
        .next()
        .unwrap_or_default()
        .trim_end_matches('.');
    let mut chars = about.chars();
    let summary = match (chars.next(), chars.next()) {
        // "Run a command" -> "run a command", but "URL ..." stays.
        (Some(first), Some(second)) if second.is_lowercase() => first
            .to_lowercase()
            .chain(about[first.len_utf8()..].chars())
            .collect(),
        _ => about.to_string(),
    };
    let mut roff = Roff::new();
    roff.control("SH", ["NAME"]);
    roff.text([roman(format!("{BIN} - {summary}"))]);
    roff
}

/// clap's own usage line(s), so the man page and `--help` agree: options in
/// bold, placeholders in italics, as man-pages(7) asks.
fn synopsis_section(cmd: &mut Command) -> Roff {
    let usage = cmd.render_usage().to_string();
    let usage = usage.trim_start();
    let usage = usage.strip_prefix("Usage:").unwrap_or(usage);
    let mut roff = Roff::new();
    roff.control("SH", ["SYNOPSIS"]);
    for (i, form) in usage
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .enumerate()
    {
        if i > 0 {
            roff.control("br", []);
        }
        roff.text(usage_inlines(form, &literals(cmd)));
    }
    roff
}

/// The subcommands' names: typed as written, so bold in a usage line.
fn literals(cmd: &Command) -> Vec<String> {
    cmd.get_subcommands()
        .map(|s| s.get_name().to_string())
        .collect()
}

/// Splits one usage form into fonts: `[`, `]`, `|`, `...` roman; the program,
/// flags and `literals` (subcommand names) bold; `<NAME>`, `OPTIONS`,
/// `COMMAND` italic without the angle brackets.
fn usage_inlines(form: &str, literals: &[String]) -> Vec<Inline> {
    let mut out = Vec::new();
    for (i, word) in form.split(' ').filter(|w| !w.is_empty()).enumerate() {
        if i > 0 {
            out.push(roman(" "));
        }
        let mut rest = word;
        while !rest.is_empty() {
            let punct = rest.len()
                - rest
                    .trim_start_matches(['[', ']', '(', ')', '{', '}', '|', '.', '='])
                    .len();
            if punct > 0 {
                out.push(roman(&rest[..punct]));
                rest = &rest[punct..];
            } else if let Some(inner) = rest.strip_prefix('<') {
                let end = inner.find('>').unwrap_or(inner.len());
                let choices: Vec<&str> = inner[..end].split('|').collect();
                if choices.iter().all(|c| literals.iter().any(|l| l == c)) {
                    // `<status|unlock>`: one of these words, as written.
                    for (i, c) in choices.iter().enumerate() {
                        if i > 0 {
                            out.push(roman("|"));
                        }
                        out.push(bold(*c));
                    }
                } else {
                    out.push(italic(&inner[..end]));
                }
                rest = inner.get(end + 1..).unwrap_or_default();
            } else {
                let end = rest
                    .find(['[', ']', '(', ')', '{', '}', '|', '<', '=', '.'])
                    .unwrap_or(rest.len());
                let token = &rest[..end];
                out.push(
                    if token == BIN || token.starts_with('-') || literals.iter().any(|l| l == token)
                    {
                        bold(token)
                    } else {
                        italic(token)
                    },
                );
                rest = &rest[end..];
            }
        }
    }
    out
}

/// The long about, paragraph by paragraph, with flags in bold.
fn description_section(cmd: &Command) -> Roff {
    let mut roff = Roff::new();
    roff.control("SH", ["DESCRIPTION"]);
    let text = cmd
        .get_long_about()
        .or_else(|| cmd.get_about())
        .map(|s| s.to_string())
        .unwrap_or_default();
    // The first paragraph repeats the summary NAME already gives.
    let summary = cmd.get_about().map(|s| s.to_string()).unwrap_or_default();
    let text = match text.split_once("\n\n") {
        Some((first, rest)) if first.trim().trim_end_matches('.') == summary.trim() => rest,
        _ => text.as_str(),
    };
    for line in text.lines() {
        if line.trim().is_empty() {
            roff.control("PP", []);
        } else {
            roff.text(prose(line.trim()));
        }
    }
    roff
}

/// `status` and `unlock`: each with its usage, what it does, its options as
/// clap_mangen renders the main OPTIONS (the shared ones too: a reader of
/// one subsection should not have to look elsewhere), and its exit statuses.
fn subcommands_section(page: &mut Page, cmd: &Command) {
    let mut roff = Roff::new();
    roff.control("SH", ["SUBCOMMANDS"]);
    page.push(&roff);
    for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
        let mut sub = sub.clone().bin_name(format!("{BIN} {}", sub.get_name()));
        sub.build();
        let mut roff = Roff::new();
        roff.control("SS", [sub.get_name()]);
        let usage = sub.render_usage().to_string();
        let usage = usage.trim_start_matches("Usage:").trim();
        roff.text(usage_inlines(usage, &literals(cmd)));
        roff.control("PP", []);
        let about = sub
            .get_long_about()
            .or(sub.get_about())
            .map(|a| a.to_string())
            .unwrap_or_default();
        roff.text(prose(&sentence(&about.replace('\n', " "))));
        roff.control("PP", []);
        roff.text([roman("Options:")]);
        page.push(&roff);
        page.part(|w| w.write_all(&options_list(&sub)));
        let mut roff = Roff::new();
        roff.control("PP", []);
        roff.text([roman("Exit status:")]);
        status_list(&mut roff, subcommand_exit_table(sub.get_name()));
        page.push(&roff);
    }
}

/// clap_mangen's OPTIONS section for `cmd` without its `.SH` line, to sit
/// in a subsection.
fn options_list(cmd: &Command) -> Vec<u8> {
    let mut out = Vec::new();
    Man::new(cmd.clone())
        .render_options_section(&mut out)
        .expect("rendering into memory cannot fail");
    let text = String::from_utf8(out).expect("roff output is UTF-8");
    let heading = "\n.SH OPTIONS\n";
    let at = text
        .find(heading)
        .expect("clap_mangen starts the options with .SH OPTIONS");
    assert_eq!(
        text.matches(".SH ").count(),
        1,
        "{}: options under help headings of their own need a subsection each",
        cmd.get_name()
    );
    format!("{}\n{}", &text[..at], &text[at + heading.len()..]).into_bytes()
}

/// The exit statuses of a subcommand, from `src/exit.rs`. A new subcommand
/// stops the generator until it has its own table there.
fn subcommand_exit_table(name: &str) -> &'static str {
    match name {
        "status" => exit::STATUS_TABLE,
        "unlock" => exit::UNLOCK_TABLE,
        "history" => exit::HISTORY_TABLE,
        "forget" => exit::FORGET_TABLE,
        "check" => exit::CHECK_TABLE,
        "config" => exit::CONFIG_TABLE,
        other => panic!("{other}: give it an exit-status table in src/exit.rs and name it here"),
    }
}

fn exit_status_section() -> Roff {
    let mut roff = Roff::new();
    roff.control("SH", ["EXIT STATUS"]);
    status_list(&mut roff, exit::TABLE);
    roff
}

/// An exit-status table as a tagged list: one `.TP` per status, continuation
/// lines (indented deeper than the first entry) appended to the previous
/// entry.
fn status_list(roff: &mut Roff, table: &str) {
    // One line per status, as a table: no blank line between entries.
    roff.control("PD", ["0"]);
    let mut item_indent = None;
    for line in table.lines() {
        let body = line.trim_start();
        let indent = line.len() - body.len();
        if body.is_empty() {
            continue;
        }
        if indent == 0 {
            // The "Exit status:" heading is the section heading; any other
            // unindented line is prose.
            if !body.eq_ignore_ascii_case("exit status:") {
                roff.control("PP", []);
                roff.text(prose(body));
            }
            continue;
        }
        if item_indent.is_some_and(|first| indent > first) {
            roff.text(prose(body));
            continue;
        }
        item_indent.get_or_insert(indent);
        let (code, what) = body.split_once(char::is_whitespace).unwrap_or((body, ""));
        roff.control("TP", []);
        roff.text(status_inlines(code));
        roff.text(prose(what.trim_start()));
    }
    roff.control("PD", []);
}

/// `128+N` as bold `128+` and italic `N`: the letters are placeholders.
fn status_inlines(code: &str) -> Vec<Inline> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(c) = rest.chars().next() {
        let placeholder = c.is_ascii_uppercase();
        let end = rest
            .find(|ch: char| ch.is_ascii_uppercase() != placeholder)
            .unwrap_or(rest.len());
        let run = &rest[..end];
        out.push(if placeholder { italic(run) } else { bold(run) });
        rest = &rest[end..];
    }
    out
}

/// Variables read in place of flags (from the clap definition), then the ones
/// the command is given.
fn environment_section(cmd: &Command) -> Roff {
    let mut roff = Roff::new();
    roff.control("SH", ["ENVIRONMENT"]);
    for arg in cmd.get_arguments().filter(|a| !a.is_hide_set()) {
        let Some(var) = arg.get_env() else { continue };
        let flag = match (arg.get_short(), arg.get_long()) {
            (_, Some(long)) => format!("--{long}"),
            (Some(short), None) => format!("-{short}"),
            (None, None) => continue,
        };
        roff.control("TP", []);
        roff.text([bold(var.to_string_lossy())]);
        let mut text = vec![];
        if let Some(help) = arg.get_long_help().or_else(|| arg.get_help()) {
            text.extend(prose(&sentence(&help.to_string())));
            text.push(roman(" "));
        }
        text.extend([roman("Used when "), bold(flag), roman(" is not given.")]);
        if arg.is_hide_env_values_set() {
            text.push(roman(" Its value is never shown by --help."));
        }
        roff.text(text);
    }
    // Set by run.rs for the command (see `Env` there).
    roff.control("PP", []);
    roff.text([roman(
        "The command runs with these added to its environment:",
    )]);
    roff.control("TP", []);
    roff.text([bold("REDLOCK_KEY")]);
    roff.text(prose(
        "The name of the lock, as given with --key (without the prefix).",
    ));
    roff.control("TP", []);
    roff.text([bold("REDLOCK_TOKEN")]);
    roff.text(prose(
        "The random token stored as the lock's value on the nodes that granted it; \
         it identifies this holder of the lock.",
    ));
    roff.control("TP", []);
    roff.text([bold("REDLOCK_FENCING_TOKEN")]);
    roff.text(prose(
        "With --fence: a number greater than that of every earlier holder of the lock.",
    ));
    roff.control("TP", []);
    roff.text([bold("REDLOCK_SLOT")]);
    roff.text(prose("With --limit: the slot held, from 0 to N-1."));
    roff.control("PP", []);
    roff.text([
        roman("The --on-failure command runs with "),
        bold("REDLOCK_KEY"),
        roman(" (the lock's name), "),
        bold("REDLOCK_OUTCOME"),
        roman(" (how the run ended: failed, signal, not-run, lost, timeout or unavailable), "),
        bold("REDLOCK_EXIT_STATUS"),
        roman(" (redlock-run's exit status) and "),
        bold("REDLOCK_RUN_ID"),
        roman(" (the run's id, which its pings carry as rid) added to its environment."),
    ]);
    roff.control("PP", []);
    roff.text([
        roman("Read directly, never from the command line: "),
        bold("REDLOCK_PASSWORD"),
        roman(" (the password for nodes whose URL has none, unless --password-file is given), "),
        bold("REDLOCK_USERNAME"),
        roman(" (the ACL user that goes with it), "),
        bold("REDLOCK_SENTINEL_PASSWORD"),
        roman(" (the password of the sentinels of redis+sentinel:// nodes, unless --sentinel-password-file is given) and "),
        bold("REDLOCK_SENTINEL_USERNAME"),
        roman(" (the sentinels' ACL user)."),
    ]);
    roff.control("PP", []);
    roff.text([
        bold("REDLOCK_CONFIG"),
        roman(
            " names the configuration file (TOML, its keys the long options' names), read when \
             --config is not given; without it the first of ",
        ),
        italic("$XDG_CONFIG_HOME"),
        roman("/redlock-run/config.toml (~/.config/redlock-run/config.toml) and /etc/redlock-run/config.toml is read. A flag or its variable wins over the file; --no-config reads none."),
    ]);
    roff.control("PP", []);
    roff.text([
        bold("REDLOCK_PASSWORD"),
        roman(", "),
        bold("REDLOCK_SENTINEL_PASSWORD"),
        roman(", "),
        bold("REDLOCK_PING"),
        roman(", and "),
        bold("REDLOCK_REDIS"),
        roman(
            " when one of its URLs carries a password, are removed from the environment of the \
             command and of --on-failure.",
        ),
    ]);
    roff
}

/// Blocks of the after-help text, each under its unindented `Heading:` line
/// (`None` for text before the first heading).
fn after_help_blocks(cmd: &Command) -> Vec<(Option<String>, Vec<String>)> {
    let text = cmd
        .get_after_long_help()
        .or_else(|| cmd.get_after_help())
        .map(|s| s.to_string())
        .unwrap_or_default();
    let mut blocks: Vec<(Option<String>, Vec<String>)> = Vec::new();
    for line in text.lines() {
        let heading = line
            .strip_suffix(':')
            .filter(|h| !h.is_empty() && !line.starts_with(char::is_whitespace));
        match (heading, blocks.last_mut()) {
            (Some(h), _) => blocks.push((Some(h.to_string()), Vec::new())),
            (None, Some((_, lines))) => lines.push(line.to_string()),
            (None, None) => blocks.push((None, vec![line.to_string()])),
        }
    }
    blocks
        .retain(|(heading, lines)| heading.is_some() || lines.iter().any(|l| !l.trim().is_empty()));
    blocks
}

/// Groups separated by blank lines; in each, `# comment` lines become the
/// explanation and the other lines the command, set verbatim and indented.
fn examples_section(lines: &[String]) -> Roff {
    let mut roff = Roff::new();
    roff.control("SH", ["EXAMPLES"]);
    let groups = lines
        .split(|l| l.trim().is_empty())
        .filter(|g| !g.is_empty());
    for (i, group) in groups.enumerate() {
        let (comments, commands): (Vec<&str>, Vec<&str>) = group
            .iter()
            .map(|l| l.trim())
            .partition(|l| l.starts_with('#'));
        let comment = comments
            .iter()
            .map(|c| c.trim_start_matches('#').trim())
            .collect::<Vec<_>>()
            .join(" ");
        if i > 0 {
            // Not directly after .SH, where it is redundant.
            roff.control("PP", []);
        }
        if !comment.is_empty() {
            roff.text(prose(&introduction(&comment)));
        }
        if !commands.is_empty() {
            roff.control("RS", ["4"]);
            roff.control("nf", []);
            for command in commands {
                roff.text([roman(command)]);
            }
            roff.control("fi", []);
            roff.control("RE", []);
        }
    }
    roff
}

/// Any other after-help block, kept as written so nothing is lost.
fn verbatim_section(heading: &str, lines: &[String]) -> Roff {
    let mut roff = Roff::new();
    roff.control("SH", [heading.to_uppercase().as_str()]);
    roff.control("nf", []);
    for line in lines {
        roff.text([roman(line.strip_prefix("  ").unwrap_or(line))]);
    }
    roff.control("fi", []);
    roff
}

fn see_also_section() -> Roff {
    let mut roff = Roff::new();
    roff.control("SH", ["SEE ALSO"]);
    roff.text([
        bold("flock"),
        roman("(1), "),
        bold("timeout"),
        roman("(1), "),
        bold("redis-server"),
        roman("(1)"),
    ]);
    roff.control("PP", []);
    roff.text([roman("The Redlock algorithm:")]);
    // On a line of its own, unfilled: never hyphenated, and the line before it
    // is not justified across the width. (.UR with no link text would do the
    // same in groff, but mandoc -T lint flags the empty block.)
    roff.control("RS", ["4"]);
    roff.control("nf", []);
    roff.text([roman(REDLOCK_URL)]);
    roff.control("fi", []);
    roff.control("RE", []);
    roff
}

/// Text with command-line flags (`-E`, `--timeout`, `-E/--busy-exit-code`)
/// in bold, the rest roman.
fn prose(text: &str) -> Vec<Inline> {
    let mut out = Vec::new();
    let mut plain = String::new();
    for (i, word) in text.split(' ').enumerate() {
        if i > 0 {
            plain.push(' ');
        }
        let core = word.trim_start_matches('(');
        let core = core.trim_end_matches([',', ';', ':', '.', ')', '\'']);
        let lead = &word[..word.len() - word.trim_start_matches('(').len()];
        if core.split('/').all(is_flag) && !core.is_empty() {
            plain.push_str(lead);
            out.push(roman(std::mem::take(&mut plain)));
            for (j, flag) in core.split('/').enumerate() {
                if j > 0 {
                    out.push(roman("/"));
                }
                out.push(bold(flag));
            }
            plain.push_str(&word[lead.len() + core.len()..]);
        } else {
            plain.push_str(word);
        }
    }
    out.push(roman(plain));
    out.retain(|i| !matches!(i, Inline::Roman(s) if s.is_empty()));
    out
}

/// `-E`, `-vv`, `--kill-after`; not `-1`, `-` or `--`.
fn is_flag(s: &str) -> bool {
    let body = s.strip_prefix("--").or_else(|| s.strip_prefix('-'));
    body.is_some_and(|b| {
        b.starts_with(|c: char| c.is_ascii_alphabetic())
            && b.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
    })
}

/// A help string as a sentence: ends with a full stop.
fn sentence(s: &str) -> String {
    let s = s.trim();
    if s.ends_with(['.', '!', '?']) {
        s.to_string()
    } else {
        format!("{s}.")
    }
}

/// An example's comment as the sentence introducing it: capitalised, ending
/// in a colon.
fn introduction(comment: &str) -> String {
    let mut chars = comment.chars();
    let mut s: String = match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    };
    if !s.ends_with(['.', ':', '!', '?']) {
        s.push(':');
    }
    s
}

/// How roff quotes a control-line argument containing spaces.
fn roff_arg(s: &str) -> String {
    if s.contains(' ') {
        format!("\"{s}\"")
    } else {
        s.to_string()
    }
}
