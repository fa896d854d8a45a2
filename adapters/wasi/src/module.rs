//! The guest module: found, compiled once per process (or read back from
//! the on-disk cache), linked, and instantiated per run from an
//! [`InstancePre`]. Stores get fuel, an epoch deadline and memory limits.

use harness_core::engine::HostHandle;
use harness_core::CancellationToken;
use sha2::{Digest, Sha256};
use std::cell::RefCell;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;
use wasmtime::{
    Caller, Config, Engine, InstanceAllocationStrategy, InstancePre, Linker, Module,
    PoolingAllocationConfig, ResourceLimiter, Store, StoreLimits, StoreLimitsBuilder,
    UpdateDeadline,
};
use wasmtime_wasi::p1::WasiP1Ctx;

/// The script that builds the guest; named in every missing-binary error.
pub const BUILD_SCRIPT: &str = "scripts/build-quickjs-wasm";

/// The guest's default path, relative to the working directory.
pub const DEFAULT_WASM_PATH: &str = "bin/quickjs.wasm";

/// Environment variable that overrides the default guest path.
pub const WASM_PATH_ENV: &str = "HARNESS_QUICKJS_WASM";

/// Native stack wasm may use. Worker threads have 16 MiB.
pub(crate) const MAX_WASM_STACK: usize = 4 << 20;

/// Why the guest could not be loaded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoadError {
    #[error("the QuickJS WASI binary {path} does not exist; build it with {BUILD_SCRIPT}")]
    Missing { path: PathBuf },
    #[error("the QuickJS WASI binary {path} cannot be used: {message}")]
    Invalid { path: PathBuf, message: String },
}

/// Where the guest is: `HARNESS_QUICKJS_WASM`, else `bin/quickjs.wasm`
/// under the working directory, else the one in this source tree (for
/// tests and benches run by cargo from a crate directory).
pub fn default_wasm_path() -> PathBuf {
    if let Some(p) = std::env::var_os(WASM_PATH_ENV) {
        return PathBuf::from(p);
    }
    let local = PathBuf::from(DEFAULT_WASM_PATH);
    if local.exists() {
        return local;
    }
    let tree = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(DEFAULT_WASM_PATH);
    if tree.exists() {
        return tree;
    }
    local
}

/// How to load the guest.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct ModuleOptions {
    /// The guest; `None` is [`default_wasm_path`].
    pub wasm_path: Option<PathBuf>,
    /// Directory for compiled modules (`*.cwasm`); `None` compiles in
    /// memory only. The default options cache next to the guest.
    pub cache_dir: Option<PathBuf>,
    /// Bounds-checked linear memories without the usual multi-GiB virtual
    /// reservation, for processes with an address-space cap (the process
    /// workers, RLIMIT_AS 4 GiB); a little slower.
    pub bounded_memory: bool,
    /// Pre-initialise the guest (wizer): run its QuickJS start-up once and
    /// start every instance from a snapshot of that state. For the harness
    /// engine that is the runtime and the hardened context; for the
    /// sandbox, which runs the guest as a program, the program's runtime,
    /// context and Node-like globals (each run still instantiates the
    /// snapshot afresh).
    pub preinit: bool,
}

impl ModuleOptions {
    /// The default guest, cached next to it.
    pub fn cached() -> Self {
        let wasm = default_wasm_path();
        let dir = wasm.parent().map(Path::to_path_buf);
        ModuleOptions {
            wasm_path: Some(wasm),
            cache_dir: dir,
            bounded_memory: false,
            preinit: true,
        }
    }

    pub(crate) fn path(&self) -> PathBuf {
        self.wasm_path.clone().unwrap_or_else(default_wasm_path)
    }
}

/// A compiled guest, ready to instantiate.
pub struct Loaded {
    pub(crate) engine: Engine,
    /// The engine configuration's tag in the cache's file names.
    tag: &'static str,
    pub(crate) pre: InstancePre<RunState>,
    /// SHA-256 of the guest file, hex.
    pub sha256: String,
    pub path: PathBuf,
    /// Whether the compiled code came from the on-disk cache.
    pub from_cache: bool,
}

impl std::fmt::Debug for Loaded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loaded")
            .field("path", &self.path)
            .field("sha256", &self.sha256)
            .field("from_cache", &self.from_cache)
            .finish()
    }
}

