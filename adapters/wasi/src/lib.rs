//! QuickJS compiled to WASI (`bin/quickjs.wasm`, built from
//! `adapters/wasi/guest` by `scripts/build-quickjs-wasm`), run by wasmtime.
//!
//! Two products share the guest:
//! - [`Wasi`], a harness engine: the module is compiled once per process
//!   (and cached on disk next to the guest); an instance made from an
//!   `InstancePre` (from wasmtime's pooling allocator where the address
//!   space allows) serves the runs of its engine thread while each ends
//!   clean, and each run gets fuel ([`Limits::fuel`]), an epoch deadline
//!   for wall-clock time and cancellation, and `StoreLimits` for memory. No
//!   file system, no environment beyond `NODE_ENV=production`, no
//!   arguments. The shared event loop drives it through the same engine
//!   primitives as every engine; the guest's `host(op, a, b)` is a wasm
//!   import.
//! - [`Sandbox`], the workspace sandbox: a session directory mounted as
//!   `/app`, the script run as `quickjs /app/user_code.js`, and a report of
//!   what it printed and changed.
//!
//! [`Limits::fuel`]: harness_core::Limits::fuel
//!
//! # Examples
//! ```no_run
//! use harness_core::{ExecutionRequest, ScriptRuntimeAdapter};
//! use harness_wasi::Wasi;
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let engine = Wasi::new();
//! let report = engine.execute(ExecutionRequest::new("return 1 + 1")).await;
//! assert_eq!(report.value, Some(serde_json::json!(2)));
//! # });
//! ```

use harness_core::engine::{
    parse_error, Body, EndCheck, Engine, EngineDescriptor, EngineFault, EngineSetup, EngineThread,
    FaultKind, HostHandle, Pooled, PooledEngine,
};
use harness_core::process::ProcessOptions;
use harness_core::session::{SessionSpec, SessionThread};
use harness_core::{
    Capabilities, GlobalEval, GlobalEvalOutcome, ScriptError, ScriptRuntimeAdapter,
};
use std::sync::Arc;
use wasmtime::{Memory, Store, Trap, TypedFunc};

mod image;
mod module;
pub mod sandbox;

pub use module::{
    default_wasm_path, load, load_uncached, LoadError, Loaded, ModuleOptions, BUILD_SCRIPT,
    DEFAULT_WASM_PATH, WASM_PATH_ENV,
};
pub use sandbox::{Sandbox, SandboxError, SandboxPolicy, SandboxResult};

use module::{answer_with, fuel_used, new_store, RunState, StopWhen};

/// Engine name, as in `--engine`.
pub const ENGINE_NAME: &str = "wasi";

/// What runs inside: QuickJS as the native engine has it, built for WASI.
pub const QUICKJS_VERSION: &str = "quickjs-ng 0.16.2 (rquickjs 0.14) on wasm32-wasip1, wasmtime 48";

/// Stack of each engine thread; wasm uses at most [`module::MAX_WASM_STACK`] of it.
const THREAD_STACK_BYTES: usize = 16 * 1024 * 1024;

/// Linear memory beyond the script's heap limit: the guest's data, its
/// 4 MiB shadow stack (adapters/wasi/guest/build.rs) and allocator slack.
const GUEST_OVERHEAD_BYTES: u64 = 16 << 20;

/// QuickJS's stack limit stays this far inside the 4 MiB shadow stack.
const SHADOW_STACK_BYTES: u64 = 4 << 20;
const SHADOW_STACK_MARGIN: u64 = 512 << 10;

/// Fuel for `harness_end` (the prelude's `end()` and, at most, a
/// collection of the reused context's garbage).
const END_FUEL: u64 = 2_000_000_000;

/// The linear-memory cap for a run with a `memory_bytes` heap limit.
fn linear_bytes(memory_bytes: u64) -> usize {
    usize::try_from(memory_bytes.saturating_add(GUEST_OVERHEAD_BYTES)).unwrap_or(usize::MAX)
}

/// `harness_check` kinds: a wrapped harness script, a sandbox program.
const CHECK_HARNESS_SCRIPT: i32 = 0;
const CHECK_PROGRAM: i32 = 1;

/// The guest's exports, typed.
struct Guest {
    store: Store<RunState>,
    memory: Memory,
    input: TypedFunc<u32, u32>,
    load: TypedFunc<(u64, u64), i32>,
    start: TypedFunc<(), i32>,
    run_jobs: TypedFunc<(), i32>,
    settle: TypedFunc<(f64, i32), i32>,
    /// `harness_end`: whether the instance may serve the next run (absent
    /// in guests built before instances were reused: then it never does).
    end: Option<TypedFunc<(), i32>>,
    check: TypedFunc<i32, i32>,
    /// `harness_private`: makes the instance's context a private realm
    /// for its last run (absent in older guests: they run every script in
    /// the shared context).
    private: Option<TypedFunc<(), i32>>,
    /// `harness_session` and `harness_heap_used`: a session's realm, and
    /// the heap it holds (absent in guests built before sessions).
    session: Option<(TypedFunc<(), i32>, TypedFunc<(), u64>)>,
    memory_refused: TypedFunc<(), i32>,
    heap_peak: TypedFunc<(), u64>,
    /// The first trap: the instance is dead after it, and every later call
    /// reports the same fault.
    trapped: Option<EngineFault>,
    /// The instance's [`Engine::context_id`].
    id: u64,
}

