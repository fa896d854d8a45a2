//! Services built on the `harness` crate, each behind its own Cargo
//! feature: scale-out on Redis Streams (`fleet`), the exporters of what the
//! harness measures (`telemetry`: Prometheus with `prometheus`, OTLP with
//! `otlp`), the harness as an MCP server (`mcp_server`, feature
//! `mcp-server`), and the conventions the project's command-line programs share
//! (`cli_support`, feature `cli-support`).

#![warn(missing_docs, unreachable_pub)]

#[cfg(feature = "cli-support")]
pub mod cli_support;
#[cfg(feature = "fleet")]
pub mod fleet;
#[cfg(feature = "mcp-server")]
pub mod mcp_server;
#[cfg(any(feature = "prometheus", feature = "otlp"))]
pub mod telemetry;
