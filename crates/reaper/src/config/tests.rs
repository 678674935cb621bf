use super::*;
use reaper_core::{Action, DsLine, FollowUp, OwnerMaster};
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

fn file(text: &str) -> tempfile::NamedTempFile {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(text.as_bytes()).unwrap();
    f
}

fn vars(v: &[(&str, &str)]) -> Vec<(String, String)> {
    v.iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

fn load_text(text: &str) -> Result<Settings, ConfigErrors> {
    let f = file(text);
    load_with(f.path(), true, &[])
}

fn example_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config.example.toml")
}

#[test]
fn example_config_parses_to_the_defaults() {
    let s = load_with(&example_path(), true, &[]).expect("config.example.toml is valid");
    assert_eq!(s, Settings::default());
    assert_eq!(s.dolphinscheduler.version, VersionSetting::Auto);
    assert_eq!(s.reconcile.grace_period, Duration::from_secs(60));
    assert_eq!(s.reconcile.workflow_grace_period, Duration::from_secs(900));
    assert_eq!(s.etcd.endpoints, ["http://127.0.0.1:2379"]);
    assert_eq!(s.registry.kind, RegistryKind::Zookeeper);
}

/// Every key of the typed defaults is in the example: set (to its default:
/// the test above), or, for a key unset by default, as a commented-out line.
#[test]
fn example_config_documents_every_key() {
    let text = std::fs::read_to_string(example_path()).unwrap();
    let table: toml::Table = text.parse().unwrap();
    let commented = |section: &str, key: &str| {
        let mut in_section = false;
        text.lines().any(|l| {
            let l = l.trim();
            if l.starts_with('[') {
                in_section = l.starts_with(&format!("[{section}]"));
            }
            in_section && l.starts_with(&format!("# {key} ="))
        })
    };
    let keys = Settings::documented_keys();
    assert!(keys.len() > 60, "{keys:?}");
    for (section, key, default) in keys {
        if table.get(&section).and_then(|t| t.get(&key)).is_some() {
            continue;
        }
        if (section.as_str(), key.as_str()) == RULES {
            assert!(
                text.contains("# [[policy.rules]]"),
                "policy.rules undocumented"
            );
            for field in Schema::of_defaults().rule_keys {
                assert!(
                    text.contains(&format!("# {field} =")),
                    "policy.rules: {field}"
                );
            }
            continue;
        }
        assert!(
            default.is_empty() && commented(&section, &key),
            "{section}.{key} (default {default:?}) missing from config.example.toml"
        );
    }
}

#[test]
fn missing_default_file_means_defaults() {
    let s = load_with(Path::new("/nonexistent/ds-reaper.toml"), false, &[]).unwrap();
    assert_eq!(s.zookeeper.connect, "127.0.0.1:2181");
    assert_eq!(s.http.listen.to_string(), "127.0.0.1:9477");
    assert_eq!(s, Settings::default());
}

#[test]
fn missing_explicit_file_is_an_error() {
    assert!(load_with(Path::new("/nonexistent/ds-reaper.toml"), true, &[]).is_err());
}

#[test]
fn every_problem_is_reported_once_each_naming_its_key() {
    let e = load_text(
        r#"
[reconcile]
grace_period = "soon"
max_actions_per_sweep = -1
bogus = 1
[brake]
max_zombie_fraction = 1.5
[policy]
worker_lost = "explode"
[[policy.rules]]
reason = "worker_lost"
colour = "red"
[[policy.rules]]
reason = "workflow_stalled"
action = "kill"
[nonsense]
x = 1
"#,
    )
    .unwrap_err();
    let all = e.to_string();
    for needle in [
        "reconcile.grace_period: invalid duration",
        "reconcile.max_actions_per_sweep: -1 is out of range",
        "reconcile.bogus: unknown key",
        "brake.max_zombie_fraction: 1.5 is not a fraction",
        "policy.worker_lost: unknown variant `explode`",
        "policy.rules[0].colour: unknown key",
        "policy.rules[1].action: workflow_stalled is report-only",
        "nonsense: unknown section",
    ] {
        assert!(all.contains(needle), "missing {needle:?} in:\n{all}");
    }
    assert_eq!(e.0.len(), 8, "{all}");
}

