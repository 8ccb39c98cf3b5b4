//! Checks docs/design.md §2 and §3 against the code, as tests/architecture.rs
//! checks §12 and src/store/scripts.rs the script headers of
//! docs/wire-format.md: every script of `lua/` has its row in §3's table,
//! the flags table is the scripts' shebangs, every helper the design names
//! is defined where it says, every `lua/` file it names exists, and the
//! sizes it quotes (the stored header's maximum, the reads of a header,
//! list's value head) are the constants of the code.

use crate::info::PREVIEW_BYTES;
use crate::store::assembly::{defined_names, INCLUDES};
use crate::store::scripts::ALL;
use crate::store::stored::{HEADER_BYTES, STAGE_BYTES};

const DESIGN: &str = include_str!("../docs/design.md");

/// Section `## <number>. ...` of `doc`, to the next `## `.
fn section<'a>(doc: &'a str, number: &str) -> &'a str {
    let start = doc
        .find(&format!("\n## {number}. "))
        .unwrap_or_else(|| panic!("docs/design.md has no section {number}"));
    let rest = &doc[start + 1..];
    rest[3..].find("\n## ").map_or(rest, |end| &rest[..end + 3])
}

/// The cells of the table rows of `text` (not the lines under the heads).
fn rows(text: &str) -> Vec<Vec<&str>> {
    text.lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("|-"))
        .map(|l| l.trim_matches('|').split(" | ").map(str::trim).collect())
        .collect()
}

