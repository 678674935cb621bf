# Connection details of the local services started by deploy/dev/services.sh.
# Sourced by scripts/test.sh and scripts/demo.sh; tests read these variables.
export DS_TEST_ZK=${DS_TEST_ZK:-127.0.0.1:2181}
export DS_TEST_MYSQL=${DS_TEST_MYSQL:-mysql://ds:ds@127.0.0.1:3306}
export DS_TEST_POSTGRES=${DS_TEST_POSTGRES:-postgres://postgres:postgres@127.0.0.1:5432}
# the DS schemas are read from ../shared, never copied into the repo
export DS_SCHEMA_DIR=${DS_SCHEMA_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/../shared/ds-schema}
export DS_SERVICES_SCRIPT=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/services.sh
# DS's etcd registry (reaper-etcd, ds-sim): comma-separated client endpoints
export ETCD_ENDPOINTS=${ETCD_ENDPOINTS:-http://127.0.0.1:2379}
