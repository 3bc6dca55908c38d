//! The house's layering, checked, where the workspace's crates cannot
//! check it themselves. Cargo already keeps the crates apart: `kiln-runtime`
//! (runtime/) depends on no other kiln crate, the library (src/) cannot
//! reach the command line (cli/), and the command line sees only the
//! library's public API. Inside each crate this test reads every .rs file,
//! finds its imports of the crate's own modules (`use` declarations and
//! inline `crate::`/`super::` paths; comments, doc comments, string
//! literals and `#[cfg(test)]` items skipped) and fails, naming the file,
//! the line and the import, when a lower floor imports a higher one or
//! when the files of a folder import each other in a circle.
//! docs/architecture.md draws the same floors.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The library's top-level modules, ground floor first. A module imports
/// only modules on lower floors (never one on its own floor or above).
/// docs/architecture.md describes each floor.
const LAYERS: &[&[&str]] = &[
    &["util", "progress"],
    &["graph"],
    &["stablehlo"],
    &["params"],
    &["models"],
    &["interp", "tokenizer"],
    &["iree"],
    &["manifest"],
    &["export"],
    &["generate"],
    &["package"],
    &["verify"],
    &["error"],
];

/// `kiln-runtime`'s top-level modules, ground floor first, by the same
/// rule (docs/architecture.md, "The runtime crate's floors").
const RUNTIME_LAYERS: &[&[&str]] = &[
    &["ffi", "names", "tokenizer", "types"],
    &["iree", "package", "step"],
    &["generate", "kv"],
    &["chat", "serve", "steps"],
    &["model"],
    &["capi"],
    &["jni"],
];

/// One crate of the workspace, as this test reads it.
struct Crate {
    /// Its source folder under the repository root.
    dir: &'static str,
    /// Its root file in `dir` (the module path `[]`).
    root: &'static str,
    /// Its floors; empty for a crate with no floors (the command line,
    /// one file per verb: only the no-circle rule).
    layers: &'static [&'static [&'static str]],
    /// Folders of `dir` that are other crates' roots (runtime/src/bin).
    skip: &'static [&'static str],
}

/// The workspace's crates.
const CRATES: &[Crate] = &[
    Crate {
        dir: "src",
        root: "lib.rs",
        layers: LAYERS,
        skip: &[],
    },
    Crate {
        dir: "runtime/src",
        root: "lib.rs",
        layers: RUNTIME_LAYERS,
        skip: &["bin"],
    },
    Crate {
        dir: "cli/src",
        root: "main.rs",
        layers: &[],
        skip: &[],
    },
];

/// A Rust source file of one crate.
struct Source {
    /// The path under the repository root, for messages.
    rel: String,
    /// The module path (`["models", "config"]`; empty for a crate root).
    module: Vec<String>,
    /// Imports of this crate's modules: the resolved path, the line, and
    /// the import as written.
    imports: Vec<(Vec<String>, usize, String)>,
    /// The names its `use` declarations bring in (its children see them
    /// too, through `super::`), each with its resolved source path.
    names: BTreeMap<String, Vec<String>>,
}

/// A token of stripped source: an identifier, `::` or one punctuation
/// character, with its line.
#[derive(Clone, Debug)]
struct Tok {
    text: String,
    line: usize,
}