/// How the guest will be entered, which decides what a pre-initialised
/// snapshot holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Entry {
    /// The `harness_*` primitives: the hardened context.
    Harness,
    /// `_start`, the sandbox's program: its runtime, context and globals.
    Program,
    /// The `harness_*` primitives for a run in a private realm
    /// (docs/security.md, "Private realms"): the realm, hardened but for
    /// the intrinsics. An instance of it serves one run.
    Private,
}

impl Entry {
    /// The guest's export wizer calls (`[] -> []`).
    fn init_func(self) -> &'static str {
        match self {
            Entry::Harness => "wizer_initialize",
            Entry::Program => "wizer_initialize_program",
            Entry::Private => "wizer_initialize_private",
        }
    }

    /// Tells the compiled files of the snapshots apart.
    fn cache_tag(self) -> &'static str {
        match self {
            Entry::Harness => "-preinit",
            Entry::Program => "-program",
            Entry::Private => "-private",
        }
    }
}

type ModuleCache = Mutex<HashMap<(ModuleOptions, Entry), Arc<Loaded>>>;

fn loaded_modules() -> &'static ModuleCache {
    static MODULES: OnceLock<ModuleCache> = OnceLock::new();
    MODULES.get_or_init(Mutex::default)
}

/// The guest for `opts`, compiled at most once per process.
pub fn load(opts: &ModuleOptions) -> Result<Arc<Loaded>, LoadError> {
    load_as(opts, Entry::Harness)
}

/// The guest for `opts` entered as `entry`, compiled at most once per
/// process.
pub(crate) fn load_as(opts: &ModuleOptions, entry: Entry) -> Result<Arc<Loaded>, LoadError> {
    let mut map = loaded_modules().lock().unwrap_or_else(|p| p.into_inner());
    let key = (opts.clone(), entry);
    if let Some(l) = map.get(&key) {
        return Ok(l.clone());
    }
    let loaded = Arc::new(load_uncached_as(opts, entry)?);
    map.insert(key, loaded.clone());
    Ok(loaded)
}

/// The engine configuration, and a tag that tells its compiled code apart
/// in the cache (code for bounds-checked memories differs). `pooled`
/// draws instances from the pooling allocator (see [`pool`]).
pub(crate) fn engine_config(bounded_memory: bool, pooled: bool) -> (Config, &'static str) {
    let mut c = Config::new();
    c.consume_fuel(true);
    c.epoch_interruption(true);
    c.max_wasm_stack(MAX_WASM_STACK);
    // Unused (no async calls), but must not be smaller than the above.
    c.async_stack_size(MAX_WASM_STACK + (1 << 20));
    c.cranelift_opt_level(wasmtime::OptLevel::Speed);
    if bounded_memory {
        // Bounds-checked memories that grow in place: slower, but they fit
        // under RLIMIT_AS.
        c.memory_reservation(0);
        c.memory_guard_size(64 << 10);
        // Each live instance reserves its memory's size plus this much
        // address space to grow into without moving (wasmtime's default
        // is 2 GiB): room for the default 96 MiB heap limit and the
        // guest's overhead, and for several instances under a worker's
        // RLIMIT_AS (a private run's instance beside the one kept for
        // shared runs). A run allowed more grows past it by moving its
        // memory, a copy.
        c.memory_reservation_for_growth(BOUNDED_GROWTH_BYTES);
        return (c, BOUNDED_TAG);
    }
    if pooled {
        c.allocation_strategy(InstanceAllocationStrategy::Pooling(pool()));
    }
    (c, "reserved")
}

/// The cache tag of an engine with bounds-checked memories.
const BOUNDED_TAG: &str = "bounded";

/// Address space a bounds-checked memory reserves to grow into in place.
const BOUNDED_GROWTH_BYTES: u64 = 256 << 20;

