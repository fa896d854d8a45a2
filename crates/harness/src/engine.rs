//! Engine selection: one `#[cfg]` arm per engine feature.

use harness_core::process::{EngineHost, ProcessAdapter, ProcessOptions};
use harness_core::{EngineInfo, Isolation, ScriptRuntimeAdapter};
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

/// The engines this build knows by name.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum EngineKind {
    /// QuickJS (quickjs-ng) through rquickjs: embedded, fastest start.
    #[default]
    QuickJs,
    /// Boa (boa_engine), pure Rust. It cannot stop a running script or
    /// limit its heap by itself, so it runs behind the process boundary by
    /// default.
    Boa,
    /// V8 isolates (the `v8` crate), behind the `v8` feature: needs a
    /// prebuilt V8 to link (see `adapters/v8/README.md`).
    V8,
    /// QuickJS compiled to WASI, run by wasmtime with fuel, an epoch
    /// deadline and a linear-memory cap (`bin/quickjs.wasm`, built by
    /// `scripts/build-quickjs-wasm`).
    Wasi,
}

/// An engine name that is unknown, or known but not built in.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown or unavailable engine {name:?}; available engines: {available}")]
pub struct UnknownEngine {
    pub name: String,
    pub available: String,
}

impl EngineKind {
    /// Every engine this build can run.
    // One cfg-gated push per engine feature.
    #[allow(clippy::vec_init_then_push)]
    pub fn available() -> Vec<EngineKind> {
        let mut v = Vec::new();
        #[cfg(feature = "quickjs")]
        v.push(EngineKind::QuickJs);
        #[cfg(feature = "boa")]
        v.push(EngineKind::Boa);
        #[cfg(feature = "wasi")]
        v.push(EngineKind::Wasi);
        #[cfg(feature = "v8")]
        v.push(EngineKind::V8);
        v
    }