#[test]
fn environment_overrides_and_names_the_variable_on_error() {
    let f = file("[reconcile]\ngrace_period = \"10s\"\n[etcd]\nendpoints = [\"http://a:2379\"]\n");
    let s = load_with(
        f.path(),
        true,
        &vars(&[
            ("DS_REAPER__RECONCILE__GRACE_PERIOD", "90s"),
            (
                "DS_REAPER__DATABASE__URL",
                "postgres://u:hunter2@db:5432/ds",
            ),
            ("DS_REAPER__DOLPHINSCHEDULER__VERSION", "2.0"),
            (
                "DS_REAPER__RECONCILE__STATES",
                "RUNNING_EXECUTION, DISPATCH",
            ),
            ("DS_REAPER__RATE__PER_MINUTE", "7"),
            ("DS_REAPER__BRAKE__MAX_ZOMBIE_FRACTION", "0.25"),
            ("DS_REAPER__LEADER__ENABLED", "false"),
            (
                "DS_REAPER__ETCD__ENDPOINTS",
                "http://e1:2379,http://e2:2379",
            ),
            ("DS_REAPER__REGISTRY__TYPE", "etcd"),
            ("PATH", "/bin"),
        ]),
    )
    .unwrap();
    assert_eq!(s.reconcile.grace_period, Duration::from_secs(90));
    assert_eq!(
        s.grace_period,
        Duration::from_secs(90),
        "the flat copy follows"
    );
    assert_eq!(s.version, VersionSetting::Line(DsLine::V2_0));
    assert_eq!(
        s.reconcile.states.as_deref().unwrap(),
        ["RUNNING_EXECUTION", "DISPATCH"]
    );
    assert_eq!(s.rate.per_minute, 7);
    assert_eq!(s.brake.max_zombie_fraction, 0.25);
    assert!(!s.leader.enabled);
    assert_eq!(s.etcd.endpoints, ["http://e1:2379", "http://e2:2379"]);
    assert_eq!(s.registry.kind, RegistryKind::Etcd);
    assert_eq!(s.database.url.expose(), "postgres://u:hunter2@db:5432/ds");

    let e = load_with(
        f.path(),
        true,
        &vars(&[
            ("DS_REAPER__RECONCILE__GRACE_PERIOD", "forever"),
            ("DS_REAPER__RATE__PER_MINUTE", "lots"),
            ("DS_REAPER__NOPE__KEY", "1"),
            ("DS_REAPER__RECONCILE__GRACE_PERIOD__X", "1"),
            ("DS_REAPER__POLICY__RULES", "x"),
        ]),
    )
    .unwrap_err();
    let all = e.to_string();
    for needle in [
        "DS_REAPER__RECONCILE__GRACE_PERIOD (reconcile.grace_period): invalid duration",
        "DS_REAPER__RATE__PER_MINUTE (rate.per_minute): expected a whole number",
        "DS_REAPER__NOPE__KEY: unknown variable",
        "DS_REAPER__RECONCILE__GRACE_PERIOD__X: unknown variable",
        "DS_REAPER__POLICY__RULES: policy.rules cannot be set from the environment",
    ] {
        assert!(all.contains(needle), "missing {needle:?} in:\n{all}");
    }
    assert_eq!(e.0.len(), 5, "{all}");
}

