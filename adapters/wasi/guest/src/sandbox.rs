//! Sandbox mode: `quickjs /app/user_code.js` runs a file as a program.
//!
//! `console.log`/`info`/`debug` write to stdout, `console.error`/`warn` to
//! stderr; `require('fs')` offers the usual synchronous calls, confined to
//! `/app` twice over: paths are resolved against `/app` and refused with
//! `EACCES` when they leave it, and the host preopens `/app` and nothing
//! else, so WASI itself refuses anything outside (symlinks included).

use rquickjs::context::EvalOptions;
use rquickjs::function::Opt;
use rquickjs::{Context, Ctx, Function, Object, Runtime, TypedArray, Value};
use std::cell::{Cell, RefCell};
use std::io::{ErrorKind, Write};
use std::path::{Component, Path, PathBuf};
use std::rc::Rc;

/// The one directory a sandboxed script may touch.
const ROOT: &str = "/app";

/// Node-like globals over the natives `__write(fd, text)` and
/// `__fs(op, path, data, flag)`; the natives are removed from the global
/// object once captured.
const BOOTSTRAP: &str = r#"(function (write, fsop) {
  'use strict';
  const G = globalThis;
  function show(v, depth) {
    if (typeof v === 'string') return depth ? JSON.stringify(v) : v;
    if (v instanceof Error) return v.stack ? v.name + ': ' + v.message + '\n' + v.stack : String(v);
    if (typeof v === 'function') return '[Function: ' + (v.name || 'anonymous') + ']';
    if (typeof v === 'bigint') return String(v) + 'n';
    if (typeof v === 'symbol' || v === undefined || v === null || typeof v !== 'object') return String(v);
    try {
      const seen = new Set();
      return JSON.stringify(v, function (k, x) {
        if (typeof x === 'bigint') return String(x) + 'n';
        if (typeof x === 'object' && x !== null) {
          if (seen.has(x)) return '[Circular]';
          seen.add(x);
        }
        if (x === undefined) return null;
        return x;
      });
    } catch (e) {
      return String(v);
    }
  }
  function line(args) {
    const parts = [];
    for (let i = 0; i < args.length; i++) parts.push(show(args[i], 0));
    return parts.join(' ') + '\n';
  }
  const out = function () { write(1, line(arguments)); };
  const err = function () { write(2, line(arguments)); };
  G.console = { log: out, info: out, debug: out, trace: out, error: err, warn: err };

  function call(op, path, data, flag) {
    const r = fsop(op, String(path), data, !!flag);
    if (r && r.error) {
      const e = new Error(r.error + ': ' + r.message + ', ' + r.syscall + " '" + path + "'");
      e.code = r.error;
      e.errno = r.errno;
      e.syscall = r.syscall;
      e.path = String(path);
      throw e;
    }
    return r ? r.value : undefined;
  }
  function bytes(data) {
    if (typeof data === 'string') return data;
    if (data instanceof ArrayBuffer) return new Uint8Array(data.slice(0));
    if (ArrayBuffer.isView(data)) return new Uint8Array(data.buffer.slice(data.byteOffset, data.byteOffset + data.byteLength));
    return String(data);
  }
  function stats(s) {
    return {
      size: s.size, mtimeMs: s.mtimeMs, mtime: new Date(s.mtimeMs),
      isFile() { return s.file; }, isDirectory() { return s.dir; },
      isSymbolicLink() { return s.link; },
    };
  }
  const fs = {
    readFileSync(path, options) { return call('read', path); },
    writeFileSync(path, data) { call('write', path, bytes(data), false); },
    appendFileSync(path, data) { call('write', path, bytes(data), true); },
    existsSync(path) { try { return call('exists', path); } catch (e) { return false; } },
    readdirSync(path) { return call('readdir', path); },
    mkdirSync(path, options) { call('mkdir', path, undefined, options && options.recursive); },
    statSync(path) { return stats(call('stat', path)); },
    unlinkSync(path) { call('unlink', path); },
  };
  const modules = { fs: fs, 'node:fs': fs };
  G.require = function require(name) {
    if (Object.prototype.hasOwnProperty.call(modules, name)) return modules[name];
    const e = new Error("Cannot find module '" + name + "'");
    e.code = 'MODULE_NOT_FOUND';
    throw e;
  };
  G.module = { exports: {} };
  G.exports = G.module.exports;
  G.__filename = '/app/user_code.js';
  G.__dirname = '/app';
})"#;

