//! The crate's module structure, checked: no module depends on itself
//! through others (no cycle), each layer uses only the layers below it,
//! and docs/design.md §12 draws the structure as it is (every layer, every
//! file under `src/`).
//!
//! The dependencies are read from the source text: every `crate::a::b` and
//! `super::` path outside test code, followed through `pub use`
//! re-exports to the module that defines the item. Test modules, test
//! files and test folders are left out: a test may reach across layers.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

/// The layers, top to bottom, by the first segment of a module's path. A
/// module may use its own layer and those below it. Modules not listed are
/// leaves (errors, ids, messages, ...): anything may use them, and they
/// may use only other leaves.
const LAYERS: &[(&str, &[&str])] = &[
    ("web", &["web", "queue"]),
    ("testing", &["testing", "queue", "consume"]),
    ("queue", &["queue", "consume", "store"]),
    ("consume", &["consume", "store"]),
    ("store", &["store"]),
];

#[test]
fn no_module_depends_on_itself() {
    let graph = Graph::read();
    let cycles = graph.cycles();
    assert!(
        cycles.is_empty(),
        "module cycles (each line one strongly connected group):\n{}",
        cycles.iter().map(|c| c.join(" <-> ")).collect::<Vec<_>>().join("\n")
    );
}

#[test]
fn each_layer_uses_only_the_layers_below() {
    let graph = Graph::read();
    let layer_of = |m: &str| m.split("::").next().unwrap_or("").to_string();
    let mut wrong = Vec::new();
    for (from, deps) in &graph.edges {
        let allowed = LAYERS.iter().find(|(l, _)| *l == layer_of(from)).map(|(_, a)| *a);
        for to in deps {
            let to_layer = layer_of(to);
            let is_layer = LAYERS.iter().any(|(l, _)| *l == to_layer);
            let ok = match allowed {
                Some(allowed) => !is_layer || allowed.contains(&to_layer.as_str()),
                None => !is_layer,
            };
            if !ok {
                wrong.push(format!("{from} -> {to}"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "dependencies against the layering:\n{}",
        wrong.join("\n")
    );
}

/// The queue modules that may use the consume runtime: those that start,
/// configure or wake it. Every other queue module (sends, flows, reads)
/// goes to the store itself: the flows' relay and completions are the
/// store's, so a send never reaches sideways into the runtime.
const QUEUE_USES_CONSUME: &[&str] = &[
    "queue",
    "queue::builder",
    "queue::config",
    "queue::consume_batch",
    "queue::results",
    "queue::schedules",
    "queue::worker",
];

#[test]
fn only_the_runtime_starters_of_queue_use_consume() {
    let graph = Graph::read();
    let wrong: Vec<String> = graph
        .edges
        .iter()
        .filter(|(from, _)| from.starts_with("queue") && !QUEUE_USES_CONSUME.contains(&from.as_str()))
        .flat_map(|(from, deps)| {
            deps.iter()
                .filter(|to| to.split("::").next() == Some("consume"))
                .map(move |to| format!("{from} -> {to}"))
        })
        .collect();
    assert!(
        wrong.is_empty(),
        "queue modules reaching into the consume runtime (the store has what they need):\n{}",
        wrong.join("\n")
    );
}

/// Most lines of a production source file (its test modules left out).
const MAX_FILE_LINES: usize = 600;
/// Most lines of a function, from `fn` to its closing brace.
const MAX_FN_LINES: usize = 80;

#[test]
fn production_files_and_functions_stay_short() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    source_files(&root, &root, &mut files);
    let mut long = Vec::new();
    for file in files.iter().filter(|f| !is_test_file(f)) {
        let text = fs::read_to_string(root.join(file)).unwrap();
        let (lines, fns) = measure(&text);
        if lines > MAX_FILE_LINES {
            long.push(format!("src/{file}: {lines} lines (at most {MAX_FILE_LINES})"));
        }
        for (name, line, n) in fns.into_iter().filter(|f| f.2 > MAX_FN_LINES) {
            long.push(format!(
                "src/{file}:{line} fn {name}: {n} lines (at most {MAX_FN_LINES})"
            ));
        }
    }
    assert!(long.is_empty(), "too long:\n{}", long.join("\n"));
}

#[test]
fn the_measure_skips_tests_strings_and_comments() {
    let text = "fn a() {\n    let s = \"}\";\n    let c = '}';\n    // }\n}\n\n#[cfg(test)]\nmod tests {\n    fn b() {\n    }\n}\n";
    let (lines, fns) = measure(text);
    assert_eq!(lines, 6);
    assert_eq!(fns, [("a".to_string(), 1, 5)]);
    assert!(is_test_file("store/script_tests/ack.rs") && is_test_file("acl_tests.rs"));
    assert!(!is_test_file("store/ops/ack.rs"));
}

/// Test files (`*tests.rs`) and the files of test folders (`*_tests/`).
fn is_test_file(file: &str) -> bool {
    file.split('/')
        .any(|part| part.trim_end_matches(".rs").ends_with("tests"))
}

/// A source file's lines outside its `#[cfg(test)]` items, and each
/// function outside them: its name, first line and lines.
fn measure(text: &str) -> (usize, Vec<(String, usize, usize)>) {
    let code = blank_literals(text);
    let line_of = |at: usize| code[..at].matches('\n').count() + 1;
    let mut tests = Vec::new();
    for (at, _) in code.match_indices("#[cfg(test)]") {
        let rest = &code[at..];
        let end = match (rest.find(';'), rest.find('{')) {
            (Some(semi), Some(open)) if semi < open => at + semi,
            (_, Some(open)) => closing(&code, at + open),
            (Some(semi), None) => at + semi,
            (None, None) => code.len(),
        };
        tests.push((at, end));
    }
    let in_tests = |at: usize| tests.iter().any(|&(a, b)| a <= at && at <= b);
    let test_lines: usize = tests.iter().map(|&(a, b)| line_of(b) - line_of(a) + 1).sum();
    let mut fns = Vec::new();
    for (at, _) in code.match_indices("fn ") {
        let before = code[..at].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') || in_tests(at) {
            continue;
        }
        let rest = &code[at + 3..];
        let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        let (Some(open), semi) = (rest.find('{'), rest.find(';')) else {
            continue;
        };
        if name.is_empty() || semi.is_some_and(|s| s < open) {
            continue;
        }
        let end = closing(&code, at + 3 + open);
        fns.push((name, line_of(at), line_of(end) - line_of(at) + 1));
    }
    (text.lines().count() - test_lines, fns)
}

/// Where the `}` that closes the `{` at `open` is.
fn closing(code: &str, open: usize) -> usize {
    let mut depth = 0;
    for (i, c) in code[open..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return open + i;
                }
            }
            _ => {}
        }
    }
    code.len()
}

