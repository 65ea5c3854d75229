//! The daemon's configuration: flags and environment variables
//! ([`ServeArgs`], clap), an optional TOML file ([`FileConfig`]), and the
//! resolved [`Config`] that [`crate::run`] takes. A flag or environment
//! variable wins over the file, the file over the default.

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, ValueEnum};
use serde::Deserialize;

use crate::auth::{AuthConfig, TokenHash};
use crate::events::EventsConfig;
use crate::events::log::JobLogConfig;
use crate::events::otlp::OtlpConfig;
use crate::executor::scheduler::SchedulerConfig;
use crate::executor::{ExecSettings, Limits};
use crate::tenant::Client;

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Human,
    /// One JSON object per line.
    Json,
}

/// `jobstore serve`: flags and environment variables. Every one is
/// optional here so that the config file can supply it.
#[derive(Debug, Clone, Default, Args)]
pub struct ServeArgs {
    /// TOML config file; flags and environment variables override it.
    #[arg(long, env = "JOBSTORE_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Store URL: sqlite://PATH, postgres://…, redis://…, redis+cluster://…,
    /// mongodb://…, memory://. Default: a SQLite file in the data dir.
    #[arg(
        long,
        env = "JOBSTORE_STORE",
        value_name = "URL",
        hide_env_values = true
    )]
    pub store: Option<String>,
    /// Directory for the journal, the generated sysid and the default
    /// SQLite store [default: ./jobstore-data].
    #[arg(long, env = "JOBSTORE_DATA_DIR", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// Address to listen on [default: 127.0.0.1:7070]; port 0 picks a free one.
    #[arg(long, env = "JOBSTORE_LISTEN", value_name = "ADDR")]
    pub listen: Option<SocketAddr>,
    /// Write the address actually bound to this file once listening.
    #[arg(long, value_name = "FILE")]
    pub addr_file: Option<PathBuf>,
    /// Allow listening beyond loopback with no tokens configured. Anyone who
    /// can reach the port can then add jobs and manage handlers.
    #[arg(long, env = "JOBSTORE_INSECURE_LISTEN")]
    pub insecure_listen: bool,
    /// This daemon's name in the store [default: generated once and kept in
    /// the data dir].
    #[arg(long, env = "JOBSTORE_SYSID")]
    pub sysid: Option<String>,
    /// How long a sysid reservation lasts without renewal [default: 30s].
    #[arg(long, value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub sysid_ttl: Option<Duration>,
    /// The admin token (manages handlers, reaches every client). Prefer the
    /// environment variable, or a hash in the config file.
    #[arg(
        long,
        env = "JOBSTORE_ADMIN_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN"
    )]
    pub admin_token: Option<String>,
    /// Allow `process` handlers (commands run on this host): the admin may
    /// set them over HTTP and this daemon runs them. Without it, jobs of a
    /// process handler set through another daemon are left to daemons that
    /// allow them.
    #[arg(long, env = "JOBSTORE_ALLOW_PROCESS_HANDLERS")]
    pub allow_process_handlers: bool,
    /// Hosts `http` handlers may call (repeat the flag; default: any host).
    #[arg(
        long = "http-allow-host",
        env = "JOBSTORE_HTTP_ALLOW_HOSTS",
        value_delimiter = ',',
        value_name = "HOST"
    )]
    pub http_allow_hosts: Vec<String>,
    /// Largest request body accepted, in bytes [default: 32 MiB].
    #[arg(long, value_name = "BYTES")]
    pub max_body_bytes: Option<usize>,
    /// Longest a request may take, slow clients included [default: 30s].
    #[arg(long, value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub request_timeout: Option<Duration>,
    /// Longest a client may take to send a request's headers; a slower one
    /// is disconnected [default: 10s].
    #[arg(long, value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub header_read_timeout: Option<Duration>,
    /// Longest a client may take to send a request's body; a slower one is
    /// answered 408 [default: 30s].
    #[arg(long, value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub body_read_timeout: Option<Duration>,
    /// How long an add with client-chosen ids waits for the store to say
    /// which ids already existed [default: 10s].
    #[arg(long, value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub idempotent_wait: Option<Duration>,
    /// Records per ingest batch (one store add each) [default: 1000].
    #[arg(long, value_name = "N")]
    pub ingest_batch: Option<usize>,
    /// How long shutdown waits for in-flight work and ingest [default: 30s].
    #[arg(long, value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub shutdown_grace: Option<Duration>,
    /// Log format.
    #[arg(long, env = "JOBSTORE_LOG_FORMAT", value_enum)]
    pub log_format: Option<LogFormat>,
    /// Accept and store jobs, but run none (an intake-only daemon).
    #[arg(long)]
    pub no_execute: bool,
    /// Most jobs running at once on this daemon [default: 64].
    #[arg(long, value_name = "N")]
    pub max_running: Option<u32>,
    /// Most jobs of one client running at once [default: no cap].
    #[arg(long, value_name = "N")]
    pub max_running_per_client: Option<u32>,
    /// Most jobs of one jobtype running at once, unless its handler sets
    /// `concurrency` [default: 3/4 of --max-running].
    #[arg(long, value_name = "N")]
    pub max_running_per_jobtype: Option<u32>,
    /// Most jobs claimed at once [default: 32].
    #[arg(long, value_name = "N")]
    pub claim_batch: Option<u32>,
    /// Lease of a claimed job, renewed every third of it; a crashed
    /// daemon's jobs run elsewhere after one lease [default: 30s].
    #[arg(long, value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub lease: Option<Duration>,
    /// How long archived ok jobs are kept; 0s deletes them at completion
    /// [default: 7days].
    #[arg(long, value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub retention: Option<Duration>,
    /// How long archived jobs that did not end ok (failed, error, timeout,
    /// cancelled) are kept, so their output still says why [default:
    /// 30days].
    #[arg(long, value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub retention_failed: Option<Duration>,
    /// How often archived jobs past their retention are purged [default:
    /// 1m].
    #[arg(long, value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub purge_every: Option<Duration>,
    /// How often the wait and run times summed here are added to the
    /// store's per-jobtype stats [default: 5s].
    #[arg(long, value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub stats_every: Option<Duration>,
    /// How often this daemon looks for due schedules and fires their slots
    /// (every daemon on a store does; each slot fires once); at most 5s
    /// [default: 1s].
    #[arg(long, value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub schedule_tick: Option<Duration>,
    /// Hand-outs before a job that keeps failing is archived as timeout,
    /// unless its handler says otherwise [default: 10].
    #[arg(long, value_name = "N")]
    pub max_attempts: Option<u32>,
    /// Age after which a job that keeps failing is archived as timeout
    /// [default: 7days].
    #[arg(long, value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub max_age: Option<Duration>,
    /// Longest one run may take [default: 10m].
    #[arg(long, value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub time_limit: Option<Duration>,
    /// First retry delay; doubles per attempt, with jitter [default: 1s].
    #[arg(long, value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub backoff_base: Option<Duration>,
    /// Longest retry delay [default: 1h].
    #[arg(long, value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub backoff_max: Option<Duration>,
    /// Longest wait between two looks at the store for due work, when no
    /// notification comes [default: 1s].
    #[arg(long, value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub poll: Option<Duration>,
    /// Write the job log to FILE: one JSON line per job event (added,
    /// ingested, claimed, started, finished, released, lost), rotated by
    /// size; `-` writes the lines to stderr instead [default: off].
    #[arg(long, env = "JOBSTORE_JOB_LOG", value_name = "FILE")]
    pub job_log: Option<PathBuf>,
    /// Rotate the job log file before a line would take it past this many
    /// bytes [default: 104857600, 100 MiB].
    #[arg(long, value_name = "BYTES")]
    pub job_log_max_bytes: Option<u64>,
    /// Rotated job log files kept, FILE.1 (the newest) to FILE.N; 0 keeps
    /// none [default: 5].
    #[arg(long, value_name = "N")]
    pub job_log_keep: Option<u32>,
    /// Export spans of job events (add, ingest, claim, run, release) over
    /// OTLP/HTTP (protobuf) to this URL: a base URL such as
    /// http://collector:4318, to which /v1/traces is added, or the full
    /// traces URL. Runs then continue the trace from their own span
    /// [default: off].
    #[arg(long, env = "JOBSTORE_OTLP_ENDPOINT", value_name = "URL")]
    pub otlp_endpoint: Option<String>,
}