fn internal(msg: impl Into<String>) -> EngineFault {
    EngineFault::new(FaultKind::Internal, "Error", msg)
}

impl Guest {
    /// A fresh instance with its own store and limits.
    fn new(
        loaded: &module::Loaded,
        memory_bytes: u64,
        fuel: Option<u64>,
        stop: StopWhen,
    ) -> Result<Guest, EngineFault> {
        let mut wasi = wasmtime_wasi::WasiCtxBuilder::new();
        wasi.env("NODE_ENV", "production");
        let mut store = new_store(
            &loaded.engine,
            wasi.build_p1(),
            linear_bytes(memory_bytes),
            fuel,
            stop,
        );
        let instance = loaded
            .pre
            .instantiate(&mut store)
            .map_err(|e| internal(format!("the guest did not instantiate: {e}")))?;
        let missing = |what: &str, e: wasmtime::Error| {
            internal(format!(
                "the guest lacks {what} (rebuild it with {}): {e}",
                module::BUILD_SCRIPT
            ))
        };
        macro_rules! func {
            ($name:literal) => {
                instance
                    .get_typed_func(&mut store, $name)
                    .map_err(|e| missing($name, e))?
            };
        }
        let memory = instance
            .get_memory(&mut store, "memory")
            .ok_or_else(|| internal("the guest exports no memory"))?;
        Ok(Guest {
            input: func!("harness_input"),
            load: func!("harness_load"),
            start: func!("harness_start"),
            run_jobs: func!("harness_run_jobs"),
            settle: func!("harness_settle"),
            end: instance.get_typed_func(&mut store, "harness_end").ok(),
            check: func!("harness_check"),
            private: instance.get_typed_func(&mut store, "harness_private").ok(),
            session: instance
                .get_typed_func(&mut store, "harness_session")
                .ok()
                .zip(
                    instance
                        .get_typed_func(&mut store, "harness_heap_used")
                        .ok(),
                ),
            memory_refused: func!("harness_memory_refused"),
            heap_peak: func!("harness_heap_peak"),
            trapped: None,
            id: harness_core::engine::new_context_id(),
            memory,
            store,
        })
    }

    /// Makes an instance that served a run ready for the next one, with
    /// that run's limits: fuel, memory cap, deadline and cancellation.
    /// False (the caller makes a fresh instance) when its linear memory
    /// has grown past the new run's cap.
    fn rearm(&mut self, memory_bytes: u64, fuel: Option<u64>, stop: StopWhen) -> bool {
        let linear = linear_bytes(memory_bytes);
        if self.trapped.is_some() || self.memory.data_size(&self.store) > linear {
            return false;
        }
        let state = self.store.data_mut();
        state.limiter = module::Limiter::new(linear);
        state.stop = stop;
        state.reply.clear();
        state.fault = None;
        module::set_budget(&mut self.store, fuel);
        true
    }

    /// Ends the run; true when the guest says the instance ended clean and
    /// may serve the next run (`harness_end`, given the run's end-of-run
    /// probe).
    fn finish(&mut self, check: &EndCheck) -> bool {
        let Some(end) = self.end.clone() else {
            return false;
        };
        if self.trapped.is_some() || self.store.data().limiter.refused {
            return false;
        }
        let probe = match check {
            EndCheck::Nothing => "",
            EndCheck::Probe(text) => text.as_str(),
            _ => return false,
        };
        if self.put(probe.as_bytes()).is_err() {
            return false;
        }
        // Bounded by fuel (and by the finished run's deadline and
        // cancellation, still the store's: past them the call traps and
        // the instance is dropped).
        let _ = self.store.set_fuel(END_FUEL);
        matches!(end.call(&mut self.store, ()), Ok(1))
    }

    /// The QuickJS heap the instance holds now (a guest with sessions).
    fn heap_used(&mut self) -> Result<u64, EngineFault> {
        if self.session.is_none() {
            return Err(internal("this guest has no sessions"));
        }
        self.call(|g| &g.session.as_ref().expect("checked above").1, ())
    }

    /// Calls one export, unless the instance trapped before; a trap is
    /// remembered.
    fn call<P: wasmtime::WasmParams, R: wasmtime::WasmResults>(
        &mut self,
        f: impl FnOnce(&mut Self) -> &TypedFunc<P, R>,
        params: P,
    ) -> Result<R, EngineFault> {
        if let Some(t) = &self.trapped {
            return Err(t.clone());
        }
        let func = f(self).clone();
        func.call(&mut self.store, params).map_err(|e| {
            let fault = self.trap_fault(e);
            self.trapped = Some(fault.clone());
            fault
        })
    }

