use super::*;
use std::io::Write;

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

#[test]
fn example_config_parses_and_documents_every_key_with_its_default() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config.example.toml");
    let s = load_with(&path, true, &[]).expect("config.example.toml is valid");
    assert_eq!(s.version, VersionSetting::Auto);
    assert_eq!(s.grace_period, Duration::from_secs(60));
    assert_eq!(s.full_scan_interval, Duration::from_secs(600));
    assert_eq!(s.rate_per_minute, 120);
    assert!(s.leader_enabled);
    // every key appears in the example, with the default value the code uses
    let text = std::fs::read_to_string(&path).unwrap();
    let table: toml::Table = text.parse().unwrap();
    for (section, key, default) in Settings::documented_keys() {
        if key == "rules" || key == "states" {
            assert!(
                text.contains(&format!("# {key}"))
                    || text.contains(&format!("[[{section}.{key}]]")),
                "{section}.{key} undocumented"
            );
            continue;
        }
        let v = table
            .get(section)
            .and_then(|t| t.get(key))
            .unwrap_or_else(|| panic!("{section}.{key} missing from config.example.toml"));
        let shown = match v {
            toml::Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        assert_eq!(shown, default, "{section}.{key}");
    }
}

#[test]
fn missing_default_file_means_defaults() {
    let s = load_with(Path::new("/nonexistent/ds-reaper.toml"), false, &[]).unwrap();
    assert_eq!(s.zk_connect, "127.0.0.1:2181");
    assert_eq!(s.http_listen.to_string(), "127.0.0.1:9477");
}

#[test]
fn missing_explicit_file_is_an_error() {
    assert!(load_with(Path::new("/nonexistent/ds-reaper.toml"), true, &[]).is_err());
}

#[test]
fn every_problem_is_reported_once_each_naming_its_key() {
    let f = file(
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
[nonsense]
x = 1
"#,
    );
    let e = load_with(f.path(), true, &[]).unwrap_err();
    let all = e.to_string();
    for needle in [
        "reconcile.grace_period",
        "reconcile.max_actions_per_sweep",
        "reconcile.bogus: unknown key",
        "brake.max_zombie_fraction",
        "policy.worker_lost",
        "policy.rules[0].colour: unknown key",
        "nonsense: unknown section",
    ] {
        assert!(all.contains(needle), "missing {needle:?} in:\n{all}");
    }
    assert_eq!(e.0.len(), 7, "{all}");
}

#[test]
fn environment_overrides_and_names_the_variable_on_error() {
    let f = file("[reconcile]\ngrace_period = \"10s\"\n");
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
        ]),
    )
    .unwrap();
    assert_eq!(s.grace_period, Duration::from_secs(90));
    assert_eq!(s.version, VersionSetting::Line(DsLine::V2_0));
    assert_eq!(
        s.states.as_deref().unwrap(),
        ["RUNNING_EXECUTION", "DISPATCH"]
    );
    let e = load_with(
        f.path(),
        true,
        &vars(&[
            ("DS_REAPER__RECONCILE__GRACE_PERIOD", "forever"),
            ("DS_REAPER__NOPE__KEY", "1"),
        ]),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("DS_REAPER__RECONCILE__GRACE_PERIOD (reconcile.grace_period)"),
        "{e}"
    );
    assert!(e.contains("DS_REAPER__NOPE__KEY: unknown variable"), "{e}");
}

#[test]
fn secrets_never_print() {
    let dir = tempfile::tempdir().unwrap();
    let pw = dir.path().join("pw");
    std::fs::write(&pw, "s3cret-pass\n").unwrap();
    let tok = dir.path().join("tok");
    std::fs::write(&tok, "tok-123").unwrap();
    let f = file(&format!(
        "[database]\nurl = \"mysql://ds:urlpass@h:3306/ds\"\npassword_file = \"{}\"\n[http]\ntoken_file = \"{}\"\n",
        pw.display(),
        tok.display()
    ));
    let s = load_with(f.path(), true, &[]).unwrap();
    assert_eq!(s.db_password.as_ref().unwrap().expose(), "s3cret-pass");
    assert_eq!(s.http_token.as_ref().unwrap().expose(), "tok-123");
    let shown = format!("{}\n{:?}", s.to_redacted_toml(), s);
    for secret in ["s3cret-pass", "tok-123", "urlpass"] {
        assert!(!shown.contains(secret), "{secret} leaked:\n{shown}");
    }
    assert!(shown.contains("mysql://ds:***@h:3306/ds"));
}

#[test]
fn unreadable_secret_file_is_an_error() {
    let f = file("[http]\ntoken_file = \"/nonexistent/token\"\n");
    let e = load_with(f.path(), true, &[]).unwrap_err().to_string();
    assert!(e.contains("http.token_file"), "{e}");
}

#[test]
fn rules_and_states_resolve_per_line() {
    let f = file(
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
"#,
    );
    let s = load_with(f.path(), true, &[]).unwrap();
    assert_eq!(s.rules.len(), 1);
    assert_eq!(s.rules[0].owner_master, Some(OwnerMaster::Alive));
    assert_eq!(s.rules[0].project_code, Some(42));
    let (codes, unknown) = s.live_states(DsLine::V1_3);
    assert_eq!(codes, vec![1]);
    assert_eq!(unknown, vec!["DISPATCH", "DELAY_EXECUTION"]);
    let (codes, unknown) = s.live_states(DsLine::V3_2);
    assert_eq!(codes, vec![1, 17, 12]);
    assert!(unknown.is_empty());
    assert_eq!(s.policy(DsLine::V3_2).worker_lost, Action::Fail);
    // the effective config round-trips through the loader
    let again = file(&s.to_redacted_toml());
    let s2 = load_with(again.path(), true, &[]).unwrap();
    assert_eq!(s2.rules, s.rules);
    assert_eq!(s2.states, s.states);
}

#[test]
fn finished_states_are_refused() {
    let f = file("[reconcile]\nstates = [\"SUCCESS\"]\n");
    let e = load_with(f.path(), true, &[]).unwrap_err().to_string();
    assert!(e.contains("finished state"), "{e}");
}