/// The TOML config file. Every key is optional.
///
/// ```toml
/// store = "postgres://jobs@db/jobs"
/// data_dir = "/var/lib/jobstore"
/// listen = "0.0.0.0:7070"
/// sysid = "node-1"
/// allow_process_handlers = true
///
/// [auth]
/// admin_token_sha256 = "9f86d081…"   # `jobstore token` prints a token and its hash
///
/// [[auth.clients]]
/// name = "acme"
/// token_sha256 = "60303ae2…"
/// ```
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// See [`ServeArgs::store`].
    pub store: Option<String>,
    /// See [`ServeArgs::data_dir`].
    pub data_dir: Option<PathBuf>,
    /// See [`ServeArgs::listen`].
    pub listen: Option<SocketAddr>,
    /// See [`ServeArgs::insecure_listen`].
    pub insecure_listen: Option<bool>,
    /// See [`ServeArgs::sysid`].
    pub sysid: Option<String>,
    /// See [`ServeArgs::sysid_ttl`].
    #[serde(default, with = "opt_duration")]
    pub sysid_ttl: Option<Duration>,
    /// See [`ServeArgs::allow_process_handlers`].
    pub allow_process_handlers: Option<bool>,
    /// See [`ServeArgs::http_allow_hosts`].
    pub http_allow_hosts: Option<Vec<String>>,
    /// See [`ServeArgs::max_body_bytes`].
    pub max_body_bytes: Option<usize>,
    /// See [`ServeArgs::request_timeout`].
    #[serde(default, with = "opt_duration")]
    pub request_timeout: Option<Duration>,
    /// See [`ServeArgs::header_read_timeout`].
    #[serde(default, with = "opt_duration")]
    pub header_read_timeout: Option<Duration>,
    /// See [`ServeArgs::body_read_timeout`].
    #[serde(default, with = "opt_duration")]
    pub body_read_timeout: Option<Duration>,
    /// See [`ServeArgs::idempotent_wait`].
    #[serde(default, with = "opt_duration")]
    pub idempotent_wait: Option<Duration>,
    /// See [`ServeArgs::ingest_batch`].
    pub ingest_batch: Option<usize>,
    /// See [`ServeArgs::shutdown_grace`].
    #[serde(default, with = "opt_duration")]
    pub shutdown_grace: Option<Duration>,
    /// See [`ServeArgs::log_format`].
    pub log_format: Option<LogFormat>,
    /// See [`ServeArgs::no_execute`].
    pub no_execute: Option<bool>,
    /// See [`ServeArgs::max_running`].
    pub max_running: Option<u32>,
    /// See [`ServeArgs::max_running_per_client`].
    pub max_running_per_client: Option<u32>,
    /// See [`ServeArgs::max_running_per_jobtype`].
    pub max_running_per_jobtype: Option<u32>,
    /// See [`ServeArgs::claim_batch`].
    pub claim_batch: Option<u32>,
    /// See [`ServeArgs::lease`].
    #[serde(default, with = "opt_duration")]
    pub lease: Option<Duration>,
    /// See [`ServeArgs::retention`].
    #[serde(default, with = "opt_duration")]
    pub retention: Option<Duration>,
    /// See [`ServeArgs::retention_failed`].
    #[serde(default, with = "opt_duration")]
    pub retention_failed: Option<Duration>,
    /// See [`ServeArgs::purge_every`].
    #[serde(default, with = "opt_duration")]
    pub purge_every: Option<Duration>,
    /// See [`ServeArgs::stats_every`].
    #[serde(default, with = "opt_duration")]
    pub stats_every: Option<Duration>,
    /// See [`ServeArgs::schedule_tick`].
    #[serde(default, with = "opt_duration")]
    pub schedule_tick: Option<Duration>,
    /// See [`ServeArgs::max_attempts`].
    pub max_attempts: Option<u32>,
    /// See [`ServeArgs::max_age`].
    #[serde(default, with = "opt_duration")]
    pub max_age: Option<Duration>,
    /// See [`ServeArgs::time_limit`].
    #[serde(default, with = "opt_duration")]
    pub time_limit: Option<Duration>,
    /// See [`ServeArgs::backoff_base`].
    #[serde(default, with = "opt_duration")]
    pub backoff_base: Option<Duration>,
    /// See [`ServeArgs::backoff_max`].
    #[serde(default, with = "opt_duration")]
    pub backoff_max: Option<Duration>,
    /// See [`ServeArgs::poll`].
    #[serde(default, with = "opt_duration")]
    pub poll: Option<Duration>,
    /// See [`ServeArgs::job_log`].
    pub job_log: Option<PathBuf>,
    /// See [`ServeArgs::job_log_max_bytes`].
    pub job_log_max_bytes: Option<u64>,
    /// See [`ServeArgs::job_log_keep`].
    pub job_log_keep: Option<u32>,
    /// See [`ServeArgs::otlp_endpoint`].
    pub otlp_endpoint: Option<String>,
    /// Tokens.
    #[serde(default)]
    pub auth: FileAuth,
}