    /// Copies `bytes` into the guest's input buffer.
    fn put(&mut self, bytes: &[u8]) -> Result<(), EngineFault> {
        let len = u32::try_from(bytes.len()).map_err(|_| internal("input too large"))?;
        let ptr = self.call(|g| &g.input, len)?;
        self.memory
            .write(&mut self.store, ptr as usize, bytes)
            .map_err(|e| internal(e.to_string()))
    }

    /// Runs a primitive: status 0 is done, anything else carries the fault
    /// the guest reported; a trap is the host stopping the guest.
    fn primitive<P: wasmtime::WasmParams>(
        &mut self,
        input: Option<&[u8]>,
        f: impl FnOnce(&mut Self) -> &TypedFunc<P, i32>,
        params: P,
    ) -> Result<(), EngineFault> {
        if let Some(bytes) = input {
            self.put(bytes)?;
        }
        match self.call(f, params)? {
            0 => Ok(()),
            _ => Err(self.reported_fault()),
        }
    }

    fn reported_fault(&mut self) -> EngineFault {
        let Some(bytes) = self.store.data_mut().fault.take() else {
            return internal("the guest failed without saying why");
        };
        // The guest writes the same four fields as `EngineFault` serialises.
        match serde_json::from_slice::<EngineFault>(&bytes) {
            Ok(f) => f,
            Err(e) => internal(format!("the guest reported an unreadable fault: {e}")),
        }
    }

    /// Maps a trap to a fault: fuel, the epoch deadline, the wasm stack, or
    /// a memory growth the limiter refused (the guest aborts when Rust
    /// cannot allocate).
    fn trap_fault(&self, e: wasmtime::Error) -> EngineFault {
        let refused = self.store.data().limiter.refused;
        let oom = || EngineFault::new(FaultKind::OutOfMemory, "InternalError", "out of memory");
        match e.downcast_ref::<Trap>() {
            Some(Trap::OutOfFuel) => {
                EngineFault::new(FaultKind::OutOfFuel, "InternalError", "out of fuel")
            }
            Some(Trap::Interrupt) => {
                EngineFault::new(FaultKind::Interrupted, "InternalError", "interrupted")
            }
            Some(Trap::StackOverflow) => EngineFault::new(
                FaultKind::StackOverflow,
                "RangeError",
                "Maximum call stack size exceeded",
            ),
            _ if refused => oom(),
            Some(t) => internal(format!("the guest trapped: {t}")),
            None => internal(format!("the guest failed: {e:#}")),
        }
    }
}

/// Parses `source` in a fresh instance without running it (`kind`: one of
/// the `CHECK_*` constants); a syntax error is a [`FaultKind::Syntax`] fault.
pub(crate) fn check_source(
    loaded: &module::Loaded,
    source: &str,
    kind: i32,
) -> Result<(), EngineFault> {
    // Parsing is linear in the source, which the caller has capped.
    let mut guest = Guest::new(loaded, 64 << 20, None, StopWhen::default())?;
    guest.primitive(Some(source.as_bytes()), |g| &g.check, kind)
}

/// One run's engine: the instance the last clean run left on this thread,
/// or a fresh one, made ready in `load`.
struct WasiRun<'t> {
    loaded: Result<Arc<module::Loaded>, EngineFault>,
    /// Where the guest comes from, for its private snapshot.
    source: &'t Source,
    /// The thread's private snapshot, once it was found ready.
    private: &'t mut Option<Arc<Loaded>>,
    guest: Option<Guest>,
    /// The instance the thread's last run left, if it ended clean.
    spare: Option<Guest>,
    host: Option<HostHandle>,
    fuel: Option<u64>,
    /// What `harness_end` checks after the run ([`Body::end_check`]).
    end_check: EndCheck,
    /// The run is a session's: `spare` is the session's instance (none
    /// before its first run), kept after it.
    session: Option<SessionSpec>,
}

/// Suspending and resuming ([`Engine::suspend`], [`Engine::resume`]).
impl WasiRun<'_> {
    /// A fresh instance of the boot snapshot, under `setup`'s limits, for
    /// a run that may suspend: no byte of an earlier run is in it. A run
    /// in a private realm hardens it in the instance.
    fn load_fresh(&mut self, setup: &EngineSetup<'_>, host: HostHandle) -> Result<(), EngineFault> {
        let loaded = self.loaded.clone()?;
        let limits = setup.limits;
        self.fuel = limits.fuel;
        let guest = Guest::new(&loaded, limits.memory_bytes, limits.fuel, stop_when(setup))?;
        self.guest = Some(guest);
        self.host = Some(host);
        if limits.private_realm() && self.guest.as_ref().is_some_and(|g| g.private.is_some()) {
            self.primitive(None, |g| g.private.as_ref().expect("checked above"), ())?;
        }
        self.install(setup, limits.memory_bytes)
    }

    /// `harness_load`: the run's configuration into the prelude, with
    /// the heap limit `memory` and the run's stack limit (inside the
    /// shadow stack).
    fn install(&mut self, setup: &EngineSetup<'_>, memory: u64) -> Result<(), EngineFault> {
        let stack = setup
            .limits
            .stack_bytes
            .min(SHADOW_STACK_BYTES - SHADOW_STACK_MARGIN);
        self.primitive(
            Some(setup.config_json.as_bytes()),
            |g| &g.load,
            (memory, stack),
        )
    }
}