/// Instances come from a pool of slots reserved up front (1,000, wasmtime's
/// default: about 4 TiB of address space, none of it committed until used),
/// each kept mapped to the guest's copy-on-write image between runs. A
/// freed slot's low [`KEEP_RESIDENT_BYTES`] are put back from the image in
/// place (the rest is given back to the kernel), so the next run neither
/// maps nor faults in its memory, and nothing of one run survives into
/// the next: the slot holds the image again. Where the kernel has the
/// `PAGEMAP_SCAN` ioctl (Linux 6.7+) only the pages the run dirtied are
/// put back; elsewhere wasmtime rewrites the whole resident part, which
/// cost a sandbox run of a trivial program about 17% of its CPU. Where
/// that much address space cannot be reserved (valgrind, a small
/// `ulimit -v`), the engine falls back to mapping each instance on demand.
fn pool() -> PoolingAllocationConfig {
    let mut pool = PoolingAllocationConfig::new();
    pool.linear_memory_keep_resident(KEEP_RESIDENT_BYTES)
        .table_keep_resident(KEEP_RESIDENT_BYTES)
        .pagemap_scan(wasmtime::Enabled::Auto);
    pool
}

/// Bytes of a pooled instance's memory (and table) reset in place and kept
/// resident when it is freed, instead of being given back to the kernel.
const KEEP_RESIDENT_BYTES: usize = 8 << 20;

/// The engine for `bounded_memory`: pooled where the pool can be reserved,
/// else on demand (see [`pool`]).
fn new_engine(bounded_memory: bool) -> wasmtime::Result<(Engine, &'static str)> {
    if !bounded_memory {
        let (config, tag) = engine_config(false, true);
        match Engine::new(&config) {
            Ok(engine) => return Ok((engine, tag)),
            Err(e) => tracing::warn!(
                error = %e,
                "wasi: no instance pool (address space?); instances are mapped on demand"
            ),
        }
    }
    let (config, tag) = engine_config(bounded_memory, false);
    Ok((Engine::new(&config)?, tag))
}

/// Compiles (or reads back) and links the guest; not memoised.
pub fn load_uncached(opts: &ModuleOptions) -> Result<Loaded, LoadError> {
    load_uncached_as(opts, Entry::Harness)
}

fn load_uncached_as(opts: &ModuleOptions, entry: Entry) -> Result<Loaded, LoadError> {
    compile(opts, entry, None)
}

/// Where the compiled code of the guest with `sha256` entered as `entry`
/// is cached, for an engine configuration tagged `tag`.
fn cache_file(opts: &ModuleOptions, entry: Entry, sha256: &str, tag: &str) -> Option<PathBuf> {
    let init = if opts.preinit { entry.cache_tag() } else { "" };
    opts.cache_dir.as_ref().map(|d| {
        d.join(format!(
            ".quickjs-{}-wasmtime{}-{tag}{init}.cwasm",
            &sha256[..16],
            wasmtime_version()
        ))
    })
}

/// Where `loaded` (the guest `opts` loads, entered as `entry`) is cached on
/// disk; `None` without a cache directory.
pub(crate) fn cache_file_of(
    opts: &ModuleOptions,
    entry: Entry,
    loaded: &Loaded,
) -> Option<PathBuf> {
    cache_file(opts, entry, &loaded.sha256, loaded.tag)
}