/// The `[auth]` table of the config file: SHA-256 hashes of tokens, never
/// the tokens themselves.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileAuth {
    /// Hex SHA-256 of the admin token.
    pub admin_token_sha256: Option<String>,
    /// Clients and their token hashes.
    #[serde(default)]
    pub clients: Vec<FileClient>,
}

/// One `[[auth.clients]]` entry.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileClient {
    /// The client name (the `{client}` of its paths).
    pub name: String,
    /// Hex SHA-256 of its token.
    pub token_sha256: Option<String>,
    /// Several token hashes (to rotate tokens without downtime).
    #[serde(default)]
    pub token_sha256s: Vec<String>,
}

mod opt_duration {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer};

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        let s: Option<String> = Option::deserialize(d)?;
        s.map(|s| {
            humantime::parse_duration(&s)
                .map_err(|e| serde::de::Error::custom(format!("duration {s:?}: {e}")))
        })
        .transpose()
    }
}

/// Why the configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The config file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The config file is not valid TOML or has unknown keys.
    #[error("config file {path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A value is out of range or inconsistent.
    #[error("{0}")]
    Invalid(String),
}

/// The resolved configuration of a daemon.
#[derive(Clone)]
pub struct Config {
    /// Store URL; `None` is the embedded default (SQLite in `data_dir`).
    pub store_url: Option<String>,
    /// Journal, sysid file and default store live here.
    pub data_dir: PathBuf,
    /// Where to listen.
    pub listen: SocketAddr,
    /// Where to write the bound address.
    pub addr_file: Option<PathBuf>,
    /// Listening beyond loopback without tokens is allowed.
    pub insecure_listen: bool,
    /// The sysid, or `None` to use the one kept in the data dir.
    pub sysid: Option<String>,
    /// Sysid reservation length.
    pub sysid_ttl: Duration,
    /// Tokens.
    pub auth: AuthConfig,
    /// `process` handlers may be set over HTTP (by the admin).
    pub allow_process_handlers: bool,
    /// Hosts `http` handlers may call; empty: any.
    pub http_allow_hosts: Vec<String>,
    /// Largest request body.
    pub max_body_bytes: usize,
    /// Longest request.
    pub request_timeout: Duration,
    /// Longest wait for a request's headers (the connection is closed).
    pub header_read_timeout: Duration,
    /// Longest wait for a request's body (answered 408).
    pub body_read_timeout: Duration,
    /// Wait for the store's verdict on client-chosen ids.
    pub idempotent_wait: Duration,
    /// Records per ingest batch.
    pub ingest_batch: usize,
    /// How long a journal reservation lasts before its records are handed
    /// out again.
    pub ingest_reserve_timeout: Duration,
    /// Shutdown grace period.
    pub shutdown_grace: Duration,
    /// Journal segment size.
    pub journal_segment_bytes: u64,
    /// Log format (used by the binary's tracing setup).
    pub log_format: LogFormat,
    /// Run jobs (false: intake only).
    pub execute: bool,
    /// How jobs run.
    pub exec: ExecSettings,
    /// The job log and span export (both off by default).
    pub events: EventsConfig,
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("store_url", &self.store_url.as_deref().map(redact_url))
            .field("data_dir", &self.data_dir)
            .field("listen", &self.listen)
            .field("insecure_listen", &self.insecure_listen)
            .field("sysid", &self.sysid)
            .field("sysid_ttl", &self.sysid_ttl)
            .field("auth", &self.auth)
            .field("allow_process_handlers", &self.allow_process_handlers)
            .field("http_allow_hosts", &self.http_allow_hosts)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("request_timeout", &self.request_timeout)
            .field("header_read_timeout", &self.header_read_timeout)
            .field("body_read_timeout", &self.body_read_timeout)
            .field("idempotent_wait", &self.idempotent_wait)
            .field("ingest_batch", &self.ingest_batch)
            .field("shutdown_grace", &self.shutdown_grace)
            .field("execute", &self.execute)
            .field("exec", &self.exec)
            .field("events", &self.events)
            .finish_non_exhaustive()
    }
}