fn stop_when(setup: &EngineSetup<'_>) -> StopWhen {
    StopWhen {
        deadline: Some(setup.deadline),
        cancel: Some(setup.cancel.clone()),
    }
}

impl WasiRun<'_> {
    /// A session's run: the session's instance (a fresh one made a
    /// session's by its first run), its memory cap the session's, the
    /// run's limit what the realm holds plus the run's own.
    fn load_session(
        &mut self,
        setup: &EngineSetup<'_>,
        host: HostHandle,
        spec: SessionSpec,
    ) -> Result<(), EngineFault> {
        let loaded = self.loaded.clone()?;
        let limits = setup.limits;
        let stop = StopWhen {
            deadline: Some(setup.deadline),
            cancel: Some(setup.cancel.clone()),
        };
        self.fuel = limits.fuel;
        let first = self.spare.is_none();
        let guest = match self.spare.take() {
            Some(mut g) => {
                if !g.rearm(spec.memory_bytes, limits.fuel, stop) {
                    return Err(internal("the session's instance cannot serve another run"));
                }
                g
            }
            None => Guest::new(&loaded, spec.memory_bytes, limits.fuel, stop)?,
        };
        if guest.session.is_none() {
            return Err(internal(format!(
                "this guest has no sessions (rebuild it with {})",
                module::BUILD_SCRIPT
            )));
        }
        self.guest = Some(guest);
        self.host = Some(host);
        if first {
            self.primitive(None, |g| &g.session.as_ref().expect("checked above").0, ())?;
        }
        let used = self.heap_used()?;
        if first {
            spec.set_baseline_bytes(used);
        }
        self.install(setup, spec.run_limit(used, limits.memory_bytes))
    }

    /// The QuickJS heap the instance holds now.
    fn heap_used(&mut self) -> Result<u64, EngineFault> {
        let guest = self.guest.as_mut().ok_or_else(|| internal("not loaded"))?;
        guest.heap_used()
    }

    /// The private snapshot of `harness`, if it is ready (it is made on a
    /// thread of its own the first time one is asked for).
    fn private_snapshot(&mut self, harness: &Arc<Loaded>) -> Option<Arc<Loaded>> {
        if self.private.is_none() {
            *self.private = self.source.private(harness);
        }
        self.private.clone()
    }

    /// Runs a primitive with this run's host answering the guest's host
    /// calls.
    fn primitive<P: wasmtime::WasmParams>(
        &mut self,
        input: Option<&[u8]>,
        f: impl FnOnce(&mut Guest) -> &TypedFunc<P, i32>,
        params: P,
    ) -> Result<(), EngineFault> {
        let guest = self.guest.as_mut().ok_or_else(|| internal("not loaded"))?;
        let _host = answer_with(self.host.clone());
        guest.primitive(input, f, params)
    }
}