/// `src` with comments and the contents of string and character literals
/// blanked (newlines kept, so lines still count).
fn strip(src: &str) -> String {
    let b: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    let is_ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < b.len() && b[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == '/' && b.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if b[i] == '*' && b.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(b[i]));
                    i += 1;
                }
            }
        } else if is_ident(c) && (i == 0 || !is_ident(b[i - 1])) {
            let start = i;
            while i < b.len() && is_ident(b[i]) {
                i += 1;
            }
            let word: String = b[start..i].iter().collect();
            out.push_str(&word);
            if word == "r" || word == "br" {
                let mut j = i;
                while b.get(j) == Some(&'#') {
                    j += 1;
                }
                if b.get(j) == Some(&'"') {
                    let hashes = j - i;
                    out.extend(std::iter::repeat_n(' ', hashes + 1));
                    i = j + 1;
                    while i < b.len() {
                        if b[i] == '"' && (1..=hashes).all(|k| b.get(i + k) == Some(&'#')) {
                            out.extend(std::iter::repeat_n(' ', hashes + 1));
                            i += hashes + 1;
                            break;
                        }
                        out.push(blank(b[i]));
                        i += 1;
                    }
                }
            }
        } else if c == '"' {
            out.push(' ');
            i += 1;
            while i < b.len() && b[i] != '"' {
                if b[i] == '\\' {
                    out.push(' ');
                    i += 1;
                }
                if i < b.len() {
                    out.push(blank(b[i]));
                    i += 1;
                }
            }
            out.push(' ');
            i += 1;
        } else if c == '\'' && (next == Some('\\') || b.get(i + 2) == Some(&'\'')) {
            // A character literal ('x', '\n', '\u{..}'); a lifetime stays.
            out.push(' ');
            i += 1;
            if b.get(i) == Some(&'\\') {
                out.push_str("  ");
                i += 2;
            }
            while i < b.len() && b[i] != '\'' {
                out.push(' ');
                i += 1;
            }
            out.push(' ');
            i += 1;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// The tokens of stripped source.
fn tokens(code: &str) -> Vec<Tok> {
    let mut toks = Vec::new();
    let mut line = 1;
    let b: Vec<char> = code.chars().collect();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c.is_alphanumeric() || c == '_' {
            let start = i;
            while i < b.len() && (b[i].is_alphanumeric() || b[i] == '_') {
                i += 1;
            }
            toks.push(Tok {
                text: b[start..i].iter().collect(),
                line,
            });
        } else if c == ':' && b.get(i + 1) == Some(&':') {
            toks.push(Tok {
                text: "::".into(),
                line,
            });
            i += 2;
        } else {
            toks.push(Tok {
                text: c.to_string(),
                line,
            });
            i += 1;
        }
    }
    toks
}

/// `toks` without the items under `#[cfg(test)]` (test modules may import
/// what they test from anywhere).
fn without_tests(toks: Vec<Tok>) -> Vec<Tok> {
    let is = |k: usize, s: &str| toks.get(k).is_some_and(|t| t.text == s);
    let mut out = Vec::with_capacity(toks.len());
    let mut i = 0;
    while i < toks.len() {
        let cfg_test = ["#", "[", "cfg", "(", "test", ")", "]"]
            .iter()
            .enumerate()
            .all(|(k, s)| is(i + k, s));
        if !cfg_test {
            out.push(toks[i].clone());
            i += 1;
            continue;
        }
        // Skip the attribute, then the item: to its `;` or its braced body.
        i += 7;
        let mut depth = 0i32;
        while i < toks.len() {
            match toks[i].text.as_str() {
                "(" | "[" => depth += 1,
                ")" | "]" => depth -= 1,
                ";" if depth == 0 => {
                    i += 1;
                    break;
                }
                "{" if depth == 0 => {
                    let mut braces = 0;
                    while i < toks.len() {
                        match toks[i].text.as_str() {
                            "{" => braces += 1,
                            "}" => braces -= 1,
                            _ => {}
                        }
                        i += 1;
                        if braces == 0 {
                            break;
                        }
                    }
                    break;
                }
                _ => {}
            }
            i += 1;
        }
    }
    out
}

fn is_ident(s: &str) -> bool {
    s.chars()
        .next()
        .is_some_and(|c| c.is_alphabetic() || c == '_')
}

/// Expands the use tree at `toks[*i]` (after `use`) under `prefix` into
/// (path, name it is known by) pairs; `*i` ends past the tree.
fn use_tree(
    toks: &[Tok],
    i: &mut usize,
    prefix: Vec<String>,
    out: &mut Vec<(Vec<String>, String)>,
) {
    let mut path = prefix;
    let text = |k: usize| toks.get(k).map_or("", |t| t.text.as_str());
    if text(*i) == "::" {
        *i += 1;
    }
    loop {
        match text(*i) {
            "{" => {
                *i += 1;
                while *i < toks.len() && text(*i) != "}" {
                    use_tree(toks, i, path.clone(), out);
                    if text(*i) == "," {
                        *i += 1;
                    }
                }
                *i += 1;
                return;
            }
            "*" => {
                *i += 1;
                let name = path.last().cloned().unwrap_or_default();
                out.push((path, name));
                return;
            }
            s if is_ident(s) => {
                if s != "self" || path.is_empty() {
                    path.push(s.to_string());
                }
                *i += 1;
                if text(*i) == "::" {
                    *i += 1;
                    continue;
                }
                let mut name = path.last().cloned().unwrap_or_default();
                if text(*i) == "as" {
                    name = text(*i + 1).to_string();
                    *i += 2;
                }
                out.push((path, name));
                return;
            }
            _ => {
                *i += 1;
                return;
            }
        }
    }
}