/// A URL with its password replaced by `***`, for logs.
pub fn redact_url(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) if u.password().is_some() => {
            let _ = u.set_password(Some("***"));
            u.to_string()
        }
        Ok(_) => url.to_owned(),
        Err(_) => "<unparsable URL>".to_owned(),
    }
}

impl Config {
    /// Defaults: everything local, in `data_dir`.
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        Config {
            store_url: None,
            data_dir: data_dir.into(),
            listen: SocketAddr::from(([127, 0, 0, 1], 7070)),
            addr_file: None,
            insecure_listen: false,
            sysid: None,
            sysid_ttl: Duration::from_secs(30),
            auth: AuthConfig::default(),
            allow_process_handlers: false,
            http_allow_hosts: Vec::new(),
            max_body_bytes: 32 << 20,
            request_timeout: Duration::from_secs(30),
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(30),
            idempotent_wait: Duration::from_secs(10),
            ingest_batch: 1000,
            ingest_reserve_timeout: Duration::from_secs(60),
            shutdown_grace: Duration::from_secs(30),
            journal_segment_bytes: 64 << 20,
            log_format: LogFormat::Human,
            execute: true,
            exec: ExecSettings::default(),
            events: EventsConfig::default(),
        }
    }

    /// Reads the file named by `args.config` (if any) and lays the flags
    /// over it.
    pub fn from_args(args: &ServeArgs) -> Result<Self, ConfigError> {
        let file = match &args.config {
            Some(path) => read_file(path)?,
            None => FileConfig::default(),
        };
        Self::resolve(args, file)
    }

    /// Flags over `file` over the defaults, then [`Config::check`].
    pub fn resolve(args: &ServeArgs, file: FileConfig) -> Result<Self, ConfigError> {
        let data_dir = args
            .data_dir
            .clone()
            .or(file.data_dir)
            .unwrap_or_else(|| PathBuf::from("jobstore-data"));
        let d = Config::new(data_dir);
        let mut auth = AuthConfig::default();
        if let Some(hash) = &file.auth.admin_token_sha256 {
            auth.admin.push(
                TokenHash::from_hex(hash)
                    .map_err(|e| ConfigError::Invalid(format!("auth.admin_token_sha256: {e}")))?,
            );
        }
        if let Some(token) = &args.admin_token {
            if token.len() < 16 {
                return Err(ConfigError::Invalid(
                    "the admin token is shorter than 16 characters".to_owned(),
                ));
            }
            auth.admin.push(TokenHash::of(token));
        }
        for c in &file.auth.clients {
            let client = Client::new(&c.name)
                .map_err(|e| ConfigError::Invalid(format!("auth.clients: {e}")))?;
            let hashes = c.token_sha256.iter().chain(&c.token_sha256s);
            let mut parsed = Vec::new();
            for h in hashes {
                parsed.push(TokenHash::from_hex(h).map_err(|e| {
                    ConfigError::Invalid(format!("auth.clients {:?}: {e}", c.name))
                })?);
            }
            if parsed.is_empty() {
                return Err(ConfigError::Invalid(format!(
                    "auth.clients {:?} has no token_sha256",
                    c.name
                )));
            }
            auth.clients.entry(client).or_default().extend(parsed);
        }
        let config = Config {
            store_url: args.store.clone().or(file.store),
            listen: args.listen.or(file.listen).unwrap_or(d.listen),
            addr_file: args.addr_file.clone(),
            insecure_listen: args.insecure_listen || file.insecure_listen.unwrap_or(false),
            sysid: args.sysid.clone().or(file.sysid),
            sysid_ttl: args.sysid_ttl.or(file.sysid_ttl).unwrap_or(d.sysid_ttl),
            auth,
            allow_process_handlers: args.allow_process_handlers
                || file.allow_process_handlers.unwrap_or(false),
            http_allow_hosts: if args.http_allow_hosts.is_empty() {
                file.http_allow_hosts.unwrap_or_default()
            } else {
                args.http_allow_hosts.clone()
            },
            max_body_bytes: args
                .max_body_bytes
                .or(file.max_body_bytes)
                .unwrap_or(d.max_body_bytes),
            request_timeout: args
                .request_timeout
                .or(file.request_timeout)
                .unwrap_or(d.request_timeout),
            header_read_timeout: args
                .header_read_timeout
                .or(file.header_read_timeout)
                .unwrap_or(d.header_read_timeout),
            body_read_timeout: args
                .body_read_timeout
                .or(file.body_read_timeout)
                .unwrap_or(d.body_read_timeout),
            idempotent_wait: args
                .idempotent_wait
                .or(file.idempotent_wait)
                .unwrap_or(d.idempotent_wait),
            ingest_batch: args
                .ingest_batch
                .or(file.ingest_batch)
                .unwrap_or(d.ingest_batch),
            shutdown_grace: args
                .shutdown_grace
                .or(file.shutdown_grace)
                .unwrap_or(d.shutdown_grace),
            log_format: args.log_format.or(file.log_format).unwrap_or_default(),
            execute: !(args.no_execute || file.no_execute.unwrap_or(false)),
            events: EventsConfig {
                job_log: args.job_log.clone().or(file.job_log).map(|path| {
                    let d = JobLogConfig::new(&path);
                    JobLogConfig {
                        max_bytes: args
                            .job_log_max_bytes
                            .or(file.job_log_max_bytes)
                            .unwrap_or(d.max_bytes),
                        keep: args.job_log_keep.or(file.job_log_keep).unwrap_or(d.keep),
                        ..d
                    }
                }),
                otlp: args
                    .otlp_endpoint
                    .clone()
                    .or(file.otlp_endpoint)
                    .map(OtlpConfig::new),
            },
            exec: {
                let e = ExecSettings::default();
                let max_running = args
                    .max_running
                    .or(file.max_running)
                    .unwrap_or(e.scheduler.max_running);
                let dl = e.limits;
                ExecSettings {
                    lease: args.lease.or(file.lease).unwrap_or(e.lease),
                    scheduler: SchedulerConfig {
                        max_running,
                        max_running_per_tenant: args
                            .max_running_per_client
                            .or(file.max_running_per_client),
                        max_running_per_jobtype: args
                            .max_running_per_jobtype
                            .or(file.max_running_per_jobtype)
                            .or(SchedulerConfig::with_slots(max_running).max_running_per_jobtype),
                        max_batch: args
                            .claim_batch
                            .or(file.claim_batch)
                            .unwrap_or(e.scheduler.max_batch),
                        ..SchedulerConfig::with_slots(max_running)
                    },
                    limits: Limits {
                        max_attempts: args
                            .max_attempts
                            .or(file.max_attempts)
                            .unwrap_or(dl.max_attempts),
                        max_age: args.max_age.or(file.max_age).unwrap_or(dl.max_age),
                        time_limit: args.time_limit.or(file.time_limit).unwrap_or(dl.time_limit),
                        backoff_base: args
                            .backoff_base
                            .or(file.backoff_base)
                            .unwrap_or(dl.backoff_base),
                        backoff_max: args
                            .backoff_max
                            .or(file.backoff_max)
                            .unwrap_or(dl.backoff_max),
                    },
                    retention: Some(
                        args.retention
                            .or(file.retention)
                            .unwrap_or(e.retention.unwrap_or(Duration::from_secs(7 * 24 * 3600))),
                    ),
                    retention_failed: args
                        .retention_failed
                        .or(file.retention_failed)
                        .or(e.retention_failed),
                    purge_every: args
                        .purge_every
                        .or(file.purge_every)
                        .unwrap_or(e.purge_every),
                    stats_every: args
                        .stats_every
                        .or(file.stats_every)
                        .unwrap_or(e.stats_every),
                    schedule_tick: args
                        .schedule_tick
                        .or(file.schedule_tick)
                        .unwrap_or(e.schedule_tick),
                    poll: args.poll.or(file.poll).unwrap_or(e.poll),
                    ..e
                }
            },
            ..d
        };
        config.check()?;
        Ok(config)
    }

    /// Refuses inconsistent settings: listening beyond loopback with no
    /// tokens (unless `insecure_listen`), zero sizes, a sysid TTL too short
    /// to renew.
    pub fn check(&self) -> Result<(), ConfigError> {
        if !self.listen.ip().is_loopback() && !self.auth.enabled() && !self.insecure_listen {
            return Err(ConfigError::Invalid(format!(
                "refusing to listen on {} with no tokens configured: anyone who can reach it \
                 could add jobs and set handlers. Configure tokens ([auth] in the config file, \
                 or JOBSTORE_ADMIN_TOKEN), listen on 127.0.0.1, or pass --insecure-listen",
                self.listen
            )));
        }
        if self.header_read_timeout.is_zero() || self.body_read_timeout.is_zero() {
            return Err(ConfigError::Invalid(
                "header_read_timeout and body_read_timeout must be above 0".into(),
            ));
        }
        if self.max_body_bytes == 0 {
            return Err(ConfigError::Invalid(
                "max_body_bytes must be above 0".into(),
            ));
        }
        if !(1..=jobstore_api::limits::MAX_BATCH).contains(&self.ingest_batch) {
            return Err(ConfigError::Invalid(format!(
                "ingest_batch must be within 1..={}",
                jobstore_api::limits::MAX_BATCH
            )));
        }
        if self.sysid_ttl < Duration::from_secs(1)
            || self.sysid_ttl > jobstore_api::limits::MAX_LEASE
        {
            return Err(ConfigError::Invalid(
                "sysid_ttl must be within 1s..=7days".into(),
            ));
        }
        let e = &self.exec;
        if e.purge_every.is_zero() {
            return Err(ConfigError::Invalid("purge_every must be above 0".into()));
        }
        if e.stats_every.is_zero() {
            return Err(ConfigError::Invalid("stats_every must be above 0".into()));
        }
        if e.schedule_tick.is_zero() || e.schedule_tick > Duration::from_secs(5) {
            return Err(ConfigError::Invalid(
                "schedule_tick must be within 1ms..=5s (a slot is on time within two ticks)".into(),
            ));
        }
        if e.scheduler.max_running == 0 || e.scheduler.max_batch == 0 {
            return Err(ConfigError::Invalid(
                "max_running and claim_batch must be above 0".into(),
            ));
        }
        if e.scheduler.max_batch as usize > jobstore_api::limits::MAX_CLAIM {
            return Err(ConfigError::Invalid(format!(
                "claim_batch must be at most {}",
                jobstore_api::limits::MAX_CLAIM
            )));
        }
        if e.lease < Duration::from_millis(300) || e.lease > jobstore_api::limits::MAX_LEASE {
            return Err(ConfigError::Invalid(
                "lease must be within 300ms..=7days".into(),
            ));
        }
        if e.limits.max_attempts == 0 {
            return Err(ConfigError::Invalid("max_attempts must be above 0".into()));
        }
        if e.limits.backoff_base > e.limits.backoff_max
            || e.limits.backoff_max > jobstore_api::limits::MAX_DELAY
        {
            return Err(ConfigError::Invalid(
                "backoff_base must not exceed backoff_max, nor backoff_max 100 years".into(),
            ));
        }
        if e.limits.time_limit.is_zero() || e.poll.is_zero() {
            return Err(ConfigError::Invalid(
                "time_limit and poll must be above 0".into(),
            ));
        }
        if let Some(log) = &self.events.job_log
            && log.max_bytes == 0
        {
            return Err(ConfigError::Invalid(
                "job_log_max_bytes must be above 0".into(),
            ));
        }
        if let Some(otlp) = &self.events.otlp {
            otlp.traces_url().map_err(|e| {
                ConfigError::Invalid(format!("otlp_endpoint {:?}: {e}", otlp.endpoint))
            })?;
        }
        if let Some(sysid) = &self.sysid {
            jobstore_api::validate::sysid(sysid)
                .map_err(|e| ConfigError::Invalid(format!("sysid: {e}")))?;
        }
        Ok(())
    }

    /// The journal's directory.
    pub fn journal_dir(&self) -> PathBuf {
        self.data_dir.join("journal")
    }
}

