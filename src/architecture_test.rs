//! The crate's modules must form layers, and its files must not import
//! each other in a loop. This reads every file of `src/` (not `src/bin/`),
//! collects the paths its code names from the crate (`crate::`, `super::`,
//! `self::`, use groups expanded), and leads each to the file that defines
//! it (names a module root imports with `use`, such as `lib.rs`'s
//! re-exports, resolved to where they come from). Two graphs come out: file
//! to file, which must have no cycle, and top-level module to top-level
//! module, which must follow the layers. Test code (`*_test.rs` files,
//! `*_test/` directories and `#[cfg(test)] mod tests` blocks) and comments
//! are left out. `docs/architecture.md` draws the layers; its table is
//! checked here too.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Module (or file, by its module path) → those it imports.
type Graph = BTreeMap<String, BTreeSet<String>>;

fn source_of(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    // Unit tests at the end of a file may use anything.
    let code = text
        .split("#[cfg(test)]\nmod tests")
        .next()
        .unwrap_or_default();
    code.lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The library's files (not `src/bin/`, not test code) by module path:
/// `worker/producer.rs` is `worker::producer`, `db/mod.rs` is `db`, and
/// `lib.rs` is the empty path, the crate's root.
fn library_files(src: &Path) -> BTreeMap<String, PathBuf> {
    let mut files = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            let stem = path.file_stem().unwrap_or_default().to_string_lossy();
            if (dir == src && stem == "bin") || stem.ends_with("_test") {
                continue;
            }
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let relative = path.strip_prefix(src).unwrap_or(&path).with_extension("");
                let mut segments: Vec<String> = relative
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().to_string())
                    .collect();
                if segments.last().is_some_and(|s| s == "mod") || segments == ["lib"] {
                    segments.pop();
                }
                files.insert(segments.join("::"), path);
            }
        }
    }
    files
}

/// Whether `module` is a module root (`lib.rs`, a `mod.rs`, or a file with
/// a directory of submodules beside it): it declares submodules, may use
/// their items by bare paths, and may re-export them.
fn is_root(module: &str, files: &BTreeMap<String, PathBuf>) -> bool {
    let children = format!("{module}::");
    module.is_empty() || files.keys().any(|file| file.starts_with(&children))
}

fn join(module: &str, path: &str) -> String {
    match (module.is_empty(), path.is_empty()) {
        (true, _) => path.to_string(),
        (_, true) => module.to_string(),
        _ => format!("{module}::{path}"),
    }
}

/// The path or use tree that begins `text`: `crate::a::{b, c::D}` of
/// `crate::a::{b, c::D};`, `crate::a::f` of `crate::a::f(x)`.
fn tree_at(text: &str) -> &str {
    let mut depth = 0;
    for (i, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => return &text[..i],
            '}' => depth -= 1,
            c if depth == 0 && !(c.is_ascii_alphanumeric() || c == '_' || c == ':') => {
                return &text[..i];
            }
            _ => {}
        }
    }
    text
}

/// The paths of a use tree: `a::{self, b::{C, D as E}}` gives `a`,
/// `a::b::C` and `a::b::D`.
fn expand(tree: &str) -> Vec<String> {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        let path = tree.split_whitespace().next().unwrap_or_default();
        return vec![path.trim_end_matches("::self").to_string()];
    };
    let prefix = tree[..open].trim_end_matches("::");
    let close = tree.rfind('}').filter(|close| *close > open);
    let inner = &tree[open + 1..close.unwrap_or(tree.len())];
    let (mut items, mut depth, mut start) = (Vec::new(), 0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&inner[start..]);
    items
        .into_iter()
        .flat_map(expand)
        .filter(|path| !path.is_empty())
        .map(|path| match path.as_str() {
            "self" => prefix.to_string(),
            _ => join(prefix, &path),
        })
        .collect()
}

/// `path`, as the file of `module` writes it, from the crate's root:
/// `crate::a::B` is `a::B`; in `worker::handle`, `super::ahead` is
/// `worker::ahead` and `self::x` is `worker::handle::x`; any other path is
/// read from `module` (a module root's `use child::…`).
fn absolute(path: &str, module: &str) -> String {
    let mut base: Vec<&str> = module.split("::").filter(|s| !s.is_empty()).collect();
    let mut rest = path;
    if let Some(after) = rest.strip_prefix("crate::") {
        base.clear();
        rest = after;
    } else if let Some(after) = rest.strip_prefix("self::") {
        rest = after;
    }
    while let Some(after) = rest.strip_prefix("super::") {
        base.pop();
        rest = after;
    }
    join(&base.join("::"), rest)
}