/// A failed file operation, as Node reports it.
struct FsError {
    code: &'static str,
    errno: i32,
    message: String,
    syscall: &'static str,
}

fn denied(syscall: &'static str) -> FsError {
    FsError {
        code: "EACCES",
        errno: -13,
        message: "permission denied (outside /app)".into(),
        syscall,
    }
}

/// Maps an I/O error to Node's code. WASI reports a path the preopen does
/// not cover (a symlink out of /app, say) as ENOTCAPABLE or EPERM: both
/// are a permission error to the script.
fn fs_error(e: &std::io::Error, syscall: &'static str) -> FsError {
    // WASI errno values (wasi-libc): EPERM 63, ENOTCAPABLE 76, ELOOP 32.
    let wasi_denied = matches!(e.raw_os_error(), Some(63 | 76 | 32));
    let (code, errno, message) = match e.kind() {
        _ if wasi_denied => ("EACCES", -13, "permission denied (outside /app)"),
        ErrorKind::PermissionDenied => ("EACCES", -13, "permission denied"),
        ErrorKind::NotFound => ("ENOENT", -2, "no such file or directory"),
        ErrorKind::AlreadyExists => ("EEXIST", -17, "file already exists"),
        ErrorKind::NotADirectory => ("ENOTDIR", -20, "not a directory"),
        ErrorKind::IsADirectory => ("EISDIR", -21, "illegal operation on a directory"),
        ErrorKind::DirectoryNotEmpty => ("ENOTEMPTY", -39, "directory not empty"),
        _ => ("EIO", -5, "i/o error"),
    };
    let message = if code == "EIO" {
        format!("{message}: {e}")
    } else {
        message.to_owned()
    };
    FsError {
        code,
        errno,
        message,
        syscall,
    }
}

/// Resolves `path` against `/app` without touching the file system and
/// refuses anything that leaves it (`..` included).
fn confine(path: &str, syscall: &'static str) -> Result<PathBuf, FsError> {
    let mut out = PathBuf::from("/");
    let joined = Path::new(ROOT).join(path);
    for c in joined.components() {
        match c {
            Component::RootDir | Component::Prefix(_) => out = PathBuf::from("/"),
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(p) => out.push(p),
        }
    }
    if out.starts_with(ROOT) {
        Ok(out)
    } else {
        Err(denied(syscall))
    }
}

/// What a file that is not a plain file of this workspace gets: a FIFO,
/// device or socket (opening one could wait forever), or for writing, a
/// file with a second name (a hard link someone placed here, perhaps to a
/// file outside).
fn not_plain(syscall: &'static str, why: &str) -> FsError {
    FsError {
        code: "EPERM",
        errno: -1,
        message: format!("operation not permitted ({why})"),
        syscall,
    }
}

