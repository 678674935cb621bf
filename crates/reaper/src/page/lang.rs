//! The page's language (issue 24): English, or Chinese when the browser's
//! `Accept-Language` prefers it. Only the page's own words are translated;
//! reason names, states, hosts and notes stay as the API and the logs spell
//! them, so that what an operator reads can be searched for.
//!
//! The language is set for the duration of one render on the rendering
//! thread, so that the many small formatting helpers need no extra argument.

use std::cell::Cell;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Lang {
    #[default]
    En,
    Zh,
}

impl Lang {
    /// The language an `Accept-Language` header prefers among ours: the
    /// highest `q` wins, English on a tie or when neither is named.
    pub fn from_accept_language(header: Option<&str>) -> Lang {
        let Some(h) = header else { return Lang::En };
        let (mut en, mut zh) = (-1.0f32, -1.0f32);
        for part in h.split(',') {
            let mut it = part.split(';');
            let tag = it.next().unwrap_or("").trim().to_ascii_lowercase();
            let q = it
                .filter_map(|p| p.trim().strip_prefix("q="))
                .filter_map(|q| q.trim().parse::<f32>().ok())
                .find(|q| q.is_finite())
                .unwrap_or(1.0);
            let primary = tag.split('-').next().unwrap_or("");
            match primary {
                "zh" => zh = zh.max(q),
                "en" => en = en.max(q),
                "*" => en = en.max(q),
                _ => {}
            }
        }
        if zh > 0.0 && zh > en {
            Lang::Zh
        } else {
            Lang::En
        }
    }

    pub fn html_tag(self) -> &'static str {
        match self {
            Lang::En => "en",
            Lang::Zh => "zh-CN",
        }
    }
}

thread_local! {
    static LANG: Cell<Lang> = const { Cell::new(Lang::En) };
}

/// Runs `f` with `lang` as the page's language on this thread.
pub fn with_lang<T>(lang: Lang, f: impl FnOnce() -> T) -> T {
    let prev = LANG.with(|l| l.replace(lang));
    let out = f();
    LANG.with(|l| l.set(prev));
    out
}

pub fn current() -> Lang {
    LANG.with(|l| l.get())
}

/// One of the page's words in the current language (itself when untranslated).
pub fn tr(en: &str) -> &str {
    if current() == Lang::En {
        return en;
    }
    ZH.iter().find(|(e, _)| *e == en).map_or(en, |(_, z)| z)
}

