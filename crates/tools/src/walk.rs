//! Walking a tree under the root by descriptor, for `grepFiles`,
//! `fileSearch` and `listDir`.
//!
//! The start directory is opened once through the root's [`Dir`] (which
//! never resolves outside it), and everything below is opened from the
//! descriptor of its parent without following symbolic links. A directory
//! swapped for a link after it was checked therefore leads nowhere: the
//! walk holds the directory it opened, not its name.
//!
//! Ignore files (`.gitignore`, `.ignore`) count only inside the root: from
//! the root down to the start, and in every directory walked. Nothing
//! above the root and no global git configuration hides a file.
//!
//! The walk is a loop over an explicit stack, so a deep tree costs memory
//! and descriptors (one per level), never the thread's stack.

use crate::rooted::{io_error, outside, relative};
use cap_std::fs::{Dir, FileType};
use harness_core::ToolError;
use ignore::gitignore::{Gitignore, GitignoreBuilder};
use ignore::Match;
use std::ffi::OsString;
use std::ops::ControlFlow;
use std::path::{Component, Path, PathBuf};
use std::rc::Rc;

/// Largest ignore file read; a bigger one is not honoured.
const MAX_IGNORE_FILE: u64 = 1 << 20;

/// One entry met by a walk.
pub(crate) struct Entry<'a> {
    /// The directory that holds it, as opened.
    pub parent: &'a Dir,
    /// Its name in `parent`.
    pub name: &'a OsString,
    /// Relative to the root, as displayed.
    pub rel: &'a Path,
    /// Levels below the start (0: the start's own entries).
    pub level: usize,
    /// Its type as the directory listed it (a link is a link).
    pub file_type: FileType,
}

/// What a walk honours.
pub(crate) struct Rules {
    /// `.gitignore` and `.ignore` files and globs; `false`: every entry.
    pub ignores: bool,
    /// Globs relative to the start (`!glob` leaves out), as ripgrep's
    /// overrides: when any glob includes, other files are left out.
    pub globs: Vec<String>,
    /// Levels to descend at most (`usize::MAX`: all).
    pub depth: usize,
}

/// The lexically normal form of `p` relative to the root (`""` for the
/// root itself); `..` that would climb above the root is refused with the
/// same message as any other way out.
pub(crate) fn normal(p: &str) -> Result<PathBuf, ToolError> {
    let rel = relative(p)?;
    let mut out = PathBuf::new();
    for c in rel.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return Err(outside(p));
                }
            }
            Component::Normal(name) => out.push(name),
            Component::RootDir | Component::Prefix(_) => return Err(outside(p)),
        }
    }
    Ok(out)
}

/// A chain of the ignore files in force: the innermost directory's first.
struct Ignores {
    rules: Gitignore,
    outer: Option<Rc<Ignores>>,
}

fn decide(chain: &Option<Rc<Ignores>>, rel: &Path, is_dir: bool) -> bool {
    let mut at = chain.as_deref();
    while let Some(node) = at {
        match node.rules.matched(rel, is_dir) {
            Match::Ignore(_) => return false,
            Match::Whitelist(_) => return true,
            Match::None => at = node.outer.as_deref(),
        }
    }
    true
}

/// The ignore files of `dir` (at `rel` under the root), on top of `outer`.
fn read_ignores(dir: &Dir, rel: &Path, outer: Option<Rc<Ignores>>) -> Option<Rc<Ignores>> {
    let mut builder = GitignoreBuilder::new(if rel.as_os_str().is_empty() {
        Path::new(".")
    } else {
        rel
    });
    let mut any = false;
    for name in [".gitignore", ".ignore"] {
        let Ok(bytes) = crate::rooted::read_regular(dir, Path::new(name), name, MAX_IGNORE_FILE)
        else {
            continue;
        };
        for line in String::from_utf8_lossy(&bytes).lines() {
            any |= builder.add_line(None, line).is_ok();
        }
    }
    match builder.build() {
        Ok(rules) if any => Some(Rc::new(Ignores { rules, outer })),
        _ => outer,
    }
}

/// The directory at `rel` under `root` (`""`: the root itself).
fn open_under(root: &Dir, rel: &Path) -> std::io::Result<Dir> {
    if rel.as_os_str().is_empty() {
        root.try_clone()
    } else {
        root.open_dir(rel)
    }
}