/// The link count and whether it is a regular file, of an open file.
fn judge(file: &std::fs::File) -> std::io::Result<(bool, u64)> {
    use std::os::fd::AsRawFd;
    // SAFETY: all zeroes is a valid value of the plain C struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat writes the struct we pass, for a descriptor we hold.
    if unsafe { libc::fstat(file.as_raw_fd(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((st.st_mode & libc::S_IFMT == libc::S_IFREG, st.st_nlink))
}

/// Refuses what is there already if it is not a regular file (before
/// opening it, which for a FIFO would wait for a writer).
fn check_before_open(p: &Path, syscall: &'static str) -> Result<(), FsError> {
    match std::fs::metadata(p) {
        Ok(m) if m.is_dir() => Err(fs_error(
            &std::io::Error::from(ErrorKind::IsADirectory),
            syscall,
        )),
        Ok(m) if !m.is_file() => Err(not_plain(syscall, "not a regular file")),
        _ => Ok(()),
    }
}

/// Reads a regular file whole.
fn read_plain(p: &Path) -> Result<Vec<u8>, FsError> {
    use std::io::Read;
    check_before_open(p, "open")?;
    let mut file = std::fs::File::open(p).map_err(|e| fs_error(&e, "open"))?;
    let (regular, _) = judge(&file).map_err(|e| fs_error(&e, "fstat"))?;
    if !regular {
        return Err(not_plain("open", "not a regular file"));
    }
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)
        .map_err(|e| fs_error(&e, "read"))?;
    Ok(bytes)
}

/// Opens a regular file with one name for writing (created if missing),
/// emptied first unless `append`: the checks are made on the opened file,
/// before anything is written.
fn open_plain_for_writing(p: &Path, append: bool) -> Result<std::fs::File, FsError> {
    check_before_open(p, "open")?;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .append(append)
        .open(p)
        .map_err(|e| fs_error(&e, "open"))?;
    match judge(&file).map_err(|e| fs_error(&e, "fstat"))? {
        (false, _) => return Err(not_plain("open", "not a regular file")),
        (true, links) if links > 1 => {
            return Err(not_plain("open", "a file with more than one link"))
        }
        _ => {}
    }
    if !append {
        file.set_len(0).map_err(|e| fs_error(&e, "ftruncate"))?;
    }
    Ok(file)
}

/// Writes bytes: a string as UTF-8, or the bytes of a Uint8Array.
fn data_bytes(data: &Value<'_>) -> Vec<u8> {
    if let Some(s) = data.as_string() {
        return s.to_string().unwrap_or_default().into_bytes();
    }
    match TypedArray::<u8>::from_value(data.clone()) {
        // SAFETY: no JavaScript runs while the slice is copied, and the
        // bootstrap passes a fresh copy that nothing else can detach.
        Ok(a) => unsafe { a.as_slice() }.to_vec(),
        Err(_) => Vec::new(),
    }
}

/// One file operation; `Ok` holds the JS value to return.
fn fs_op<'js>(
    ctx: &Ctx<'js>,
    op: &str,
    path: &str,
    data: Option<Value<'js>>,
    flag: bool,
) -> Result<Value<'js>, FsError> {
    let js = |r: rquickjs::Result<Value<'js>>| {
        r.map_err(|e| FsError {
            code: "EIO",
            errno: -5,
            message: e.to_string(),
            syscall: "convert",
        })
    };
    match op {
        "read" => {
            let p = confine(path, "open")?;
            let bytes = read_plain(&p)?;
            let text = String::from_utf8_lossy(&bytes).into_owned();
            js(rquickjs::String::from_str(ctx.clone(), &text).map(|s| s.into_value()))
        }
        "write" => {
            let p = confine(path, "open")?;
            let bytes = data.as_ref().map(data_bytes).unwrap_or_default();
            let mut file = open_plain_for_writing(&p, flag)?;
            file.write_all(&bytes).map_err(|e| fs_error(&e, "write"))?;
            Ok(Value::new_undefined(ctx.clone()))
        }
        "exists" => {
            let p = confine(path, "access")?;
            Ok(Value::new_bool(ctx.clone(), p.exists()))
        }
        "readdir" => {
            let p = confine(path, "scandir")?;
            let mut names: Vec<String> = std::fs::read_dir(&p)
                .map_err(|e| fs_error(&e, "scandir"))?
                .filter_map(|d| d.ok())
                .map(|d| d.file_name().to_string_lossy().into_owned())
                .collect();
            names.sort();
            let arr = js(rquickjs::Array::new(ctx.clone()).map(|a| a.into_value()))?;
            if let Some(a) = arr.as_array() {
                for (i, n) in names.iter().enumerate() {
                    let _ = a.set(i, n.as_str());
                }
            }
            Ok(arr)
        }
        "mkdir" => {
            let p = confine(path, "mkdir")?;
            let r = if flag {
                std::fs::create_dir_all(&p)
            } else {
                std::fs::create_dir(&p)
            };
            r.map_err(|e| fs_error(&e, "mkdir"))?;
            Ok(Value::new_undefined(ctx.clone()))
        }
        "stat" => {
            let p = confine(path, "stat")?;
            let m = std::fs::metadata(&p).map_err(|e| fs_error(&e, "stat"))?;
            let link = std::fs::symlink_metadata(&p)
                .map(|l| l.file_type().is_symlink())
                .unwrap_or(false);
            let mtime = m
                .modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map(|d| d.as_secs_f64() * 1000.0)
                .unwrap_or(0.0);
            let o = js(Object::new(ctx.clone()).map(|o| o.into_value()))?;
            if let Some(o) = o.as_object() {
                let _ = o.set("size", m.len() as f64);
                let _ = o.set("mtimeMs", mtime);
                let _ = o.set("file", m.is_file());
                let _ = o.set("dir", m.is_dir());
                let _ = o.set("link", link);
            }
            Ok(o)
        }
        "unlink" => {
            let p = confine(path, "unlink")?;
            std::fs::remove_file(&p).map_err(|e| fs_error(&e, "unlink"))?;
            Ok(Value::new_undefined(ctx.clone()))
        }
        _ => Err(FsError {
            code: "ENOSYS",
            errno: -38,
            message: format!("unknown operation {op}"),
            syscall: "fs",
        }),
    }
}