impl Engine for WasiRun<'_> {
    fn load(&mut self, setup: &EngineSetup<'_>, host: HostHandle) -> Result<(), EngineFault> {
        if let Some(spec) = self.session.clone() {
            return self.load_session(setup, host, spec);
        }
        if setup.suspendable {
            return self.load_fresh(setup, host);
        }
        let loaded = self.loaded.clone()?;
        let limits = setup.limits;
        let stop = StopWhen {
            deadline: Some(setup.deadline),
            cancel: Some(setup.cancel.clone()),
        };
        self.fuel = limits.fuel;
        let snapshot = if limits.private_realm() {
            self.private_snapshot(&loaded)
        } else {
            None
        };
        self.guest = Some(match snapshot {
            // A run in a private realm starts in a fresh instance of the
            // snapshot that holds one; the spare stays for the next run.
            Some(private) => Guest::new(&private, limits.memory_bytes, limits.fuel, stop)?,
            None => match self.spare.take().and_then(|mut g| {
                g.rearm(limits.memory_bytes, limits.fuel, stop.clone())
                    .then_some(g)
            }) {
                Some(g) => g,
                None => Guest::new(&loaded, limits.memory_bytes, limits.fuel, stop)?,
            },
        });
        self.host = Some(host);
        if limits.private_realm() && self.guest.as_ref().is_some_and(|g| g.private.is_some()) {
            // The guest then says at `harness_end` that the instance
            // served its last run. An instance of the private snapshot
            // is in its private realm already (this only checks it).
            self.primitive(None, |g| g.private.as_ref().expect("checked above"), ())?;
        }
        self.install(setup, limits.memory_bytes)
    }

    fn start(&mut self, body: &Body) -> Result<(), EngineFault> {
        self.end_check = body.end_check();
        let started = self
            .primitive(Some(body.wrapped().as_bytes()), |g| &g.start, ())
            .map_err(|mut f| {
                if f.kind == FaultKind::Thrown && f.name == "SyntaxError" {
                    f.kind = FaultKind::Syntax;
                }
                f
            });
        // The guest's own stack ran out (a trap): the script was running,
        // the parser having a limit of its own. A fault of the run, not of
        // compiling: the instance is dead, and `run_jobs` reports the same
        // trap (a guest reports its first trap to every later call).
        let trapped = self.guest.as_ref().is_some_and(|g| g.trapped.is_some());
        match started {
            Err(f) if trapped && f.kind == FaultKind::StackOverflow => Ok(()),
            r => r,
        }
    }

    fn run_jobs(&mut self) -> Result<(), EngineFault> {
        self.primitive(None, |g| &g.run_jobs, ())
    }

    fn settle(&mut self, id: u64, ok: bool, payload: &str) -> Result<(), EngineFault> {
        self.primitive(
            Some(payload.as_bytes()),
            |g| &g.settle,
            (id as f64, i32::from(ok)),
        )
    }

    /// Peak QuickJS heap of the run, context included, as the guest's
    /// allocator counted it (what `memory_bytes` limits, as on the native
    /// engine); unknown once the instance trapped.
    fn context_id(&self) -> Option<u64> {
        self.guest.as_ref().map(|g| g.id)
    }

    fn memory_used(&mut self) -> Option<u64> {
        let g = self.guest.as_mut()?;
        g.call(|g| &g.heap_peak, ()).ok()
    }

    fn in_session(&self) -> bool {
        self.session.is_some()
    }

    /// Wherever the guest loaded; a session's run too (its image holds
    /// the session's realm).
    fn can_suspend(&self) -> bool {
        self.loaded.is_ok()
    }

    /// The pages of linear memory that differ from a fresh instance's,
    /// and the fuel burned.
    fn suspend(&mut self) -> Result<Vec<u8>, EngineFault> {
        let loaded = self.loaded.clone()?;
        let fuel = self.fuel;
        let guest = self.guest.as_mut().ok_or_else(|| internal("not loaded"))?;
        if let Some(t) = &guest.trapped {
            return Err(t.clone());
        }
        let boot = Guest::new(&loaded, 0, None, StopWhen::default())?;
        let used = fuel_used(&guest.store, fuel);
        let memory = guest.memory.data(&guest.store);
        Ok(image::encode(
            &loaded.sha256,
            boot.memory.data(&boot.store),
            memory,
            used,
        ))
    }

    /// A fresh instance whose memory is made the image's.
    fn resume(
        &mut self,
        setup: &EngineSetup<'_>,
        host: HostHandle,
        bytes: &[u8],
    ) -> Result<(), EngineFault> {
        let loaded = self.loaded.clone()?;
        let limits = setup.limits;
        // A session's run resumes as the first run of a new session, in
        // the memory the session may hold.
        if self.session.is_some() && self.spare.is_some() {
            return Err(internal(
                "a session that ran already cannot take a continuation",
            ));
        }
        let memory_bytes = self
            .session
            .as_ref()
            .map_or(limits.memory_bytes, |s| s.memory_bytes);
        let cap = linear_bytes(memory_bytes);
        let image = image::decode(bytes, cap).map_err(internal)?;
        if image.guest != loaded.sha256 {
            return Err(internal(format!(
                "it was made by guest build {}, and this is {}",
                image.guest.chars().take(16).collect::<String>(),
                &loaded.sha256[..16]
            )));
        }
        self.fuel = limits.fuel;
        let mut guest = Guest::new(&loaded, memory_bytes, limits.fuel, stop_when(setup))?;
        let have = guest.memory.data_size(&guest.store);
        if image.memory_bytes < have {
            return Err(internal(
                "its memory is smaller than the guest's boot image",
            ));
        }
        let grow = (image.memory_bytes - have).div_ceil(64 * 1024) as u64;
        guest
            .memory
            .grow(&mut guest.store, grow)
            .map_err(|e| internal(format!("its memory does not fit: {e}")))?;
        let data = guest.memory.data_mut(&mut guest.store);
        let end = image.memory_bytes.min(data.len());
        image.apply(&mut data[..end]);
        let budget = limits
            .fuel
            .unwrap_or(u64::MAX)
            .saturating_sub(image.fuel_used);
        module::set_budget(&mut guest.store, Some(budget));
        self.guest = Some(guest);
        self.host = Some(host);
        if let Some(spec) = self.session.clone() {
            spec.set_baseline_bytes(self.heap_used()?);
        }
        Ok(())
    }

    /// A session's heap as the run left it, garbage included.
    fn finished(&mut self) {
        if let Some(spec) = self.session.clone() {
            if let Ok(used) = self.heap_used() {
                spec.set_retained_bytes(used);
            }
        }
    }

    fn fuel_consumed(&mut self) -> Option<u64> {
        let fuel = self.fuel;
        self.guest.as_ref().map(|g| fuel_used(&g.store, fuel))
    }

    /// The linear-memory cap refused a growth, or the guest's allocator
    /// refused an allocation (QuickJS then may throw only a bare `null`).
    fn memory_exhausted(&mut self) -> bool {
        let Some(g) = self.guest.as_mut() else {
            return false;
        };
        if g.store.data().limiter.refused {
            return true;
        }
        g.trapped.is_none() && g.call(|g| &g.memory_refused, ()).is_ok_and(|v| v != 0)
    }

    /// Moves the engine's epoch: every running store checks whether its
    /// run is the one to stop.
    fn stopper(&self) -> Option<Box<dyn FnOnce() + Send>> {
        let engine = self.loaded.as_ref().ok()?.engine.clone();
        Some(Box::new(move || engine.increment_epoch()))
    }

    /// The same QuickJS runs inside: its messages map as the native
    /// engine's do.
    fn classify(&self, name: &str, message: &str) -> FaultKind {
        harness_abi::classify_quickjs(name, message)
    }
}

