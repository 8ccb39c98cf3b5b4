//! How a script of `lua/` becomes the source Redis runs: the helpers it
//! uses of the include files it names (`--- @include "name"`, resolved
//! through the include files' own), and nothing else. One assembly for
//! every language: the producers in other languages load copies of it
//! (src/producer_files_tests.rs).

/// The files of `lua/include/`, by name: helpers shared by the scripts.
macro_rules! lua_includes {
    ($($name:literal),* $(,)?) => {
        pub(crate) static INCLUDES: &[(&str, &str)] = &[$(($name, include_str!(concat!("../../lua/include/", $name, ".lua")))),*];
    };
}

lua_includes! {
    "abort", "args", "checks", "claim_groups", "clock", "completions", "finish", "flows", "group_moves", "groups", "header", "lease",
    "markers", "notes", "paging", "priorities", "rate", "records", "store", "wake",
}

/// How a file names an include file it uses, before the name in quotes.
const INCLUDE: &str = "--- @include \"";

/// The include files `file` names, and theirs, each once, every one after
/// those it includes: the order their helpers are defined in. A name
/// that is not a file of `lua/include/` is left out (a test checks there
/// are none).
fn included(file: &str) -> Vec<(&'static str, &'static str)> {
    fn visit(file: &str, seen: &mut Vec<&'static str>, out: &mut Vec<(&'static str, &'static str)>) {
        for name in includes_of(file) {
            if let Some(&(name, text)) = INCLUDES.iter().find(|(n, _)| *n == name) {
                // Seen before its own includes are visited, so that a cycle ends.
                if !seen.contains(&name) {
                    seen.push(name);
                    visit(text, seen, out);
                    out.push((name, text));
                }
            }
        }
    }
    let mut out = Vec::new();
    visit(file, &mut Vec::new(), &mut out);
    out
}

/// The names of the include files `file` names, in its order.
fn includes_of(file: &str) -> impl Iterator<Item = &str> {
    file.lines().filter_map(|l| l.strip_prefix(INCLUDE)?.split('"').next())
}

/// `text` without its include lines.
pub(crate) fn without_includes(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n').filter(|l| !l.starts_with(INCLUDE)) {
        out.push_str(line);
    }
    out
}

/// The blocks (separated by blank lines) of the include files of `file`
/// (`included`) that `body`, its code, needs, in the files' order: those
/// defining a name that the body or another needed block uses, each with
/// its comment; a block of comments alone (a file's introduction) stays in
/// its file. Each file's blocks are headed by its name. Every `local
/// function` costs a closure at each run of a script, which a single
/// awaited send pays in its round trip.
pub(crate) fn helpers_for(body: &str, file: &str) -> String {
    let files = included(file);
    // Each block with the index of its file.
    let blocks: Vec<(usize, String)> = files
        .iter()
        .enumerate()
        .flat_map(|(f, (_, text))| text.split("\n\n").map(move |b| (f, without_includes(b))))
        .map(|(f, b)| (f, b.trim_matches('\n').to_string()))
        .filter(|(_, b)| !b.is_empty())
        .collect();
    let names: Vec<Vec<&str>> = blocks.iter().map(|(_, b)| defined_names(b)).collect();
    let mut needed = vec![false; blocks.len()];
    let mut users = vec![code_of(body)];
    while let Some(user) = users.pop() {
        for (i, (_, block)) in blocks.iter().enumerate() {
            if !needed[i] && names[i].iter().any(|name| uses(&user, name)) {
                needed[i] = true;
                users.push(code_of(block));
            }
        }
    }
    let mut out = String::new();
    for (f, (file, _)) in files.iter().enumerate() {
        let of_file = |i: &usize| blocks[*i].0 == f;
        if !(0..blocks.len()).filter(of_file).any(|i| needed[i]) {
            continue;
        }
        out.push_str("-- lua/include/");
        out.push_str(file);
        out.push_str(".lua\n");
        for i in (0..blocks.len()).filter(of_file).filter(|&i| needed[i]) {
            out.push_str(&blocks[i].1);
            out.push_str("\n\n");
        }
    }
    out
}