/// Compiles (or reads back) and links the guest entered as `entry`; with
/// `like`, on that module's wasmtime engine, and only if the guest file is
/// still the one `like` was made from.
fn compile(opts: &ModuleOptions, entry: Entry, like: Option<&Loaded>) -> Result<Loaded, LoadError> {
    let path = opts.path();
    let invalid = |message: String| LoadError::Invalid {
        path: path.clone(),
        message,
    };
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(LoadError::Missing { path });
        }
        Err(e) => return Err(invalid(e.to_string())),
    };
    let sha256 = hex(&Sha256::digest(&bytes));
    let (engine, tag) = match like {
        Some(l) if l.sha256 != sha256 => {
            return Err(invalid(format!(
                "it changed since it was loaded (SHA-256 {} then)",
                &l.sha256[..16]
            )));
        }
        Some(l) => (l.engine.clone(), l.tag),
        None => new_engine(opts.bounded_memory).map_err(|e| invalid(e.to_string()))?,
    };
    let cache_file = cache_file(opts, entry, &sha256, tag);
    let mut from_cache = false;
    let mut module = None;
    if let Some(file) = cache_file.as_ref().filter(|f| f.exists()) {
        // A file that does not match this wasmtime and configuration is
        // refused by `deserialize_file`; then the guest is compiled anew.
        module = read_cached(&engine, file);
        from_cache = module.is_some();
    }
    let module = match module {
        Some(m) => m,
        None => {
            let wasm = match (opts.preinit, entry) {
                (false, _) => bytes,
                // A guest from before program snapshots (no such export)
                // still runs, starting its program from scratch.
                (true, Entry::Program) if !exports_func(&bytes, entry.init_func()) => {
                    tracing::warn!(
                        target: "harness::wasi",
                        path = %path.display(),
                        "the guest has no {}: every sandbox run builds its runtime \
                         (rebuild it with {BUILD_SCRIPT})",
                        entry.init_func()
                    );
                    bytes
                }
                // Without it the runs harden their private realm inside
                // the instance, as before (`harness_private`).
                (true, Entry::Private) if !exports_func(&bytes, entry.init_func()) => {
                    return Err(invalid(format!(
                        "no {}: rebuild it with {BUILD_SCRIPT}",
                        entry.init_func()
                    )));
                }
                (true, _) => preinitialise(&engine, &bytes, entry.init_func())
                    .map_err(|e| invalid(format!("pre-initialising: {e:#}")))?,
            };
            let m = Module::from_binary(&engine, &wasm).map_err(|e| invalid(e.to_string()))?;
            if let Some(file) = &cache_file {
                write_cached(&m, file, &sha256);
            }
            m
        }
    };
    let linker = linker(&engine).map_err(|e| invalid(e.to_string()))?;
    let pre = linker
        .instantiate_pre(&module)
        .map_err(|e| invalid(e.to_string()))?;
    Ok(Loaded {
        engine,
        tag,
        pre,
        sha256,
        path,
        from_cache,
    })
}

/// Where the private snapshot of a guest stands in this process.
enum PrivateSlot {
    /// A thread of its own is compiling it (or reading it back).
    Loading,
    Ready(Arc<Loaded>),
    /// It could not be made (an older guest, no pre-initialisation): runs
    /// harden their private realm inside the instance.
    Failed,
}

type PrivateCache = Mutex<HashMap<ModuleOptions, PrivateSlot>>;

fn private_modules() -> &'static PrivateCache {
    static PRIVATE: OnceLock<PrivateCache> = OnceLock::new();
    PRIVATE.get_or_init(Mutex::default)
}

/// The private snapshot of `harness` (the guest `opts` loads, entered as
/// the harness), on the same wasmtime engine, so that one epoch stops
/// instances of both. Never waits for a compile: the first call reads it
/// back from the disk cache if it is there, or else starts compiling it on
/// a thread of its own and answers `None`, as every call does until it is
/// ready; a run that finds none hardens its private realm inside an
/// instance of `harness` (slower, the same behaviour).
pub(crate) fn private_when_ready(
    opts: &ModuleOptions,
    harness: &Arc<Loaded>,
) -> Option<Arc<Loaded>> {
    if !opts.preinit {
        return None;
    }
    let mut map = private_modules().lock().unwrap_or_else(|p| p.into_inner());
    match map.get(opts) {
        Some(PrivateSlot::Ready(l)) => return Some(l.clone()),
        Some(PrivateSlot::Loading | PrivateSlot::Failed) => return None,
        None => {}
    }
    map.insert(opts.clone(), PrivateSlot::Loading);
    drop(map);
    // Compiled already (by a process before this one, or for process
    // workers): read back now, in milliseconds, which is less than one
    // run that hardens its realm.
    let cached = cache_file(opts, Entry::Private, &harness.sha256, harness.tag);
    if cached.is_some_and(|f| f.exists()) {
        return load_private(opts, harness);
    }
    let (key, harness) = (opts.clone(), harness.clone());
    let spawned = std::thread::Builder::new()
        .name("harness-wasi-private".into())
        .spawn(move || {
            load_private(&key, &harness);
        });
    if spawned.is_err() {
        // Runs go on hardening their realm in place; the next one tries
        // again.
        private_modules()
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(opts);
    }
    None
}