/// Where an engine's guest comes from.
#[derive(Debug, Clone)]
enum Source {
    /// Loaded on demand, once per process ([`module::load`]).
    Options(ModuleOptions),
    /// Loaded already by the caller.
    Loaded(Arc<Loaded>),
}

impl Source {
    fn load(&self) -> Result<Arc<Loaded>, LoadError> {
        match self {
            Source::Options(opts) => module::load(opts),
            Source::Loaded(l) => Ok(l.clone()),
        }
    }

    /// The private snapshot of `harness` (this source's guest), if it is
    /// ready; a guest the caller loaded has none (its options are not
    /// known), and its private runs harden their realm in the instance.
    fn private(&self, harness: &Arc<Loaded>) -> Option<Arc<Loaded>> {
        match self {
            Source::Options(opts) => module::private_when_ready(opts, harness),
            Source::Loaded(_) => None,
        }
    }
}

/// One engine thread's state: where the guest comes from, and the
/// instance its last run ended clean in.
struct WasiThread {
    source: Source,
    warm: Option<Guest>,
    /// The guest's private snapshot, once found ready.
    private: Option<Arc<Loaded>>,
    /// Set when the thread serves one session.
    session: Option<SessionThread<Guest>>,
}

impl WasiThread {
    fn loaded(&self) -> Result<Arc<module::Loaded>, EngineFault> {
        self.source.load().map_err(|e| internal(e.to_string()))
    }
}

impl WasiThread {
    /// A session's run: its instance, kept if the run ended clean; any
    /// other ending ends the session.
    fn lend_session(&mut self, run: &mut dyn FnMut(Result<&mut dyn Engine, EngineFault>) -> bool) {
        let loaded = self.loaded();
        let Some(state) = self.session.as_mut() else {
            return;
        };
        if let Some(why) = state.ended() {
            run(Err(EngineFault::session_ended(why)));
            return;
        }
        let spec = state.spec.clone();
        let mut engine = WasiRun {
            loaded,
            source: &self.source,
            private: &mut self.private,
            guest: None,
            spare: state.take_realm(),
            host: None,
            fuel: None,
            end_check: EndCheck::Nothing,
            session: Some(spec.clone()),
        };
        let tainted = run(Ok(&mut engine));
        engine.host = None;
        // A run refused before it loaded leaves the instance as it was, or
        // still to be made.
        let kept = match engine.guest.take() {
            None if !tainted => {
                state.untouched(engine.spare.take());
                return;
            }
            None => None,
            Some(mut guest) => {
                let clean = !tainted && guest.finish(&EndCheck::Nothing);
                if clean {
                    if let Ok(bytes) = guest.heap_used() {
                        spec.set_retained_bytes(bytes);
                    }
                }
                clean.then_some(guest)
            }
        };
        state.after_run(kept, tainted);
    }
}

impl EngineThread for WasiThread {
    fn begin_session(&mut self, spec: SessionSpec) -> bool {
        self.warm = None;
        self.session = Some(SessionThread::begin(spec));
        true
    }

    fn lend(&mut self, run: &mut dyn FnMut(Result<&mut dyn Engine, EngineFault>) -> bool) {
        if self.session.is_some() {
            self.lend_session(run);
            return;
        }
        let loaded = self.loaded();
        let mut engine = WasiRun {
            loaded,
            source: &self.source,
            private: &mut self.private,
            guest: None,
            spare: self.warm.take(),
            host: None,
            fuel: None,
            end_check: EndCheck::Nothing,
            session: None,
        };
        let tainted = run(Ok(&mut engine));
        // After the run has answered its caller: an instance that ended
        // clean serves the next run (the same rules as the native engine's
        // context reuse, docs/security.md "Between runs"); any other is
        // dropped, and its pool slot goes back to the snapshot's image. A
        // run in an instance of the private snapshot left the spare as it
        // was.
        engine.host = None;
        self.warm = engine.spare.take();
        if !tainted {
            if let Some(mut guest) = engine.guest.take() {
                if guest.finish(&engine.end_check) {
                    self.warm = Some(guest);
                }
            }
        }
    }