/// The absolute module path of `path` written in module `module` (whose
/// file declares the child modules `children`), or `None` for another
/// crate's path.
fn absolute(
    path: &[String],
    module: &[String],
    children: &BTreeSet<String>,
) -> Option<Vec<String>> {
    let first = path.first()?;
    match first.as_str() {
        "crate" | "$crate" => Some(path[1..].to_vec()),
        "super" => {
            let ups = path.iter().take_while(|s| *s == "super").count();
            let base = module.get(..module.len().checked_sub(ups)?)?;
            Some(base.iter().chain(&path[ups..]).cloned().collect())
        }
        "self" => Some(module.iter().chain(&path[1..]).cloned().collect()),
        s if children.contains(s) => Some(module.iter().chain(path).cloned().collect()),
        _ => None,
    }
}

/// Parses one source file, `rel` (for messages) at `module`.
fn parse_source(rel: String, text: &str, module: Vec<String>) -> Source {
    let toks = without_tests(tokens(&strip(text)));
    let text_at = |k: usize| toks.get(k).map_or("", |t| t.text.as_str());
    let children: BTreeSet<String> = (0..toks.len())
        .filter(|&k| text_at(k) == "mod" && is_ident(text_at(k + 1)) && text_at(k + 2) == ";")
        .map(|k| text_at(k + 1).to_string())
        .collect();
    let mut src = Source {
        rel,
        module,
        imports: Vec::new(),
        names: BTreeMap::new(),
    };
    let mut i = 0;
    while i < toks.len() {
        let t = &toks[i];
        if t.text == "use" && (i == 0 || text_at(i - 1) != "::") {
            let line = t.line;
            i += 1;
            let mut trees = Vec::new();
            use_tree(&toks, &mut i, Vec::new(), &mut trees);
            for (path, name) in trees {
                if let Some(abs) = absolute(&path, &src.module, &children) {
                    src.names.insert(name, abs.clone());
                    src.imports.push((abs, line, path.join("::")));
                }
            }
            continue;
        }
        let starts_path = matches!(t.text.as_str(), "crate" | "super")
            && text_at(i + 1) == "::"
            && (i == 0 || text_at(i - 1) != "::");
        if starts_path {
            let line = t.line;
            let mut path = vec![t.text.clone()];
            i += 1;
            while text_at(i) == "::" && is_ident(text_at(i + 1)) {
                path.push(text_at(i + 1).to_string());
                i += 2;
            }
            if text_at(i - 1) != "$" {
                if let Some(abs) = absolute(&path, &src.module, &children) {
                    src.imports.push((abs, line, path.join("::")));
                }
            }
            continue;
        }
        i += 1;
    }
    src
}

/// Every .rs file under `dir`, sorted.
fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// The sources of crate `c`.
fn sources(c: &Crate) -> Vec<Source> {
    let root = crate::common::root();
    let src = root.join(c.dir);
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files
        .iter()
        .filter(|f| {
            let rel = f.strip_prefix(&src).unwrap();
            !c.skip.iter().any(|s| rel.starts_with(s))
        })
        .map(|f| {
            let rel = f.strip_prefix(&src).unwrap();
            let mut module: Vec<String> = if rel == Path::new(c.root) {
                Vec::new()
            } else {
                rel.with_extension("")
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect()
            };
            if module.last().is_some_and(|s| s == "mod") {
                module.pop();
            }
            let rel = f.strip_prefix(&root).unwrap().display().to_string();
            parse_source(rel, &std::fs::read_to_string(f).unwrap(), module)
        })
        .collect()
}

/// The module a path names: its longest prefix that is a module, following
/// `use` declarations (re-exports) to the module that defines the item.
fn target(path: &[String], modules: &BTreeMap<Vec<String>, &Source>) -> Vec<String> {
    let mut path = path.to_vec();
    for _ in 0..8 {
        let n = (0..=path.len())
            .rev()
            .find(|&n| modules.contains_key(&path[..n]))
            .unwrap_or(0);
        let module = &path[..n];
        let Some(next) = path.get(n) else {
            return module.to_vec();
        };
        match modules[module].names.get(next) {
            Some(source) if source.as_slice() != &path[..=n] => {
                let rest = path[n + 1..].to_vec();
                path = source.iter().cloned().chain(rest).collect();
            }
            _ => return module.to_vec(),
        }
    }
    path
}

