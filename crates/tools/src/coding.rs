//! The coding-agent tool pack: `readFile`, `listDir`, `grepFiles`,
//! `fileSearch`, `applyPatch`, `updatePlan`, `viewImage` (and the shared
//! `exec`), all confined to the root like the other built-ins, defined as
//! typed tools (schemas generated from the argument and result types).
//!
//! Packs: `core-codex` (exec, applyPatch, readFile, listDir, grepFiles,
//! fileSearch), `anthropic-standard` (exec, readFile, updatePlan,
//! listDir), `file-ops` (readFile, listDir, grepFiles, applyPatch,
//! fileSearch).

pub use crate::patch::{FileChange, PatchResult};
use crate::rooted::{blocking, io_error, relative};
use crate::typed::typed_tool;
use crate::walk;
use cap_std::fs::Dir;
use harness_core::{ToolError, ToolRegistry};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::ops::ControlFlow;
use std::path::Path;
use std::sync::Arc;

/// Lines `readFile` returns by default.
pub const DEFAULT_READ_LINES: usize = 2000;
/// Longest line `readFile` returns whole; longer ones are cut.
pub const MAX_LINE_CHARS: usize = 500;

/// Adds the coding tools and their packs to `registry` (which must hold
/// `exec` already), confined to the root `dir`.
pub(crate) fn register(registry: &mut ToolRegistry, dir: Arc<Dir>) -> std::io::Result<()> {
    let err = |e: harness_core::RegistryError| std::io::Error::other(e.to_string());
    let d = dir.clone();
    registry
        .register(typed_tool("readFile", move |a: ReadFileArgs, _| {
            let d = d.clone();
            async move { blocking(move || read_file(&d, a)).await }
        }))
        .map_err(err)?;
    let d = dir.clone();
    registry
        .register(typed_tool("listDir", move |a: ListDirArgs, _| {
            let d = d.clone();
            async move { blocking(move || list_dir(&d, a)).await }
        }))
        .map_err(err)?;
    let d = dir.clone();
    registry
        .register(typed_tool("grepFiles", move |a: GrepArgs, _| {
            let d = d.clone();
            async move { blocking(move || grep_files(&d, a)).await }
        }))
        .map_err(err)?;
    let d = dir.clone();
    registry
        .register(typed_tool("fileSearch", move |a: FileSearchArgs, _| {
            let d = d.clone();
            async move { blocking(move || file_search(&d, a)).await }
        }))
        .map_err(err)?;
    registry
        .register(typed_tool(
            "updatePlan",
            |a: UpdatePlanArgs, _| async move { update_plan(a) },
        ))
        .map_err(err)?;
    let d = dir.clone();
    registry
        .register(typed_tool("viewImage", move |a: ViewImageArgs, _| {
            let d = d.clone();
            async move { blocking(move || view_image(&d, a)).await }
        }))
        .map_err(err)?;
    let d = dir;
    registry
        .register(typed_tool("applyPatch", move |a: ApplyPatchArgs, _| {
            let d = d.clone();
            async move { blocking(move || crate::patch::apply(&d, &a.patch)).await }
        }))
        .map_err(err)?;
    registry
        .define_pack(
            "core-codex",
            [
                "exec",
                "applyPatch",
                "readFile",
                "listDir",
                "grepFiles",
                "fileSearch",
            ],
        )
        .and_then(|r| {
            r.define_pack(
                "anthropic-standard",
                ["exec", "readFile", "updatePlan", "listDir"],
            )
        })
        .and_then(|r| {
            r.define_pack(
                "file-ops",
                [
                    "readFile",
                    "listDir",
                    "grepFiles",
                    "applyPatch",
                    "fileSearch",
                ],
            )
        })
        .map_err(err)?;
    Ok(())
}