/// `text` with its comments, strings and character literals blanked out
/// (each character but a newline made a space), so braces in them count
/// for nothing.
fn blank_literals(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    // Blanks chars[from..to], keeping newlines.
    let blank = |out: &mut String, from: usize, to: usize| {
        for &c in &chars[from..to.min(chars.len())] {
            out.push(if c == '\n' { '\n' } else { ' ' });
        }
    };
    let find = |from: usize, pat: &str| {
        let pat: Vec<char> = pat.chars().collect();
        (from..chars.len())
            .find(|&j| chars[j..].starts_with(&pat))
            .map_or(chars.len(), |j| j + pat.len())
    };
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        let ident_before = i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_');
        let end = if c == '/' && next == Some('/') {
            find(i, "\n") - 1
        } else if c == '/' && next == Some('*') {
            find(i + 2, "*/")
        } else if c == 'r' && !ident_before && matches!(next, Some('"' | '#')) {
            let hashes = chars[i + 1..].iter().take_while(|&&h| h == '#').count();
            if chars.get(i + 1 + hashes) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            find(i + 2 + hashes, &format!("\"{}", "#".repeat(hashes)))
        } else if c == '"' {
            let mut j = i + 1;
            while j < chars.len() && chars[j] != '"' {
                j += if chars[j] == '\\' { 2 } else { 1 };
            }
            j + 1
        } else if c == '\'' && next == Some('\\') {
            find(i + 3, "'")
        } else if c == '\'' && chars.get(i + 2) == Some(&'\'') {
            i + 3
        } else {
            out.push(c);
            i += 1;
            continue;
        };
        blank(&mut out, i, end);
        i = end.max(i + 1);
    }
    out
}