#[test]
fn new_keys_are_read_typed() {
    let dir = tempfile::tempdir().unwrap();
    let pw = dir.path().join("etcd-pw");
    std::fs::write(&pw, "etcd-secret\n").unwrap();
    let s = load_text(&format!(
        r#"
[registry]
type = "jdbc"
[etcd]
namespace = "ds"
user = "root"
password_file = "{}"
lease_ttl = "15s"
[jdbc_registry]
url = "postgres://r:regpass@db/ds"
poll_interval = "2s"
expire_after = "9s"
[reconcile]
process_gone_after = "90s"
agent_stale_after = "1m"
hold_while_process_alive = false
process_task_types = ["SHELL", "PYTHON"]
workflows = false
workflow_states = ["RUNNING_EXECUTION", "READY_STOP"]
workflow_grace_period = "20m"
workflow_stall_after = "1h"
[policy]
process_gone = "fail"
workflow_master_lost = "recover"
workflow_stalled = "report"
[agent]
worker = "10.0.1.11:1234"
exec_base = "/data/ds"
process_dir = "/data/ds-1.2/process"
scan_interval = "5s"
path = "/ops/agents/"
listen = "0.0.0.0:9478"
"#,
        pw.display()
    ))
    .unwrap();
    assert_eq!(s.registry.kind, RegistryKind::Jdbc);
    assert_eq!(s.unsupported(), None, "every registry of SPEC §14 runs");
    assert_eq!(
        s.etcd.password_file.as_ref().unwrap().secret().expose(),
        "etcd-secret"
    );
    assert_eq!(s.etcd.lease_ttl, Duration::from_secs(15));
    assert_eq!(
        s.jdbc_registry.url.as_ref().unwrap().expose(),
        "postgres://r:regpass@db/ds"
    );
    assert_eq!(s.jdbc_registry.expire_after, Duration::from_secs(9));
    let r = &s.reconcile;
    assert_eq!(r.process_gone_after, Duration::from_secs(90));
    assert_eq!(r.agent_stale_after, Duration::from_secs(60));
    assert!(!r.hold_while_process_alive && !r.workflows);
    assert_eq!(
        r.process_task_types.as_deref().unwrap(),
        ["SHELL", "PYTHON"]
    );
    assert_eq!(
        r.workflow_states.as_deref().unwrap(),
        ["RUNNING_EXECUTION", "READY_STOP"]
    );
    assert_eq!(r.workflow_stall_after, Duration::from_secs(3600));
    assert_eq!(s.policy.process_gone, Action::Fail);
    assert_eq!(s.policy.workflow_master_lost, WorkflowAction::Recover);
    assert_eq!(s.agent.worker, AgentWorker::Named("10.0.1.11:1234".into()));
    assert_eq!(s.agent.path, "ops/agents");
    assert_eq!(
        s.agent.process_dir.as_deref(),
        Some(std::path::Path::new("/data/ds-1.2/process"))
    );
    assert_eq!(Settings::default().agent.process_dir, None);
    assert_eq!(s.agent.listen.port(), 9478);
    assert!(Settings::default().unsupported().is_none());
    // the redacted output keeps the new keys and hides the registry password
    let shown = s.to_redacted_toml();
    assert!(shown.contains("type = \"jdbc\""), "{shown}");
    assert!(shown.contains("postgres://r:***@db/ds"), "{shown}");
    assert!(
        !shown.contains("regpass") && !shown.contains("etcd-secret"),
        "{shown}"
    );
}

#[test]
fn new_keys_are_validated() {
    let e = load_text(
        r#"
[registry]
type = "consul"
[etcd]
endpoints = []
lease_ttl = "100ms"
[jdbc_registry]
url = "redis://x"
poll_interval = "0s"
[reconcile]
workflow_states = ["SUCCESS"]
hold_while_process_alive = "perhaps"
[policy]
process_gone = "recover"
workflow_master_lost = "fail"
workflow_stalled = "recover"
[agent]
worker = ""
exec_base = "relative/dir"
process_dir = "process"
listen = "nowhere"
"#,
    )
    .unwrap_err();
    let all = e.to_string();
    for needle in [
        "registry.type: unknown variant `consul`",
        "etcd.endpoints: must name at least one endpoint",
        "etcd.lease_ttl: 100ms is too short",
        "jdbc_registry.url: must be a mysql://",
        "jdbc_registry.poll_interval: 0s is too short",
        "reconcile.workflow_states: \"SUCCESS\" is not a non-terminal workflow state",
        "reconcile.hold_while_process_alive: invalid type",
        "policy.process_gone: unknown variant `recover`",
        "policy.workflow_master_lost: unknown variant `fail`",
        "policy.workflow_stalled: unknown variant `recover`",
        "agent.worker: must be \"auto\"",
        "agent.exec_base: \"relative/dir\" must be an absolute path",
        "agent.process_dir: \"process\" must be an absolute path",
        "agent.listen: \"nowhere\"",
    ] {
        assert!(all.contains(needle), "missing {needle:?} in:\n{all}");
    }
    assert_eq!(e.0.len(), 14, "{all}");
    assert!(!all.contains("redis://x"), "a URL is never repeated: {all}");
}

#[test]
fn agent_kill_keys_default_off_and_are_validated() {
    let d = Settings::default();
    assert!(!d.agent.allow_kill, "kills are off unless asked for");
    assert_eq!(d.agent.kill_grace, Duration::from_secs(10));
    let s = load_text("[agent]\nallow_kill = true\nkill_grace = \"30s\"\n").unwrap();
    assert!(s.agent.allow_kill);
    assert_eq!(s.agent.kill_grace, Duration::from_secs(30));
    // and so `ds-reaper agent` runs
    let a = crate::config::adapters::agent_settings(&s).unwrap();
    assert!(a.allow_kill);
    assert_eq!(a.kill_grace, Duration::from_secs(30));
    assert!(
        !crate::config::adapters::agent_settings(&d)
            .unwrap()
            .allow_kill
    );
    let e = load_text("[agent]\nallow_kill = \"maybe\"\nkill_grace = \"0s\"\n").unwrap_err();
    let all = e.to_string();
    assert!(all.contains("agent.allow_kill: invalid type"), "{all}");
    assert!(all.contains("agent.kill_grace: 0s is too short"), "{all}");
    let e = load_text("[agent]\nkill_grace = \"1h\"\n").unwrap_err();
    assert!(
        e.to_string().contains("agent.kill_grace: 1h is too long"),
        "{e}"
    );
}

