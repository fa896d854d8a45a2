//! Engine selection: one `#[cfg]` arm per engine feature.

use harness_core::ScriptRuntimeAdapter;
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
        v
    }

    pub fn name(self) -> &'static str {
        match self {
            EngineKind::QuickJs => "quickjs",
        }
    }

    fn unavailable(self) -> UnknownEngine {
        UnknownEngine {
            name: self.name().to_owned(),
            available: available_list(),
        }
    }

    /// Builds the adapter, or says the engine was not compiled in.
    pub fn adapter(self) -> Result<Arc<dyn ScriptRuntimeAdapter>, UnknownEngine> {
        match self {
            #[cfg(feature = "quickjs")]
            EngineKind::QuickJs => Ok(Arc::new(harness_quickjs::QuickJs::new())),
            #[allow(unreachable_patterns)]
            other => Err(other.unavailable()),
        }
    }
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
            _ => Err(UnknownEngine {
                name: s.to_owned(),
                available: available_list(),
            }),
        }
    }
}
