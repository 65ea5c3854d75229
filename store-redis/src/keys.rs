//! Key names. Every key of one jobtype shares the hash tag `{P:T}`; keys
//! of the whole namespace share `{P}`; id index buckets are `{P|i<b>}`.

use jobstore_api::{Millis, ResultCode, StatsResolution};

/// How many buckets the id index is split into (a fixed part of the data
/// layout: changing it makes existing ids unfindable).
pub(crate) const BUCKETS: u64 = 16;

#[derive(Debug, Clone)]
pub(crate) struct Keys {
    prefix: String,
}

/// The keys of one jobtype (all in the slot of `{P:T}`).
#[derive(Debug, Clone)]
pub(crate) struct TypeKeys {
    pub ready: String,
    pub sched: String,
    pub lock: String,
    /// `{P:T}:done:<code>`: archived jobs of each result code, in the
    /// order of [`ResultCode::ALL`].
    pub done: [String; ResultCode::ALL.len()],
    /// `{P:T}:done`: archived jobs of every code, as stores kept them
    /// before the sets per code; `purge.lua` moves them over.
    pub done_before_codes: String,
    pub codes: String,
    /// `{P:T}:fence`: set of `"<token> <id>"`, reservations taken over.
    pub fence: String,
    /// Prefix of the job hashes: `{P:T}:j:`, followed by the id.
    pub job: String,
    /// `{P:T}:paused`: exists (value `1`) while the jobtype is paused.
    pub paused: String,
    /// `{P:T}:blocked`: blocked jobs, score the not-before time.
    pub blocked: String,
    /// `{P:T}:staged`: jobs of an add with dependencies not yet committed.
    pub staged: String,
    /// `{P:T}:fx`: the outbox of edges ended in this slot whose waiters
    /// are elsewhere.
    pub fx: String,
    /// Prefix of the stats bucket hashes: `{P:T}:stats:`, followed by
    /// the resolution and the bucket start (see [`TypeKeys::stats_bucket`]).
    pub stats: String,
}

impl TypeKeys {
    /// `{P:T}:e:<id>`: the edges of waiter `id`.
    pub fn edges(&self, id: &str) -> String {
        format!("{}e:{id}", self.base())
    }

    /// `{P:T}:`, the start of every key of the jobtype.
    fn base(&self) -> &str {
        self.job.strip_suffix("j:").unwrap_or(&self.job)
    }

    /// The set of archived jobs of `code`.
    pub fn done_of(&self, code: ResultCode) -> &str {
        let i = ResultCode::ALL.iter().position(|c| *c == code);
        &self.done[i.unwrap_or_default()]
    }

    /// `{P:T}:stats:<resolution>:<start>`: the stats bucket of this
    /// jobtype starting at `start` (epoch ms).
    pub fn stats_bucket(&self, resolution: StatsResolution, start: Millis) -> String {
        format!("{}{}:{start}", self.stats, resolution.as_str())
    }
}