#[test]
fn rule_actions_must_suit_their_reason() {
    let e = load_text(
        r#"
[[policy.rules]]
reason = "workflow_stalled"
action = "recover"
[[policy.rules]]
reason = "workflow_master_lost"
action = "kill"
[[policy.rules]]
reason = "worker_lost"
action = "recover"
[[policy.rules]]
action = "recover"
[[policy.rules]]
reason = "workflow_master_lost"
action = "recover"
workflow = "fail"
"#,
    )
    .unwrap_err();
    let all = e.to_string();
    for needle in [
        "policy.rules[0].action: workflow_stalled is report-only",
        "policy.rules[1].action: workflow_master_lost takes",
        "policy.rules[2].action: \"recover\" applies to",
        "policy.rules[3].action: \"recover\" applies to",
        "policy.rules[4].workflow: a follow-up applies to task actions",
    ] {
        assert!(all.contains(needle), "missing {needle:?} in:\n{all}");
    }
    assert_eq!(e.0.len(), 5, "{all}");
}

#[test]
fn workflow_rules_stay_out_of_the_task_policy() {
    let s = load_text(
        r#"
[[policy.rules]]
reason = "process_gone"
action = "fail"
[[policy.rules]]
reason = "workflow_master_lost"
action = "recover"
[[policy.rules]]
worker_group = "etl"
action = "kill"
"#,
    )
    .unwrap();
    assert_eq!(s.policy.rules.len(), 3);
    let p = s.policy(DsLine::V3_2);
    // process_gone is the planner's (SPEC §12); workflow findings are not task rules
    assert_eq!(p.rules.len(), 2);
    assert_eq!(p.rules[0].reason, Some(reaper_core::Reason::ProcessGone));
    assert_eq!(p.rules[0].action, Some(Action::Fail));
    assert_eq!(p.rules[1].worker_group.as_deref(), Some("etl"));
    assert_eq!(p.rules[1].action, Some(Action::Kill));
}

#[test]
fn secrets_never_print() {
    let dir = tempfile::tempdir().unwrap();
    let pw = dir.path().join("pw");
    std::fs::write(&pw, "s3cret-pass\n").unwrap();
    let tok = dir.path().join("tok");
    std::fs::write(&tok, "tok-123").unwrap();
    let s = load_text(&format!(
        "[database]\nurl = \"mysql://ds:urlpass@h:3306/ds\"\npassword_file = \"{}\"\n\
         [http]\ntoken_file = \"{}\"\n[jdbc_registry]\nurl = \"mysql://h/ds?password=qpass\"\n",
        pw.display(),
        tok.display()
    ))
    .unwrap();
    let db_pw = s.database.password_file.as_ref().unwrap();
    assert_eq!(db_pw.secret().expose(), "s3cret-pass");
    assert_eq!(db_pw.path(), pw);
    assert_eq!(
        s.http.token_file.as_ref().unwrap().secret().expose(),
        "tok-123"
    );
    assert_eq!(s.http_token.as_ref().unwrap().expose(), "tok-123");
    let json = serde_json::to_string(&s).unwrap();
    let shown = format!("{}\n{:?}\n{json}", s.to_redacted_toml(), s);
    for secret in ["s3cret-pass", "tok-123", "urlpass", "qpass"] {
        assert!(!shown.contains(secret), "{secret} leaked:\n{shown}");
    }
    assert!(shown.contains("mysql://ds:***@h:3306/ds"), "{shown}");
    assert!(
        shown.contains(&pw.display().to_string()),
        "the path shows: {shown}"
    );
}