/// Reads a text file under the root as numbered lines (`L12: …`): a slice
/// (`offset`, `limit`), or with `mode: "indentation"` the block around
/// `anchorLine` by indentation, up to `maxLevels` enclosing levels.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[non_exhaustive]
pub struct ReadFileArgs {
    /// The file, relative to the root.
    pub file_path: String,
    /// First line to return (1-based; default 1).
    #[serde(default)]
    pub offset: Option<usize>,
    /// Lines to return at most (default 2000).
    #[serde(default)]
    pub limit: Option<usize>,
    /// `slice` (default) or `indentation`.
    #[serde(default)]
    pub mode: Option<ReadMode>,
    /// For `indentation`: the line whose block to return (default: offset, else 1).
    #[serde(default)]
    pub anchor_line: Option<usize>,
    /// For `indentation`: enclosing levels to include (default 1).
    #[serde(default)]
    pub max_levels: Option<usize>,
}

/// How `readFile` picks lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum ReadMode {
    /// `offset` and `limit`.
    Slice,
    /// The block around `anchorLine`.
    Indentation,
}

/// Numbered lines of a file.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ReadFileResult {
    /// The file, as asked.
    pub file_path: String,
    /// The lines, each `L<number>: <text>`, joined with newlines.
    pub content: String,
    /// First and last line returned (0 and 0 when none).
    pub start_line: usize,
    /// Last line returned.
    pub end_line: usize,
    /// Lines in the file.
    pub total_lines: usize,
    /// More lines follow the ones returned.
    pub truncated: bool,
}

fn read_text(dir: &Dir, p: &str) -> Result<String, ToolError> {
    let rel = relative(p)?;
    let meta = dir.metadata(&rel).map_err(|e| io_error(e, p))?;
    if meta.is_dir() {
        return Err(ToolError::new(format!("{p} is a directory; use listDir")));
    }
    if meta.len() > 16 * 1024 * 1024 {
        return Err(ToolError::new(format!(
            "{p} is {} bytes; the limit is 16 MiB",
            meta.len()
        )));
    }
    let bytes = crate::rooted::read_regular(dir, &rel, p, 16 * 1024 * 1024)?;
    if bytes.contains(&0) {
        return Err(ToolError::new(format!("{p} is a binary file")));
    }
    String::from_utf8(bytes).map_err(|_| ToolError::new(format!("{p} is not UTF-8 text")))
}

fn indent_of(line: &str) -> Option<usize> {
    if line.trim().is_empty() {
        return None;
    }
    Some(
        line.chars()
            .take_while(|c| *c == ' ' || *c == '\t')
            .map(|c| if c == '\t' { 4 } else { 1 })
            .sum(),
    )
}

fn read_file(dir: &Dir, a: ReadFileArgs) -> Result<ReadFileResult, ToolError> {
    let text = read_text(dir, &a.file_path)?;
    let lines: Vec<&str> = text.lines().collect();
    let total = lines.len();
    let limit = a.limit.unwrap_or(DEFAULT_READ_LINES).max(1);
    let (start, end) = match a.mode.unwrap_or(ReadMode::Slice) {
        ReadMode::Slice => {
            let start = a.offset.unwrap_or(1).max(1);
            if start > total.max(1) && total > 0 {
                return Err(ToolError::new(format!(
                    "offset {start} is past the end of {} ({total} lines)",
                    a.file_path
                )));
            }
            (start, (start + limit - 1).min(total))
        }
        ReadMode::Indentation => {
            let anchor = a
                .anchor_line
                .or(a.offset)
                .unwrap_or(1)
                .clamp(1, total.max(1));
            block_around(&lines, anchor, a.max_levels.unwrap_or(1), limit)
        }
    };
    let mut content = String::new();
    if total > 0 {
        for (i, line) in lines.iter().enumerate().take(end).skip(start - 1) {
            if !content.is_empty() {
                content.push('\n');
            }
            let cut: String = line.chars().take(MAX_LINE_CHARS).collect();
            content.push_str(&format!("L{}: {cut}", i + 1));
        }
    }
    Ok(ReadFileResult {
        file_path: a.file_path,
        content,
        start_line: if total == 0 { 0 } else { start },
        end_line: if total == 0 { 0 } else { end },
        total_lines: total,
        truncated: end < total,
    })
}