    pub fn name(self) -> &'static str {
        match self {
            EngineKind::QuickJs => "quickjs",
            EngineKind::Boa => "boa",
            EngineKind::V8 => "v8",
            EngineKind::Wasi => "wasi",
        }
    }

    fn unavailable(self) -> UnknownEngine {
        UnknownEngine {
            name: self.name().to_owned(),
            available: available_list(),
        }
    }

    /// Where the engine runs unless told otherwise: in this process for
    /// engines that stop themselves and cap their heap (QuickJS), behind
    /// the process boundary for those that cannot (Boa).
    pub fn default_isolation(self) -> Isolation {
        match self {
            EngineKind::QuickJs | EngineKind::V8 | EngineKind::Wasi => Isolation::InProcess,
            EngineKind::Boa => Isolation::Process,
        }
    }

    /// Builds the in-process adapter, or says the engine was not compiled in.
    pub fn adapter(self) -> Result<Arc<dyn ScriptRuntimeAdapter>, UnknownEngine> {
        match self {
            #[cfg(feature = "quickjs")]
            EngineKind::QuickJs => Ok(Arc::new(harness_quickjs::QuickJs::new())),
            #[cfg(feature = "boa")]
            EngineKind::Boa => Ok(Arc::new(harness_boa::Boa::new())),
            #[cfg(feature = "v8")]
            EngineKind::V8 => Ok(Arc::new(harness_v8::V8::new())),
            #[cfg(feature = "wasi")]
            EngineKind::Wasi => {
                // Compile (or read back) the guest now, once per process,
                // rather than inside the first run. A failure (no guest) is
                // reported by each run.
                let engine = harness_wasi::Wasi::new();
                let _ = engine.preload();
                Ok(Arc::new(engine))
            }
            #[allow(unreachable_patterns)]
            other => Err(other.unavailable()),
        }
    }

    /// The engine's own description (name, version, what it enforces in
    /// this process).
    pub fn info(self) -> Result<EngineInfo, UnknownEngine> {
        match self {
            #[cfg(feature = "quickjs")]
            EngineKind::QuickJs => Ok(harness_quickjs::engine_info()),
            #[cfg(feature = "boa")]
            EngineKind::Boa => Ok(harness_boa::engine_info()),
            #[cfg(feature = "v8")]
            EngineKind::V8 => Ok(harness_v8::engine_info()),
            #[cfg(feature = "wasi")]
            EngineKind::Wasi => Ok(harness_wasi::engine_info()),
            #[allow(unreachable_patterns)]
            other => Err(other.unavailable()),
        }
    }

    /// What a worker process serves for this engine.
    pub fn worker_host(self) -> Result<Box<dyn EngineHost>, UnknownEngine> {
        match self {
            #[cfg(feature = "quickjs")]
            EngineKind::QuickJs => Ok(harness_quickjs::worker_host()),
            #[cfg(feature = "boa")]
            EngineKind::Boa => Ok(harness_boa::worker_host()),
            #[cfg(feature = "v8")]
            EngineKind::V8 => Ok(harness_v8::worker_host()),
            #[cfg(feature = "wasi")]
            EngineKind::Wasi => Ok(harness_wasi::worker_host()),
            #[allow(unreachable_patterns)]
            other => Err(other.unavailable()),
        }
    }

    /// Builds the adapter for `isolation`; process workers are started
    /// from `opts` (see [`ProcessOptions::current_exe`]).
    pub fn adapter_with(
        self,
        isolation: Isolation,
        opts: impl FnOnce(&str) -> std::io::Result<ProcessOptions>,
    ) -> Result<Arc<dyn ScriptRuntimeAdapter>, crate::BuildError> {
        match isolation {
            Isolation::InProcess => Ok(self.adapter()?),
            Isolation::Process => {
                let info = self.info()?;
                // Workers read the compiled guest from the disk cache; fill
                // it here, once, rather than in each worker's start-up. A
                // failure (no guest) is reported by the runs.
                #[cfg(feature = "wasi")]
                if self == EngineKind::Wasi {
                    let _ = harness_wasi::prepare_process_workers();
                }
                #[allow(unused_mut)] // used by the wasi arm
                let mut opts = opts(self.name()).map_err(crate::BuildError::Worker)?;
                // Workers start in `/` with an empty environment: tell them
                // where this process found the guest.
                #[cfg(feature = "wasi")]
                if self == EngineKind::Wasi {
                    opts.env.push(harness_wasi::worker_env());
                }
                let adapter = ProcessAdapter::new(info, opts);
                adapter.prewarm(1);
                Ok(Arc::new(adapter))
            }
        }
    }
}

/// Serves an engine if this process was started as a worker
/// (`PROGRAM --harness-worker ENGINE`), and exits; returns otherwise. Call
/// it first thing in `main` of a binary that runs engines behind the
/// process boundary, and install [`harness_core::process::WorkerAllocator`]
/// as its global allocator so workers can enforce memory limits.
pub fn serve_worker_if_requested() {
    harness_core::process::serve_if_requested(|name| {
        name.parse::<EngineKind>()
            .ok()
            .and_then(|e| e.worker_host().ok())
    });
}

fn available_list() -> String {
    let names: Vec<&str> = EngineKind::available()
        .into_iter()
        .map(EngineKind::name)
        .collect();
    if names.is_empty() {
        "(none: build with an engine feature such as `quickjs`)".to_owned()
    } else {
        names.join(", ")
    }
}

impl fmt::Display for EngineKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for EngineKind {
    type Err = UnknownEngine;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "quickjs" | "qjs" => Ok(EngineKind::QuickJs),
            "boa" => Ok(EngineKind::Boa),
            "v8" => Ok(EngineKind::V8),
            "wasi" | "wasi-quickjs" => Ok(EngineKind::Wasi),
            _ => Err(UnknownEngine {
                name: s.to_owned(),
                available: available_list(),
            }),
        }
    }
}
