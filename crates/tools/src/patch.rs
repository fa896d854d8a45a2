//! `applyPatch`: the Codex patch format and unified diffs, applied all or
//! nothing. Every operation is planned against the files as they are
//! (each hunk located, every path checked) before anything is written;
//! then each file is written atomically.

use crate::rooted::{io_error, relative, write_atomic};
use cap_std::fs::Dir;
use harness_core::ToolError;
use schemars::JsonSchema;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// What `applyPatch` did.
#[derive(Debug, Serialize, JsonSchema)]
#[non_exhaustive]
pub struct PatchResult {
    /// One entry per file, in patch order.
    pub files: Vec<FileChange>,
}

/// One file the patch changed.
#[derive(Debug, Serialize, JsonSchema)]
#[non_exhaustive]
pub struct FileChange {
    /// The file (the new path for a move).
    pub path: String,
    /// `add`, `update`, `delete` or `move`.
    pub action: String,
    /// Lines added.
    pub added: usize,
    /// Lines removed.
    pub removed: usize,
}

/// One hunk: the lines it expects (context and removed) and what replaces
/// them; `anchor` narrows where to look (a Codex `@@ text` header), `hint`
/// is the unified diff's old start line.
#[derive(Debug, Default, Clone)]
struct Hunk {
    anchor: Option<String>,
    hint: Option<usize>,
    old: Vec<String>,
    new: Vec<String>,
    at_end: bool,
}

impl Hunk {
    /// Takes one body line (`+new`, `-old`, ` both`, or an empty line as
    /// empty context); false for any other line.
    fn push_line(&mut self, l: &str) -> bool {
        match l.chars().next() {
            Some('+') => self.new.push(l[1..].to_owned()),
            Some('-') => self.old.push(l[1..].to_owned()),
            Some(' ') => {
                self.old.push(l[1..].to_owned());
                self.new.push(l[1..].to_owned());
            }
            None => {
                self.old.push(String::new());
                self.new.push(String::new());
            }
            _ => return false,
        }
        true
    }
}

#[derive(Debug)]
enum Op {
    Add {
        path: String,
        lines: Vec<String>,
    },
    Delete {
        path: String,
    },
    Update {
        path: String,
        to: Option<String>,
        hunks: Vec<Hunk>,
    },
}

fn bad(msg: impl Into<String>) -> ToolError {
    ToolError::new(msg.into())
}

/// Parses either format.
fn parse(patch: &str) -> Result<Vec<Op>, ToolError> {
    let text = patch.replace("\r\n", "\n");
    let trimmed = text.trim();
    if trimmed.starts_with("*** Begin Patch") {
        parse_codex(trimmed)
    } else if trimmed.starts_with("--- ") || trimmed.starts_with("diff ") {
        parse_unified(trimmed)
    } else {
        Err(bad("not a patch: expected `*** Begin Patch` (Codex format) or a unified diff (`--- a/file`)"))
    }
}