/// docs/design.md §12 draws the code layout: its table of layers is
/// [`LAYERS`] (top to bottom, each with the layers below it that it uses),
/// and its tree names every file under `src/` and nothing else.
#[test]
fn design_code_layout_names_every_module_and_layer() {
    let layout = Layout::read();
    let doc_layers: Vec<String> = layout
        .layers
        .iter()
        .map(|(l, uses)| format!("{l}: {}", uses.join(", ")))
        .collect();
    let layers: Vec<String> = LAYERS
        .iter()
        .map(|(l, uses)| {
            let below: Vec<&str> = uses.iter().copied().filter(|u| u != l).collect();
            format!("{l}: {}", below.join(", "))
        })
        .collect();
    assert_eq!(
        doc_layers, layers,
        "docs/design.md §12: the table of layers (`| Layer | Uses |`, top to bottom) is not the layering tests/architecture.rs checks"
    );
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    source_files(&root, &root, &mut files);
    let missing: Vec<&String> = files.iter().filter(|f| !layout.names(f)).collect();
    assert!(
        missing.is_empty(),
        "docs/design.md §12 does not draw these files of src/ in its tree:\n{}",
        missing.iter().map(|f| f.as_str()).collect::<Vec<_>>().join("\n")
    );
    let stale: Vec<&String> = layout
        .entries
        .iter()
        .filter(|e| !files.iter().any(|f| Layout::matches(e, f)))
        .collect();
    assert!(
        stale.is_empty(),
        "docs/design.md §12 draws what src/ does not have:\n{}",
        stale.iter().map(|e| e.as_str()).collect::<Vec<_>>().join("\n")
    );
}

#[test]
fn the_layout_reader_follows_the_tree() {
    let tree = "src/\n  a.rs  x\n  b/   y\n    c.rs z.rs  w\n    d/\n      <e>.rs  v\n  f.rs\n                  (g.rs: prose)\n";
    let entries = Layout::tree(tree);
    assert_eq!(
        entries,
        ["a.rs", "b/", "b/c.rs", "b/z.rs", "b/d/", "b/d/<e>.rs", "f.rs"]
    );
    let layout = Layout {
        layers: Vec::new(),
        entries,
    };
    assert!(layout.names("b/d/anything.rs") && layout.names("b/c.rs"));
    assert!(!layout.names("b/e.rs") && !layout.names("g.rs"));
}

#[test]
fn the_reader_finds_known_dependencies() {
    let graph = Graph::read();
    assert!(graph.edges.len() > 10, "{:?}", graph.edges.keys());
    let uses_error = graph.edges.values().filter(|d| d.contains("error")).count();
    assert!(uses_error > 5, "crate::Error uses not resolved to module `error`");
}

/// Module path -> the modules it uses.
struct Graph {
    edges: BTreeMap<String, BTreeSet<String>>,
}

/// One source file's module: its path and its code without tests and comments.
struct Module {
    path: String,
    code: String,
}

impl Graph {
    fn read() -> Graph {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut modules = Vec::new();
        collect(&root, &root, &mut modules);
        let names: BTreeSet<String> = modules.iter().map(|m| m.path.clone()).collect();
        let exports: BTreeMap<String, BTreeMap<String, String>> =
            modules.iter().map(|m| (m.path.clone(), reexports(m, &names))).collect();
        let mut edges = BTreeMap::new();
        for m in &modules {
            let mut deps = BTreeSet::new();
            let code = without_reexports(&m.code);
            let mut paths = references(&code, &m.path, &children(&m.code));
            // A re-export is a dependency only when the module uses the item itself.
            for (name, target) in &exports[&m.path] {
                if mentions(&code, name) {
                    paths.push(target.clone());
                }
            }
            for path in paths {
                if let Some(to) = resolve(&path, &names, &exports, 0) {
                    if to != m.path && !to.is_empty() {
                        deps.insert(to);
                    }
                }
            }
            edges.insert(m.path.clone(), deps);
        }
        edges.remove("");
        Graph { edges }
    }

