//! The command line (SPEC §7) and its exit codes.
//!
//! Here: parsing (`args`), loading the settings and starting the runtime for
//! each command. The commands that connect have a module each (`check` with
//! its table in `output`, `reap`) and share `connect`.

mod anomalies;
mod args;
mod check;
mod connect;
mod output;
mod reap;

use crate::app;
use crate::config::{self, Settings};
use crate::engine::ReapRequest;
use args::parse_action;
pub use args::{Cli, Command, ConfigCommand, Format};
use check::check;
use clap::Parser;
use reap::{reap, reap_workflow};
use reaper_core::{Action, DsLine, FollowUp};
use std::path::PathBuf;
use std::process::ExitCode;

pub const EXIT_OK: u8 = 0;
pub const EXIT_FOUND: u8 = 1;
pub const EXIT_CONFIG: u8 = 2;
pub const EXIT_UNREACHABLE: u8 = 3;

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    ExitCode::from(dispatch(cli))
}

fn load(cli: &Cli) -> Result<Settings, u8> {
    let (path, explicit) = match &cli.config {
        Some(p) => (p.clone(), true),
        None => (PathBuf::from(config::DEFAULT_PATH), false),
    };
    config::load(&path, explicit).map_err(|e| {
        eprintln!("ds-reaper: invalid configuration ({}):", path.display());
        for line in &e.0 {
            eprintln!("  {line}");
        }
        EXIT_CONFIG
    })
}

/// As [`load`], for the commands that connect: refuses a configured feature
/// this build does not have yet (`config check` still accepts the key).
fn load_usable(cli: &Cli) -> Result<Settings, u8> {
    let s = load(cli)?;
    if let Some(why) = s.unsupported() {
        eprintln!("ds-reaper: {why}");
        return Err(EXIT_CONFIG);
    }
    Ok(s)
}

fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    // Two workers are plenty: the daemon mostly waits, and a small footprint
    // matters on a DS master host.
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
}

fn dispatch(cli: Cli) -> u8 {
    match &cli.command {
        Command::Version => version(),
        Command::Config {
            command: ConfigCommand::Check,
        } => config_check(&cli),
        Command::Run => run(&cli),
        Command::Agent => agent(&cli),
        Command::Check { format, observe } => {
            let s = match load_usable(&cli) {
                Ok(s) => s,
                Err(code) => return code,
            };
            init_cli_logging(&s);
            with_runtime(|| check(s, *format, *observe))
        }
        Command::Reap { .. } => reap_command(&cli),
    }
}

fn version() -> u8 {
    println!(
        "ds-reaper {} (commit {})",
        env!("CARGO_PKG_VERSION"),
        env!("DS_REAPER_GIT_COMMIT")
    );
    println!("supported DolphinScheduler lines:");
    for l in DsLine::ALL {
        println!("  {:<6} {}", l.as_str(), l.releases());
    }
    println!("databases: MySQL/MariaDB, PostgreSQL");
    EXIT_OK
}

fn config_check(cli: &Cli) -> u8 {
    match load(cli) {
        Ok(s) => {
            print!("{}", s.to_redacted_toml());
            eprintln!("configuration is valid");
            if let Some(why) = s.unsupported() {
                eprintln!("note: {why}");
            }
            EXIT_OK
        }
        Err(code) => code,
    }
}

/// The runtime of `run` and `agent`; a failure to start it is said and exits 1.
fn daemon_runtime() -> Result<tokio::runtime::Runtime, u8> {
    runtime().map_err(|e| {
        eprintln!("ds-reaper: cannot start the runtime: {e}");
        1
    })
}

fn run(cli: &Cli) -> u8 {
    let s = match load_usable(cli) {
        Ok(s) => s,
        Err(code) => return code,
    };
    crate::telemetry::init(s.log.format, &s.log.level);
    let rt = match daemon_runtime() {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    match rt.block_on(app::run(s)) {
        Ok(()) => EXIT_OK,
        Err(e) => {
            tracing::error!(error = format!("{e:#}"), "ds-reaper failed");
            eprintln!("ds-reaper: {e:#}");
            1
        }
    }
}

fn agent(cli: &Cli) -> u8 {
    let s = match load(cli) {
        Ok(s) => s,
        Err(code) => return code,
    };
    let settings = match crate::config::adapters::agent_settings(&s) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("ds-reaper: {e:#}");
            return EXIT_CONFIG;
        }
    };
    crate::telemetry::init(s.log.format, &s.log.level);
    let rt = match daemon_runtime() {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    match rt.block_on(app::agent(settings)) {
        Ok(()) => EXIT_OK,
        Err(e) => {
            tracing::error!(error = %e, "the agent failed");
            eprintln!("ds-reaper: {e}");
            e.exit_code()
        }
    }
}

/// `reap --task-id N` or `reap --workflow-instance N`.
fn reap_command(cli: &Cli) -> u8 {
    let Command::Reap {
        task_id,
        workflow_instance,
        action,
        workflow,
        force,
        yes,
    } = &cli.command
    else {
        unreachable!("reap_command is dispatched for reap only")
    };
    let actor = format!(
        "cli:{}",
        std::env::var("SUDO_USER")
            .or_else(|_| std::env::var("USER"))
            .unwrap_or_else(|_| "unknown".into())
    );
    if let Some(id) = workflow_instance {
        if let Some(a) = action.as_deref().filter(|a| a.trim() != "recover") {
            eprintln!("ds-reaper: --action {a:?}: a workflow instance takes only `recover`");
            return EXIT_CONFIG;
        }
        let s = match load_usable(cli) {
            Ok(s) => s,
            Err(code) => return code,
        };
        init_cli_logging(&s);
        let (id, force, yes) = (*id, *force, *yes);
        return with_runtime(|| reap_workflow(s, id, force, yes, actor));
    }
    let action = match action.as_deref().map(parse_action).transpose() {
        Ok(a) => a.unwrap_or(Action::Fail),
        Err(e) => {
            eprintln!("ds-reaper: --action: {e}");
            return EXIT_CONFIG;
        }
    };
    let s = match load_usable(cli) {
        Ok(s) => s,
        Err(code) => return code,
    };
    init_cli_logging(&s);
    let req = ReapRequest {
        task_id: task_id.unwrap_or_default(),
        action: Some(action),
        workflow: Some(workflow.unwrap_or(FollowUp::None)),
        force: *force,
        actor,
    };
    with_runtime(|| reap(s, req, *yes))
}

fn init_cli_logging(s: &Settings) {
    let level = if std::env::var_os("RUST_LOG").is_some() {
        s.log.level.as_str()
    } else {
        "warn"
    };
    crate::telemetry::init(crate::config::LogFormat::Pretty, level);
}

fn with_runtime<F, Fut>(f: F) -> u8
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = u8>,
{
    match runtime() {
        Ok(rt) => rt.block_on(f()),
        Err(e) => {
            eprintln!("ds-reaper: cannot start the runtime: {e}");
            EXIT_UNREACHABLE
        }
    }
}