/// The native behind `require('fs')`: `{ value }` or `{ error, ... }`.
fn fs_native<'js>(
    ctx: Ctx<'js>,
    op: String,
    path: String,
    data: Opt<Value<'js>>,
    flag: Opt<bool>,
) -> rquickjs::Result<Object<'js>> {
    let out = Object::new(ctx.clone())?;
    match fs_op(&ctx, &op, &path, data.0, flag.0.unwrap_or(false)) {
        Ok(v) => out.set("value", v)?,
        Err(e) => {
            out.set("error", e.code)?;
            out.set("errno", e.errno)?;
            out.set("message", e.message)?;
            out.set("syscall", e.syscall)?;
        }
    }
    Ok(out)
}

fn write_fd(fd: i32, text: String) {
    if fd == 2 {
        let _ = std::io::stderr().write_all(text.as_bytes());
    } else {
        let _ = std::io::stdout().write_all(text.as_bytes());
    }
}

/// What an uncaught error prints, as Node does: `Uncaught Name: message`
/// and the stack.
fn print_uncaught(ctx: &Ctx<'_>, e: rquickjs::Error, prefix: &str) {
    let text = match e {
        rquickjs::Error::Exception => describe(ctx.catch()),
        other => other.to_string(),
    };
    eprintln!("{prefix}{text}");
}

fn describe(v: Value<'_>) -> String {
    if let Some(o) = v.as_object() {
        let get = |k: &str| o.get::<_, Option<String>>(k).ok().flatten();
        if let Some(message) = get("message") {
            let name = get("name").unwrap_or_else(|| "Error".into());
            let stack = get("stack").unwrap_or_default();
            return format!("{name}: {message}\n{stack}").trim_end().to_owned();
        }
    }
    match v.as_string() {
        Some(s) => s.to_string().unwrap_or_default(),
        None => format!("{v:?}"),
    }
}

/// A runtime and context with the bootstrap done, ready for one program.
/// Field order is drop order: the context before the runtime.
struct Program {
    ctx: Context,
    rt: Runtime,
    /// Set by the rejection tracker when a promise is left rejected.
    rejected: Rc<Cell<bool>>,
}

thread_local! {
    /// The program state `wizer_initialize_program` built into the
    /// snapshot; `run_file` takes it (a module without it builds its own).
    static PROGRAM: RefCell<Option<Program>> = const { RefCell::new(None) };
}

