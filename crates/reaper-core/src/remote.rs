//! Remote applications (SPEC §17): a task whose YARN application may still
//! run is never acted on. The daemon asks the ResourceManager for each of a
//! task's known applications and feeds the answers here; [`decide`] says
//! whether to act, to hold, or to kill first.

pub use crate::remote_app::{AppPhase, RemoteApp};
pub use crate::verdict::{REMOTE_APP_IDS_UNKNOWN, REMOTE_APP_RUNNING, REMOTE_APP_UNKNOWN};

use crate::verdict::{Blocked, Disposition, Zombie};

/// The task types whose work runs as a YARN application (SPEC §17), those
/// any line has.
pub const YARN_TASK_TYPES: [&str; 6] = ["SPARK", "FLINK", "FLINK_STREAM", "MR", "HIVECLI", "SQOOP"];

pub fn is_yarn_task(task_type: &str) -> bool {
    YARN_TASK_TYPES
        .iter()
        .any(|t| t.eq_ignore_ascii_case(task_type.trim()))
}

/// Whether an application found for a task is provably not its own (SPEC
/// §17): the RM says it started before the task (less the clock skew
/// tolerance), or that another user runs it where the task's tenant is
/// known, or another task instance has the same id (`shared`). What cannot
/// be told counts as the task's own: it holds, it is never assumed away.
pub fn is_foreign(
    app: &RemoteApp,
    task_start: Option<crate::Instant>,
    tenant: Option<&str>,
    skew: std::time::Duration,
    shared: bool,
) -> bool {
    if shared {
        return true;
    }
    let started = app
        .started_time
        .and_then(chrono::DateTime::from_timestamp_millis);
    if let (Some(started), Some(start)) = (started, task_start) {
        if started < start - crate::delta(skew) {
            return true;
        }
    }
    matches!((app.user.as_deref(), tenant), (Some(u), Some(t)) if !u.trim().eq_ignore_ascii_case(t.trim()))
}

/// What to do with a task given its applications' states.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RemoteDecision {
    /// No application may run: act as planned.
    Act,
    /// Kill these live applications first (`kill_remote_apps = true`); the
    /// task waits until every application is final.
    Kill(Vec<String>),
    /// Do not act now.
    Hold(Blocked),
}

/// The decision for a task with `apps` (its known ids with the RM's
/// answers). A task without known ids is acted on as planned; a live
/// application holds (or is killed first, when `kill`); an unknown one holds
/// whatever `kill` says, since it cannot be killed by what is not known.
pub fn decide(apps: &[RemoteApp], kill: bool) -> RemoteDecision {
    let live: Vec<String> = apps
        .iter()
        .filter(|a| a.phase() == AppPhase::Live)
        .map(|a| a.id.clone())
        .collect();
    if !live.is_empty() {
        return if kill {
            RemoteDecision::Kill(live)
        } else {
            RemoteDecision::Hold(Blocked::RemoteAppRunning)
        };
    }
    if apps.iter().any(|a| a.phase() == AppPhase::Unknown) {
        return RemoteDecision::Hold(Blocked::RemoteAppUnknown);
    }
    RemoteDecision::Act
}

/// The ResourceManager's answers about the candidates' applications, read
/// before the plan (SPEC §17), and whether live ones may be killed first.
/// The planner holds a task with it before the budget admits anything, so a
/// held task takes no place in the sweep's cap or the rate limit.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RemoteEvidence {
    /// Each task's known applications with the RM's answers, by task id.
    pub apps: std::collections::BTreeMap<i64, Vec<RemoteApp>>,
    /// `[policy] kill_remote_apps`.
    pub kill: bool,
    /// Ids found for each task that are not its own ([`is_foreign`]).
    pub foreign: std::collections::BTreeMap<i64, Vec<String>>,
    /// YARN tasks held because their host's agent reads no id source.
    pub ids_unknown: std::collections::BTreeSet<i64>,
}

impl RemoteEvidence {
    /// Records the task's applications on the zombie and, when it is about
    /// to be acted on, holds it unless every application is final or (with
    /// `kill`) every one not final is live and will be killed first by the
    /// executor. Returns whether it held the zombie.
    pub fn judge(&self, z: &mut Zombie) -> bool {
        if let Some(foreign) = self.foreign.get(&z.task.id) {
            z.evidence.foreign_app_ids = foreign.clone();
        }
        if self.ids_unknown.contains(&z.task.id) && z.disposition == Disposition::Act {
            hold(z, Blocked::RemoteAppIdsUnknown);
            return true;
        }
        let Some(apps) = self.apps.get(&z.task.id) else {
            return false;
        };
        z.evidence.remote_apps = apps.clone();
        if z.disposition != Disposition::Act {
            return false;
        }
        match decide(apps, self.kill) {
            RemoteDecision::Act | RemoteDecision::Kill(_) => false,
            RemoteDecision::Hold(b) => {
                hold(z, b);
                true
            }
        }
    }
}