    fn check(&mut self, body: &Body) -> Result<(), ScriptError> {
        let loaded = self
            .loaded()
            .map_err(|f| ScriptError::internal(f.message))?;
        check_source(&loaded, body.wrapped(), CHECK_HARNESS_SCRIPT)
            .map_err(|f| parse_error(&f, body.source()))
    }

    fn eval_global(&mut self, _eval: GlobalEval) -> GlobalEvalOutcome {
        GlobalEvalOutcome::Unsupported(
            "test262 runs on the native QuickJS engine (the same QuickJS); the WASI guest only \
             runs harness scripts and sandbox programs"
                .to_owned(),
        )
    }
}

/// WASI-QuickJS on the shared event loop: where its guest comes from.
/// The default is [`default_wasm_path`], cached on disk next to it.
#[derive(Debug, Clone)]
pub struct WasiEngine {
    source: Source,
}

impl Default for WasiEngine {
    fn default() -> Self {
        WasiEngine::with_options(ModuleOptions::cached())
    }
}

impl WasiEngine {
    /// A given guest and cache, loaded on the first run.
    pub fn with_options(opts: ModuleOptions) -> Self {
        WasiEngine {
            source: Source::Options(opts),
        }
    }

    /// A guest loaded already (see [`load_uncached`]).
    pub fn with_loaded(loaded: Arc<Loaded>) -> Self {
        WasiEngine {
            source: Source::Loaded(loaded),
        }
    }

    /// Loads (compiles or reads back) the guest now instead of on the first
    /// run, so that a missing or broken binary is reported up front.
    pub fn preload(&self) -> Result<Arc<Loaded>, LoadError> {
        self.source.load()
    }

    /// Makes the guest's private snapshot now, waiting for it. Without
    /// this call, the first run that needs a private realm
    /// (`Limits::realm`, docs/security.md "Private realms") reads the
    /// snapshot back from the disk cache, or, where it was never compiled,
    /// starts compiling it on a thread of its own; until it is ready, such
    /// runs harden their realm inside the run (milliseconds instead of
    /// about a trivial run's time). False where it cannot be made: a guest
    /// loaded by the caller ([`WasiEngine::with_loaded`]), no
    /// pre-initialisation, or a guest built before private snapshots. Such
    /// runs still work, the slow way.
    pub fn preload_private(&self) -> Result<bool, LoadError> {
        let loaded = self.source.load()?;
        Ok(match &self.source {
            Source::Options(opts) => module::load_private(opts, &loaded).is_some(),
            Source::Loaded(_) => false,
        })
    }
}

impl PooledEngine for WasiEngine {
    fn descriptor() -> EngineDescriptor {
        descriptor()
    }

    fn new_thread(&self) -> Box<dyn EngineThread> {
        Box::new(WasiThread {
            source: self.source.clone(),
            warm: None,
            private: None,
            session: None,
        })
    }

    fn has_sessions(&self) -> bool {
        true
    }
}

/// The WASI-QuickJS engine: a pool of engine threads, an instance per run
/// (`Wasi::with_engine(WasiEngine::with_options(…), n)` for another guest).
pub type Wasi = Pooled<WasiEngine>;

/// The old name of [`WasiEngine`].
#[deprecated(note = "renamed to WasiEngine")]
pub type WasiAdapter = WasiEngine;

/// The engine in this process with at most `threads` engine threads.
/// The guest is compiled (or read back) now, once per process, rather
/// than inside the first run; a failure (no guest) is reported by each
/// run.
fn in_process(threads: usize) -> Arc<dyn ScriptRuntimeAdapter> {
    let engine = Wasi::with_max_workers(threads);
    let _ = engine.engine().preload();
    Arc::new(engine)
}

/// WASI-QuickJS: fuel, an epoch deadline and a linear-memory cap, all
/// enforced by wasmtime outside the engine; a trap ends only the instance.
pub fn descriptor() -> EngineDescriptor {
    EngineDescriptor::new(
        ENGINE_NAME,
        QUICKJS_VERSION,
        Capabilities::NONE
            .with_interrupt()
            .with_memory_limit()
            .with_fuel()
            .with_hard_kill()
            .with_stack_guard(),
        || in_process(harness_core::engine::DEFAULT_MAX_THREADS),
        worker_thread,
    )
    .with_in_process_threads(in_process)
    .with_sessions(|spec| {
        let engine = WasiEngine::default();
        let _ = engine.preload();
        Wasi::for_session(engine, spec).map(|p| Arc::new(p) as _)
    })
    .with_aliases(&["wasi-quickjs"])
    .with_thread_stack_bytes(THREAD_STACK_BYTES)
    .with_process_setup(prepare_process)
}

/// Before process workers start: fill the disk cache they read the
/// compiled guest from, and tell them (started in `/` with an empty
/// environment) where this process found the guest.
fn prepare_process(opts: &mut ProcessOptions) {
    // A failure (no guest) is reported by the runs.
    let _ = prepare_process_workers();
    opts.env.push(worker_env());
}