/// Walks the tree at `rel` (as normalised by [`normal`]; `p` as asked, for
/// errors) depth first in name order, which is the order of the paths
/// sorted, calling `each` on every entry the rules keep until it breaks.
pub(crate) fn walk(
    root: &Dir,
    p: &str,
    rel: &Path,
    rules: &Rules,
    mut each: impl FnMut(&Entry<'_>) -> ControlFlow<()>,
) -> Result<(), ToolError> {
    let start = open_under(root, rel).map_err(|e| io_error(e, p))?;
    let mut chain = None;
    if rules.ignores {
        // The ignore files from the root down to the start's parent (the
        // start's own are read with its entries below).
        let mut at = PathBuf::new();
        for c in rel.components() {
            if let Ok(d) = open_under(root, &at) {
                chain = read_ignores(&d, &at, chain);
            }
            at.push(c);
        }
    }
    let globs = overrides(rel, &rules.globs)?;

    struct Frame {
        dir: Dir,
        rel: PathBuf,
        level: usize,
        /// Entries still to visit, last first.
        pending: Vec<(OsString, FileType)>,
        ignores: Option<Rc<Ignores>>,
    }
    let open = |dir: Dir, rel: PathBuf, level: usize, outer: Option<Rc<Ignores>>| {
        let ignores = if rules.ignores {
            read_ignores(&dir, &rel, outer)
        } else {
            None
        };
        let mut pending = Vec::new();
        for entry in dir.entries().map_err(|e| io_error(e, p))? {
            let entry = entry.map_err(|e| io_error(e, p))?;
            let file_type = entry.file_type().map_err(|e| io_error(e, p))?;
            pending.push((entry.file_name(), file_type));
        }
        pending.sort_by(|a, b| b.0.cmp(&a.0));
        Ok::<_, ToolError>(Frame {
            dir,
            rel,
            level,
            pending,
            ignores,
        })
    };
    let mut stack = vec![open(start, rel.to_path_buf(), 0, chain)?];
    while let Some(frame) = stack.last_mut() {
        let Some((name, file_type)) = frame.pending.pop() else {
            stack.pop();
            continue;
        };
        let entry_rel = frame.rel.join(&name);
        let is_dir = file_type.is_dir();
        if rules.ignores {
            if name == ".git" {
                continue;
            }
            let keep = match globs.as_ref().map(|g| g.matched(&entry_rel, is_dir)) {
                Some(Match::Ignore(_)) => false,
                Some(Match::Whitelist(_)) => true,
                _ => decide(&frame.ignores, &entry_rel, is_dir),
            };
            if !keep {
                continue;
            }
        }
        let entry = Entry {
            parent: &frame.dir,
            name: &name,
            rel: &entry_rel,
            level: frame.level,
            file_type,
        };
        if each(&entry).is_break() {
            return Ok(());
        }
        if is_dir && frame.level + 1 < rules.depth {
            // Not following links: a name swapped for one since it was
            // listed fails to open and is left out.
            let Ok(sub) = open_dir_nofollow(&frame.dir, &name) else {
                continue;
            };
            let (level, outer) = (frame.level + 1, frame.ignores.clone());
            let next = open(sub, entry_rel, level, outer)?;
            stack.push(next);
        }
    }
    Ok(())
}

/// The directory `name` in `dir`, refused if it is a link.
fn open_dir_nofollow(dir: &Dir, name: &OsString) -> std::io::Result<Dir> {
    #[cfg(unix)]
    {
        use cap_std::fs::OpenOptionsExt;
        let mut options = cap_std::fs::OpenOptions::new();
        options
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW);
        Ok(Dir::from_std_file(
            dir.open_with(name, &options)?.into_std(),
        ))
    }
    #[cfg(not(unix))]
    {
        if dir.symlink_metadata(name)?.is_symlink() {
            return Err(std::io::ErrorKind::NotADirectory.into());
        }
        dir.open_dir(name)
    }
}

/// ripgrep's overrides for `globs`, relative to the start.
fn overrides(
    rel: &Path,
    globs: &[String],
) -> Result<Option<ignore::overrides::Override>, ToolError> {
    if globs.is_empty() {
        return Ok(None);
    }
    let base = if rel.as_os_str().is_empty() {
        Path::new(".")
    } else {
        rel
    };
    let mut builder = ignore::overrides::OverrideBuilder::new(base);
    for g in globs {
        builder
            .add(g)
            .map_err(|e| ToolError::new(format!("bad glob {g}: {e}")))?;
    }
    builder
        .build()
        .map(Some)
        .map_err(|e| ToolError::new(e.to_string()))
}
