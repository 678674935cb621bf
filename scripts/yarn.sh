#!/usr/bin/env bash
# The real-ResourceManager tier (issue 22, SPEC §17): a MiniYARNCluster (Hadoop's YARN server test
# jars from Maven Central, into /var/tmp/ds-reaper-services/yarn; nothing of Hadoop's in the
# repository) driven by the e2e tests in tests/tests/e2e/yarn.rs: a lost worker's SPARK task whose
# applications run is held, the ids survive a daemon restart, an RM that is down holds, and with
# kill_remote_apps the applications end KILLED before the task row is written; and an RM HA pair
# (two JVMs, one ResourceManager each, the elector on the dev ZooKeeper under the test's own root)
# whose standby's real 307 ds-reaper follows for the state and the kill; and (yarn::evidence)
# which applications are a task's own: one started before the task, one another task names and
# one another user runs (submitted as `bi`) are never killed, the own one is, its audited `done`
# after the RM's finishedTime; a host whose agent reads no id source holds; an over row's
# running application is a ghost application, killed only with kill_remote_apps.
#   scripts/yarn.sh            (needs the dev services: bash deploy/dev/services.sh start)
# HADOOP_VERSION (default 3.3.6) and YARN_CACHE pass through to tests/yarn/launch.sh. A missing
# JDK or Maven fails the run (never a skip).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck disable=SC1091
source deploy/dev/env.sh
start=$(date +%s)
bash tests/yarn/launch.sh prepare
echo "yarn: jars and launcher ready in $(($(date +%s) - start)) s" >&2
YARN_TESTS=1 cargo test -p reaper-e2e --test e2e yarn:: -- --nocapture
echo "yarn: done in $(($(date +%s) - start)) s" >&2