    /// Groups of modules that reach each other (Tarjan's algorithm).
    fn cycles(&self) -> Vec<Vec<String>> {
        struct Tarjan<'a> {
            g: &'a BTreeMap<String, BTreeSet<String>>,
            index: BTreeMap<&'a str, usize>,
            low: BTreeMap<&'a str, usize>,
            stack: Vec<&'a str>,
            on_stack: BTreeSet<&'a str>,
            out: Vec<Vec<String>>,
        }
        impl<'a> Tarjan<'a> {
            fn visit(&mut self, v: &'a str) {
                let i = self.index.len();
                self.index.insert(v, i);
                self.low.insert(v, i);
                self.stack.push(v);
                self.on_stack.insert(v);
                for w in self.g.get(v).into_iter().flatten() {
                    let w = w.as_str();
                    if !self.index.contains_key(w) {
                        self.visit(w);
                        let l = self.low[v].min(self.low[w]);
                        self.low.insert(v, l);
                    } else if self.on_stack.contains(w) {
                        let l = self.low[v].min(self.index[w]);
                        self.low.insert(v, l);
                    }
                }
                if self.low[v] == self.index[v] {
                    let mut group = Vec::new();
                    while let Some(w) = self.stack.pop() {
                        self.on_stack.remove(w);
                        group.push(w.to_string());
                        if w == v {
                            break;
                        }
                    }
                    if group.len() > 1 {
                        group.sort();
                        self.out.push(group);
                    }
                }
            }
        }
        let mut t = Tarjan {
            g: &self.edges,
            index: BTreeMap::new(),
            low: BTreeMap::new(),
            stack: Vec::new(),
            on_stack: BTreeSet::new(),
            out: Vec::new(),
        };
        for v in self.edges.keys() {
            if !t.index.contains_key(v.as_str()) {
                t.visit(v);
            }
        }
        t.out
    }
}

/// Every module file under `dir`, test files and the binaries left out.
fn collect(root: &Path, dir: &Path, out: &mut Vec<Module>) {
    let mut entries: Vec<_> = fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    entries.sort();
    for p in entries {
        let rel = p.strip_prefix(root).unwrap().to_string_lossy().replace('\\', "/");
        if p.is_dir() {
            if rel != "bin" {
                collect(root, &p, out);
            }
            continue;
        }
        // Test files (`*tests.rs`) and the files of test folders (`tests/`, `*_tests/`).
        let in_tests = rel
            .split('/')
            .any(|part| part.trim_end_matches(".rs").ends_with("tests"));
        if !rel.ends_with(".rs") || in_tests {
            continue;
        }
        let path = rel
            .trim_end_matches(".rs")
            .trim_end_matches("/mod")
            .trim_end_matches("lib")
            .replace('/', "::");
        let code = strip(&fs::read_to_string(&p).unwrap());
        out.push(Module { path, code });
    }
}

/// The code without comments and without `#[cfg(test)]` items.
fn strip(source: &str) -> String {
    let mut code = String::new();
    for line in source.lines() {
        let line = match line.find("//") {
            Some(i) => &line[..i],
            None => line,
        };
        code.push_str(line);
        code.push('\n');
    }
    while let Some(at) = code.find("#[cfg(test)]") {
        let rest = &code[at..];
        // The item ends at its `;` or at the `}` closing its first `{`.
        let end = match (rest.find(';'), rest.find('{')) {
            (Some(semi), Some(open)) if semi < open => at + semi + 1,
            (_, Some(open)) => {
                let mut depth = 0;
                let mut end = code.len();
                for (i, c) in rest[open..].char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                end = at + open + i + 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                end
            }
            (Some(semi), None) => at + semi + 1,
            (None, None) => code.len(),
        };
        code.replace_range(at..end, "");
    }
    code
}

/// Absolute paths (`a::b::c`, without `crate::`) that `code` names:
/// through `crate::`, `super::` or one of the module's `children`.
fn references(code: &str, module: &str, children: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut starts = vec![
        ("crate::".to_string(), String::new()),
        ("super::".to_string(), parent(module)),
    ];
    starts.extend(children.iter().map(|c| (format!("{c}::"), join(module, c))));
    for (start, base) in &starts {
        let start = start.as_str();
        let mut from = 0;
        while let Some(i) = code[from..].find(start) {
            let at = from + i;
            from = at + start.len();
            let before = code[..at].chars().next_back();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            expand(&code[from..], base, &mut out);
        }
    }
    out
}

