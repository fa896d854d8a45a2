//! `harness`: run and check model-written scripts from the command line.
//!
//! Exit status: 0 when the script succeeded, 1 when it failed, 2 for usage
//! errors (bad flags, unreadable input file, unknown engine), 3 when the
//! run suspended (`--suspend-to`).

mod args;
mod check_cmd;
mod config_cmd;
mod fleet_cmd;
mod front;
mod mcp_cmd;
mod repl_cmd;
mod respond_cmd;
mod run_cmd;
#[cfg(feature = "wasi")]
mod sandbox_cmd;
mod tools_cmd;
#[cfg(feature = "wasi")]
mod warm_cmd;

use args::*;
use check_cmd::*;
use config_cmd::*;
use front::*;
use mcp_cmd::*;
use repl_cmd::*;
use respond_cmd::*;
use run_cmd::*;
#[cfg(feature = "wasi")]
use sandbox_cmd::*;
use tools_cmd::*;
#[cfg(feature = "wasi")]
use warm_cmd::*;

use async_trait::async_trait;
use clap::{Parser, Subcommand, ValueEnum};
use harness::config::{ApprovalDefault, Config, Overrides};
use harness::{
    ApprovalBridge, ApprovalDecision, ApprovalRequest, AutoApprove, AutoDeny, BuildError,
    ExecutionReport, Harness, Isolation, Mode, ScriptError, ScriptLanguage,
};
use std::io::{IsTerminal, Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

// Also this binary's own worker processes (the process boundary).
harness::main! {
    fn main() -> ExitCode {
        harness_services::cli_support::main("harness", |cli: Cli| async move {
            match cli.command {
                Command::Run(a) => run(a).await,
                Command::Resume(a) => resume(a).await,
                Command::Check(a) => check(a).await,
                Command::Respond(a) => respond(a).await,
                Command::Config(c) => config_command(c),
                Command::Tools(a) => tools_command(a).await,
                Command::Mcp(a) => mcp(a).await,
                Command::Repl(a) => repl(a).await,
                Command::Worker(a) => fleet_cmd::worker(a).await,
                Command::Submit(a) => fleet_cmd::submit(a).await,
                #[cfg(feature = "wasi")]
                Command::Sandbox(a) => sandbox(a),
                #[cfg(feature = "wasi")]
                Command::Warm(a) => warm(a),
            }
        })
    }
}
