//! The Lua scripts, embedded. Job scripts get `scripts/lib.lua` prepended.
//! Also the one encoding of times the scripts compare.

use std::sync::LazyLock;

use jobstore_api::Millis;
use redis::Script;

macro_rules! job_script {
    ($name:literal) => {
        Script::new(concat!(
            include_str!("../scripts/lib.lua"),
            include_str!(concat!("../scripts/", $name, ".lua"))
        ))
    };
}

macro_rules! plain_script {
    ($name:literal) => {
        Script::new(include_str!(concat!("../scripts/", $name, ".lua")))
    };
}

pub(crate) struct Scripts {
    pub reserve: Script,
    pub rereserve: Script,
    pub unreserve: Script,
    pub add: Script,
    pub claim: Script,
    pub renew: Script,
    pub release: Script,
    pub update: Script,
    pub cancel: Script,
    pub purge: Script,
    pub counts: Script,
    pub list: Script,
    pub rerun: Script,
    pub delete: Script,
    pub edit: Script,
    pub get: Script,
    pub pause: Script,
    pub handler_set: Script,
    pub handler_get: Script,
    pub handler_delete: Script,
    pub handler_list: Script,
    pub sysid_reserve: Script,
    pub sysid_renew: Script,
    pub sysid_release: Script,
    pub stats_add: Script,
    pub stats_read: Script,
    pub schedule_set: Script,
    pub schedule_delete: Script,
    pub schedule_pause: Script,
    pub schedule_advance: Script,
    pub schedule_list: Script,
    pub schedule_due: Script,
    pub link: Script,
    pub commit: Script,
    pub resolve: Script,
    pub settle: Script,
    pub waits: Script,
    pub waits_of: Script,
    pub unblock: Script,
}

pub(crate) static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    reserve: plain_script!("reserve"),
    rereserve: plain_script!("rereserve"),
    unreserve: plain_script!("unreserve"),
    add: job_script!("add"),
    claim: job_script!("claim"),
    renew: job_script!("renew"),
    release: job_script!("release"),
    update: plain_script!("update"),
    cancel: job_script!("cancel"),
    purge: job_script!("purge"),
    counts: plain_script!("counts"),
    list: job_script!("list"),
    rerun: job_script!("rerun"),
    delete: job_script!("delete"),
    edit: job_script!("edit"),
    get: plain_script!("get"),
    pause: plain_script!("pause"),
    handler_set: plain_script!("handler_set"),
    handler_get: plain_script!("handler_get"),
    handler_delete: plain_script!("handler_delete"),
    handler_list: plain_script!("handler_list"),
    sysid_reserve: plain_script!("sysid_reserve"),
    sysid_renew: plain_script!("sysid_renew"),
    sysid_release: plain_script!("sysid_release"),
    stats_add: plain_script!("stats_add"),
    stats_read: plain_script!("stats_read"),
    schedule_set: plain_script!("schedule_set"),
    schedule_delete: plain_script!("schedule_delete"),
    schedule_pause: plain_script!("schedule_pause"),
    schedule_advance: plain_script!("schedule_advance"),
    schedule_list: plain_script!("schedule_list"),
    schedule_due: plain_script!("schedule_due"),
    link: job_script!("link"),
    commit: job_script!("commit"),
    resolve: job_script!("resolve"),
    settle: job_script!("settle"),
    waits: plain_script!("waits"),
    waits_of: job_script!("waits_of"),
    unblock: job_script!("unblock"),
});

/// A time as 15 zero-padded decimal digits, as the scripts compare times
/// (validated times are `0..=MAX_TIME`, 15 digits, and leases or delays
/// on top stay below 10^15), so that they compare as strings.
pub(crate) fn padded(t: Millis) -> String {
    format!("{t:015}")
}

#[cfg(test)]
mod tests {
    use jobstore_api::limits::MAX_HISTORY;

    /// The scripts keep as many events per job as the contract says.
    #[test]
    fn scripts_keep_max_history_events() {
        let lib = include_str!("../scripts/lib.lua");
        assert!(lib.contains(&format!("local HISTORY = {MAX_HISTORY}\n")));
    }
}
