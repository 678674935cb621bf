//! The command line (SPEC §7) and its exit codes.

use crate::app;
use crate::config::{self, Settings};
use crate::engine::{ReapError, ReapRequest};
use crate::views::{WorkflowView, ZombieView};
use clap::{Parser, Subcommand, ValueEnum};
use reaper_core::{Action, DsLine, FollowUp};
use serde_json::json;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

pub const EXIT_OK: u8 = 0;
pub const EXIT_FOUND: u8 = 1;
pub const EXIT_CONFIG: u8 = 2;
pub const EXIT_UNREACHABLE: u8 = 3;

#[derive(Parser, Debug)]
#[command(
    name = "ds-reaper",
    version,
    about = "Finds and reaps zombie DolphinScheduler task instances"
)]
pub struct Cli {
    /// Configuration file.
    #[arg(long, global = true, value_name = "PATH")]
    pub config: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the daemon until SIGTERM/SIGINT.
    Run,
    /// Run the worker-host agent (SPEC §12) until SIGTERM/SIGINT.
    Agent,
    /// One sweep, no writes: list every zombie and what policy would do.
    Check {
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
        /// Watch the registry this long first (e.g. "30s").
        #[arg(long, default_value = "0s", value_parser = parse_dur)]
        observe: Duration,
    },
    /// Reap one task (or recover one workflow instance) safely: refuses
    /// unless it is a zombie (a lost master's workflow), or --force.
    Reap {
        #[arg(
            long,
            required_unless_present = "workflow_instance",
            conflicts_with = "workflow_instance"
        )]
        task_id: Option<i64>,
        /// A workflow instance whose master is lost (SPEC §13): `--action recover`.
        #[arg(long)]
        workflow_instance: Option<i64>,
        /// Task: fail (default), fault-tolerance or kill; workflow: recover.
        #[arg(long)]
        action: Option<String>,
        #[arg(long, value_parser = parse_followup, conflicts_with = "workflow_instance")]
        workflow: Option<FollowUp>,
        /// Reap even if the task is not a zombie (audited as reason `forced`).
        #[arg(long)]
        force: bool,
        /// Do not ask for confirmation.
        #[arg(long)]
        yes: bool,
    },
    /// Configuration commands.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// Print the version, git commit and supported DS lines.
    Version,
}

#[derive(Subcommand, Debug)]
pub enum ConfigCommand {
    /// Validate and print the effective configuration (secrets redacted).
    Check,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Table,
    Json,
}

fn parse_dur(s: &str) -> Result<Duration, String> {
    config::parse_duration(s)
}

fn parse_action(s: &str) -> Result<Action, String> {
    match s.parse::<Action>() {
        Ok(Action::Report) => Err("reap writes: use fail, fault-tolerance or kill".into()),
        Ok(a) => Ok(a),
        Err(e) => Err(e.to_string()),
    }
}