/// Compiles (or reads back) the guest as process workers load it, so that
/// the compiled module is in the disk cache before the first worker
/// starts: a worker then reads it back in milliseconds instead of
/// compiling it inside its start-up (and the first run's time).
pub fn prepare_process_workers() -> Result<(), LoadError> {
    let opts = worker_module_options();
    let loaded = module::load(&opts)?;
    // The private snapshot too; without it, workers harden private realms
    // inside their runs.
    let _ = module::load_private(&opts, &loaded);
    Ok(())
}

/// One compiled snapshot of the guest, made ready by [`warm_caches`].
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[non_exhaustive]
pub struct Warmed {
    /// What it starts: `harness` (a run of this engine), `private` (a run
    /// in a private realm, docs/security.md) or `sandbox`
    /// ([`Sandbox::execute`]).
    pub snapshot: &'static str,
    /// Who loads it: `in-process`, or `process` (process workers, whose
    /// bounds-checked memories fit under their address-space cap).
    pub isolation: &'static str,
    /// False where this guest cannot make it (one built before private
    /// snapshots, or whose pre-initialisation failed; the log says why):
    /// those runs still work, the slow way.
    pub ready: bool,
    /// Read back from the disk cache (true) or compiled now.
    pub from_cache: bool,
    /// The compiled file; `None` where it was not made.
    pub cache_file: Option<std::path::PathBuf>,
    /// How long it took, in milliseconds.
    pub millis: f64,
}

impl Warmed {
    fn of(
        (snapshot, isolation): (&'static str, &'static str),
        opts: &ModuleOptions,
        entry: module::Entry,
        loaded: Option<&Loaded>,
        started: std::time::Instant,
    ) -> Warmed {
        Warmed {
            snapshot,
            isolation,
            ready: loaded.is_some(),
            from_cache: loaded.is_some_and(|l| l.from_cache),
            cache_file: loaded.and_then(|l| module::cache_file_of(opts, entry, l)),
            millis: started.elapsed().as_secs_f64() * 1e3,
        }
    }
}

/// Compiles (or reads back) every snapshot of the default guest
/// ([`default_wasm_path`]) a process may need, and so fills the disk cache
/// next to it: the engine's, the private realm's and the sandbox's, in
/// process and for process workers. Each is otherwise compiled on first
/// use (seconds); the private one on a thread of its own that a one-shot
/// process, such as the CLI, may not live to see finish, so that its
/// private runs would harden their realm inside the run every time. For a
/// deploy step or a container image: `harness warm`.
pub fn warm_caches() -> Result<Vec<Warmed>, LoadError> {
    use module::Entry;
    use std::time::Instant;
    let mut out = Vec::with_capacity(5);
    for (isolation, opts) in [
        ("in-process", ModuleOptions::cached()),
        ("process", worker_module_options()),
    ] {
        let started = Instant::now();
        let harness = module::load(&opts)?;
        let what = ("harness", isolation);
        out.push(Warmed::of(
            what,
            &opts,
            Entry::Harness,
            Some(&harness),
            started,
        ));
        let started = Instant::now();
        let private = module::load_private(&opts, &harness);
        let what = ("private", isolation);
        out.push(Warmed::of(
            what,
            &opts,
            Entry::Private,
            private.as_deref(),
            started,
        ));
    }
    let opts = ModuleOptions::cached();
    let started = Instant::now();
    let program = module::load_as(&opts, Entry::Program)?;
    let what = ("sandbox", "in-process");
    out.push(Warmed::of(
        what,
        &opts,
        Entry::Program,
        Some(&program),
        started,
    ));
    Ok(out)
}

/// The variable that tells a worker process (started in `/` with an empty
/// environment) where this process finds the guest: `HARNESS_QUICKJS_WASM`
/// with [`default_wasm_path`] made absolute.
pub fn worker_env() -> (std::ffi::OsString, std::ffi::OsString) {
    let path = default_wasm_path();
    let path = std::path::absolute(&path).unwrap_or(path);
    (WASM_PATH_ENV.into(), path.into_os_string())
}

fn worker_module_options() -> ModuleOptions {
    ModuleOptions {
        bounded_memory: true,
        ..ModuleOptions::cached()
    }
}

/// What a worker process serves for `--harness-worker wasi`.
fn worker_thread() -> Box<dyn EngineThread> {
    let opts = worker_module_options();
    let mut thread = WasiThread {
        source: Source::Options(opts.clone()),
        warm: None,
        private: None,
        session: None,
    };
    // Load and instantiate once before the worker caps itself: runs arm
    // the worker's heap budget and forbid file writes (RLIMIT_FSIZE 0),
    // while compiling the guest needs far more heap than a script, writes
    // the cache, and the first instance writes the module's memory image
    // into a memfd. The same for the private snapshot, which a capped
    // worker could not make. A failure is kept and reported by each run.
    if let Ok(loaded) = thread.loaded() {
        let _ = Guest::new(&loaded, 0, None, StopWhen::default());
        thread.private = module::load_private(&opts, &loaded);
        if let Some(private) = &thread.private {
            let _ = Guest::new(private, 0, None, StopWhen::default());
        }
    }
    Box::new(thread)
}