/// The words between backticks in `text`.
fn quoted(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

/// The numbers right after each `prefix` in `text`.
fn numbers_after(text: &str, prefix: &str) -> Vec<usize> {
    text.match_indices(prefix)
        .filter_map(|(at, _)| {
            let digits: String = text[at + prefix.len()..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            digits.parse().ok()
        })
        .collect()
}

/// What `docs/design.md` (`doc`) gets wrong about the code, one line each.
fn design_errors(doc: &str) -> Vec<String> {
    let mut wrong = Vec::new();
    let scripts = section(doc, "3");
    let table = scripts.split("\n### ").next().unwrap_or_default();
    let named: Vec<&str> = rows(table)
        .iter()
        .map(|r| r[0].trim_matches('`'))
        .filter(|f| f.ends_with(".lua") && !f.contains('/'))
        .collect();
    for s in ALL {
        let file = format!("{}.lua", s.name);
        match named.iter().filter(|n| **n == file).count() {
            1 => {}
            n => wrong.push(format!("§3's script table has {n} rows for lua/{file}")),
        }
    }
    for n in &named {
        if !ALL.iter().any(|s| format!("{}.lua", s.name) == *n) {
            wrong.push(format!("§3's script table has a row for {n}, which lua/ does not have"));
        }
    }
    // The flags table: each script's shebang.
    let flag_rows: Vec<Vec<&str>> = rows(scripts)
        .into_iter()
        .filter(|r| r.len() == 2 && (r[0] == "none" || (r[0].starts_with('`') && !r[0].contains(".lua"))))
        .collect();
    for row in &flag_rows {
        let flags = row[0].trim_matches('`');
        for file in quoted(row[1]) {
            let script = ALL.iter().find(|s| format!("{}.lua", s.name) == file);
            let shebang = script.map(|s| s.file.lines().next().unwrap_or_default());
            let want = match flags {
                "none" => "#!lua".to_string(),
                f => format!("#!lua flags={f}"),
            };
            if shebang != Some(want.as_str()) {
                wrong.push(format!("§3 says {file} has flags {flags}; its first line: {shebang:?}"));
            }
        }
    }
    let flagged: usize = flag_rows.iter().map(|r| quoted(r[1]).len()).sum();
    if flagged != ALL.len() {
        wrong.push(format!(
            "§3's flags table names {flagged} scripts, lua/ has {}",
            ALL.len()
        ));
    }
    // The helpers table: each include, and each helper it names.
    let includes: Vec<Vec<&str>> = rows(scripts)
        .into_iter()
        .filter(|r| r[0].starts_with("`lua/include/"))
        .collect();
    for (name, _) in INCLUDES {
        let path = format!("lua/include/{name}.lua");
        if !includes.iter().any(|r| r[0].trim_matches('`') == path) {
            wrong.push(format!("§3's table of helpers has no row for {path}"));
        }
    }
    for row in &includes {
        let path = row[0].trim_matches('`');
        let text = INCLUDES
            .iter()
            .find(|(name, _)| format!("lua/include/{name}.lua") == path)
            .map(|(_, text)| *text);
        let Some(text) = text else {
            wrong.push(format!("§3's table of helpers names {path}, which does not exist"));
            continue;
        };
        for helper in quoted(row[1]).into_iter().filter(|h| is_lua_name(h)) {
            if !defined_names(text).contains(&helper) {
                wrong.push(format!(
                    "§3 names {helper} as a helper of {path}, which does not define it"
                ));
            }
        }
    }
    // "`name` in `lua/include/file.lua`" anywhere.
    for (at, _) in doc.match_indices("` in `lua/include/") {
        let name = doc[..at].rsplit('`').next().unwrap_or_default();
        let file = doc[at + 6..].split('`').next().unwrap_or_default();
        let text = INCLUDES
            .iter()
            .find(|(n, _)| format!("lua/include/{n}.lua") == file)
            .map(|(_, t)| *t);
        if !text.is_some_and(|t| defined_names(t).contains(&name)) {
            wrong.push(format!(
                "docs/design.md says {name} is in {file}, which does not define it"
            ));
        }
    }
    // Every file of lua/ it names exists.
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    for (at, _) in doc.match_indices("`lua/") {
        let path = doc[at + 1..].split('`').next().unwrap_or_default();
        if path.ends_with(".lua") && !path.contains('<') && !root.join(path).is_file() {
            wrong.push(format!("docs/design.md names {path}, which does not exist"));
        }
    }
    // The sizes it quotes.
    let header_reads = [
        ("at most ", " bytes before the `:`", HEADER_BYTES),
        ("keeps its bound (", "", HEADER_BYTES),
        ("`GETRANGE 0 ", "", HEADER_BYTES - 1),
        ("`GETRANGE key 0 ", "", HEADER_BYTES - 1),
        ("value head (", "", PREVIEW_BYTES),
        ("value head (256 + ", "", HEADER_BYTES),
    ];
    for (prefix, suffix, want) in header_reads {
        let found: Vec<usize> = doc
            .match_indices(prefix)
            .filter(|(at, _)| {
                doc[at + prefix.len()..]
                    .trim_start_matches(|c: char| c.is_ascii_digit())
                    .starts_with(suffix)
            })
            .flat_map(|(at, _)| numbers_after(&doc[at..], prefix).into_iter().take(1))
            .collect();
        if found.is_empty() {
            wrong.push(format!("docs/design.md no longer says \"{prefix}<n>{suffix}\""));
        }
        for n in found.into_iter().filter(|n| *n != want) {
            wrong.push(format!("docs/design.md says \"{prefix}{n}{suffix}\", the code {want}"));
        }
    }
    wrong
}

fn is_lua_name(word: &str) -> bool {
    !word.is_empty()
        && word.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !word.starts_with(|c: char| c.is_ascii_digit())
}

/// The value of `local <name> = <n>` in include file `file`.
fn lua_constant(file: &str, name: &str) -> usize {
    let text = INCLUDES.iter().find(|(n, _)| *n == file).unwrap().1;
    numbers_after(text, &format!("\nlocal {name} = "))[0]
}

#[test]
fn design_md_has_every_script_helper_and_size_as_the_code_has_them() {
    let wrong = design_errors(DESIGN);
    assert!(wrong.is_empty(), "docs/design.md:\n{}", wrong.join("\n"));
}

#[test]
fn the_lua_constants_are_the_rust_ones() {
    assert_eq!(lua_constant("header", "HEADER_BYTES"), HEADER_BYTES);
    assert_eq!(lua_constant("header", "BIG_VALUE"), STAGE_BYTES);
    let quoted_limit = numbers_after(DESIGN, "`MAX_LIMIT` = ");
    assert_eq!(quoted_limit, [lua_constant("args", "MAX_LIMIT")]);
}

#[test]
fn a_stale_design_md_is_caught() {
    let stale = DESIGN
        .replacen("| `note.lua` |", "| `notes.lua` |", 1)
        .replacen("`now_ms`, `now_us`: Redis", "`now_ms`, `count`: Redis", 1)
        .replacen("value head (256 + 169", "value head (256 + 104", 1);
    let wrong = design_errors(&stale);
    for part in [
        "0 rows for lua/note.lua",
        "row for notes.lua",
        "names count as a helper of lua/include/clock.lua",
        "says \"value head (256 + 104\", the code 169",
    ] {
        assert!(wrong.iter().any(|w| w.contains(part)), "{part} not in {wrong:#?}");
    }
}