fn floor(layers: &[&[&str]], module: &str) -> Option<usize> {
    layers.iter().position(|f| f.contains(&module))
}

/// One import between two modules, for messages.
struct Edge {
    from: String,
    to: String,
    at: String,
}

/// The circles among `edges` (strongly connected components of more than
/// one node), each with the edges inside it.
fn circles(edges: &[Edge]) -> Vec<Vec<&Edge>> {
    let nodes: BTreeSet<&str> = edges
        .iter()
        .flat_map(|e| [e.from.as_str(), e.to.as_str()])
        .collect();
    fn reach<'a>(edges: &'a [Edge], from: &'a str) -> BTreeSet<&'a str> {
        let mut seen = BTreeSet::from([from]);
        let mut stack = vec![from];
        while let Some(n) = stack.pop() {
            for e in edges.iter().filter(|e| e.from == n) {
                if seen.insert(e.to.as_str()) {
                    stack.push(e.to.as_str());
                }
            }
        }
        seen
    }
    let reaches: BTreeMap<&str, BTreeSet<&str>> =
        nodes.iter().map(|&n| (n, reach(edges, n))).collect();
    let mut done = BTreeSet::new();
    let mut out = Vec::new();
    for &n in &nodes {
        if done.contains(n) {
            continue;
        }
        let scc: BTreeSet<&str> = nodes
            .iter()
            .copied()
            .filter(|m| reaches[n].contains(m) && reaches[m].contains(n))
            .collect();
        done.extend(scc.iter().copied());
        if scc.len() > 1 {
            out.push(
                edges
                    .iter()
                    .filter(|e| scc.contains(e.from.as_str()) && scc.contains(e.to.as_str()))
                    .collect(),
            );
        }
    }
    out
}

#[test]
fn lower_layers_do_not_import_higher_ones_and_folders_have_no_circles() {
    let mut problems = Vec::new();
    for c in CRATES {
        problems.extend(crate_problems(c));
    }
    assert!(
        problems.is_empty(),
        "layering (tests/layering.rs, docs/architecture.md):\n{}",
        problems.join("\n")
    );
}

/// What breaks the floors or makes a circle in crate `c`.
fn crate_problems(c: &Crate) -> Vec<String> {
    let sources = sources(c);
    let dir = c.dir;
    let mut problems = Vec::new();
    let floor = |m: &str| floor(c.layers, m);

    // The floor table lists exactly the crate's top-level modules.
    if !c.layers.is_empty() {
        let top: BTreeSet<&str> = sources
            .iter()
            .filter(|s| s.module.len() == 1)
            .map(|s| s.module[0].as_str())
            .collect();
        for m in &top {
            if floor(m).is_none() {
                problems.push(format!(
                    "{dir}/{m}: a top-level module missing from the layer table (tests/layering.rs)"
                ));
            }
        }
        for m in c.layers.iter().flat_map(|f| f.iter()) {
            if !top.contains(m) {
                problems.push(format!(
                    "the layer table names `{m}`, which is not a module of {dir}/"
                ));
            }
        }
    }

    let modules: BTreeMap<Vec<String>, &Source> =
        sources.iter().map(|s| (s.module.clone(), s)).collect();
    // Folder (module path) -> imports between its children.
    let mut folders: BTreeMap<Vec<String>, Vec<Edge>> = BTreeMap::new();
    for s in &sources {
        for (path, line, written) in &s.imports {
            let to = target(path, &modules);
            let at = format!("{}:{line} imports `{written}`", s.rel);
            let (from, to) = (&s.module, &to);
            if !from.is_empty() && !to.is_empty() && from[0] != to[0] {
                let (a, b) = (from[0].as_str(), to[0].as_str());
                if let (Some(fa), Some(fb)) = (floor(a), floor(b)) {
                    if fb >= fa {
                        let how = if fb == fa {
                            "its own floor"
                        } else {
                            "a higher floor"
                        };
                        problems.push(format!(
                            "{at}: `{a}` (floor {fa}) imports `{b}` (floor {fb}, {how})"
                        ));
                    }
                }
            }
            // The children of each folder both paths are under (a
            // folder's mod.rs may use its children: it is their facade).
            let common = from.iter().zip(to).take_while(|(x, y)| x == y).count();
            if common < from.len() && common < to.len() {
                let folder = from[..common].to_vec();
                folders.entry(folder).or_default().push(Edge {
                    from: from[common].clone(),
                    to: to[common].clone(),
                    at: at.clone(),
                });
            }
        }
    }
    for (folder, edges) in &folders {
        for circle in circles(edges) {
            let name = if folder.is_empty() {
                format!("{dir}/")
            } else {
                format!("{dir}/{}/", folder.join("/"))
            };
            let mut lines = vec![format!("a circle among the modules of {name}:")];
            let mut pairs: BTreeMap<(&str, &str), Vec<&str>> = BTreeMap::new();
            for e in circle {
                pairs.entry((&e.from, &e.to)).or_default().push(&e.at);
            }
            for ((from, to), sites) in pairs {
                let more = match sites.len() - 1 {
                    0 => String::new(),
                    n => format!(" (and {n} more)"),
                };
                lines.push(format!("  {from} -> {to}: {}{more}", sites[0]));
            }
            problems.push(lines.join("\n"));
        }
    }
    problems
}