/// Holds a zombie about to be acted on: `check` and the API say why.
pub fn hold(z: &mut Zombie, blocked: Blocked) {
    z.note = Some(blocked.describe());
    z.disposition = Disposition::Blocked(blocked);
}

/// The ids of a zombie's applications that are live: what the executor
/// kills before the task's write when the policy allows it.
pub fn live_ids(z: &Zombie) -> Vec<String> {
    z.evidence
        .remote_apps
        .iter()
        .filter(|a| a.phase() == AppPhase::Live)
        .map(|a| a.id.clone())
        .collect()
}

/// Whether `s` is a YARN application id, `application_<digits>_<digits>`.
pub fn is_app_id(s: &str) -> bool {
    let Some(rest) = s.strip_prefix("application_") else {
        return false;
    };
    let Some((a, b)) = rest.split_once('_') else {
        return false;
    };
    let num = |x: &str| !x.is_empty() && x.len() <= 19 && x.bytes().all(|c| c.is_ascii_digit());
    num(a) && num(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn app(id: &str, state: Option<&str>) -> RemoteApp {
        RemoteApp {
            state: state.map(str::to_string),
            ..RemoteApp::unknown(id)
        }
    }

    /// The planner's hold for a zombie with `apps` (`kill`: the policy).
    fn apply(z: &mut Zombie, apps: Vec<RemoteApp>, kill: bool) {
        let evidence = RemoteEvidence {
            apps: [(z.task.id, apps)].into(),
            kill,
            ..RemoteEvidence::default()
        };
        evidence.judge(z);
    }

    #[test]
    fn no_known_application_acts() {
        assert_eq!(decide(&[], false), RemoteDecision::Act);
        assert_eq!(decide(&[], true), RemoteDecision::Act);
    }

    #[test]
    fn every_live_state_holds_and_every_final_one_acts() {
        for s in ["NEW", "NEW_SAVING", "SUBMITTED", "ACCEPTED", "RUNNING"] {
            assert_eq!(
                decide(&[app("a", Some("FINISHED")), app("b", Some(s))], false),
                RemoteDecision::Hold(Blocked::RemoteAppRunning),
                "{s}"
            );
        }
        let done = [
            app("a", Some("FINISHED")),
            app("b", Some("FAILED")),
            app("c", Some("KILLED")),
        ];
        assert_eq!(decide(&done, false), RemoteDecision::Act);
    }

    #[test]
    fn an_application_the_rm_cannot_tell_about_holds_even_with_kill() {
        // unreachable, 404, or a state this build does not know
        for s in [None, Some("SOMETHING_NEW")] {
            let apps = [app("a", Some("KILLED")), app("b", s)];
            assert_eq!(
                decide(&apps, false),
                RemoteDecision::Hold(Blocked::RemoteAppUnknown)
            );
            assert_eq!(
                decide(&apps, true),
                RemoteDecision::Hold(Blocked::RemoteAppUnknown)
            );
        }
    }

    #[test]
    fn with_kill_only_the_live_applications_are_killed() {
        let apps = [
            app("a", Some("RUNNING")),
            app("b", Some("FINISHED")),
            app("c", Some("ACCEPTED")),
            app("d", None),
        ];
        assert_eq!(
            decide(&apps, true),
            RemoteDecision::Kill(vec!["a".into(), "c".into()])
        );
        // without it, running outranks unknown in the note
        assert_eq!(
            decide(&apps, false),
            RemoteDecision::Hold(Blocked::RemoteAppRunning)
        );
    }

    fn zombie(disposition: Disposition) -> Zombie {
        Zombie {
            task: crate::Candidate::new(7, "SPARK", 1, Some("10.0.0.11:1234")),
            state_name: "RUNNING_EXECUTION".into(),
            reason: crate::Reason::WorkerLost,
            evidence: crate::Evidence::default(),
            owner_master: None,
            owner_master_alive: true,
            action: crate::Action::Fail,
            workflow: crate::FollowUp::None,
            note: None,
            disposition,
        }
    }

    #[test]
    fn only_a_zombie_about_to_be_acted_on_is_held_and_every_one_shows_its_apps() {
        let apps = vec![app("application_1_1", Some("RUNNING"))];
        let mut z = zombie(Disposition::Act);
        apply(&mut z, apps.clone(), false);
        assert_eq!(
            z.disposition,
            Disposition::Blocked(Blocked::RemoteAppRunning)
        );
        assert_eq!(z.note.as_deref(), Some(REMOTE_APP_RUNNING));
        assert_eq!(z.evidence.remote_apps, apps);

        // with kill, a live application is the executor's to kill first:
        // the zombie stays admitted, its live ids known
        let mut z = zombie(Disposition::Act);
        apply(&mut z, apps.clone(), true);
        assert_eq!(z.disposition, Disposition::Act);
        assert_eq!(live_ids(&z), vec!["application_1_1".to_string()]);

        let unknown = vec![app("application_1_1", None)];
        let mut z = zombie(Disposition::Act);
        apply(&mut z, unknown.clone(), true);
        assert_eq!(z.note.as_deref(), Some(REMOTE_APP_UNKNOWN));

        let mut z = zombie(Disposition::Report);
        apply(&mut z, apps.clone(), false);
        assert_eq!(z.disposition, Disposition::Report);
        assert_eq!(z.note, None);
        assert_eq!(z.evidence.remote_apps, apps);

        let done = vec![app("application_1_1", Some("KILLED"))];
        let mut z = zombie(Disposition::Act);
        apply(&mut z, done.clone(), false);
        assert_eq!(z.disposition, Disposition::Act);
    }

    #[test]
    fn only_what_is_provably_anothers_is_foreign() {
        let t = |s: i64| chrono::DateTime::from_timestamp(1_700_000_000 + s, 0).unwrap();
        let skew = std::time::Duration::from_secs(5);
        let started = |s: i64, user: Option<&str>| RemoteApp {
            started_time: Some(t(s).timestamp_millis()),
            user: user.map(str::to_string),
            ..app("application_1_1", Some("RUNNING"))
        };
        // an upstream job's application, started long before the task
        assert!(is_foreign(
            &started(-3600, None),
            Some(t(0)),
            None,
            skew,
            false
        ));
        // within the skew, or after the task started: its own
        assert!(!is_foreign(
            &started(-4, None),
            Some(t(0)),
            None,
            skew,
            false
        ));
        assert!(!is_foreign(
            &started(30, None),
            Some(t(0)),
            None,
            skew,
            false
        ));
        // another user's, where the tenant is known
        assert!(is_foreign(
            &started(30, Some("bi")),
            Some(t(0)),
            Some("etl"),
            skew,
            false
        ));
        assert!(!is_foreign(
            &started(30, Some("ETL")),
            Some(t(0)),
            Some("etl"),
            skew,
            false
        ));
        // another task instance has the same id
        assert!(is_foreign(&started(30, None), Some(t(0)), None, skew, true));
        // what cannot be told is the task's own
        assert!(!is_foreign(
            &app("application_1_1", None),
            Some(t(0)),
            None,
            skew,
            false
        ));
        assert!(!is_foreign(&started(-3600, None), None, None, skew, false));
    }

    #[test]
    fn a_yarn_task_whose_agent_reads_no_id_source_is_held_and_foreign_ids_are_shown() {
        let mut z = zombie(Disposition::Act);
        let evidence = RemoteEvidence {
            ids_unknown: [7].into(),
            foreign: [(7, vec!["application_9_9".to_string()])].into(),
            ..RemoteEvidence::default()
        };
        assert!(evidence.judge(&mut z));
        assert_eq!(
            z.disposition,
            Disposition::Blocked(Blocked::RemoteAppIdsUnknown)
        );
        assert_eq!(z.note.as_deref(), Some(REMOTE_APP_IDS_UNKNOWN));
        assert_eq!(
            z.evidence.foreign_app_ids,
            vec!["application_9_9".to_string()]
        );
        // a zombie only reported is shown, not held
        let mut z = zombie(Disposition::Report);
        assert!(!evidence.judge(&mut z));
        assert_eq!(z.disposition, Disposition::Report);
        assert!(is_yarn_task("spark") && is_yarn_task("HIVECLI") && !is_yarn_task("SHELL"));
    }

    #[test]
    fn application_ids_are_recognised() {
        assert!(is_app_id("application_1700000000000_0001"));
        for bad in [
            "application_1",
            "application__1",
            "application_1_",
            "application_a_1",
            "app_1_2",
            "application_1_2 ",
            "application_1_2_3",
        ] {
            assert!(!is_app_id(bad), "{bad}");
        }
    }
}