fn parse_codex(text: &str) -> Result<Vec<Op>, ToolError> {
    let lines: Vec<&str> = text.lines().collect();
    if lines.last().map(|l| l.trim()) != Some("*** End Patch") {
        return Err(bad("the patch does not end with `*** End Patch`"));
    }
    let mut ops = Vec::new();
    let mut i = 1;
    while i < lines.len() - 1 {
        let line = lines[i];
        if let Some(path) = line.strip_prefix("*** Add File: ") {
            i += 1;
            let mut body = Vec::new();
            while i < lines.len() - 1 && !lines[i].starts_with("*** ") {
                let Some(l) = lines[i].strip_prefix('+') else {
                    return Err(bad(format!(
                        "line {}: every line of an added file starts with `+`",
                        i + 1
                    )));
                };
                body.push(l.to_owned());
                i += 1;
            }
            ops.push(Op::Add {
                path: path.trim().to_owned(),
                lines: body,
            });
        } else if let Some(path) = line.strip_prefix("*** Delete File: ") {
            ops.push(Op::Delete {
                path: path.trim().to_owned(),
            });
            i += 1;
        } else if let Some(path) = line.strip_prefix("*** Update File: ") {
            i += 1;
            let mut to = None;
            if let Some(t) = lines.get(i).and_then(|l| l.strip_prefix("*** Move to: ")) {
                to = Some(t.trim().to_owned());
                i += 1;
            }
            let mut hunks: Vec<Hunk> = Vec::new();
            let mut cur: Option<Hunk> = None;
            while i < lines.len() - 1
                && (!lines[i].starts_with("*** ") || lines[i] == "*** End of File")
            {
                let l = lines[i];
                if l == "*** End of File" {
                    if let Some(h) = cur.as_mut() {
                        h.at_end = true;
                    }
                } else if let Some(anchor) = l.strip_prefix("@@") {
                    if let Some(h) = cur.take() {
                        hunks.push(h);
                    }
                    let a = anchor.trim();
                    cur = Some(Hunk {
                        anchor: (!a.is_empty()).then(|| a.to_owned()),
                        ..Hunk::default()
                    });
                } else {
                    let h = cur.get_or_insert_with(Hunk::default);
                    if !h.push_line(l) {
                        return Err(bad(format!(
                            "line {}: a hunk line starts with ' ', '-' or '+' (got {l:?})",
                            i + 1
                        )));
                    }
                }
                i += 1;
            }
            if let Some(h) = cur.take() {
                hunks.push(h);
            }
            if hunks.is_empty() && to.is_none() {
                return Err(bad(format!("`*** Update File: {path}` has no hunks")));
            }
            ops.push(Op::Update {
                path: path.trim().to_owned(),
                to,
                hunks,
            });
        } else if line.trim().is_empty() {
            i += 1;
        } else {
            return Err(bad(format!("line {}: unexpected {line:?}", i + 1)));
        }
    }
    Ok(ops)
}

fn strip_ab(p: &str) -> String {
    let p = p.split('\t').next().unwrap_or(p).trim();
    p.strip_prefix("a/")
        .or_else(|| p.strip_prefix("b/"))
        .unwrap_or(p)
        .to_owned()
}

fn parse_unified(text: &str) -> Result<Vec<Op>, ToolError> {
    let lines: Vec<&str> = text.lines().collect();
    let mut ops = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let Some(old) = lines[i].strip_prefix("--- ") else {
            i += 1;
            continue;
        };
        let Some(new) = lines.get(i + 1).and_then(|l| l.strip_prefix("+++ ")) else {
            return Err(bad(format!("line {}: `---` without `+++`", i + 1)));
        };
        let (old, new) = (strip_ab(old), strip_ab(new));
        i += 2;
        let mut hunks = Vec::new();
        while i < lines.len() && lines[i].starts_with("@@") {
            let header = lines[i];
            let hint = header
                .split_whitespace()
                .nth(1)
                .and_then(|r| r.strip_prefix('-'))
                .and_then(|r| r.split(',').next())
                .and_then(|n| n.parse::<usize>().ok());
            i += 1;
            let mut h = Hunk {
                hint,
                ..Hunk::default()
            };
            while i < lines.len() && !lines[i].starts_with("@@") && !lines[i].starts_with("--- ") {
                let l = lines[i];
                // `\ No newline at end of file` belongs to no side.
                if !l.starts_with('\\') && !h.push_line(l) {
                    break;
                }
                i += 1;
            }
            hunks.push(h);
        }
        if old == "/dev/null" {
            let lines = hunks.into_iter().flat_map(|h| h.new).collect();
            ops.push(Op::Add { path: new, lines });
        } else if new == "/dev/null" {
            ops.push(Op::Delete { path: old });
        } else {
            let to = (new != old).then_some(new);
            ops.push(Op::Update {
                path: old,
                to,
                hunks,
            });
        }
    }
    if ops.is_empty() {
        return Err(bad("the unified diff names no file"));
    }
    Ok(ops)
}

/// Where `needle` starts in `hay` at or after `from`: exact first, then
/// ignoring trailing spaces, then ignoring surrounding spaces.
fn find(hay: &[String], needle: &[String], from: usize) -> Option<usize> {
    if needle.is_empty() {
        return Some(from.min(hay.len()));
    }
    let norms: [fn(&str) -> &str; 3] = [|s| s, str::trim_end, str::trim];
    for norm in norms {
        let found = (from..=hay.len().saturating_sub(needle.len())).find(|&s| {
            hay[s..s + needle.len()]
                .iter()
                .zip(needle)
                .all(|(a, b)| norm(a) == norm(b))
        });
        if found.is_some() {
            return found;
        }
    }
    None
}

