//! Tools from Rust types: the arguments and the result are structs that
//! derive `serde` and [`schemars::JsonSchema`]; their JSON Schemas are
//! generated (no hand-written JSON), the tool's description is the
//! arguments' doc comment, and the arguments arrive deserialised.
//!
//! # Examples
//! ```
//! use harness::typed::typed_tool;
//! use schemars::JsonSchema;
//! use serde::{Deserialize, Serialize};
//!
//! /// Adds two numbers.
//! #[derive(Deserialize, JsonSchema)]
//! #[serde(deny_unknown_fields)]
//! struct Add {
//!     /// The first addend.
//!     a: f64,
//!     /// The second addend.
//!     b: f64,
//! }
//!
//! #[derive(Serialize, JsonSchema)]
//! struct Sum {
//!     sum: f64,
//! }
//!
//! let tool = typed_tool("add", |args: Add, _ctx| async move { Ok(Sum { sum: args.a + args.b }) });
//! let mut tools = harness::ToolRegistry::new();
//! tools.register(tool).unwrap();
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let h = harness::Harness::builder().tools(tools).build().unwrap();
//! let r = h.run("return (await tools.add({a: 1, b: 2})).sum").await;
//! assert_eq!(r.value, Some(serde_json::json!(3)));
//! # });
//! ```

use harness_core::{FnTool, ToolContext, ToolError};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use std::future::Future;

/// The JSON Schema of `T`, as a value.
pub fn schema_of<T: JsonSchema>() -> Value {
    serde_json::to_value(schemars::schema_for!(T)).unwrap_or(Value::Bool(true))
}

/// A tool named `name` whose arguments are an `A` and whose result is an
/// `O`: both schemas generated, the description taken from `A`'s doc
/// comment (its schema's `description`).
pub fn typed_tool<A, O, F, Fut>(name: &str, f: F) -> FnTool
where
    A: DeserializeOwned + JsonSchema + Send + 'static,
    O: Serialize + JsonSchema + 'static,
    F: Fn(A, ToolContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<O, ToolError>> + Send + 'static,
{
    let input = schema_of::<A>();
    let description = input
        .get("description")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let f = std::sync::Arc::new(f);
    FnTool::new(name, description, input, move |args: Value, ctx| {
        let f = f.clone();
        async move {
            // The facade validated `args` against A's schema already; a
            // value serde still refuses is a bug in the schema, said so.
            let args: A = serde_json::from_value(args).map_err(|e| {
                ToolError::new(format!("arguments do not match the tool's types: {e}"))
            })?;
            let out = f(args, ctx).await?;
            serde_json::to_value(out)
                .map_err(|e| ToolError::new(format!("the result is not JSON: {e}")))
        }
    })
    .with_output_schema(schema_of::<O>())
}