/// Builds the runtime and context and runs the bootstrap. Touches neither
/// the file system nor the clock, so its result may be snapshotted:
/// `Math.random` is the guest's generator, seeded by `run_file` per run
/// (QuickJS seeds its own when the context is made, which a snapshot would
/// freeze for every run).
fn new_program() -> Result<Program, String> {
    let rt = Runtime::new().map_err(|e| e.to_string())?;
    // QuickJS's own limit, measured on the shadow stack. Plain JS recursion
    // keeps its frames mostly on wasm's native stack, which the host caps
    // first: the program then ends as a `stack_overflow` termination.
    rt.set_max_stack_size(crate::SANDBOX_STACK_BYTES);
    let rejected = Rc::new(Cell::new(false));
    let seen = rejected.clone();
    rt.set_host_promise_rejection_tracker(Some(Box::new(
        move |_ctx: Ctx<'_>, _promise, reason: Value<'_>, handled: bool| {
            if !handled {
                eprintln!("Uncaught (in promise) {}", describe(reason));
                seen.set(true);
            }
        },
    )));
    let ctx = Context::full(&rt).map_err(|e| e.to_string())?;
    ctx.with(|ctx| {
        let setup = || -> rquickjs::Result<()> {
            crate::install_random(&ctx)?;
            let boot: Function = ctx.eval(BOOTSTRAP)?;
            let write = Function::new(ctx.clone(), write_fd)?;
            let fs = Function::new(ctx.clone(), fs_native)?;
            boot.call::<_, ()>((write, fs))
        };
        setup().map_err(|e| match e {
            rquickjs::Error::Exception => format!("setup failed: {}", describe(ctx.catch())),
            other => format!("setup failed: {other}"),
        })
    })?;
    Ok(Program { ctx, rt, rejected })
}

/// The pre-initialisation entry point for sandbox mode (`[] -> []`, as
/// wizer wants): a snapshot taken after it starts every program with its
/// runtime, context and bootstrap built. Each sandbox run instantiates
/// the snapshot afresh, so nothing of one program reaches the next. A
/// failure is left for `run_file`, which then builds its own.
#[no_mangle]
pub extern "C" fn wizer_initialize_program() {
    PROGRAM.with(|p| {
        let mut p = p.borrow_mut();
        if p.is_none() {
            *p = new_program().ok();
        }
    });
}

/// Runs the file at `path`; returns the process exit status.
pub fn run_file(path: &str) -> i32 {
    // Relative paths in the script resolve inside the workspace.
    let _ = std::env::set_current_dir(ROOT);
    let source = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("quickjs: cannot read {path}: {e}");
            return 2;
        }
    };
    crate::seed_random();
    let program = match PROGRAM
        .with(|p| p.borrow_mut().take())
        .map_or_else(new_program, Ok)
    {
        Ok(p) => p,
        Err(e) => {
            eprintln!("quickjs: {e}");
            return 70;
        }
    };
    let code = run_program(&program, path, source);
    // The instance ends with the program: freeing QuickJS's runtime object
    // by object (a full collection first) would only burn fuel.
    std::mem::forget(program);
    code
}

fn run_program(program: &Program, path: &str, source: Vec<u8>) -> i32 {
    let Program { ctx, rt, rejected } = program;
    let failed = ctx.with(|ctx| {
        let mut opts = EvalOptions::default();
        opts.strict = false;
        opts.global = true;
        opts.filename = Some(path.to_owned());
        match ctx.eval_with_options::<(), _>(source, opts) {
            Ok(()) => false,
            Err(e) => {
                print_uncaught(&ctx, e, "Uncaught ");
                true
            }
        }
    });
    if failed {
        return 1;
    }
    loop {
        match rt.execute_pending_job() {
            Ok(true) => {}
            Ok(false) => break,
            Err(job) => {
                job.0
                    .with(|ctx| eprintln!("Uncaught {}", describe(ctx.catch())));
                return 1;
            }
        }
    }
    let _ = std::io::stdout().flush();
    if rejected.get() {
        1
    } else {
        0
    }
}