/// Whether the character before `at` could continue a path or a name.
fn inside_a_word(code: &str, at: usize) -> bool {
    code[..at]
        .chars()
        .next_back()
        .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

/// The paths the file of `module` names from the crate, from the root.
fn named_paths(code: &str, module: &str) -> Vec<String> {
    let mut paths = Vec::new();
    for prefix in ["crate::", "super::", "self::"] {
        for (at, _) in code.match_indices(prefix) {
            if !inside_a_word(code, at) {
                let tree = expand(tree_at(&code[at..]));
                paths.extend(tree.iter().map(|path| absolute(path, module)));
            }
        }
    }
    paths
}

/// The names a module root's `use` items bring into `module`, with the
/// paths they come from: `pub(crate) use outcome::{Lease, heartbeat};` in
/// `db` gives `db::Lease` from `db::outcome::Lease`, and `db::heartbeat`.
fn use_items(code: &str, module: &str) -> Vec<(String, String)> {
    let mut items = Vec::new();
    for (at, _) in code.match_indices("use ") {
        if inside_a_word(code, at) {
            continue;
        }
        for path in expand(tree_at(code[at + "use ".len()..].trim_start())) {
            let name = path.rsplit("::").next().unwrap_or_default();
            items.push((join(module, name), absolute(&path, module)));
        }
    }
    items
}

/// The file that defines `path`: its longest prefix that is a file, unless
/// that file's module imports the next name, which is then followed.
fn defining_file(
    path: &str,
    files: &BTreeMap<String, PathBuf>,
    imported: &BTreeMap<String, String>,
) -> String {
    let mut path = path.to_string();
    // (A few hops at most: imports cannot loop in code that compiles.)
    for _ in 0..16 {
        let segments: Vec<&str> = path.split("::").collect();
        let Some(k) = (0..=segments.len())
            .rev()
            .find(|k| files.contains_key(&segments[..*k].join("::")))
        else {
            return String::new();
        };
        let file = segments[..k].join("::");
        match segments
            .get(k)
            .and_then(|next| imported.get(&join(&file, next)))
        {
            Some(source) if *source != path => {
                path = join(source, &segments[k + 1..].join("::"));
            }
            _ => return file,
        }
    }
    String::new()
}

/// File → files it imports, by module path. A module root's imports of its
/// own submodules are left out: it declares them and re-exports their
/// items, and they may use what it defines.
fn file_graph(src: &Path) -> Graph {
    let files = library_files(src);
    let mut imported = BTreeMap::new();
    for (module, file) in &files {
        if is_root(module, &files) {
            imported.extend(use_items(&source_of(file), module));
        }
    }
    let mut graph = Graph::new();
    for (module, file) in &files {
        let edges = graph.entry(module.clone()).or_default();
        for path in named_paths(&source_of(file), module) {
            let target = defining_file(&path, &files, &imported);
            let own = module.is_empty() || target == *module;
            if !own && !target.starts_with(&format!("{module}::")) {
                edges.insert(target);
            }
        }
    }
    graph
}

/// Top-level module → top-level modules it imports: the file graph, each
/// file counted in its top-level module (the crate's root left out).
fn graph(src: &Path) -> Graph {
    let top = |path: &str| path.split("::").next().unwrap_or_default().to_string();
    let mut graph = Graph::new();
    for (file, imports) in file_graph(src) {
        let module = top(&file);
        if module.is_empty() {
            continue;
        }
        let edges = graph.entry(module.clone()).or_default();
        for import in imports.iter().map(|import| top(import)) {
            if !import.is_empty() && import != module {
                edges.insert(import);
            }
        }
    }
    graph
}

/// Edges that lie on a cycle: `a → b` where `b` reaches `a`.
fn cycle_edges(graph: &Graph) -> BTreeSet<(String, String)> {
    let reaches = |from: &str, to: &str| {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.to_string()];
        while let Some(node) = stack.pop() {
            if node == to {
                return true;
            }
            if seen.insert(node.clone()) {
                stack.extend(graph.get(&node).into_iter().flatten().cloned());
            }
        }
        false
    };
    graph
        .iter()
        .flat_map(|(a, targets)| targets.iter().map(move |b| (a.clone(), b.clone())))
        .filter(|(a, b)| reaches(b, a))
        .collect()
}

