//! Engine selection: one `#[cfg]` arm per engine feature.

use harness_core::engine::EngineDescriptor;
use harness_core::process::{ProcessAdapter, ProcessOptions};
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
#[non_exhaustive]
pub struct UnknownEngine {
    /// The name asked for.
    pub name: String,
    /// The engines this build has, comma-separated.
    pub available: String,
}

impl EngineKind {
    /// Every engine this build knows, built in or not, in the order
    /// listings show them.
    pub const ALL: [EngineKind; 4] = [
        EngineKind::QuickJs,
        EngineKind::Boa,
        EngineKind::Wasi,
        EngineKind::V8,
    ];

    /// Every engine this build can run.
    pub fn available() -> Vec<EngineKind> {
        Self::ALL
            .into_iter()
            .filter(|k| k.built_in().is_some())
            .collect()
    }

    /// The engine's stable name, as in `--engine`.
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

    /// The engine's descriptor, or why there is none (not built in).
    pub fn descriptor(self) -> Result<EngineDescriptor, UnknownEngine> {
        self.built_in().ok_or_else(|| self.unavailable())
    }

    /// The one list of engines: a descriptor for each engine compiled in,
    /// one `#[cfg]` line each.
    fn built_in(self) -> Option<EngineDescriptor> {
        match self {
            #[cfg(feature = "quickjs")]
            EngineKind::QuickJs => Some(harness_quickjs::descriptor()),
            #[cfg(feature = "boa")]
            EngineKind::Boa => Some(harness_boa::descriptor()),
            #[cfg(feature = "v8")]
            EngineKind::V8 => Some(harness_v8::descriptor()),
            #[cfg(feature = "wasi")]
            EngineKind::Wasi => Some(harness_wasi::descriptor()),
            #[allow(unreachable_patterns)]
            _ => None,
        }
    }

    /// Where the engine runs unless told otherwise: in this process for
    /// engines that stop themselves and cap their heap (QuickJS), behind
    /// the process boundary for those that cannot (Boa).
    pub fn default_isolation(self) -> Isolation {
        match self.descriptor() {
            Ok(d) => d.default_isolation,
            Err(_) => Isolation::InProcess,
        }
    }

    /// Builds the in-process adapter, or says the engine was not compiled in.
    pub fn adapter(self) -> Result<Arc<dyn ScriptRuntimeAdapter>, UnknownEngine> {
        Ok(self.descriptor()?.in_process())
    }

    /// The engine's own description (name, version, what it enforces in
    /// this process).
    pub fn info(self) -> Result<EngineInfo, UnknownEngine> {
        Ok(self.descriptor()?.info())
    }

    /// Builds the adapter for `isolation`; process workers are started
    /// from `opts` (see [`ProcessOptions::current_exe`]).
    pub fn adapter_with(
        self,
        isolation: Isolation,
        opts: impl FnOnce(&str) -> std::io::Result<ProcessOptions>,
    ) -> Result<Arc<dyn ScriptRuntimeAdapter>, crate::BuildError> {
        let engine = self.descriptor()?;
        match isolation {
            Isolation::InProcess => Ok(engine.in_process()),
            Isolation::Process => {
                let opts = opts(engine.name).map_err(crate::BuildError::Worker)?;
                let adapter = ProcessAdapter::for_engine(&engine, opts);
                adapter.prewarm(1);
                Ok(Arc::new(adapter))
            }
        }
    }
}

/// The descriptors of every engine this build can run.
pub fn engines() -> Vec<EngineDescriptor> {
    EngineKind::available()
        .into_iter()
        .filter_map(|k| k.descriptor().ok())
        .collect()
}

/// Serves an engine if this process was started as a worker
/// (`PROGRAM --harness-worker ENGINE`), and exits; returns otherwise.
/// Binaries call it through [`crate::main!`], which also installs the
/// counting allocator that workers need to enforce memory limits.
pub fn serve_worker_if_requested() {
    harness_core::process::serve_if_requested(|name| {
        name.parse::<EngineKind>()
            .ok()
            .and_then(|e| e.descriptor().ok())
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
            // Names and aliases of every engine, built in or not (an engine
            // that is known but not built in is reported as such); the
            // tests hold them to the descriptors.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_aliases_match_the_descriptors() {
        for kind in EngineKind::available() {
            let d = kind.descriptor().unwrap();
            assert_eq!(d.name, kind.name());
            assert_eq!(kind.default_isolation(), d.default_isolation);
            for alias in d.aliases.iter().chain([&d.name]) {
                assert_eq!(alias.parse::<EngineKind>().unwrap(), kind, "{alias}");
                assert_eq!(alias.to_uppercase().parse::<EngineKind>().unwrap(), kind);
            }
        }
        assert_eq!(engines().len(), EngineKind::available().len());
    }
}
