//! The tenants of workflow instances (SPEC §17): a YARN application runs as
//! its task's tenant, so one whose RM `user` is another is not the task's
//! own. Read only for the workflows of tasks with known application ids,
//! one statement per [`ID_BATCH`] ids.
//!
//! Where DS keeps it (reference §2.2): 1.x–3.1 `tenant_id` on the workflow
//! instance, resolved through `t_ds_tenant.tenant_code`; 3.2+ the instance's
//! own `tenant_code`, whose default `'default'` means DS runs the task as
//! the worker's own user — not known here, so left out.

use crate::dialect::{Conn, Dialect};
use crate::schema::TENANT;
use crate::sql::Sql;
use crate::{Db, SqlError, ID_BATCH};
use reaper_core::DsLine;
use std::collections::BTreeMap;

/// 3.2+'s tenant code for "the worker's own user".
const DEFAULT_TENANT: &str = "default";

/// How the connected schema names a workflow instance's tenant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TenantCol {
    /// 3.2+: `tenant_code` on the instance.
    Code,
    /// ≤ 3.1: `tenant_id`, joined to `t_ds_tenant`.
    Id,
}

impl Db {
    /// The tenant code of each of `workflow_ids` where the schema says one;
    /// a workflow without a known tenant is absent.
    pub async fn tenants(
        &self,
        line: DsLine,
        workflow_ids: &[i64],
    ) -> Result<BTreeMap<i64, String>, SqlError> {
        let mut out = BTreeMap::new();
        if workflow_ids.is_empty() {
            return Ok(out);
        }
        let cat = self.catalog().await?;
        let wf = line.workflow_table();
        let col = if cat.has(wf, "tenant_code") {
            TenantCol::Code
        } else if cat.has(wf, "tenant_id") && cat.has(TENANT, "tenant_code") {
            TenantCol::Id
        } else {
            return Ok(out);
        };
        for chunk in workflow_ids.chunks(ID_BATCH) {
            out.extend(with_conn!(
                self,
                "reading the tenants of workflows with remote applications",
                |c: D| read::<D>(c, wf, col, chunk)
            )?);
        }
        Ok(out)
    }
}

async fn read<D: Dialect>(
    c: &mut Conn<D>,
    wf: &str,
    col: TenantCol,
    ids: &[i64],
) -> Result<BTreeMap<i64, String>, SqlError> {
    let mut q = Sql::<D>::new(match col {
        TenantCol::Code => format!("SELECT w.id, w.tenant_code FROM {wf} w WHERE "),
        TenantCol::Id => format!(
            "SELECT w.id, t.tenant_code FROM {wf} w JOIN {TENANT} t ON t.id = w.tenant_id WHERE "
        ),
    });
    D::in_set(&mut q, "w.id", ids);
    let mut out = BTreeMap::new();
    for r in q.fetch_all(c).await? {
        // a row that cannot be read only leaves its tenant unknown
        let (Ok(Some(id)), Ok(Some(code))) = (D::int(&r, 0), D::text(&r, 1)) else {
            continue;
        };
        let code = code.trim();
        let worker_user = col == TenantCol::Code && code == DEFAULT_TENANT;
        if !code.is_empty() && !worker_user {
            out.insert(id, code.to_string());
        }
    }
    Ok(out)
}