/// The private snapshot of `harness`, compiled (or read back) now if it
/// was not: for process workers, which load it before capping themselves,
/// and for filling the disk cache before they start. `None` where it
/// cannot be made (see [`private_when_ready`]).
pub(crate) fn load_private(opts: &ModuleOptions, harness: &Arc<Loaded>) -> Option<Arc<Loaded>> {
    if !opts.preinit {
        return None;
    }
    if let Some(PrivateSlot::Ready(l)) = private_modules()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(opts)
    {
        return Some(l.clone());
    }
    let loaded = compile(opts, Entry::Private, Some(harness));
    let slot = match loaded {
        Ok(l) => PrivateSlot::Ready(Arc::new(l)),
        Err(e) => {
            tracing::warn!(
                target: "harness::wasi",
                error = %e,
                "no private snapshot: runs in a private realm harden it inside the run"
            );
            PrivateSlot::Failed
        }
    };
    let ready = match &slot {
        PrivateSlot::Ready(l) => Some(l.clone()),
        _ => None,
    };
    private_modules()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(opts.clone(), slot);
    ready
}

/// Whether the module exports a function called `name`.
fn exports_func(wasm: &[u8], name: &str) -> bool {
    use wasmparser::{ExternalKind, Parser, Payload};
    for payload in Parser::new(0).parse_all(wasm) {
        match payload {
            Ok(Payload::ExportSection(exports)) => {
                return exports
                    .into_iter()
                    .flatten()
                    .any(|e| e.name == name && e.kind == ExternalKind::Func);
            }
            Ok(_) => {}
            Err(_) => return false,
        }
    }
    false
}

/// Runs the guest's start-up (`init_func`: runtime, context, hardening or
/// the program's globals) once and returns a module whose memory and
/// globals start where it ended.
fn preinitialise(engine: &Engine, wasm: &[u8], init_func: &str) -> wasmtime::Result<Vec<u8>> {
    let mut wizer = wasmtime_wizer::Wizer::new();
    wizer.init_func(init_func);
    let (cx, instrumented) = wizer.instrument(wasm)?;
    let module = Module::from_binary(engine, &instrumented)?;
    let wasi = wasmtime_wasi::WasiCtxBuilder::new().build_p1();
    let mut store = new_store(engine, wasi, 1 << 30, None, StopWhen::default());
    let instance = linker(engine)?.instantiate(&mut store, &module)?;
    instance
        .get_typed_func::<(), ()>(&mut store, init_func)?
        .call(&mut store, ())?;
    let mut state = Snapshot {
        store: &mut store,
        instance,
    };
    block_on(wizer.snapshot(&cx, &mut state))
}

/// The instance wizer reads the initialised state from.
struct Snapshot<'a> {
    store: &'a mut Store<RunState>,
    instance: wasmtime::Instance,
}

impl wasmtime_wizer::InstanceState for Snapshot<'_> {
    async fn global_get(
        &mut self,
        name: &str,
        _: wasmtime_wizer::ValType,
    ) -> wasmtime_wizer::SnapshotVal {
        use wasmtime_wizer::SnapshotVal;
        let value = self
            .instance
            .get_global(&mut *self.store, name)
            .map(|g| g.get(&mut *self.store));
        match value {
            Some(wasmtime::Val::I32(x)) => SnapshotVal::I32(x),
            Some(wasmtime::Val::I64(x)) => SnapshotVal::I64(x),
            Some(wasmtime::Val::F32(x)) => SnapshotVal::F32(x),
            Some(wasmtime::Val::F64(x)) => SnapshotVal::F64(x),
            Some(wasmtime::Val::V128(x)) => SnapshotVal::V128(x.as_u128()),
            // Wizer asks only for the globals it exported itself, all of
            // number types.
            _ => SnapshotVal::I32(0),
        }
    }

    async fn memory_contents(&mut self, name: &str, contents: impl FnOnce(&[u8]) + Send) {
        match self.instance.get_memory(&mut *self.store, name) {
            Some(m) => contents(m.data(&*self.store)),
            None => contents(&[]),
        }
    }
}

/// Drives a future that never waits (the snapshot reads a finished
/// instance) to its end.
fn block_on<F: std::future::Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    loop {
        if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::yield_now();
    }
}

#[allow(unsafe_code)]
fn read_cached(engine: &Engine, file: &Path) -> Option<Module> {
    // SAFETY: the file is one this function's sibling wrote with
    // `Module::serialize` for a guest with the same SHA-256, next to the
    // guest itself: whoever can replace it can replace the guest. wasmtime
    // checks its version and the engine configuration before using it.
    unsafe { Module::deserialize_file(engine, file) }.ok()
}