fn parse_followup(s: &str) -> Result<FollowUp, String> {
    s.parse::<FollowUp>().map_err(|e| e.to_string())
}

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
        Command::Version => {
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
        Command::Config {
            command: ConfigCommand::Check,
        } => match load(&cli) {
            Ok(s) => {
                print!("{}", s.to_redacted_toml());
                eprintln!("configuration is valid");
                if let Some(why) = s.unsupported() {
                    eprintln!("note: {why}");
                }
                EXIT_OK
            }
            Err(code) => code,
        },
        Command::Run => {
            let s = match load_usable(&cli) {
                Ok(s) => s,
                Err(code) => return code,
            };
            crate::telemetry::init(s.log.format, &s.log.level);
            let rt = match runtime() {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("ds-reaper: cannot start the runtime: {e}");
                    return 1;
                }
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
        Command::Agent => {
            let s = match load(&cli) {
                Ok(s) => s,
                Err(code) => return code,
            };
            let settings = match app::agent_settings(&s) {
                Ok(a) => a,
                Err(e) => {
                    eprintln!("ds-reaper: {e:#}");
                    return EXIT_CONFIG;
                }
            };
            crate::telemetry::init(s.log.format, &s.log.level);
            let rt = match runtime() {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("ds-reaper: cannot start the runtime: {e}");
                    return 1;
                }
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
        Command::Check { format, observe } => {
            let s = match load_usable(&cli) {
                Ok(s) => s,
                Err(code) => return code,
            };
            init_cli_logging(&s);
            with_runtime(|| check(s, *format, *observe))
        }
        Command::Reap {
            task_id,
            workflow_instance,
            action,
            workflow,
            force,
            yes,
        } => {
            let actor = format!(
                "cli:{}",
                std::env::var("SUDO_USER")
                    .or_else(|_| std::env::var("USER"))
                    .unwrap_or_else(|_| "unknown".into())
            );
            if let Some(id) = workflow_instance {
                if let Some(a) = action.as_deref().filter(|a| a.trim() != "recover") {
                    eprintln!(
                        "ds-reaper: --action {a:?}: a workflow instance takes only `recover`"
                    );
                    return EXIT_CONFIG;
                }
                let s = match load_usable(&cli) {
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
            let s = match load_usable(&cli) {
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
    }
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

fn progress(msg: &str) {
    if std::io::stderr().is_terminal() {
        eprintln!("… {msg}");
    }
}

/// Connects both sides and waits for a valid registry view (exit 3 on failure).
async fn connect(
    s: &Settings,
    cancel: &CancellationToken,
) -> Result<crate::engine::SharedEngine, u8> {
    progress(&format!(
        "connecting to ZooKeeper {} and the database",
        s.zookeeper.connect
    ));
    let engine = app::build(s.clone(), cancel, false).map_err(|e| {
        eprintln!("ds-reaper: {e:#}");
        EXIT_CONFIG
    })?;
    let wait = s
        .zookeeper
        .session_timeout
        .clamp(Duration::from_secs(10), Duration::from_secs(30));
    let mut views = engine.watch();
    let valid = tokio::time::timeout(wait, async {
        loop {
            if engine.view().is_valid() {
                return;
            }
            if !views.changed().await {
                return;
            }
        }
    })
    .await;
    if valid.is_err() || !engine.view().is_valid() {
        let why = match &engine.view().state {
            reaper_core::ViewState::Invalid { reason, .. } => reason.clone(),
            _ => "closed".into(),
        };
        eprintln!(
            "ds-reaper: cannot reach ZooKeeper at {}: {why}",
            s.zookeeper.connect
        );
        return Err(EXIT_UNREACHABLE);
    }
    match tokio::time::timeout(Duration::from_secs(15), engine.ping_store()).await {
        Ok(Ok(())) => Ok(engine),
        Ok(Err(e)) => {
            eprintln!(
                "ds-reaper: cannot reach the database {}: {e}",
                s.database.url
            );
            Err(EXIT_UNREACHABLE)
        }
        Err(_) => {
            eprintln!("ds-reaper: the database {} did not answer", s.database.url);
            Err(EXIT_UNREACHABLE)
        }
    }
}

async fn check(s: Settings, format: Format, observe: Duration) -> u8 {
    let cancel = CancellationToken::new();
    let engine = match connect(&s, &cancel).await {
        Ok(e) => e,
        Err(code) => return code,
    };
    if !observe.is_zero() {
        progress(&format!(
            "observing the registry for {}",
            humantime::format_duration(observe)
        ));
        tokio::time::sleep(observe).await;
        if !engine.view().is_valid() {
            eprintln!("ds-reaper: the registry view became invalid while observing");
            return EXIT_UNREACHABLE;
        }
    }
    progress("scanning t_ds_task_instance");
    let result = engine.check().await;
    engine.close().await;
    cancel.cancel();
    let (line, plan, findings) = match result {
        Ok(x) => x,
        Err(e) => {
            eprintln!("ds-reaper: {e}");
            return EXIT_UNREACHABLE;
        }
    };
    let now = plan.at;
    let zombies: Vec<ZombieView> = plan
        .zombies
        .iter()
        .map(|z| ZombieView::new(z, now))
        .collect();
    let workflows: Vec<WorkflowView> = findings.iter().map(WorkflowView::new).collect();
    match format {
        Format::Json => {
            let doc = json!({
                "ds_line": line.as_str(),
                "registry": s.registry.kind.as_str(),
                "candidates": plan.candidates,
                "zombies": zombies,
                "workflows": workflows,
            });
            println!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
        }
        Format::Table => {
            println!("registry: {}", s.registry.kind.as_str());
            print_table(line, plan.candidates, &zombies);
            print_workflows(&workflows);
        }
    }
    if zombies.is_empty() && workflows.is_empty() {
        EXIT_OK
    } else {
        EXIT_FOUND
    }
}

fn print_table(line: DsLine, candidates: usize, zombies: &[ZombieView]) {
    let opt = |v: Option<&str>| v.unwrap_or("-").to_string();
    let age = |v: Option<i64>| match v {
        Some(s) => humantime::format_duration(Duration::from_secs(s.max(0) as u64)).to_string(),
        None => "-".into(),
    };
    let header = [
        "TASK",
        "NAME",
        "TYPE",
        "HOST",
        "GROUP",
        "REASON",
        "AGE",
        "OWNER MASTER",
        "ALIVE",
        "ACTION",
        "WORKFLOW",
        "NOTE",
    ];
    let rows: Vec<Vec<String>> = zombies
        .iter()
        .map(|z| {
            vec![
                z.task_id.to_string(),
                z.task_name.clone(),
                z.task_type.clone(),
                opt(z.host.as_deref()),
                opt(z.worker_group.as_deref()),
                z.reason.to_string(),
                age(z.age_seconds),
                opt(z.owner_master.as_deref()),
                z.owner_master_alive.to_string(),
                z.action.to_string(),
                z.workflow.to_string(),
                opt(z.note.as_deref()),
            ]
        })
        .collect();
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count().min(60));
        }
    }
    let line_of = |cells: Vec<String>| {
        cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| {
                let c: String = c.chars().take(60).collect();
                format!("{c:<w$}")
            })
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_string()
    };
    println!(
        "DS line {line}: {candidates} live-state rows, {} zombies",
        zombies.len()
    );
    if rows.is_empty() {
        return;
    }
    println!(
        "{}",
        line_of(header.iter().map(|s| s.to_string()).collect())
    );
    for r in rows {
        println!("{}", line_of(r));
    }
}

/// The workflow findings after the task zombies.
fn print_workflows(workflows: &[WorkflowView]) {
    if workflows.is_empty() {
        return;
    }
    println!("\n{} workflow findings", workflows.len());
    for w in workflows {
        println!(
            "  workflow {} ({}, {}) on {}{}: {} -> {}{}",
            w.workflow_instance_id,
            w.name,
            w.state,
            w.host.as_deref().unwrap_or("-"),
            if w.owner_master_alive {
                " (alive)"
            } else {
                " (lost)"
            },
            w.reason,
            w.action,
            w.note
                .as_deref()
                .map(|n| format!(" — {n}"))
                .unwrap_or_default()
        );
    }
}

/// Asks on the terminal, or refuses when there is none and no `--yes`.
fn confirm(what: &str, yes: bool) -> Result<(), ReapError> {
    if yes {
        return Ok(());
    }
    if !std::io::stdin().is_terminal() {
        return Err(ReapError::Refused(
            "no terminal to confirm on; pass --yes".into(),
        ));
    }
    eprint!("{what}? [y/N] ");
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    if std::io::stdin().read_line(&mut answer).is_err()
        || !matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes")
    {
        return Err(ReapError::Refused("not confirmed".into()));
    }
    Ok(())
}

async fn reap_workflow(s: Settings, id: i64, force: bool, yes: bool, actor: String) -> u8 {
    let cancel = CancellationToken::new();
    let engine = match connect(&s, &cancel).await {
        Ok(e) => e,
        Err(code) => return code,
    };
    let result = engine
        .reap_workflow(id, force, &actor, |f, forced| {
            confirm(
                &format!(
                    "Recover workflow instance {} ({}, {} on {}) — {}",
                    f.workflow.id,
                    f.workflow.name,
                    f.state_name,
                    f.workflow.host.as_deref().unwrap_or("no host"),
                    if forced { "forced" } else { f.reason.as_str() }
                ),
                yes,
            )
        })
        .await;
    engine.close().await;
    cancel.cancel();
    reap_exit(result, &format!("workflow instance {id}"))
}

fn reap_exit(result: Result<crate::audit::Record, ReapError>, what: &str) -> u8 {
    match result {
        Ok(rec) => {
            println!(
                "reaped {what}: {} -> {}{}",
                rec.from_state.as_deref().unwrap_or("?"),
                rec.to_state.as_deref().unwrap_or("?"),
                rec.detail.map(|d| format!(" ({d})")).unwrap_or_default()
            );
            EXIT_OK
        }
        Err(ReapError::Unavailable(e)) => {
            eprintln!("ds-reaper: {e}");
            EXIT_UNREACHABLE
        }
        Err(e) => {
            eprintln!("ds-reaper: {e}");
            EXIT_FOUND
        }
    }
}

async fn reap(s: Settings, req: ReapRequest, yes: bool) -> u8 {
    let cancel = CancellationToken::new();
    let engine = match connect(&s, &cancel).await {
        Ok(e) => e,
        Err(code) => return code,
    };
    let result = async {
        let prepared = engine.prepare_reap(&req).await?;
        let z = &prepared.zombie;
        let summary = format!(
            "task {} ({}, {} on {}) — {}: {} then workflow {}",
            z.task.id,
            z.task.name,
            z.state_name,
            z.task.host.as_deref().unwrap_or("no host"),
            if prepared.forced {
                "forced".to_string()
            } else {
                z.reason.to_string()
            },
            z.action,
            z.workflow
        );
        confirm(&format!("Reap {summary}"), yes)?;
        engine.commit_reap(prepared).await
    }
    .await;
    engine.close().await;
    cancel.cancel();
    reap_exit(result, &format!("task {}", req.task_id))
}
