//! The crate's modules must form layers: no module may import, directly or
//! through others, a module that imports it. This reads every file of
//! `src/` (not `src/bin/`), collects the `crate::` paths its code names, maps
//! each to the top-level module that defines it (root re-exports in `lib.rs`
//! resolved to their module), and looks for cycles. Test code (`*_test.rs`
//! files, `*_test/` directories and `#[cfg(test)] mod tests` blocks) and comments are left out.
//! `docs/architecture.md` draws the layers; its table is checked here too.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Module → modules it imports.
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

/// Identifiers at the top of `crate::…` paths, `use crate::{a, b::c}` groups
/// included.
fn crate_paths(code: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find(';').unwrap_or(group.len());
            let mut depth = 0;
            let mut item = String::new();
            for c in group[..end].chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        names.insert(first_ident(&item));
                        item.clear();
                        continue;
                    }
                    _ => {}
                }
                if depth == 0 {
                    item.push(c);
                }
            }
            names.insert(first_ident(&item));
        } else {
            names.insert(first_ident(rest));
        }
    }
    names.remove("");
    names
}

fn first_ident(text: &str) -> String {
    text.trim_start()
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect()
}

/// Root items of `lib.rs` (`pub use module::{…}`) → the module defining them.
fn root_reexports(lib: &str) -> BTreeMap<String, String> {
    let mut map = BTreeMap::new();
    for statement in lib.split(';') {
        let Some(at) = statement.find("pub use ") else {
            continue;
        };
        let path = statement[at + "pub use ".len()..].trim();
        let module = first_ident(path);
        let items = match path.find('{') {
            Some(open) => path[open + 1..].trim_end_matches('}').to_string(),
            None => path.rsplit("::").next().unwrap_or_default().to_string(),
        };
        for item in items.split(',') {
            let item = first_ident(item);
            if !item.is_empty() {
                map.insert(item, module.clone());
            }
        }
    }
    map
}

fn graph(src: &Path) -> Graph {
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap_or_default();
    let reexports = root_reexports(&lib);
    let mut modules: BTreeMap<String, Vec<std::path::PathBuf>> = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            let relative = path.strip_prefix(src).unwrap_or(&path).to_path_buf();
            let top = relative
                .components()
                .next()
                .map(|c| {
                    c.as_os_str()
                        .to_string_lossy()
                        .trim_end_matches(".rs")
                        .to_string()
                })
                .unwrap_or_default();
            if top == "bin" || top == "lib" {
                continue;
            }
            let test_code = path
                .file_stem()
                .is_some_and(|stem| stem.to_string_lossy().ends_with("_test"));
            if test_code {
                continue;
            }
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                modules.entry(top).or_default().push(path);
            }
        }
    }
    let mut graph = Graph::new();
    for (module, files) in &modules {
        let edges = graph.entry(module.clone()).or_default();
        for file in files {
            for name in crate_paths(&source_of(file)) {
                let target = if modules.contains_key(&name) {
                    name
                } else if let Some(owner) = reexports.get(&name) {
                    owner.clone()
                } else {
                    continue;
                };
                if &target != module {
                    edges.insert(target);
                }
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
fn the_checker_sees_grouped_and_root_paths() {
    let code = "use crate::{db::{self, Queries}, job::Job};\nlet x = crate::BULK_CHUNK;";
    let names = crate_paths(code);
    assert_eq!(
        names.into_iter().collect::<Vec<_>>(),
        ["BULK_CHUNK", "db", "job"]
    );
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
