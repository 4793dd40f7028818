//! Every relative link in the README and in `docs/` resolves: the file it
//! names exists, and the heading it names (`#anchor`, as GitHub makes
//! anchors from headings) is in that file. Links to other sites are not
//! followed (no network here).

use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// The Markdown files whose links are checked.
fn documents() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = vec![root.join("README.md"), root.join("CHANGELOG.md")];
    let docs = std::fs::read_dir(root.join("docs")).expect("docs/ is readable");
    for entry in docs {
        let path = entry.expect("a docs/ entry").path();
        if path.extension().is_some_and(|ext| ext == "md") {
            files.push(path);
        }
    }
    files.sort();
    files
}

/// The targets of the inline links `[text](target)` and images
/// `![alt](target)` in `text`, outside code blocks and code spans.
fn link_targets(text: &str) -> Vec<String> {
    let mut targets = Vec::new();
    for line in outside_code_blocks(text) {
        let mut rest = strip_code_spans(line);
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            targets.push(after[..end].to_owned());
            rest = after[end..].to_owned();
        }
    }
    targets
}

/// The lines of `text` outside its fenced code blocks.
fn outside_code_blocks(text: &str) -> impl Iterator<Item = &str> {
    let mut in_fence = false;
    text.lines().filter(move |line| {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
            return false;
        }
        !in_fence
    })
}

/// `line` without its code spans (`` `…` ``), where `](` is no link.
fn strip_code_spans(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut in_code = false;
    for c in line.chars() {
        if c == '`' {
            in_code = !in_code;
        } else if !in_code {
            out.push(c);
        }
    }
    out
}

/// The anchors GitHub makes from the headings of `text`: lowercased,
/// without punctuation but `-` and `_`, spaces as `-`, a repeat numbered.
fn anchors(text: &str) -> HashSet<String> {
    let mut seen = HashSet::new();
    for line in outside_code_blocks(text) {
        if !line.starts_with('#') {
            continue;
        }
        let heading = line.trim_start_matches('#').trim();
        let slug: String = heading
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let mut unique = slug.clone();
        let mut n = 1;
        while !seen.insert(unique.clone()) {
            unique = format!("{slug}-{n}");
            n += 1;
        }
    }
    seen
}

/// Every relative link of every document resolves, anchors included.
#[test]
fn every_relative_link_in_the_docs_resolves() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for document in documents() {
        let text = std::fs::read_to_string(&document).expect("a document is readable");
        let dir = document.parent().expect("a document has a folder");
        for target in link_targets(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (path, anchor) = match target.split_once('#') {
                Some((path, anchor)) => (path, Some(anchor)),
                None => (target.as_str(), None),
            };
            let file = if path.is_empty() {
                document.clone()
            } else {
                dir.join(path)
            };
            if !file.exists() {
                broken.push(format!("{}: {target}: no such file", document.display()));
                continue;
            }
            if let Some(anchor) = anchor {
                let text = std::fs::read_to_string(&file).expect("a linked file is readable");
                if !anchors(&text).contains(anchor) {
                    broken.push(format!("{}: {target}: no such heading", document.display()));
                }
            }
        }
    }
    assert!(
        checked > 20,
        "only {checked} links found: the parser is off"
    );
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// The anchors follow GitHub's rule, so that a link that GitHub resolves
/// passes, and one it does not fails.
#[test]
fn anchors_are_made_as_github_makes_them() {
    let made = anchors(
        "# Top\n## Readers and writers: `read` / `write`\n## Top\n```\n# not a heading\n```\n",
    );
    assert!(made.contains("readers-and-writers-read--write"));
    assert!(made.contains("top") && made.contains("top-1"));
    assert!(!made.contains("not-a-heading"));
    let links = link_targets("see [a](a.md#x), `[b](not.md)`, ![c](c.svg)\n```\n[d](d.md)\n```");
    assert_eq!(links, ["a.md#x", "c.svg"]);
}
