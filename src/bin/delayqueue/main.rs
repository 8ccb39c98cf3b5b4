//! `delayqueue`: inspect and operate delayqueue queues from the shell.
//!
//! Built with the `cli` feature:
//! `cargo run --features cli --bin delayqueue -- --help`. See docs/cli.md.

mod args;
mod commands;
mod failure;
mod output;
mod web;

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;

fn main() -> ExitCode {
    // Usage errors exit 2 here, --help and --version 0.
    let cli = args::Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the tokio runtime: {e}");
            return ExitCode::from(failure::USAGE);
        }
    };
    let code = match runtime.block_on(commands::run(cli)) {
        Ok(code) => code,
        Err(failure) => {
            if !failure.message.is_empty() {
                eprintln!("error: {}", failure.message);
            }
            failure.code
        }
    };
    // Do not wait for the client's background tasks (e.g. a DNS lookup).
    runtime.shutdown_timeout(Duration::from_millis(100));
    ExitCode::from(code)
}
