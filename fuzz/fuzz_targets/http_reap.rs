//! `POST /api/v1/tasks/{id}/reap`: any path segment and body give a request
//! or a 400 message, never a panic; an accepted request names the task of
//! its path and never the `report` action. The same path segment as
//! `GET /api/v1/audit?limit=`: a number up to the cap, or a 400 message.
#![no_main]
use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;

#[derive(Debug, Arbitrary)]
struct Input {
    id: String,
    body: Vec<u8>,
}

fuzz_target!(|input: Input| {
    match reaper::api::parse_reap_request(&input.id, &input.body) {
        Ok(req) => {
            assert_eq!(Ok(req.task_id), input.id.trim().parse::<i64>());
            assert_ne!(req.action, Some(reaper_core::Action::Report));
        }
        Err(msg) => assert!(!msg.to_string().is_empty()),
    }
    match reaper::api::audit_limit(Some(&input.id)) {
        Ok(n) => assert_eq!(
            Ok(n),
            input
                .id
                .trim()
                .parse::<usize>()
                .map(|v| v.min(reaper::api::AUDIT_LIMIT_MAX))
        ),
        Err(msg) => {
            assert!(input.id.trim().parse::<usize>().is_err() && !msg.to_string().is_empty())
        }
    }
});
