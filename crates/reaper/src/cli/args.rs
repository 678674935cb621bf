//! The arguments: clap's definitions of the commands and their flags, and
//! the parsers for the values clap cannot check by itself.

use crate::config;
use clap::{Parser, Subcommand, ValueEnum};
use reaper_core::policy::BadValue;
use reaper_core::{Action, FollowUp};
use std::path::PathBuf;
use std::time::Duration;

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

fn parse_dur(s: &str) -> Result<Duration, config::BadDuration> {
    config::parse_duration(s)
}

/// `reap --action` that is no write.
#[derive(Debug, thiserror::Error)]
pub(super) enum BadReapAction {
    #[error("reap writes: use fail, fault-tolerance or kill")]
    Report,
    #[error(transparent)]
    Unknown(#[from] BadValue),
}

pub(super) fn parse_action(s: &str) -> Result<Action, BadReapAction> {
    match s.parse::<Action>()? {
        Action::Report => Err(BadReapAction::Report),
        a => Ok(a),
    }
}

fn parse_followup(s: &str) -> Result<FollowUp, BadValue> {
    s.parse::<FollowUp>()
}