fn apply_hunks(
    path: &str,
    text: &str,
    hunks: &[Hunk],
) -> Result<(String, usize, usize), ToolError> {
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    let trailing_newline = text.ends_with('\n') || text.is_empty();
    let (mut added, mut removed, mut from) = (0, 0, 0);
    for (n, h) in hunks.iter().enumerate() {
        let mut start = from;
        if let Some(a) = &h.anchor {
            match lines.iter().skip(from).position(|l| l.trim() == a.trim()) {
                Some(p) => start = from + p + 1,
                None => {
                    return Err(bad(format!(
                        "hunk {} of {path} does not apply: its `@@ {a}` line was not found",
                        n + 1
                    )))
                }
            }
        }
        let at = if h.at_end {
            lines
                .len()
                .checked_sub(h.old.len())
                .filter(|&s| find(&lines, &h.old, s) == Some(s))
        } else {
            h.hint
                .map(|l| l.saturating_sub(1).max(start))
                .and_then(|s| find(&lines, &h.old, s).filter(|&f| f == s))
                .or_else(|| find(&lines, &h.old, start))
        };
        let Some(at) = at else {
            let first = h
                .old
                .iter()
                .find(|l| !l.trim().is_empty())
                .cloned()
                .unwrap_or_default();
            return Err(bad(format!(
                "hunk {} of {path} does not apply: its {} expected line(s) (starting {first:?}) were not found; nothing was changed",
                n + 1,
                h.old.len()
            )));
        };
        let common = h.old.iter().zip(&h.new).take_while(|(a, b)| a == b).count();
        removed += h.old.len() - common.min(h.old.len());
        added += h.new.len() - common.min(h.new.len());
        lines.splice(at..at + h.old.len(), h.new.iter().cloned());
        from = at + h.new.len();
    }
    let mut out = lines.join("\n");
    if trailing_newline && !out.is_empty() {
        out.push('\n');
    }
    Ok((out, added, removed))
}

/// Largest file `applyPatch` reads (to update or delete it).
const MAX_PATCHED_BYTES: u64 = 16 * 1024 * 1024;

fn read(dir: &Dir, p: &str) -> Result<Option<String>, ToolError> {
    let rel = relative(p)?;
    // Absent (or a link to nothing): the patch may add it.
    match dir.metadata(&rel) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        _ => {}
    }
    let bytes = crate::rooted::read_regular(dir, &rel, p, MAX_PATCHED_BYTES)?;
    String::from_utf8(bytes)
        .map(Some)
        .map_err(|_| ToolError::new(format!("{p} is not UTF-8 text")))
}