/// The modules `code` declares (`mod x;`), as names.
fn children(code: &str) -> Vec<String> {
    code.lines()
        .filter_map(|line| {
            let line = line.trim();
            let rest = ["pub mod ", "pub(crate) mod ", "mod "]
                .iter()
                .find_map(|p| line.strip_prefix(p))?;
            let name = rest.strip_suffix(';')?;
            name.chars()
                .all(|c| c.is_alphanumeric() || c == '_')
                .then(|| name.to_string())
        })
        .collect()
}

/// `code` without its `pub use` / `pub(crate) use` statements.
fn without_reexports(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    loop {
        let next = ["pub use ", "pub(crate) use ", "pub(super) use "]
            .iter()
            .filter_map(|p| rest.find(p))
            .min();
        match next {
            Some(i) => {
                out.push_str(&rest[..i]);
                rest = rest[i..].split_once(';').map_or("", |(_, r)| r);
            }
            None => {
                out.push_str(rest);
                return out;
            }
        }
    }
}

/// Whether `code` names `word` as a whole identifier.
fn mentions(code: &str, word: &str) -> bool {
    code.match_indices(word).any(|(i, _)| {
        let before = code[..i].chars().next_back();
        let after = code[i + word.len()..].chars().next();
        let ident = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
        !ident(before) && !ident(after)
    })
}

/// Expands one path at the start of `text`, with `{a, b::{c}}` groups.
fn expand(text: &str, base: &str, out: &mut Vec<String>) {
    let ident_end = text
        .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
        .unwrap_or(text.len());
    let head = text[..ident_end].trim_end_matches(':');
    let path = join(base, head);
    if text[ident_end..].starts_with('{') && (ident_end == 0 || text[..ident_end].ends_with("::")) {
        let body = &text[ident_end + 1..];
        let mut depth = 0;
        let mut item_start = 0;
        for (i, c) in body.char_indices() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => {
                    expand(body[item_start..i].trim(), &path, out);
                    return;
                }
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    expand(body[item_start..i].trim(), &path, out);
                    item_start = i + 1;
                }
                _ => {}
            }
        }
    } else if !head.is_empty() && head != "self" {
        out.push(path);
    } else if head == "self" {
        out.push(base.to_string());
    }
}

fn join(base: &str, tail: &str) -> String {
    let tail = tail.trim_end_matches("::self");
    match (base.is_empty(), tail.is_empty()) {
        (_, true) => base.to_string(),
        (true, false) => tail.to_string(),
        (false, false) => format!("{base}::{tail}"),
    }
}

fn parent(module: &str) -> String {
    module.rsplit_once("::").map(|(p, _)| p.to_string()).unwrap_or_default()
}

/// The items a module re-exports (`pub use` or `pub(crate) use`): name ->
/// the absolute path it stands for.
fn reexports(m: &Module, names: &BTreeSet<String>) -> BTreeMap<String, String> {
    let mut map = BTreeMap::new();
    for stmt in m.code.split(';') {
        let stmt = stmt.trim();
        let Some(rest) = ["pub use ", "pub(crate) use ", "pub(super) use "]
            .iter()
            .find_map(|p| stmt.strip_prefix(p))
        else {
            continue;
        };
        let rest = rest.trim_start_matches("crate::").trim_start_matches("self::");
        let mut paths = Vec::new();
        let base = if names.contains(&join(&m.path, first_segment(rest))) {
            m.path.clone()
        } else {
            String::new()
        };
        expand(rest, &base, &mut paths);
        for p in paths {
            let name = p.rsplit("::").next().unwrap_or(&p).to_string();
            map.insert(name, p);
        }
    }
    map
}

fn first_segment(path: &str) -> &str {
    path.split("::").next().unwrap_or(path)
}

/// The module that defines what `path` names: the longest module prefix,
/// then through that module's re-exports.
fn resolve(
    path: &str,
    names: &BTreeSet<String>,
    exports: &BTreeMap<String, BTreeMap<String, String>>,
    depth: usize,
) -> Option<String> {
    if depth > 8 {
        return None;
    }
    let segments: Vec<&str> = path.split("::").collect();
    let mut module = String::new();
    let mut used = 0;
    for (i, _) in segments.iter().enumerate() {
        let candidate = segments[..=i].join("::");
        if names.contains(&candidate) {
            module = candidate;
            used = i + 1;
        }
    }
    if let Some(item) = segments.get(used) {
        if let Some(target) = exports.get(&module).and_then(|e| e.get(*item)) {
            if target != path {
                return resolve(target, names, exports, depth + 1);
            }
        }
    }
    Some(module)
}