/// Best effort: a cache that cannot be written only costs a compile.
/// Compiled code of other guest builds in the same directory is removed.
fn write_cached(module: &Module, file: &Path, sha256: &str) {
    let Ok(bytes) = module.serialize() else {
        return;
    };
    if let Some(dir) = file.parent() {
        let current = format!(".quickjs-{}-", &sha256[..16]);
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let ours = name.starts_with(".quickjs-");
            let stale = ours && !name.starts_with(&current) && name.ends_with(".cwasm");
            // A process that ended while it wrote (a one-shot CLI whose
            // background compile of the private snapshot finished as it
            // exited) leaves its `.tmpPID` behind; a write takes
            // milliseconds, so one an hour old is abandoned.
            let abandoned = ours && name.contains(".tmp") && older_than(&entry, 3600);
            if stale || abandoned {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
    let tmp = file.with_extension(format!("tmp{}", std::process::id()));
    if std::fs::write(&tmp, bytes).is_ok() && std::fs::rename(&tmp, file).is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
}

/// Whether the file was last modified more than `secs` seconds ago.
fn older_than(entry: &std::fs::DirEntry, secs: u64) -> bool {
    entry
        .metadata()
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .is_some_and(|age| age.as_secs() > secs)
}

fn wasmtime_version() -> &'static str {
    // The crate version pins the compiled-code format.
    "48"
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// What stops a store: its run's deadline or cancel token. The epoch is
/// bumped (engine-wide) when some run must stop; each store's callback
/// decides whether that run is its own.
#[derive(Debug, Default, Clone)]
pub(crate) struct StopWhen {
    pub deadline: Option<Instant>,
    pub cancel: Option<CancellationToken>,
}

impl StopWhen {
    pub(crate) fn now(&self) -> bool {
        self.deadline.is_some_and(|d| Instant::now() >= d)
            || self.cancel.as_ref().is_some_and(|c| c.is_cancelled())
    }
}

/// [`StoreLimits`], plus what the report needs: the peak linear memory and
/// whether a growth was refused.
pub(crate) struct Limiter {
    inner: StoreLimits,
    pub peak: usize,
    pub refused: bool,
}

impl Limiter {
    pub(crate) fn new(memory_bytes: usize) -> Self {
        Limiter {
            inner: StoreLimitsBuilder::new()
                .memory_size(memory_bytes)
                .instances(1)
                .memories(1)
                .tables(4)
                .build(),
            peak: 0,
            refused: false,
        }
    }
}

impl ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let ok = self.inner.memory_growing(current, desired, maximum)?;
        if ok {
            self.peak = self.peak.max(desired);
        } else {
            self.refused = true;
        }
        Ok(ok)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.inner.table_growing(current, desired, maximum)
    }

    fn instances(&self) -> usize {
        self.inner.instances()
    }
    fn tables(&self) -> usize {
        self.inner.tables()
    }
    fn memories(&self) -> usize {
        self.inner.memories()
    }
}

/// A store's data: WASI, the limiter, and the guest's last host reply and
/// fault.
pub(crate) struct RunState {
    pub wasi: WasiP1Ctx,
    pub limiter: Limiter,
    pub stop: StopWhen,
    pub reply: Vec<u8>,
    pub fault: Option<Vec<u8>>,
}

thread_local! {
    /// The run whose guest is executing on this thread answers the guest's
    /// `host(op, a, b)` (harness mode; the handle is not `Send`, so it
    /// cannot live in the store). Set around each call into the guest.
    static CURRENT_HOST: RefCell<Option<HostHandle>> = const { RefCell::new(None) };
}

/// Makes `host` answer the guest's host calls on this thread until the
/// guard is dropped.
pub(crate) fn answer_with(host: Option<HostHandle>) -> impl Drop {
    struct Restore(Option<HostHandle>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let prev = self.0.take();
            CURRENT_HOST.with(|h| *h.borrow_mut() = prev);
        }
    }
    Restore(CURRENT_HOST.with(|h| std::mem::replace(&mut *h.borrow_mut(), host)))
}

