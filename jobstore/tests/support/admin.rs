//! The admin's view of a daemon under test: its HTTP API with the admin
//! token, and the `jobstore` command line against it.

use std::process::{Command, Output, Stdio};

use serde_json::Value;

use super::{BIN, Start, http, ids, json};

pub const ADMIN: &str = "admin-token-for-tests";

/// A daemon on `store` with the admin token, process handlers allowed and
/// a short poll.
pub fn admin_runner(store: Option<&str>) -> Start<'_> {
    Start::store(store)
        .env("JOBSTORE_ADMIN_TOKEN", ADMIN)
        .arg("--allow-process-handlers")
        .arg("--poll")
        .arg("200ms")
}

/// The `jobstore` command line against `url` with the admin token.
pub fn cli(url: &str, args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env("JOBSTORE_URL", url)
        .env("JOBSTORE_TOKEN", ADMIN)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .unwrap()
}

pub fn cli_json(url: &str, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    let out = cli(url, &all);
    assert!(
        out.status.success(),
        "jobstore {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "jobstore {args:?} printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

pub struct Api {
    c: reqwest::Client,
    url: String,
}

impl Api {
    pub fn new(url: &str) -> Api {
        Api {
            c: http(),
            url: url.to_owned(),
        }
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        json(self.c.get(format!("{}{path}", self.url)).bearer_auth(ADMIN)).await
    }

    pub async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        json(
            self.c
                .post(format!("{}{path}", self.url))
                .bearer_auth(ADMIN)
                .json(&body),
        )
        .await
    }

    pub async fn handler(&self, jobtype: &str, spec: Value) {
        let (s, v) = self
            .post(&format!("/acme/handler/add/{jobtype}/add"), spec)
            .await;
        assert_eq!(s, 200, "set handler: {v}");
    }

    pub async fn add(&self, jobtype: &str, query: &str, payloads: &[String]) -> Vec<String> {
        let (s, v) = json(
            self.c
                .post(format!("{}/acme/job/{jobtype}/add?{query}", self.url))
                .bearer_auth(ADMIN)
                .body(payloads.join("\n")),
        )
        .await;
        assert_eq!(s, 200, "add: {v}");
        ids(&v)
    }

    pub async fn job(&self, id: &str) -> Value {
        self.get(&format!("/acme/jobs/{id}")).await.1
    }

    pub async fn archived_count(&self, jobtype: &str, code: &str) -> u64 {
        let (_, v) = self.get("/acme/stats").await;
        v["jobtypes"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|j| j["type"] == jobtype)
            .and_then(|j| j["archived"][code].as_u64())
            .unwrap_or(0)
    }
}
