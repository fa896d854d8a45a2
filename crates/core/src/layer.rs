//! Wrappers around an engine: [`Layer`].
//!
//! A layer changes part of what the engine it wraps does (strips types
//! before a run, retries one, routes each through a harness) and passes
//! the rest on. The blanket implementations make every layer a
//! [`ScriptRuntimeAdapter`] and a [`Tunable`] that forward to the wrapped
//! engine whatever the layer does not override, so a new wrapper can
//! neither drop a tuning setting nor forget a method of the contract.

use crate::adapter::{EngineInfo, ExecutionRequest, GlobalEval, GlobalEvalOutcome};
use crate::error::ScriptError;
use crate::report::ExecutionReport;
use crate::tuning::{Tunable, Tuned, Tuning};
use crate::ScriptRuntimeAdapter;
use async_trait::async_trait;

/// A wrapper around an engine; see the [module docs](self).
///
/// ```
/// use harness_core::layer::Layer;
/// use harness_core::{ExecutionReport, ExecutionRequest, ScriptRuntimeAdapter};
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use std::sync::Arc;
///
/// /// Counts the runs of the engine it wraps.
/// struct Counting {
///     engine: Arc<dyn ScriptRuntimeAdapter>,
///     runs: AtomicU64,
/// }
///
/// #[async_trait::async_trait]
/// impl Layer for Counting {
///     fn inner(&self) -> &dyn ScriptRuntimeAdapter {
///         &*self.engine
///     }
///     async fn execute(&self, request: ExecutionRequest) -> ExecutionReport {
///         self.runs.fetch_add(1, Ordering::Relaxed);
///         self.engine.execute(request).await
///     }
/// }
/// ```
#[async_trait]
pub trait Layer: Send + Sync {
    /// The engine this layer wraps.
    fn inner(&self) -> &dyn ScriptRuntimeAdapter;

    /// [`ScriptRuntimeAdapter::info`]; the wrapped engine's by default.
    fn info(&self) -> EngineInfo {
        self.inner().info()
    }

    /// [`ScriptRuntimeAdapter::check_syntax`]; the wrapped engine's by
    /// default.
    async fn check_syntax(&self, source: &str) -> Result<(), ScriptError> {
        self.inner().check_syntax(source).await
    }

    /// [`ScriptRuntimeAdapter::execute`]; the wrapped engine's by default.
    async fn execute(&self, request: ExecutionRequest) -> ExecutionReport {
        self.inner().execute(request).await
    }

    /// [`ScriptRuntimeAdapter::eval_global`]; the wrapped engine's by
    /// default.
    async fn eval_global(&self, eval: GlobalEval) -> GlobalEvalOutcome {
        self.inner().eval_global(eval).await
    }
}

#[async_trait]
impl<L: Layer> ScriptRuntimeAdapter for L {
    fn info(&self) -> EngineInfo {
        Layer::info(self)
    }

    async fn check_syntax(&self, source: &str) -> Result<(), ScriptError> {
        Layer::check_syntax(self, source).await
    }

    async fn execute(&self, request: ExecutionRequest) -> ExecutionReport {
        Layer::execute(self, request).await
    }

    async fn eval_global(&self, eval: GlobalEval) -> GlobalEvalOutcome {
        Layer::eval_global(self, eval).await
    }
}

/// A layer is tuned as the engine it wraps is: always forwarded.
impl<L: Layer> Tunable for L {
    fn tune(&self, tuning: Tuning) -> Tuned {
        self.inner().tune(tuning)
    }

    fn rehearsals(&self) -> u64 {
        self.inner().rehearsals()
    }
}