/// The names a block defines: `local function name(` and `local NAME =` at a line's start.
pub(crate) fn defined_names(block: &str) -> Vec<&str> {
    block
        .lines()
        .filter_map(|l| l.strip_prefix("local "))
        .map(|l| l.strip_prefix("function ").unwrap_or(l))
        .map(|l| l.split(|c: char| !is_ident(c)).next().unwrap_or_default())
        .filter(|name| !name.is_empty())
        .collect()
}

/// Lua source without its comments (`--[[ ... ]]` blocks and `--` to the
/// end of a line), so that a name a comment mentions does not count as used.
pub(crate) fn code_of(lua: &str) -> String {
    let mut code = String::with_capacity(lua.len());
    let mut rest = lua;
    while let Some(at) = rest.find("--") {
        code.push_str(&rest[..at]);
        let comment = &rest[at..];
        let end = match comment.strip_prefix("--[[") {
            Some(block) => block.find("]]").map_or(comment.len(), |e| e + 6),
            None => comment.find('\n').unwrap_or(comment.len()),
        };
        rest = &comment[end..];
    }
    code.push_str(rest);
    code
}

/// Whether `text` holds `name` as a whole identifier.
fn uses(text: &str, name: &str) -> bool {
    occurrences(text, name).next().is_some()
}