#[test]
fn modules_form_layers_without_import_cycles() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = graph(&src);
    assert!(
        graph.contains_key("db") && graph["db"].contains("error"),
        "the checker found no imports: {graph:?}"
    );
    let cycles = cycle_edges(&graph);
    assert!(
        cycles.is_empty(),
        "import edges on a cycle (a -> b where b reaches a): {cycles:?}\ngraph: {graph:#?}"
    );
}

/// The layer table of `docs/architecture.md`: rows `| N | `module` | … |`.
fn documented_layers(doc: &str) -> BTreeMap<String, u32> {
    doc.lines()
        .filter_map(|line| {
            let mut cells = line.split('|').map(str::trim).skip(1);
            let layer = cells.next()?.parse().ok()?;
            let module = cells.next()?.trim_matches('`').to_string();
            Some((module, layer))
        })
        .collect()
}

#[test]
fn every_import_goes_to_a_lower_layer_of_the_documented_table() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let graph = graph(&root.join("src"));
    let doc = std::fs::read_to_string(root.join("docs/architecture.md")).unwrap_or_default();
    let layers = documented_layers(&doc);
    let mut wrong = Vec::new();
    for module in graph.keys() {
        if !layers.contains_key(module) {
            wrong.push(format!("`{module}` is not in docs/architecture.md"));
        }
    }
    for module in layers.keys() {
        if !graph.contains_key(module) {
            wrong.push(format!(
                "docs/architecture.md lists `{module}`, which src/ lacks"
            ));
        }
    }
    for (module, imports) in &graph {
        for import in imports {
            if let (Some(from), Some(to)) = (layers.get(module), layers.get(import))
                && to >= from
            {
                wrong.push(format!(
                    "`{module}` (layer {from}) imports `{import}` (layer {to})"
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn files_import_each_other_without_cycles() {
    let graph = file_graph(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    assert!(
        graph["worker::slots"].contains("worker::ahead") && graph["db::claim"].contains("db::exec"),
        "the checker found no imports between files: {graph:?}"
    );
    let cycles = cycle_edges(&graph);
    assert!(
        cycles.is_empty(),
        "file imports on a cycle (a -> b where b reaches a): {cycles:?}"
    );
}

#[test]
fn the_checker_sees_grouped_relative_and_reexported_paths() {
    let code = "use crate::{db::{self, Queries}, job::Job};\nlet x = crate::BULK_CHUNK;";
    assert_eq!(
        named_paths(code, "worker::launch"),
        ["db", "db::Queries", "job::Job", "BULK_CHUNK"]
    );
    assert_eq!(
        named_paths("use super::ahead::{HoldLimit as H};", "worker::handle"),
        ["worker::ahead::HoldLimit"]
    );
    let files: BTreeMap<String, PathBuf> = ["", "db", "db::outcome", "db::claim"]
        .map(|module| (module.to_string(), PathBuf::new()))
        .into();
    let mut imported = BTreeMap::new();
    imported.extend(use_items("pub use db::{Lease, BULK_CHUNK};", ""));
    imported.extend(use_items("pub(crate) use outcome::Lease;", "db"));
    let file = |path: &str| defining_file(path, &files, &imported);
    assert_eq!(file("Lease"), "db::outcome", "through two re-exports");
    assert_eq!(file("db::claim::claim"), "db::claim");
    assert_eq!(file("BULK_CHUNK"), "db", "not imported into db");
    let mut graph = Graph::new();
    graph.entry("a".into()).or_default().insert("b".into());
    graph.entry("b".into()).or_default().insert("a".into());
    graph.entry("b".into()).or_default().insert("c".into());
    assert_eq!(cycle_edges(&graph).len(), 2);
}

#[test]
#[ignore = "prints the graph: cargo test --lib print_the_module_graph -- --ignored --nocapture"]
fn print_the_module_graph() {
    let graph = graph(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    for (module, imports) in &graph {
        println!(
            "{module} -> {}",
            imports.iter().cloned().collect::<Vec<_>>().join(", ")
        );
    }
}