#[test]
fn imports_are_found_in_code_only() {
    let text = r##"
//! Docs naming `crate::export`.
use super::{cursor::Cursor, Global as G};
use crate::graph::{self, DType};
mod child;
use child::Thing;
/// [`crate::package`] in a doc comment, /* crate::iree */ in a block comment.
fn f() -> crate::step::KvSpec {
    let s = "crate::manifest"; let r = r#"super::x"#; let c = '"';
    crate::models::Checkpoint::open(s)
}
#[cfg(test)]
mod tests {
    use crate::generate::Conversation;
}
"##;
    let module = vec!["stablehlo".to_string(), "parser".to_string()];
    let src = parse_source("x.rs".into(), text, module);
    let found: Vec<(String, usize)> = src
        .imports
        .iter()
        .map(|(path, line, _)| (path.join("::"), *line))
        .collect();
    let expect = [
        ("stablehlo::cursor::Cursor", 3),
        ("stablehlo::Global", 3),
        ("graph", 4),
        ("graph::DType", 4),
        ("stablehlo::parser::child::Thing", 6),
        ("step::KvSpec", 8),
        ("models::Checkpoint::open", 10),
    ];
    let expect: Vec<(String, usize)> = expect.iter().map(|(p, l)| (p.to_string(), *l)).collect();
    assert_eq!(found, expect);
    assert_eq!(src.names["G"], ["stablehlo", "Global"]);
}

/// The floors docs/architecture.md draws in `section` (the text before
/// its first `## ` heading when `None`): rows `| N | `a`, `b` | holds |`.
fn drawn_floors(text: &str, section: Option<&str>) -> Vec<Vec<String>> {
    let mut inside = section.is_none();
    let mut rows = Vec::new();
    for l in text.lines() {
        if let Some(h) = l.strip_prefix("## ") {
            inside = section == Some(h.trim());
            continue;
        }
        if !inside {
            continue;
        }
        let cells: Vec<&str> = l.split('|').map(str::trim).collect();
        let Some(floor) = cells.get(1).and_then(|c| c.parse::<usize>().ok()) else {
            continue;
        };
        assert_eq!(
            floor,
            rows.len(),
            "docs/architecture.md: floor {floor} out of order"
        );
        let names = cells[2]
            .split(',')
            .map(|n| n.trim().trim_matches('`').to_string());
        rows.push(names.collect());
    }
    rows
}

#[test]
fn architecture_doc_draws_the_same_floors() {
    let path = crate::common::root().join("docs/architecture.md");
    let text = std::fs::read_to_string(&path).unwrap();
    let table = |layers: &[&[&str]]| -> Vec<Vec<String>> {
        layers
            .iter()
            .map(|f| f.iter().map(|m| m.to_string()).collect())
            .collect()
    };
    assert_eq!(
        drawn_floors(&text, None),
        table(LAYERS),
        "docs/architecture.md's floors differ from LAYERS in tests/layering.rs"
    );
    assert_eq!(
        drawn_floors(&text, Some("The runtime crate's floors")),
        table(RUNTIME_LAYERS),
        "docs/architecture.md's runtime floors differ from RUNTIME_LAYERS in tests/layering.rs"
    );
}