/// What docs/design.md §12 draws: the layers' table, and the tree's
/// entries as paths under `src/` (folders end in `/`; `<name>.rs` stands
/// for every file of its folder).
struct Layout {
    layers: Vec<(String, Vec<String>)>,
    entries: Vec<String>,
}

impl Layout {
    fn read() -> Layout {
        let design = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/design.md")).unwrap();
        let section = design
            .split("\n## ")
            .find(|s| s.starts_with("12. Code layout"))
            .expect("docs/design.md has no section `## 12. Code layout`");
        let cell = |c: &str| c.trim().trim_matches('`').trim_end_matches('/').to_string();
        let layers = section
            .lines()
            .skip_while(|l| !l.starts_with("| Layer |"))
            .skip(2)
            .take_while(|l| l.starts_with('|'))
            .map(|row| {
                let cells: Vec<&str> = row.trim_matches('|').split('|').collect();
                let uses = cells.get(1).copied().unwrap_or_default();
                let uses = uses.split(',').map(cell).filter(|u| !u.is_empty()).collect();
                (cell(cells[0]), uses)
            })
            .collect();
        let tree = section
            .split("```")
            .nth(1)
            .expect("docs/design.md §12 has no code block with the tree");
        Layout {
            layers,
            entries: Layout::tree(tree),
        }
    }

    /// The entries of a tree: on each line, the file and folder names that
    /// come before its description, under the folder the indentation says.
    fn tree(text: &str) -> Vec<String> {
        let mut entries = Vec::new();
        // (indentation, folder path under src/), innermost last.
        let mut folders: Vec<(usize, String)> = Vec::new();
        for line in text.lines() {
            let indent = line.len() - line.trim_start().len();
            let names: Vec<&str> = line.split_whitespace().take_while(|w| is_entry(w)).collect();
            if names.is_empty() {
                continue;
            }
            folders.retain(|(i, _)| *i < indent);
            let base = folders.last().map(|(_, f)| f.clone()).unwrap_or_default();
            for name in names {
                if name == "src/" {
                    continue;
                }
                let path = format!("{base}{name}");
                if name.ends_with('/') {
                    folders.push((indent, path.clone()));
                }
                entries.push(path);
            }
        }
        entries
    }

    /// Whether the tree draws `file` (a path under `src/`).
    fn names(&self, file: &str) -> bool {
        self.entries
            .iter()
            .any(|e| !e.ends_with('/') && Layout::matches(e, file))
    }

    /// Whether entry `e` is `file`, stands for it, or is a folder above it.
    fn matches(e: &str, file: &str) -> bool {
        if e.ends_with('/') {
            return file.starts_with(e);
        }
        match e.rsplit_once('/').map_or(("", e), |(dir, name)| (dir, name)) {
            (dir, name) if name.starts_with('<') => file
                .rsplit_once('/')
                .is_some_and(|(d, f)| d == dir && f.ends_with(".rs")),
            _ => e == file,
        }
    }
}

/// A file or folder name as the tree writes them: `name.rs`, `name/`,
/// `a/b/`, `<name>.rs`.
fn is_entry(word: &str) -> bool {
    let ok = |s: &str| {
        !s.is_empty()
            && s.split('/').all(|seg| {
                seg.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "_<>".contains(c))
            })
    };
    match (word.strip_suffix(".rs"), word.strip_suffix('/')) {
        (Some(stem), _) => ok(stem),
        (None, Some(dir)) => ok(dir),
        _ => false,
    }
}

/// Every `.rs` file under `dir`, as a path under `root`, test files and
/// binaries included.
fn source_files(root: &Path, dir: &Path, out: &mut Vec<String>) {
    for entry in fs::read_dir(dir).unwrap() {
        let p = entry.unwrap().path();
        if p.is_dir() {
            source_files(root, &p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p.strip_prefix(root).unwrap().to_string_lossy().replace('\\', "/"));
        }
    }
    out.sort();
}