fn read_file(path: &Path) -> Result<FileConfig, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_owned(),
        source,
    })?;
    toml::from_str(&text).map_err(|e| ConfigError::Parse {
        path: path.to_owned(),
        message: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_win_over_the_file() {
        let file: FileConfig = toml::from_str(
            r#"
            store = "memory://"
            listen = "127.0.0.1:9000"
            sysid_ttl = "45s"
            ingest_batch = 10
            retention = "1day"
            retention_failed = "2days"
            [auth]
            admin_token_sha256 = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
            [[auth.clients]]
            name = "acme"
            token_sha256 = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
            "#,
        )
        .unwrap();
        let args = ServeArgs {
            listen: Some("127.0.0.1:0".parse().unwrap()),
            ..ServeArgs::default()
        };
        let c = Config::resolve(&args, file).unwrap();
        assert_eq!(c.store_url.as_deref(), Some("memory://"));
        assert_eq!(c.listen.port(), 0);
        assert_eq!(c.sysid_ttl, Duration::from_secs(45));
        assert_eq!(c.exec.retention, Some(Duration::from_secs(86_400)));
        assert_eq!(
            c.exec.retention_failed,
            Some(Duration::from_secs(2 * 86_400))
        );
        let flagged = ServeArgs {
            retention_failed: Some(Duration::from_secs(60)),
            ..ServeArgs::default()
        };
        let f = Config::resolve(&flagged, FileConfig::default()).unwrap();
        assert_eq!(f.exec.retention_failed, Some(Duration::from_secs(60)));
        assert_eq!(f.exec.retention, Some(Duration::from_secs(7 * 86_400)));
        let d = Config::resolve(&ServeArgs::default(), FileConfig::default()).unwrap();
        assert_eq!(
            d.exec.retention_failed,
            Some(Duration::from_secs(30 * 86_400))
        );
        assert_eq!(c.ingest_batch, 10);
        assert!(c.auth.enabled());
        assert_eq!(c.auth.clients.len(), 1);
    }

    #[test]
    fn job_log_and_otlp_from_flags_and_the_file() {
        let file: FileConfig = toml::from_str(
            r#"
            job_log = "/var/log/jobstore/jobs.log"
            job_log_max_bytes = 1000
            job_log_keep = 3
            otlp_endpoint = "http://collector:4318"
            "#,
        )
        .unwrap();
        let c = Config::resolve(&ServeArgs::default(), file.clone()).unwrap();
        let log = c.events.job_log.unwrap();
        assert_eq!(
            log.target,
            crate::events::log::JobLogTarget::File("/var/log/jobstore/jobs.log".into())
        );
        assert_eq!((log.max_bytes, log.keep), (1000, 3));
        assert_eq!(c.events.otlp.unwrap().endpoint, "http://collector:4318");
        let args = ServeArgs {
            job_log: Some("-".into()),
            job_log_keep: Some(0),
            ..ServeArgs::default()
        };
        let c = Config::resolve(&args, file).unwrap();
        let log = c.events.job_log.unwrap();
        assert_eq!(log.target, crate::events::log::JobLogTarget::Stderr);
        assert_eq!((log.max_bytes, log.keep), (1000, 0));
        let off = Config::resolve(&ServeArgs::default(), FileConfig::default()).unwrap();
        assert!(!off.events.any());
        for bad in [
            "otlp_endpoint = 'collector:4318'",
            "otlp_endpoint = 'grpc://collector:4317'",
            "job_log = 'x'\njob_log_max_bytes = 0",
        ] {
            let file: FileConfig = toml::from_str(bad).unwrap();
            let err = Config::resolve(&ServeArgs::default(), file).unwrap_err();
            assert!(
                err.to_string().contains(if bad.contains("otlp") {
                    "otlp_endpoint"
                } else {
                    "job_log_max_bytes"
                }),
                "{err}"
            );
        }
    }

    #[test]
    fn unknown_keys_and_bad_values_are_refused() {
        assert!(toml::from_str::<FileConfig>("stor = 'x'").is_err());
        assert!(toml::from_str::<FileConfig>("sysid_ttl = 'soon'").is_err());
        let file: FileConfig = toml::from_str("[auth]\nadmin_token_sha256 = 'abc'").unwrap();
        assert!(Config::resolve(&ServeArgs::default(), file).is_err());
        let file: FileConfig = toml::from_str("[[auth.clients]]\nname = 'a-b'\ntoken_sha256 = '9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08'").unwrap();
        assert!(Config::resolve(&ServeArgs::default(), file).is_err());
    }

    #[test]
    fn public_listen_needs_tokens_or_the_insecure_flag() {
        let public: SocketAddr = "0.0.0.0:7070".parse().unwrap();
        let args = ServeArgs {
            listen: Some(public),
            ..ServeArgs::default()
        };
        let err = Config::resolve(&args, FileConfig::default()).unwrap_err();
        assert!(err.to_string().contains("refusing to listen"), "{err}");
        let insecure = ServeArgs {
            insecure_listen: true,
            ..args.clone()
        };
        Config::resolve(&insecure, FileConfig::default()).unwrap();
        let with_token = ServeArgs {
            admin_token: Some("a-long-enough-admin-token".into()),
            ..args
        };
        Config::resolve(&with_token, FileConfig::default()).unwrap();
    }

    #[test]
    fn debug_hides_passwords_and_tokens() {
        let mut c = Config::new("d");
        c.store_url = Some("postgres://u:secret@h/db".into());
        c.auth.admin.push(TokenHash::of("supersecrettoken"));
        let s = format!("{c:?}");
        assert!(!s.contains("secret@"), "{s}");
        assert!(!s.contains("supersecrettoken"), "{s}");
    }
}