const ZH: &[(&str, &str)] = &[
    // ghosts (SPEC §15)
    ("Ghost processes", "不该运行的进程（幽灵进程）"),
    ("no row", "无记录"),
    ("newer attempt", "新一次执行"),
    ("pids", "进程号"),
    ("row", "数据库记录"),
    // header and verdict
    ("leader", "主节点（leader）"),
    ("leader (election off)", "主节点（未启用选主）"),
    ("standby (does not act)", "备用（不执行动作）"),
    ("version", "版本"),
    ("updated", "更新于"),
    ("refreshes every", "自动刷新间隔"),
    ("safety brake engaged", "安全刹车已生效"),
    ("no action is taken", "不执行任何动作"),
    ("registry view invalid", "注册中心视图无效"),
    ("the database does not answer", "数据库无响应"),
    ("zombie task", "个僵尸任务"),
    ("zombie tasks", "个僵尸任务"),
    ("workflow that cannot progress", "个无法推进的工作流"),
    ("workflows that cannot progress", "个无法推进的工作流"),
    ("stale agent", "个过期的 agent"),
    ("stale agents", "个过期的 agent"),
    ("beside a live worker", "（所在 Worker 存活）"),
    ("no sweep yet", "尚未扫描"),
    (
        "All clear: no zombie tasks, no stuck workflows.",
        "一切正常：没有僵尸任务，没有卡住的工作流。",
    ),
    ("Attention", "注意"),
    // cards
    ("Zombie tasks", "僵尸任务"),
    ("Stuck workflows", "卡住的工作流"),
    ("Live workers", "存活的 Worker"),
    ("Live masters", "存活的 Master"),
    ("Registry view", "注册中心视图"),
    ("Brake", "刹车"),
    ("Last sweep", "最近一次扫描"),
    ("none", "无"),
    ("agents", "agent"),
    ("fresh", "新鲜"),
    ("stale", "过期"),
    ("recently lost", "最近丢失"),
    ("valid", "有效"),
    ("invalid", "无效"),
    ("since", "起始于"),
    ("ENGAGED", "已生效"),
    ("released", "已解除"),
    ("actions allowed", "允许执行动作"),
    ("candidate", "个候选"),
    ("candidates", "个候选"),
    ("action", "动作"),
    ("actions", "个动作"),
    // charts
    ("Zombies found", "发现的僵尸"),
    ("Actions taken", "执行的动作"),
    ("Sweep duration", "扫描耗时"),
    ("tasks", "任务"),
    ("workflows", "工作流"),
    ("duration", "耗时"),
    ("last", "最近"),
    ("max", "最大"),
    ("no sweeps in the last hour", "最近一小时没有扫描"),
    // tables
    ("first", "仅显示前"),
    ("shown", "个"),
    ("task", "任务"),
    ("name", "名称"),
    ("type", "类型"),
    ("workflow", "工作流"),
    ("host", "主机"),
    ("reason", "原因"),
    ("evidence", "证据"),
    ("submitted", "提交时间"),
    ("owner master", "所属 Master"),
    ("note", "备注"),
    ("state", "状态"),
    ("master", "Master"),
    ("alive", "存活"),
    ("lost", "丢失"),
    ("host lost", "主机丢失于"),
    ("host absent", "主机缺席"),
    ("process missing since", "进程消失于"),
    ("process last seen", "进程最后出现于"),
    ("worker started", "Worker 启动于"),
    ("heartbeat", "心跳"),
    ("master lost", "Master 丢失于"),
    ("master absent", "Master 缺席"),
    ("last progress", "最后进展"),
    ("no unfinished task", "没有未完成的任务"),
    ("Masters", "Master"),
    ("Workers", "Worker"),
    ("Recently lost", "最近丢失"),
    ("kind", "类型"),
    ("node", "节点"),
    ("address", "地址"),
    ("started", "启动时间"),
    ("last heartbeat", "最近心跳"),
    ("status", "状态"),
    ("agent", "agent"),
    ("no agent", "没有 agent"),
    ("task process", "个任务进程"),
    ("task processes", "个任务进程"),
    ("report", "报告"),
    ("unreadable", "个无法读取"),
    ("blind", "失明"),
    ("Latest audit records", "最近的审计记录"),
    ("newest first", "最新的在前"),
    ("when", "时间"),
    ("event", "事件"),
    ("subject", "对象"),
    ("actor", "执行者"),
    ("detail", "详情"),
    ("database", "数据库"),
    // ages
    ("ago", "前"),
    ("in", "后"),
    ("s", "秒"),
    ("min", "分钟"),
    ("h", "小时"),
    ("d", "天"),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_language_picks_the_preferred_of_ours() {
        let l = |h: &str| Lang::from_accept_language(Some(h));
        assert_eq!(Lang::from_accept_language(None), Lang::En);
        assert_eq!(l("zh-CN,zh;q=0.9,en;q=0.8"), Lang::Zh);
        assert_eq!(l("zh"), Lang::Zh);
        assert_eq!(l("en-US,en;q=0.9,zh-CN;q=0.8"), Lang::En);
        assert_eq!(l("fr-FR,zh-TW;q=0.5"), Lang::Zh);
        assert_eq!(l("fr-FR"), Lang::En);
        assert_eq!(l("zh;q=0"), Lang::En);
        assert_eq!(
            l("zh;q=abc, en;q=0.2"),
            Lang::Zh,
            "an unreadable q counts as 1"
        );
        assert_eq!(l(";;;,,=q"), Lang::En);
    }

    #[test]
    fn words_follow_the_language_of_the_render() {
        assert_eq!(tr("Zombie tasks"), "Zombie tasks");
        with_lang(Lang::Zh, || {
            assert_eq!(tr("Zombie tasks"), "僵尸任务");
            assert_eq!(tr("worker_lost"), "worker_lost", "identifiers stay");
        });
        assert_eq!(current(), Lang::En);
    }
}
