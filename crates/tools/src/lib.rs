//! The host tools of harness, each behind its own Cargo feature: files and
//! `exec` confined to a root (`builtin`, with the coding pack), `tools.http`
//! behind an egress policy (`http`), upstream MCP servers (`mcp`), and typed
//! tools built from Rust types (always).
//!
//! The `harness` crate re-exports these modules under the same names
//! (`harness::builtin`, `harness::http`, …) and wires them into its builder
//! and configuration file; use them from there.

#![warn(missing_docs, unreachable_pub)]

#[cfg(feature = "builtin")]
pub mod builtin;
#[cfg(feature = "builtin")]
pub mod coding;
#[cfg(all(feature = "builtin", target_os = "linux"))]
mod confine;
#[cfg(feature = "http")]
pub mod http;
#[cfg(feature = "mcp")]
pub mod mcp;
#[cfg(feature = "builtin")]
mod patch;
#[cfg(feature = "builtin")]
mod rooted;
mod settings;
pub mod typed;
#[cfg(feature = "builtin")]
mod walk;

pub use settings::{McpAuth, McpServerSettings};
