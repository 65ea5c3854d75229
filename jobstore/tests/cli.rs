//! The `jobstore` client subcommands against a real daemon: output, JSON
//! mode, batches from files and stdin, and exit codes.

mod support;

use std::io::Write;
use std::process::{Command, Output, Stdio};

use serde_json::Value;
use support::*;

fn jobstore(url: &str, args: &[&str]) -> Output {
    jobstore_with(url, args, None, &[])
}

fn jobstore_with(url: &str, args: &[&str], stdin: Option<&[u8]>, env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.args(args)
        .env("JOBSTORE_URL", url)
        .env_remove("JOBSTORE_TOKEN")
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    if let Some(input) = stdin {
        child.stdin.take().unwrap().write_all(input).unwrap();
    }
    child.wait_with_output().unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn ok(o: Output) -> String {
    assert!(
        o.status.success(),
        "exit {:?}\nstdout: {}\nstderr: {}",
        o.status.code(),
        stdout(&o),
        String::from_utf8_lossy(&o.stderr)
    );
    stdout(&o)
}

#[test]
fn client_commands() {
    let dir = tempfile::tempdir().unwrap();
    let d = DaemonProc::start(dir.path(), &Start::intake(None));
    let u = d.url.as_str();

    // Payloads as arguments: one id per line.
    let out = ok(jobstore(u, &["add", "acme", "mail", "first", "second"]));
    let arg_ids: Vec<&str> = out.lines().collect();
    assert_eq!(arg_ids.len(), 2, "{out}");

    // --json
    let out = ok(jobstore(
        u,
        &["add", "acme", "mail", "third", "--json", "--priority", "-2"],
    ));
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["ids"].as_array().unwrap().len(), 1);

    // A file sent in batches (2,500 lines in batches of 1,000), and stdin.
    let file = dir.path().join("payloads.txt");
    let lines: String = (0..2500).map(|i| format!("payload {i}\n")).collect();
    std::fs::write(&file, &lines).unwrap();
    let out = ok(jobstore(
        u,
        &[
            "add",
            "acme",
            "bulk",
            "--file",
            file.to_str().unwrap(),
            "--batch",
            "1000",
        ],
    ));
    assert_eq!(out.lines().count(), 2500);
    let out = ok(jobstore_with(
        u,
        &["add", "acme", "bulk", "-q"],
        Some(b"a\nb\nc\n"),
        &[],
    ));
    assert_eq!(out, "");

    // job: table and JSON.
    let id = arg_ids[0];
    let job = support::block_on(eventually(
        std::time::Duration::from_secs(30),
        "job ingested",
        || async {
            let o = jobstore(u, &["job", "acme", id, "--json"]);
            o.status.success().then(|| stdout(&o))
        },
    ));
    let v: Value = serde_json::from_str(&job).unwrap();
    assert_eq!(v["data"], "first");
    let table = ok(jobstore(u, &["job", "acme", id]));
    assert!(
        table.contains("waiting") && table.contains("first"),
        "{table}"
    );

    // handler set / get / list / delete.
    ok(jobstore(
        u,
        &[
            "handler",
            "set",
            "acme",
            "mail",
            "--method",
            "http",
            "http://127.0.0.1:9/x",
        ],
    ));
    let out = ok(jobstore(u, &["handler", "get", "acme", "mail"]));
    assert!(out.contains("http://127.0.0.1:9/x"), "{out}");
    let out = ok(jobstore(u, &["handler", "list", "acme", "--json"]));
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["handlers"][0]["type"], "mail");
    ok(jobstore(u, &["handler", "delete", "acme", "mail"]));

    // cancel and stats.
    let out = ok(jobstore(u, &["cancel", "acme", arg_ids[1]]));
    assert!(out.contains("cancelled"), "{out}");
    let out = ok(jobstore(u, &["stats", "acme", "--json"]));
    let v: Value = serde_json::from_str(&out).unwrap();
    let mail = v["jobtypes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["type"] == "mail")
        .unwrap();
    assert_eq!(mail["archived"]["cancelled"], 1);
    let out = ok(jobstore(u, &["stats"]));
    assert!(out.contains("bulk") && out.contains("acme"), "{out}");

    // Exit codes say what went wrong.
    let code = |o: Output| o.status.code().unwrap();
    assert_eq!(
        code(jobstore(u, &["job", "acme", "no-such-job"])),
        3,
        "not found"
    );
    assert_eq!(code(jobstore(u, &["handler", "get", "acme", "nothing"])), 3);
    assert_eq!(
        code(jobstore(u, &["add", "acme", "bad*type", "x"])),
        5,
        "invalid jobtype"
    );
    assert_eq!(
        code(jobstore(u, &["add", "a-b", "t", "x"])),
        5,
        "invalid client"
    );
    assert_eq!(
        code(jobstore(u, &["cancel", "acme", "no-such-job"])),
        3,
        "nothing cancelled"
    );
    assert_eq!(
        code(jobstore("http://127.0.0.1:1", &["job", "acme", "x"])),
        7,
        "unreachable"
    );
    assert_eq!(code(jobstore(u, &["add"])), 2, "usage");
    let o = jobstore(u, &["job", "acme", "no-such-job"]);
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("no job"),
        "the daemon's message is shown"
    );
}

#[test]
fn tokens_and_auth_exit_codes() {
    use jobstore_daemon::auth::TokenHash;
    let dir = tempfile::tempdir().unwrap();
    let cfg = token_config(
        &dir.path().join("c.toml"),
        "",
        None,
        &[("acme", "acme-token")],
    );
    let d = DaemonProc::start(
        &dir.path().join("data"),
        &Start::intake(None)
            .arg("--config")
            .arg(cfg.to_str().unwrap()),
    );
    let u = d.url.as_str();
    let o = jobstore(u, &["add", "acme", "t", "x"]);
    assert_eq!(o.status.code(), Some(4), "no token");
    let o = jobstore_with(
        u,
        &["add", "acme", "t", "x"],
        None,
        &[("JOBSTORE_TOKEN", "nope")],
    );
    assert_eq!(o.status.code(), Some(4), "wrong token");
    ok(jobstore_with(
        u,
        &["add", "acme", "t", "x"],
        None,
        &[("JOBSTORE_TOKEN", "acme-token")],
    ));
    let o = jobstore_with(u, &["stats"], None, &[("JOBSTORE_TOKEN", "acme-token")]);
    assert_eq!(
        o.status.code(),
        Some(4),
        "every client's stats need the admin"
    );

    // `jobstore token` prints a token and the hash the config wants.
    let out = ok(jobstore(u, &["token"]));
    let token = out
        .lines()
        .find_map(|l| l.strip_prefix("token:  "))
        .unwrap();
    let hash = out
        .lines()
        .find_map(|l| l.strip_prefix("sha256: "))
        .unwrap();
    assert_eq!(TokenHash::of(token).to_hex(), hash);
}