/// The lines of the block around `anchor` (1-based): out `levels`
/// enclosing headers (lines of smaller indentation above), then down to
/// the end of the outermost header's block; at most `limit` lines.
fn block_around(lines: &[&str], anchor: usize, levels: usize, limit: usize) -> (usize, usize) {
    if lines.is_empty() {
        return (1, 0);
    }
    let level_at = |i: usize| indent_of(lines[i]);
    // The anchor's own indentation (a blank line takes the next one's).
    let mut cur = (anchor - 1..lines.len()).find_map(level_at).unwrap_or(0);
    let mut start = anchor - 1;
    for _ in 0..levels {
        match (0..start)
            .rev()
            .find(|&i| level_at(i).is_some_and(|l| l < cur))
        {
            Some(h) => {
                start = h;
                cur = level_at(h).unwrap_or(0);
            }
            None => break,
        }
    }
    let header = level_at(start).unwrap_or(0);
    let mut end = start;
    for (i, _) in lines.iter().enumerate().skip(start + 1) {
        match level_at(i) {
            Some(l) if l <= header => {
                // A closing line at the header's level belongs to the block.
                let t = lines[i].trim_start();
                if l == header && (t.starts_with('}') || t.starts_with(')') || t.starts_with(']')) {
                    end = i;
                }
                break;
            }
            _ => end = i,
        }
    }
    let end = end.min(start + limit - 1);
    (start + 1, end + 1)
}

/// Lists a directory under the root as a tree: directories end with `/`,
/// symlinks with `@`, other special files with `?`; paginated.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[non_exhaustive]
pub struct ListDirArgs {
    /// The directory, relative to the root (`.` for the root).
    pub dir_path: String,
    /// First entry to return (1-based; default 1).
    #[serde(default)]
    pub offset: Option<usize>,
    /// Entries to return at most (default 200).
    #[serde(default)]
    pub limit: Option<usize>,
    /// Levels to descend (default 2).
    #[serde(default)]
    pub depth: Option<usize>,
}

/// A page of a directory tree.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ListDirResult {
    /// The directory, as asked.
    pub dir_path: String,
    /// One line per entry, indented two spaces per level.
    pub entries: Vec<String>,
    /// Entries in the whole tree (to `depth`).
    pub total: usize,
    /// More entries follow this page.
    pub has_more: bool,
}

const MAX_TREE_ENTRIES: usize = 20_000;

fn list_dir(dir: &Dir, a: ListDirArgs) -> Result<ListDirResult, ToolError> {
    let p = a.dir_path.clone();
    let rel = walk::normal(&p)?;
    let rules = walk::Rules {
        ignores: false,
        globs: Vec::new(),
        depth: a.depth.unwrap_or(2).max(1),
    };
    let mut all = Vec::new();
    walk::walk(dir, &p, &rel, &rules, |e| {
        if all.len() >= MAX_TREE_ENTRIES {
            return ControlFlow::Break(());
        }
        let ft = e.file_type;
        let mark = if ft.is_symlink() {
            "@"
        } else if ft.is_dir() {
            "/"
        } else if ft.is_file() {
            ""
        } else {
            "?"
        };
        let name = e.name.to_string_lossy();
        all.push(format!("{}{name}{mark}", "  ".repeat(e.level)));
        ControlFlow::Continue(())
    })?;
    let offset = a.offset.unwrap_or(1).max(1);
    let limit = a.limit.unwrap_or(200).max(1);
    let total = all.len();
    let entries: Vec<String> = all.into_iter().skip(offset - 1).take(limit).collect();
    Ok(ListDirResult {
        dir_path: a.dir_path,
        has_more: offset - 1 + entries.len() < total,
        entries,
        total,
    })
}

/// Files under the root whose contents match a regular expression (the
/// ripgrep libraries: `.gitignore` respected, binary files skipped).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[non_exhaustive]
pub struct GrepArgs {
    /// A regular expression (Rust `regex` syntax).
    pub pattern: String,
    /// Only files matching this glob (e.g. `*.rs`).
    #[serde(default)]
    pub include: Option<String>,
    /// Where to search, relative to the root (default: the root).
    #[serde(default)]
    pub path: Option<String>,
    /// Files to return at most (default 100).
    #[serde(default)]
    pub limit: Option<usize>,
}

