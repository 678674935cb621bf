//! The tenants of workflow instances (SPEC §17: an application whose RM
//! `user` is not the task's tenant is not its own), on every line's real
//! schema, MariaDB and PostgreSQL: 1.x–3.1 through `tenant_id` and
//! `t_ds_tenant`, 3.2+ from the instance's own `tenant_code`, whose
//! `'default'` (the worker's own user) is unknown; an unknown tenant or a
//! gone workflow is absent.

mod sql_setup;

use ds_sim::db::{SimKind, WorkflowSpec};
use reaper_core::ports::TaskStore;
use reaper_sql::*;
use sql_setup::*;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

async fn tenants_of_workflows(kind: SimKind, fixture: &str) {
    let Some(sim) = setup(kind, fixture).await else {
        return;
    };
    let line = sim.line;
    let store: Arc<dyn TaskStore> = Arc::new(SqlStore::new(connect(&sim, Duration::from_secs(30))));
    let table = line.workflow_table();
    let [etl, unknown, bi] = [(); 3].map(|_| WorkflowSpec::default());
    let etl = sim.insert_workflow(&etl).await.unwrap();
    let unknown = sim.insert_workflow(&unknown).await.unwrap();
    let bi = sim.insert_workflow(&bi).await.unwrap();
    sim.exec("INSERT INTO t_ds_tenant (id, tenant_code) VALUES (41, 'etl'), (42, 'bi')")
        .await
        .unwrap();
    let by_code = sim.has_column(table, "tenant_code");
    assert_eq!(
        by_code,
        !sim.has_column(table, "tenant_id"),
        "{kind:?} {fixture}: one of the two"
    );
    let set = |wf: i64, tenant: &str| {
        let (col, value) = if by_code {
            ("tenant_code", format!("'{tenant}'"))
        } else {
            let id = match tenant {
                "etl" => "41",
                "bi" => "42",
                // DS's "no tenant of its own": no t_ds_tenant row
                _ => "-1",
            };
            ("tenant_id", id.to_string())
        };
        format!("UPDATE {table} SET {col} = {value} WHERE id = {wf}")
    };
    for (wf, tenant) in [(etl, "etl"), (unknown, "default"), (bi, "bi")] {
        sim.exec(&set(wf, tenant)).await.unwrap();
    }

    let gone = 999_999_999;
    let got = store
        .tenants(line, &[etl, unknown, bi, gone])
        .await
        .unwrap();
    let want: BTreeMap<i64, String> = [(etl, "etl".to_string()), (bi, "bi".to_string())].into();
    assert_eq!(got, want, "{kind:?} {fixture}");
    assert!(store.tenants(line, &[]).await.unwrap().is_empty());
    sim.drop().await.unwrap();
}

macro_rules! lines {
    ($($name:ident: $kind:expr, $fixture:expr;)*) => {$(
        #[tokio::test]
        async fn $name() {
            tenants_of_workflows($kind, $fixture).await;
        }
    )*};
}

lines! {
    tenants_mysql_1_2_1: SimKind::MySql, "1.2.1";
    tenants_mysql_1_3_9: SimKind::MySql, "1.3.9";
    tenants_mysql_2_0_9: SimKind::MySql, "2.0.9";
    tenants_mysql_3_1_9: SimKind::MySql, "3.1.9";
    tenants_mysql_3_2_2: SimKind::MySql, "3.2.2";
    tenants_mysql_3_3_2: SimKind::MySql, "3.3.2";
    tenants_mysql_3_4_0: SimKind::MySql, "3.4.0";
    tenants_mysql_dev: SimKind::MySql, "dev";
    tenants_pg_1_2_1: SimKind::Postgres, "1.2.1";
    tenants_pg_1_3_9: SimKind::Postgres, "1.3.9";
    tenants_pg_2_0_9: SimKind::Postgres, "2.0.9";
    tenants_pg_3_1_9: SimKind::Postgres, "3.1.9";
    tenants_pg_3_2_2: SimKind::Postgres, "3.2.2";
    tenants_pg_3_3_2: SimKind::Postgres, "3.3.2";
    tenants_pg_3_4_0: SimKind::Postgres, "3.4.0";
    tenants_pg_dev: SimKind::Postgres, "dev";
}