/// A store with the run's limits: linear memory at most `memory_bytes`,
/// `fuel` units (unlimited when `None`), and a trap once `stop` says so
/// after the engine's epoch moves.
pub(crate) fn new_store(
    engine: &Engine,
    wasi: WasiP1Ctx,
    memory_bytes: usize,
    fuel: Option<u64>,
    stop: StopWhen,
) -> Store<RunState> {
    let state = RunState {
        wasi,
        limiter: Limiter::new(memory_bytes),
        stop,
        reply: Vec::new(),
        fault: None,
    };
    let mut store = Store::new(engine, state);
    store.limiter(|s| &mut s.limiter);
    set_budget(&mut store, fuel);
    store.epoch_deadline_callback(|ctx| {
        if ctx.data().stop.now() {
            Ok(UpdateDeadline::Interrupt)
        } else {
            Ok(UpdateDeadline::Continue(1))
        }
    });
    store
}

/// Gives a store `fuel` units (unlimited when `None`) and arms its epoch
/// deadline anew, for a new run.
pub(crate) fn set_budget(store: &mut Store<RunState>, fuel: Option<u64>) {
    // Fuel is always on in this engine's configuration; unlimited is the
    // most the store can hold.
    let _ = store.set_fuel(fuel.unwrap_or(u64::MAX));
    store.set_epoch_deadline(1);
}

/// Fuel a store has burned since it was given `fuel`.
pub(crate) fn fuel_used(store: &Store<RunState>, fuel: Option<u64>) -> u64 {
    let left = store.get_fuel().unwrap_or(0);
    fuel.unwrap_or(u64::MAX).saturating_sub(left)
}

/// Reads `len` bytes at `ptr` from the guest's memory.
fn guest_bytes(caller: &mut Caller<'_, RunState>, ptr: u32, len: u32) -> wasmtime::Result<Vec<u8>> {
    let memory = caller
        .get_export("memory")
        .and_then(|e| e.into_memory())
        .ok_or_else(|| wasmtime::format_err!("the guest exports no memory"))?;
    let data = memory.data(&caller);
    let (start, len) = (ptr as usize, len as usize);
    data.get(start..start.saturating_add(len))
        .map(<[u8]>::to_vec)
        .ok_or_else(|| wasmtime::format_err!("the guest passed a buffer outside its memory"))
}

/// WASI preview 1 and the guest's `harness` imports.
fn linker(engine: &Engine) -> wasmtime::Result<Linker<RunState>> {
    let mut linker: Linker<RunState> = Linker::new(engine);
    wasmtime_wasi::p1::add_to_linker_sync(&mut linker, |s: &mut RunState| &mut s.wasi)?;
    linker.func_wrap(
        "harness",
        "host_call",
        |mut caller: Caller<'_, RunState>,
         op: u32,
         op_len: u32,
         a: u32,
         a_len: u32,
         b: u32,
         b_len: u32|
         -> wasmtime::Result<u32> {
            let text = |v: Vec<u8>| String::from_utf8_lossy(&v).into_owned();
            let op = text(guest_bytes(&mut caller, op, op_len)?);
            let a = text(guest_bytes(&mut caller, a, a_len)?);
            let b = text(guest_bytes(&mut caller, b, b_len)?);
            // Bind the handle first: the borrow must end before the call.
            let host = CURRENT_HOST.with(|h| h.borrow().clone());
            let reply = match host {
                Some(h) => h.call(&op, &a, &b),
                None => String::new(),
            };
            let len = u32::try_from(reply.len())
                .map_err(|_| wasmtime::format_err!("host reply too large"))?;
            caller.data_mut().reply = reply.into_bytes();
            Ok(len)
        },
    )?;
    linker.func_wrap(
        "harness",
        "host_reply",
        |mut caller: Caller<'_, RunState>, dst: u32| -> wasmtime::Result<()> {
            let reply = std::mem::take(&mut caller.data_mut().reply);
            let memory = caller
                .get_export("memory")
                .and_then(|e| e.into_memory())
                .ok_or_else(|| wasmtime::format_err!("the guest exports no memory"))?;
            memory.write(&mut caller, dst as usize, &reply)?;
            Ok(())
        },
    )?;
    linker.func_wrap(
        "harness",
        "fault",
        |mut caller: Caller<'_, RunState>, ptr: u32, len: u32| -> wasmtime::Result<()> {
            let bytes = guest_bytes(&mut caller, ptr, len)?;
            caller.data_mut().fault = Some(bytes);
            Ok(())
        },
    )?;
    Ok(linker)
}

#[cfg(test)]
mod tests;