impl Keys {
    pub fn new(prefix: &str) -> Self {
        Keys {
            prefix: prefix.to_owned(),
        }
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    pub fn jobtype(&self, jobtype: &str) -> TypeKeys {
        let tag = format!("{{{}:{}}}", self.prefix, jobtype);
        TypeKeys {
            ready: format!("{tag}:ready"),
            sched: format!("{tag}:sched"),
            lock: format!("{tag}:lock"),
            done: ResultCode::ALL.map(|c| format!("{tag}:done:{c}")),
            done_before_codes: format!("{tag}:done"),
            codes: format!("{tag}:codes"),
            fence: format!("{tag}:fence"),
            job: format!("{tag}:j:"),
            paused: format!("{tag}:paused"),
            blocked: format!("{tag}:blocked"),
            staged: format!("{tag}:staged"),
            fx: format!("{tag}:fx"),
            stats: format!("{tag}:stats:"),
        }
    }

    /// The index bucket of `id`.
    pub fn bucket(&self, id: &str) -> String {
        format!("{{{}|i{}}}", self.prefix, fnv1a(id.as_bytes()) % BUCKETS)
    }

    /// `{P}:`, the start of every namespace-wide key.
    pub fn base(&self) -> String {
        format!("{{{}}}:", self.prefix)
    }

    pub fn jobtypes(&self) -> String {
        format!("{}jobtypes", self.base())
    }

    /// `{P}:paused`: the jobtypes paused (a superset while a pause or
    /// resume is under way; each jobtype's own `paused` key decides).
    pub fn paused(&self) -> String {
        format!("{}paused", self.base())
    }

    pub fn channel(&self) -> String {
        format!("{}wake", self.base())
    }

    pub fn handler_versions(&self, jobtype: &str) -> String {
        format!("{}hv:{jobtype}", self.base())
    }

    pub fn handler_data(&self, jobtype: &str) -> String {
        format!("{}hd:{jobtype}", self.base())
    }

    pub fn handler_seq(&self) -> String {
        format!("{}hseq", self.base())
    }

    pub fn handler_types(&self) -> String {
        format!("{}htypes", self.base())
    }

    pub fn sysid(&self, sysid: &str) -> String {
        format!("{}sys:{sysid}", self.base())
    }

    /// `{P}:sch:`, the start of every schedule's hash key.
    pub fn schedule_prefix(&self) -> String {
        format!("{}sch:", self.base())
    }

    /// `{P}:sch:<name>`: the schedule's hash.
    pub fn schedule(&self, name: &str) -> String {
        format!("{}{name}", self.schedule_prefix())
    }

    /// `{P}:sch`: the due index (score `next_due`, member the name) of
    /// the schedules not paused with a `next_due`.
    pub fn schedules_due(&self) -> String {
        format!("{}sch", self.base())
    }

    /// `{P}:schn`: every schedule's name, score 0.
    pub fn schedule_names(&self) -> String {
        format!("{}schn", self.base())
    }

    /// SCAN patterns that match every key of the namespace.
    pub fn patterns(&self) -> [String; 3] {
        let p = &self.prefix;
        [format!("{{{p}}}*"), format!("{{{p}:*"), format!("{{{p}|*")]
    }
}

/// 64-bit FNV-1a: stable across versions and platforms.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The value of an index entry: `"<jobtype> <token>"`.
pub(crate) fn index_value(jobtype: &str, token: &str) -> String {
    format!("{jobtype} {token}")
}

/// The reservation token of an index entry.
pub(crate) fn index_token(value: &str) -> &str {
    value.rsplit_once(' ').map_or("", |(_, t)| t)
}

/// The jobtype of an index entry.
pub(crate) fn index_jobtype(value: &str) -> &str {
    value.rsplit_once(' ').map_or(value, |(t, _)| t)
}

/// The cluster slot of a key (CRC16/XMODEM of its hash tag, mod 16384).
pub(crate) fn key_slot(key: &str) -> u16 {
    let b = key.as_bytes();
    let tagged = b.iter().position(|&c| c == b'{').and_then(|open| {
        b[open + 1..]
            .iter()
            .position(|&c| c == b'}')
            .filter(|&len| len > 0)
            .map(|len| &b[open + 1..open + 1 + len])
    });
    let data = tagged.unwrap_or(b);
    let mut crc: u16 = 0;
    for &byte in data {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_are_per_jobtype() {
        let k = Keys::new("jobs");
        assert_eq!(k.jobtype("a-b").ready, "{jobs:a-b}:ready");
        assert_eq!(k.jobtype("a-b").job, "{jobs:a-b}:j:");
        assert_eq!(k.jobtype("a-b").done[0], "{jobs:a-b}:done:ok");
        assert_eq!(k.jobtype("a-b").done[5], "{jobs:a-b}:done:timeout");
        assert_eq!(k.jobtypes(), "{jobs}:jobtypes");
        assert_eq!(k.jobtype("a-b").paused, "{jobs:a-b}:paused");
        assert_eq!(
            k.jobtype("a-b")
                .stats_bucket(StatsResolution::Minute, 60_000),
            "{jobs:a-b}:stats:minute:60000"
        );
        assert_eq!(
            k.jobtype("a:b").stats_bucket(StatsResolution::Day, 0),
            "{jobs:a:b}:stats:day:0"
        );
        assert_eq!(k.paused(), "{jobs}:paused");
        assert_eq!(k.prefix(), "jobs");
        // Each namespace wakes its own watchers only.
        assert_eq!(k.channel(), "{jobs}:wake");
        assert_ne!(k.channel(), Keys::new("other").channel());
        assert!(k.bucket("x").starts_with("{jobs|i"));
        assert_eq!(index_jobtype(&index_value("t:1", "abc")), "t:1");
        // Schedules share the namespace's slot with handlers and sysids.
        assert_eq!(k.schedule("a:b"), "{jobs}:sch:a:b");
        assert_eq!(k.schedules_due(), "{jobs}:sch");
        assert_eq!(k.schedule_names(), "{jobs}:schn");
        for key in [k.schedule("x"), k.schedules_due(), k.schedule_names()] {
            assert_eq!(key_slot(&key), key_slot(&k.sysid("s")));
        }
    }

    #[test]
    fn fnv_is_stable() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn slots_follow_hash_tags() {
        // Known values from the Redis cluster spec (CRC16 of "123456789" is 0x31C3).
        assert_eq!(key_slot("123456789"), 0x31C3);
        assert_eq!(key_slot("{user1000}.following"), key_slot("user1000"));
        // An empty tag is no tag: the whole key is hashed (CRC16/XMODEM
        // of "foo{}{bar}" is 0xE0AB, slot 8363); only the first tag counts.
        assert_eq!(key_slot("foo{}{bar}"), 8363);
        assert_eq!(key_slot("foo{{bar}}zap"), key_slot("{bar"));
        assert_eq!(key_slot("foo{bar}{zap}"), key_slot("bar"));
        assert_ne!(key_slot("{jobs:a}:ready"), key_slot("{jobs:b}:ready"));
    }
}