/// Matching files, relative to the root, sorted.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct GrepResult {
    /// The files.
    pub files: Vec<String>,
    /// More files matched than `limit`.
    pub truncated: bool,
}

/// The regular files under `path` (the root by default) that the ignore
/// files and `globs` keep, in path order, until `each` breaks.
fn each_file(
    dir: &Dir,
    path: Option<&str>,
    globs: Vec<String>,
    mut each: impl FnMut(&walk::Entry<'_>) -> ControlFlow<()>,
) -> Result<(), ToolError> {
    let p = path.unwrap_or(".");
    let rel = walk::normal(p)?;
    let rules = walk::Rules {
        ignores: true,
        globs,
        depth: usize::MAX,
    };
    walk::walk(dir, p, &rel, &rules, |e| {
        if e.file_type.is_file() {
            each(e)
        } else {
            ControlFlow::Continue(())
        }
    })
}

fn grep_files(dir: &Dir, a: GrepArgs) -> Result<GrepResult, ToolError> {
    use grep_searcher::sinks::UTF8;
    let matcher = grep_regex::RegexMatcher::new(&a.pattern)
        .map_err(|e| ToolError::new(format!("bad pattern {}: {e}", a.pattern)))?;
    let limit = a.limit.unwrap_or(100).max(1);
    let mut searcher = grep_searcher::SearcherBuilder::new()
        .binary_detection(grep_searcher::BinaryDetection::quit(0))
        .build();
    let mut files = Vec::new();
    let mut truncated = false;
    let globs = a.include.into_iter().collect();
    each_file(dir, a.path.as_deref(), globs, |e| {
        // Opened from the directory the walk holds, not followed if it
        // became a link, and searched only if it is still a regular file.
        let Some(file) = crate::rooted::open_regular(e.parent, Path::new(e.name)) else {
            return ControlFlow::Continue(());
        };
        let mut hit = false;
        let _ = searcher.search_file(
            &matcher,
            &file,
            UTF8(|_, _| {
                hit = true;
                Ok(false)
            }),
        );
        if hit {
            if files.len() == limit {
                truncated = true;
                return ControlFlow::Break(());
            }
            files.push(e.rel.to_string_lossy().into_owned());
        }
        ControlFlow::Continue(())
    })?;
    Ok(GrepResult { files, truncated })
}

/// Paths under the root that fuzzily match a pattern, best first
/// (`.gitignore` respected).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[non_exhaustive]
pub struct FileSearchArgs {
    /// What to look for in paths (fuzzy: `srcmain` finds `src/main.rs`).
    pub pattern: String,
    /// Matches to return at most (default 50).
    #[serde(default)]
    pub limit: Option<usize>,
    /// Where to search, relative to the root (default: the root).
    #[serde(default)]
    pub search_directory: Option<String>,
    /// Globs of paths to leave out.
    #[serde(default)]
    pub exclude: Option<Vec<String>>,
}

/// One fuzzy match.
#[derive(Debug, Serialize, JsonSchema)]
#[non_exhaustive]
pub struct FileMatch {
    /// Relative to the root.
    pub path: String,
    /// Higher is better.
    pub score: u32,
}

/// Fuzzy matches, best first.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct FileSearchResult {
    /// The matches.
    pub matches: Vec<FileMatch>,
    /// Paths that matched in all.
    pub total_matched: usize,
}