#[test]
fn unreadable_or_empty_secret_file_is_an_error() {
    let e = load_text("[http]\ntoken_file = \"/nonexistent/token\"\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("http.token_file: cannot read /nonexistent/token"),
        "{e}"
    );
    let empty = file("\n");
    let e = load_text(&format!(
        "[database]\npassword_file = \"{}\"\n",
        empty.path().display()
    ))
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("database.password_file:") && e.contains("is empty"),
        "{e}"
    );
    // an empty value (e.g. DS_REAPER__DATABASE__PASSWORD_FILE="") means unset
    let s = load_with(
        Path::new("/nonexistent/ds-reaper.toml"),
        false,
        &vars(&[("DS_REAPER__DATABASE__PASSWORD_FILE", "")]),
    )
    .unwrap();
    assert!(s.database.password_file.is_none());
}

#[test]
fn rules_and_states_resolve_per_line() {
    let s = load_text(
        r#"
[reconcile]
states = ["RUNNING_EXECUTION", "DISPATCH", "DELAY_EXECUTION"]
[policy]
worker_lost = "fail"
[[policy.rules]]
worker_group = "streaming"
owner_master = "alive"
project_code = 42
action = "report"
workflow = "none"
"#,
    )
    .unwrap();
    assert_eq!(s.policy.rules.len(), 1);
    assert_eq!(s.policy.rules[0].owner_master, Some(OwnerMaster::Alive));
    assert_eq!(s.policy.rules[0].project_code, Some(42));
    let (codes, unknown) = s.live_states(DsLine::V1_3);
    assert_eq!(codes, vec![1]);
    assert_eq!(unknown, vec!["DISPATCH", "DELAY_EXECUTION"]);
    let (codes, unknown) = s.live_states(DsLine::V3_2);
    assert_eq!(codes, vec![1, 17, 12]);
    assert!(unknown.is_empty());
    let p = s.policy(DsLine::V3_2);
    assert_eq!(p.worker_lost, Action::Fail);
    assert_eq!(p.rules[0].workflow, Some(FollowUp::None));
    assert_eq!(p.grace_period, s.reconcile.grace_period);
    // the effective config round-trips through the loader
    let s2 = load_text(&s.to_redacted_toml()).unwrap();
    assert_eq!(s2.policy.rules, s.policy.rules);
    assert_eq!(s2.reconcile, s.reconcile);
}

#[test]
fn finished_and_unknown_states_are_refused() {
    let e = load_text("[reconcile]\nstates = [\"SUCCESS\", \"RUNNING\"]\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("\"SUCCESS\" is a finished state"), "{e}");
    assert!(e.contains("\"RUNNING\" is not a task state"), "{e}");
    let e = load_text("[reconcile]\nstates = []\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("must name at least one state"), "{e}");
}

#[test]
fn a_section_that_is_not_a_table_is_an_error() {
    let e = load_text("reconcile = 5\n").unwrap_err().to_string();
    assert_eq!(e, "reconcile: must be a table");
}

#[test]
fn quoted_booleans_and_numbers_in_the_file_are_read_as_before() {
    let s = load_text("[leader]\nenabled = \"false\"\n[rate]\nper_minute = \"60\"\n").unwrap();
    assert!(!s.leader.enabled);
    assert_eq!(s.rate.per_minute, 60);
}

#[test]
fn ghost_keys_and_rules() {
    let d = Settings::default();
    assert_eq!(d.reconcile.ghost_after, Duration::from_secs(120));
    assert_eq!(
        d.policy.ghost_process,
        reaper_core::ghost::GhostAction::Report
    );
    let s = load_text(
        r#"
[reconcile]
ghost_after = "3s"
[policy]
ghost_process = "kill"
[[policy.rules]]
reason = "ghost_process"
task_type = "FLINK_STREAM"
action = "report"
[[policy.rules]]
worker_group = "etl"
action = "kill"
"#,
    )
    .unwrap();
    let g = s.ghost_policy(DsLine::V3_2);
    assert_eq!(g.ghost_after, Duration::from_secs(3));
    assert_eq!(g.action, reaper_core::ghost::GhostAction::Kill);
    // only rules naming ghost_process apply to ghosts, and they stay out of the task policy
    assert_eq!(g.rules.len(), 1);
    assert_eq!(g.rules[0].task_type.as_deref(), Some("FLINK_STREAM"));
    assert_eq!(
        g.rules[0].action,
        Some(reaper_core::ghost::GhostAction::Report)
    );
    assert_eq!(s.policy(DsLine::V3_2).rules.len(), 1);

    let e = load_text(
        r#"
[reconcile]
ghost_after = "0s"
[policy]
ghost_process = "fail"
[[policy.rules]]
reason = "ghost_process"
action = "fault-tolerance"
workflow = "fail"
owner_master = "lost"
"#,
    )
    .unwrap_err();
    let all = e.to_string();
    assert!(
        all.contains("policy.ghost_process: unknown variant `fail`"),
        "{all}"
    );
    let e = load_text(
        r#"
[reconcile]
ghost_after = "0s"
[[policy.rules]]
reason = "ghost_process"
action = "fault-tolerance"
workflow = "fail"
owner_master = "lost"
"#,
    )
    .unwrap_err();
    let all = e.to_string();
    for needle in [
        "reconcile.ghost_after: 0s is too short",
        "policy.rules[0].action: ghost_process takes \"report\" or \"kill\"",
        "policy.rules[0].workflow: a follow-up applies to task actions; ghost_process has none",
        "policy.rules[0].owner_master: ghost_process rules match on",
    ] {
        assert!(all.contains(needle), "missing {needle:?} in:\n{all}");
    }
}

