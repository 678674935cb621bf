//! The configuration file and `DS_REAPER__` variables: no input panics; a
//! configuration that loads is one `config check` accepts again.
#![no_main]
use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;

#[derive(Debug, Arbitrary)]
struct Input {
    toml: String,
    vars: Vec<(String, String)>,
}

fuzz_target!(|input: Input| {
    let dir = std::env::temp_dir().join(format!("ds-reaper-fuzz-config-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let file = dir.join("config.toml");
    if std::fs::write(&file, input.toml.as_bytes()).is_err() {
        return;
    }
    let vars: Vec<(String, String)> = input
        .vars
        .into_iter()
        .take(8)
        .map(|(k, v)| (format!("DS_REAPER__{k}"), v))
        .collect();
    if reaper::config::load_with(&file, true, &vars).is_ok() {
        assert!(reaper::config::load_with(&file, true, &vars).is_ok(), "loads twice alike");
    }
});