fn file_search(dir: &Dir, a: FileSearchArgs) -> Result<FileSearchResult, ToolError> {
    use nucleo_matcher::pattern::{CaseMatching, Normalization, Pattern};
    let globs: Vec<String> = a
        .exclude
        .unwrap_or_default()
        .into_iter()
        .map(|g| format!("!{g}"))
        .collect();
    let mut paths = Vec::new();
    each_file(dir, a.search_directory.as_deref(), globs, |e| {
        paths.push(e.rel.to_string_lossy().into_owned());
        ControlFlow::Continue(())
    })?;
    let mut matcher = nucleo_matcher::Matcher::new(nucleo_matcher::Config::DEFAULT.match_paths());
    let pattern = Pattern::parse(&a.pattern, CaseMatching::Smart, Normalization::Smart);
    let mut scored = pattern.match_list(paths, &mut matcher);
    scored.sort_by(|x, y| y.1.cmp(&x.1).then_with(|| x.0.cmp(&y.0)));
    let total_matched = scored.len();
    let matches = scored
        .into_iter()
        .take(a.limit.unwrap_or(50).max(1))
        .map(|(path, score)| FileMatch { path, score })
        .collect();
    Ok(FileSearchResult {
        matches,
        total_matched,
    })
}

/// Records the plan of the work: steps and their status (at most one
/// `in_progress`).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[non_exhaustive]
pub struct UpdatePlanArgs {
    /// Why the plan changed.
    #[serde(default)]
    pub explanation: Option<String>,
    /// The steps, in order.
    pub plan: Vec<PlanStep>,
}

/// One step of a plan.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct PlanStep {
    /// What the step does.
    pub step: String,
    /// Where it stands.
    pub status: StepStatus,
}

/// Where a plan step stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum StepStatus {
    /// Not started.
    Pending,
    /// Being worked on (one step at most).
    InProgress,
    /// Done.
    Completed,
}

/// The plan as recorded.
#[derive(Debug, Serialize, JsonSchema)]
#[non_exhaustive]
pub struct UpdatePlanResult {
    /// The steps.
    pub plan: Vec<PlanStep>,
    /// The explanation, if given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub explanation: Option<String>,
}

fn update_plan(a: UpdatePlanArgs) -> Result<UpdatePlanResult, ToolError> {
    let active = a
        .plan
        .iter()
        .filter(|s| s.status == StepStatus::InProgress)
        .count();
    if active > 1 {
        return Err(ToolError::new(format!(
            "{active} steps are in_progress; at most one may be"
        )));
    }
    Ok(UpdatePlanResult {
        plan: a.plan,
        explanation: a.explanation,
    })
}

/// Looks at an image under the root: its format and size, read by a real
/// decoder (a file that only looks like an image is refused).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct ViewImageArgs {
    /// The image, relative to the root.
    pub path: String,
}

/// An image's format and size.
#[derive(Debug, Serialize, JsonSchema)]
#[non_exhaustive]
pub struct ViewImageResult {
    /// The image, as asked.
    pub path: String,
    /// `png`, `jpeg`, `gif` or `webp`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Pixels.
    pub width: u32,
    /// Pixels.
    pub height: u32,
}

fn view_image(dir: &Dir, a: ViewImageArgs) -> Result<ViewImageResult, ToolError> {
    let rel = relative(&a.path)?;
    let bytes = crate::rooted::read_regular(dir, &rel, &a.path, 64 * 1024 * 1024)?;
    let reader = image::ImageReader::new(std::io::Cursor::new(&bytes))
        .with_guessed_format()
        .map_err(|e| ToolError::new(format!("{}: {e}", a.path)))?;
    let Some(format) = reader.format() else {
        return Err(ToolError::new(format!(
            "{} is not an image (png, jpeg, gif, webp)",
            a.path
        )));
    };
    let kind = format.extensions_str().first().copied().unwrap_or("image");
    let kind = if kind == "jpg" { "jpeg" } else { kind }.to_owned();
    // Decoding proves it is an image, not just a file with a magic number.
    let img = reader
        .decode()
        .map_err(|e| ToolError::new(format!("{} is not a readable image: {e}", a.path)))?;
    Ok(ViewImageResult {
        path: a.path,
        kind,
        width: img.width(),
        height: img.height(),
    })
}

/// Applies a patch under the root: the Codex format (`*** Begin Patch`,
/// `*** Add File:`, `*** Update File:`, `*** Delete File:`, `*** Move
/// to:`, `@@` hunks) or a unified diff. Every file is checked before any
/// is written; a hunk that does not apply changes nothing and says which
/// and why; each write is atomic.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct ApplyPatchArgs {
    /// The patch text.
    pub patch: String,
}