#[test]
fn the_jdbc_registry_cannot_kill_ghosts() {
    let e = load_text(
        r#"
[registry]
type = "jdbc"
[policy]
ghost_process = "kill"
[[policy.rules]]
reason = "ghost_process"
action = "kill"
"#,
    )
    .unwrap_err();
    let all = e.to_string();
    assert!(
        all.contains("policy.ghost_process: the jdbc registry carries no kill orders"),
        "{all}"
    );
    assert!(
        all.contains("policy.rules[0].action: the jdbc registry carries no kill orders"),
        "{all}"
    );
    // reporting them is fine
    load_text("[registry]\ntype = \"jdbc\"\n[policy]\nghost_process = \"report\"\n").unwrap();
}

#[test]
fn safety_iv_keys_are_read_typed_and_validated() {
    let s = load_text(
        r#"
[jdbc_registry]
outage_hold = "10m"
[reconcile]
logic_task_stall_after = "6h"
[agent]
scan_timeout = "4s"
[yarn]
sweep_budget = "8s"
require_ids = false
[[policy.rules]]
reason = "ghost_process"
over = ["terminal_state", "flag_0"]
action = "kill"
"#,
    )
    .unwrap();
    assert_eq!(s.jdbc_registry.outage_hold, Duration::from_secs(600));
    assert_eq!(
        s.reconcile.logic_task_stall_after,
        Duration::from_secs(6 * 3600)
    );
    assert_eq!(s.agent.scan_timeout, Some(Duration::from_secs(4)));
    assert_eq!(s.yarn.sweep_budget, Some(Duration::from_secs(8)));
    assert!(!s.yarn.require_ids);
    use reaper_core::ghost::Over;
    assert_eq!(
        s.policy.rules[0].over.as_deref(),
        Some(&[Over::Terminal, Over::Superseded][..])
    );
    // empty means unset; defaults as the SPEC gives them
    let d = load_text("[agent]\nscan_timeout = \"\"\n[yarn]\nsweep_budget = \"\"\n").unwrap();
    assert_eq!((d.agent.scan_timeout, d.yarn.sweep_budget), (None, None));
    assert!(d.yarn.require_ids);
    assert_eq!(d.jdbc_registry.outage_hold, Duration::from_secs(1800));
    // a kind the SPEC does not name, and a period under a second, are errors naming the key
    let e = load_text("[[policy.rules]]\nreason = \"ghost_process\"\nover = [\"finished\"]\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("over"), "{e}");
    let e = load_text("[agent]\nscan_timeout = \"10ms\"\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("agent.scan_timeout"), "{e}");
}

#[test]
fn a_ghost_rules_over_reaches_the_policy_and_over_elsewhere_is_an_error_naming_the_key() {
    use reaper_core::ghost::Over;
    let s = load_text(
        r#"
[[policy.rules]]
reason = "ghost_process"
over = ["terminal_state"]
action = "kill"
"#,
    )
    .unwrap();
    let g = s.ghost_policy(DsLine::V3_2);
    assert_eq!(g.rules[0].over.as_deref(), Some(&[Over::Terminal][..]));
    for text in [
        "[[policy.rules]]\nreason = \"worker_lost\"\nover = [\"no_row\"]\n",
        "[[policy.rules]]\nover = [\"flag_0\"]\naction = \"report\"\n",
        "[[policy.rules]]\nreason = \"ghost_process\"\nover = []\n",
    ] {
        let e = load_text(text).unwrap_err().to_string();
        assert!(e.contains("policy.rules[0].over"), "{text}: {e}");
    }
}
