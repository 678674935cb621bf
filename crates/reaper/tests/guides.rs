//! The English and the Chinese operator's guides are kept in step (issue 24):
//! both name the same configuration keys and the same commands, so that an
//! operator reading either one finds every knob and every command the other
//! tells about. Keys are those of `config.example.toml`.

use std::collections::BTreeSet;
use std::path::PathBuf;

fn repo_file(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `section.key` for every key of the example config, commented ones too.
fn config_keys() -> (BTreeSet<String>, BTreeSet<String>) {
    let mut full = BTreeSet::new();
    let mut bare = BTreeSet::new();
    let mut section = String::new();
    for line in repo_file("config.example.toml").lines() {
        let l = line.trim_start_matches('#').trim();
        if let Some(s) = l.strip_prefix('[').and_then(|s| s.split(']').next()) {
            if !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_lowercase() || c == '_' || c == '.' || c == '[')
            {
                section = s.trim_start_matches('[').to_string();
            }
            continue;
        }
        let Some((key, _)) = l.split_once(" = ") else {
            continue;
        };
        if !key.is_empty() && key.chars().all(|c| c.is_ascii_lowercase() || c == '_') {
            full.insert(format!("{section}.{key}"));
            bare.insert(key.to_string());
        }
    }
    (full, bare)
}

/// The text of every `code span` of a Markdown document (fenced blocks
/// excluded: their lines are scanned for commands only).
fn spans(doc: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut fenced = false;
    for line in doc.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut parts = line.split('`');
        parts.next();
        while let (Some(inside), Some(_)) = (parts.next(), parts.next().or(Some(""))) {
            out.push(inside.to_string());
        }
    }
    out
}

fn keys_named(doc: &str, full: &BTreeSet<String>, bare: &BTreeSet<String>) -> BTreeSet<String> {
    let mut named = BTreeSet::new();
    for span in spans(doc) {
        let mut s = span.trim();
        // `[policy] workflow_master_lost = "recover"` names policy.workflow_master_lost
        let mut section = None;
        if let Some(rest) = s.strip_prefix('[') {
            if let Some((sec, after)) = rest.split_once(']') {
                section = Some(sec.to_string());
                s = after.trim();
            }
        }
        let key = s.split(" = ").next().unwrap_or(s).trim();
        match section {
            Some(sec) if full.contains(&format!("{sec}.{key}")) => {
                named.insert(format!("{sec}.{key}"));
            }
            Some(sec)
                if full.iter().any(|k| k.starts_with(&format!("{sec}."))) && key.is_empty() =>
            {
                named.insert(format!("[{sec}]"));
            }
            _ if full.contains(key) || bare.contains(key) => {
                named.insert(key.to_string());
            }
            _ => {}
        }
    }
    named
}

/// The binary's commands (SPEC §7).
const COMMANDS: [&str; 6] = ["run", "agent", "check", "reap", "config", "version"];

/// `ds-reaper <command>` and `scripts/….sh` anywhere in the text.
fn commands_named(doc: &str) -> BTreeSet<String> {
    let mut named = BTreeSet::new();
    for line in doc.lines() {
        let mut rest = line;
        while let Some(i) = rest.find("ds-reaper ") {
            let after = rest[i + "ds-reaper ".len()..].trim_start();
            let after = after
                .strip_prefix("[--config PATH]")
                .unwrap_or(after)
                .trim_start();
            let word: String = after
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '-')
                .collect();
            if COMMANDS.contains(&word.as_str()) {
                named.insert(format!("ds-reaper {word}"));
            }
            rest = &rest[i + 1..];
        }
        let mut rest = line;
        while let Some(i) = rest.find("scripts/") {
            let tail = &rest[i..];
            let end = tail
                .find(|c: char| !(c.is_ascii_alphanumeric() || "/_-.".contains(c)))
                .unwrap_or(tail.len());
            let path = tail[..end].trim_end_matches('.');
            if path.ends_with(".sh") {
                named.insert(path.to_string());
            }
            rest = &rest[i + 1..];
        }
    }
    named
}

#[test]
fn both_guides_name_the_same_config_keys_and_commands() {
    let (full, bare) = config_keys();
    assert!(full.contains("reconcile.grace_period") && full.contains("agent.exec_base"));
    let en = repo_file("README.md");
    let zh = repo_file("README.zh-CN.md");
    assert!(
        en.contains("README.zh-CN.md"),
        "README.md links the Chinese guide"
    );
    let (ken, kzh) = (keys_named(&en, &full, &bare), keys_named(&zh, &full, &bare));
    assert!(ken.len() > 20, "{ken:?}");
    let only_en: Vec<_> = ken.difference(&kzh).collect();
    let only_zh: Vec<_> = kzh.difference(&ken).collect();
    assert!(
        only_en.is_empty() && only_zh.is_empty(),
        "config keys named in only one guide: README.md {only_en:?}, README.zh-CN.md {only_zh:?}"
    );
    let (cen, czh) = (commands_named(&en), commands_named(&zh));
    assert!(
        cen.contains("ds-reaper check") && cen.contains("scripts/test.sh"),
        "{cen:?}"
    );
    let only_en: Vec<_> = cen.difference(&czh).collect();
    let only_zh: Vec<_> = czh.difference(&cen).collect();
    assert!(
        only_en.is_empty() && only_zh.is_empty(),
        "commands named in only one guide: README.md {only_en:?}, README.zh-CN.md {only_zh:?}"
    );
}

#[test]
fn the_guides_start_with_the_two_commands() {
    for name in ["README.md", "README.zh-CN.md"] {
        let doc = repo_file(name);
        let block: Vec<&str> = doc
            .split("```")
            .nth(1)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.trim_start().starts_with("bash "))
            .collect();
        assert_eq!(block.len(), 2, "{name}: {block:?}");
        assert!(block[0].contains("scripts/demo.sh") && block[1].contains("scripts/test.sh"));
    }
}
