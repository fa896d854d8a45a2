//! Files under a tool's root, resolved once: a script's path checked
//! before cap-std resolves it, files read as what was opened (never a
//! FIFO, a device or a socket), writes made atomic. Every file tool
//! (`builtin`, the coding pack, `applyPatch`, the directory walk) reads
//! and writes through these.

use cap_std::fs::Dir;
use harness_core::tool::ToolError;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

static TMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Checks a script-supplied path before cap-std resolves it, for clearer errors.
pub(crate) fn relative(p: &str) -> Result<PathBuf, ToolError> {
    if p.contains('\0') {
        return Err(ToolError::new("path contains a NUL byte"));
    }
    let path = Path::new(p);
    if path.is_absolute() || matches!(path.components().next(), Some(Component::Prefix(_))) {
        return Err(ToolError::new(format!(
            "absolute paths are not allowed ({p}); use a path relative to the root"
        )));
    }
    Ok(path.to_path_buf())
}

/// Writes `bytes` to `rel` under `dir` atomically (a temporary file in the
/// same directory, then a rename), creating parent directories.
pub(crate) fn write_atomic(dir: &Dir, p: &str, rel: &Path, bytes: &[u8]) -> Result<(), ToolError> {
    let name = rel
        .file_name()
        .ok_or_else(|| ToolError::new(format!("{p} does not name a file")))?
        .to_string_lossy()
        .into_owned();
    let parent = rel.parent().unwrap_or(Path::new("")).to_path_buf();
    if !parent.as_os_str().is_empty() {
        // A parent that is a link out of the root makes mkdir say "exists";
        // resolving it says where it leads.
        dir.create_dir_all(&parent)
            .map_err(|e| io_error(dir.metadata(&parent).err().unwrap_or(e), p))?;
    }
    let tmp = parent.join(format!(
        ".{name}.harness-tmp-{}-{}",
        std::process::id(),
        TMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    dir.write(&tmp, bytes).map_err(|e| io_error(e, p))?;
    if let Err(e) = dir.rename(&tmp, dir, rel) {
        let _ = dir.remove_file(&tmp);
        return Err(io_error(e, p));
    }
    Ok(())
}

/// The one refusal for a path that leaves the root, whatever lies there.
pub(crate) fn outside(p: &str) -> ToolError {
    ToolError::new(format!("path {p} leads outside the root directory"))
}

pub(crate) fn io_error(e: io::Error, p: &str) -> ToolError {
    let text = e.to_string();
    if text.contains("outside of the filesystem") || text.contains("outside the filesystem") {
        return outside(p);
    }
    match e.kind() {
        io::ErrorKind::NotFound => ToolError::new(format!("no such file or directory: {p}")),
        io::ErrorKind::PermissionDenied => ToolError::new(format!("permission denied: {p}")),
        _ => ToolError::new(format!("{p}: {text}")),
    }
}

pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ToolError> + Send + 'static,
) -> Result<T, ToolError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ToolError::new(format!("file task failed: {e}")))?
}

/// Opens `rel` under `dir` for reading without waiting on a FIFO or
/// taking a terminal; `flags` adds to that (`O_NOFOLLOW`, say).
pub(crate) fn open_for_reading(dir: &Dir, rel: &Path, flags: i32) -> io::Result<cap_std::fs::File> {
    let mut options = cap_std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use cap_std::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | flags);
    }
    #[cfg(not(unix))]
    let _ = flags;
    dir.open_with(rel, &options)
}

/// The file `name` in `dir`, if it is a regular file and not a link (as
/// opened, not as listed).
pub(crate) fn open_regular(dir: &Dir, name: &Path) -> Option<std::fs::File> {
    #[cfg(unix)]
    let flags = libc::O_NOFOLLOW;
    #[cfg(not(unix))]
    let flags = 0;
    let file = open_for_reading(dir, name, flags).ok()?;
    let meta = file.metadata().ok()?;
    meta.is_file().then(|| file.into_std())
}

/// Reads the regular file `rel` (the script's `p`) of `dir`, at most
/// `max` bytes. It is opened without blocking and judged by what was
/// opened, not by a name looked up before: a FIFO, a device or a socket
/// is refused (none can hang the call or fill memory), and the cap holds
/// however long the file grows or whatever length it claims.
pub(crate) fn read_regular(dir: &Dir, rel: &Path, p: &str, max: u64) -> Result<Vec<u8>, ToolError> {
    use std::io::Read;
    let file = open_for_reading(dir, rel, 0).map_err(|e| io_error(e, p))?;
    let meta = file.metadata().map_err(|e| io_error(e, p))?;
    if meta.is_dir() {
        return Err(ToolError::new(format!("{p} is a directory")));
    }
    if !meta.is_file() {
        return Err(ToolError::new(format!(
            "{p} is not a regular file (a FIFO, device or socket)"
        )));
    }
    if meta.len() > max {
        return Err(ToolError::new(format!(
            "{p} is {} bytes; the limit is {max} bytes",
            meta.len()
        )));
    }
    let mut bytes = Vec::new();
    file.take(max.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| io_error(e, p))?;
    if bytes.len() as u64 > max {
        return Err(ToolError::new(format!(
            "{p} is more than {max} bytes; the limit is {max} bytes"
        )));
    }
    Ok(bytes)
}