/// Parses, plans (nothing written unless every operation fits), applies.
pub(crate) fn apply(dir: &Dir, patch: &str) -> Result<PatchResult, ToolError> {
    let ops = parse(patch)?;
    // The plan: final content per path (None: delete), in order.
    let mut state: BTreeMap<String, Option<String>> = BTreeMap::new();
    let mut order: Vec<String> = Vec::new();
    let mut files = Vec::new();
    let current =
        |state: &BTreeMap<String, Option<String>>, p: &str| -> Result<Option<String>, ToolError> {
            match state.get(p) {
                Some(v) => Ok(v.clone()),
                None => read(dir, p),
            }
        };
    let touch = |order: &mut Vec<String>, p: &str| {
        if !order.iter().any(|o| o == p) {
            order.push(p.to_owned());
        }
    };
    for op in ops {
        match op {
            Op::Add { path, lines } => {
                relative(&path)?;
                if current(&state, &path)?.is_some() {
                    return Err(bad(format!(
                        "cannot add {path}: it exists; nothing was changed"
                    )));
                }
                let mut text = lines.join("\n");
                text.push('\n');
                files.push(FileChange {
                    path: path.clone(),
                    action: "add".into(),
                    added: lines.len(),
                    removed: 0,
                });
                touch(&mut order, &path);
                state.insert(path, Some(text));
            }
            Op::Delete { path } => {
                let Some(old) = current(&state, &path)? else {
                    return Err(bad(format!(
                        "cannot delete {path}: no such file; nothing was changed"
                    )));
                };
                files.push(FileChange {
                    path: path.clone(),
                    action: "delete".into(),
                    added: 0,
                    removed: old.lines().count(),
                });
                touch(&mut order, &path);
                state.insert(path, None);
            }
            Op::Update { path, to, hunks } => {
                let Some(old) = current(&state, &path)? else {
                    return Err(bad(format!(
                        "cannot update {path}: no such file; nothing was changed"
                    )));
                };
                let (text, added, removed) = apply_hunks(&path, &old, &hunks)?;
                touch(&mut order, &path);
                match to {
                    Some(dest) => {
                        relative(&dest)?;
                        if dest != path && current(&state, &dest)?.is_some() {
                            return Err(bad(format!(
                                "cannot move {path} to {dest}: it exists; nothing was changed"
                            )));
                        }
                        state.insert(path, None);
                        touch(&mut order, &dest);
                        files.push(FileChange {
                            path: dest.clone(),
                            action: "move".into(),
                            added,
                            removed,
                        });
                        state.insert(dest, Some(text));
                    }
                    None => {
                        files.push(FileChange {
                            path: path.clone(),
                            action: "update".into(),
                            added,
                            removed,
                        });
                        state.insert(path, Some(text));
                    }
                }
            }
        }
    }
    // Everything fits: write (each file atomically), then delete.
    for p in &order {
        if let Some(Some(text)) = state.get(p) {
            let rel: PathBuf = relative(p)?;
            write_atomic(dir, p, &rel, text.as_bytes())?;
        }
    }
    for p in &order {
        if let Some(None) = state.get(p) {
            let rel = relative(p)?;
            dir.remove_file(&rel).map_err(|e| io_error(e, p))?;
        }
    }
    Ok(PatchResult { files })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root() -> (tempfile::TempDir, Dir) {
        let t = tempfile::tempdir().unwrap();
        let d = Dir::open_ambient_dir(t.path(), cap_std::ambient_authority()).unwrap();
        (t, d)
    }

    #[test]
    fn codex_patches_add_update_move_and_delete() {
        let (t, d) = root();
        std::fs::write(t.path().join("a.txt"), "one\ntwo\nthree\n").unwrap();
        std::fs::write(t.path().join("gone.txt"), "x\n").unwrap();
        let r = apply(&d, "*** Begin Patch\n*** Add File: new/b.txt\n+hello\n*** Update File: a.txt\n*** Move to: c.txt\n@@\n one\n-two\n+TWO\n three\n*** Delete File: gone.txt\n*** End Patch").unwrap();
        assert_eq!(r.files.len(), 3);
        assert_eq!(
            std::fs::read_to_string(t.path().join("new/b.txt")).unwrap(),
            "hello\n"
        );
        assert_eq!(
            std::fs::read_to_string(t.path().join("c.txt")).unwrap(),
            "one\nTWO\nthree\n"
        );
        assert!(!t.path().join("a.txt").exists() && !t.path().join("gone.txt").exists());
    }

    #[test]
    fn a_hunk_that_does_not_apply_changes_nothing() {
        let (t, d) = root();
        std::fs::write(t.path().join("a.txt"), "one\ntwo\n").unwrap();
        let e = apply(&d, "*** Begin Patch\n*** Add File: b.txt\n+b\n*** Update File: a.txt\n@@\n-nope\n+yes\n*** End Patch").unwrap_err();
        assert!(
            e.message.contains("hunk 1 of a.txt does not apply"),
            "{}",
            e.message
        );
        assert!(!t.path().join("b.txt").exists(), "nothing written");
        assert_eq!(
            std::fs::read_to_string(t.path().join("a.txt")).unwrap(),
            "one\ntwo\n"
        );
    }

    #[test]
    fn unified_diffs_apply_too() {
        let (t, d) = root();
        std::fs::write(t.path().join("a.txt"), "one\ntwo\nthree\n").unwrap();
        apply(&d, "--- a/a.txt\n+++ b/a.txt\n@@ -1,3 +1,3 @@\n one\n-two\n+2\n three\n--- /dev/null\n+++ b/z.txt\n@@ -0,0 +1 @@\n+zed\n").unwrap();
        assert_eq!(
            std::fs::read_to_string(t.path().join("a.txt")).unwrap(),
            "one\n2\nthree\n"
        );
        assert_eq!(
            std::fs::read_to_string(t.path().join("z.txt")).unwrap(),
            "zed\n"
        );
        let e = apply(
            &d,
            "*** Begin Patch\n*** Add File: ../out.txt\n+x\n*** End Patch",
        )
        .unwrap_err();
        assert!(
            e.message.contains("outside") || e.message.contains(".."),
            "{}",
            e.message
        );
    }
}