/// Where `text` holds `name` as a whole identifier.
fn occurrences<'a>(text: &'a str, name: &'a str) -> impl Iterator<Item = usize> + 'a {
    text.match_indices(name).map(|(at, _)| at).filter(move |&at| {
        let before = text[..at].chars().next_back();
        let after = text[at + name.len()..].chars().next();
        !before.is_some_and(is_ident) && !after.is_some_and(is_ident)
    })
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::scripts::{ALL, SEND};

    /// Every script and include file: its path, the include it is (None
    /// for a script) and its text.
    fn all_files() -> Vec<(String, Option<&'static str>, &'static str)> {
        let scripts = ALL.iter().map(|s| (format!("lua/{}.lua", s.name), None, s.file));
        let includes = INCLUDES
            .iter()
            .map(|&(name, text)| (format!("lua/include/{name}.lua"), Some(name), text));
        scripts.chain(includes).collect()
    }

    /// The names the include files define, each with its file.
    fn helpers() -> Vec<(&'static str, &'static str)> {
        INCLUDES
            .iter()
            .flat_map(|&(file, text)| defined_names(text).into_iter().map(move |n| (n, file)))
            .collect()
    }

    /// Lua code without its string literals ('...' and "..."), so that a
    /// name a string holds does not count as used.
    fn without_strings(code: &str) -> String {
        let mut out = String::with_capacity(code.len());
        let mut quote = None;
        let mut escaped = false;
        for c in code.chars() {
            match quote {
                Some(q) if !escaped && c == q => quote = None,
                Some(_) => escaped = !escaped && c == '\\',
                None if c == '\'' || c == '"' => quote = Some(c),
                None => out.push(c),
            }
        }
        out
    }

    #[test]
    fn the_include_files_are_listed_and_every_include_names_one() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("lua/include");
        let mut on_disk: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        on_disk.sort();
        let listed: Vec<String> = INCLUDES.iter().map(|(name, _)| format!("{name}.lua")).collect();
        assert_eq!(
            on_disk, listed,
            "lua/include/ against lua_includes! in src/store/scripts.rs"
        );
        for (path, own, text) in all_files() {
            for name in includes_of(text) {
                assert!(
                    INCLUDES.iter().any(|(n, _)| *n == name) && Some(name) != own,
                    "{path} includes \"{name}\", which is not another file of lua/include/"
                );
            }
            // Each once, every one after those it includes (none of which includes it back).
            let order: Vec<&str> = included(text).iter().map(|(n, _)| *n).collect();
            for (i, name) in order.iter().enumerate() {
                let text = INCLUDES.iter().find(|(n, _)| n == name).unwrap().1;
                for dep in includes_of(text) {
                    assert!(
                        order[..i].contains(&dep),
                        "{path}: {name} before {dep}, which it includes"
                    );
                }
            }
        }
    }

    #[test]
    fn each_file_includes_the_files_whose_helpers_it_calls_and_no_others() {
        let helpers = helpers();
        for (at, (name, file)) in helpers.iter().enumerate() {
            let again = helpers[..at].iter().find(|(n, _)| n == name);
            assert!(
                again.is_none(),
                "{name} is defined by lua/include/{file}.lua and {again:?}"
            );
        }
        let mut wrong = Vec::new();
        for (path, own, text) in all_files() {
            let code = without_strings(&code_of(&without_includes(text)));
            let named: std::collections::BTreeSet<&str> = includes_of(text).collect();
            let called: std::collections::BTreeSet<&str> = helpers
                .iter()
                .filter(|(name, file)| Some(*file) != own && uses(&code, name))
                .map(|(_, file)| *file)
                .collect();
            if named != called {
                wrong.push(format!("{path} includes {named:?} but calls helpers of {called:?}"));
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }

    #[test]
    fn no_script_carries_a_helper_it_never_calls() {
        let helpers = helpers();
        let mut wrong = Vec::new();
        for s in ALL {
            let source = s.source();
            let code = without_strings(&code_of(&source));
            let defined = defined_names(&source);
            for (name, file) in &helpers {
                if !defined.contains(name) {
                    continue;
                }
                let at: Vec<usize> = occurrences(&code, name).collect();
                // Defined before any use (a name used before its `local` would
                // be a global), and used.
                let first = &code[..at[0]];
                if !(first.ends_with("local function ") || first.ends_with("local ")) {
                    wrong.push(format!(
                        "lua/{}.lua uses {name} before lua/include/{file}.lua defines it",
                        s.name
                    ));
                }
                if at.len() < 2 {
                    wrong.push(format!(
                        "lua/{}.lua carries {name} of lua/include/{file}.lua, never called",
                        s.name
                    ));
                }
            }
            // Lua allows 200 locals in a function, the script's chunk too.
            assert!(
                defined.len() < 200,
                "lua/{}.lua defines {} locals",
                s.name,
                defined.len()
            );
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
        assert_eq!(without_strings("a('now_ms', \"x\\\"y\") -- b"), "a(, ) -- b");
    }

    #[test]
    fn no_lua_file_is_over_300_lines() {
        for (path, _, text) in all_files() {
            let lines = text.lines().count();
            assert!(lines <= 300, "{path} has {lines} lines");
        }
    }

    #[test]
    fn a_script_gets_the_helpers_it_uses_and_no_others() {
        let send = SEND.source();
        for used in ["local function now_ms(", "local function check_types(", "local STALE ="] {
            assert!(send.contains(used), "send lacks {used}");
        }
        // wake_if_earlier calls wake: helpers of helpers come along.
        assert!(send.contains("local function wake("));
        for unused in [
            "local function members_of(",
            "local function bury(",
            "local MAX_LIMIT =",
        ] {
            assert!(!send.contains(unused), "send has {unused}");
        }
        assert!(!send.contains(INCLUDE), "send keeps its include lines");
        // Every script still gets every helper its body names.
        for s in ALL {
            let source = s.source();
            for (name, _) in helpers() {
                if uses(&code_of(s.file), name) {
                    assert!(
                        defined_names(&source).contains(&name),
                        "lua/{}.lua lacks {name}",
                        s.name
                    );
                }
            }
        }
        assert!(uses("x = now_ms()", "now_ms") && !uses("now_ms_x()", "now_ms") && !uses("a_now_ms", "now_ms"));
        // Names in comments do not count.
        let code = code_of("--[[ count\n now_ms ]]\nlocal a = tally(1) -- wake\n-- bury\nreturn a");
        assert_eq!(code, "\nlocal a = tally(1) \n\nreturn a");
        assert!(
            !send.contains("local function count("),
            "send's header mentions a retry count"
        );
    }
}
