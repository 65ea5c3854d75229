//! The dashboard in a real browser (Chromium through ChromeDriver), on the
//! real binary: sign in, see counts move as jobs run, filter failed jobs,
//! open one, run a failure group again and see it turn ok, pause and
//! resume, a client's token that cannot see another client, no token in a
//! URL or the log, and no serious accessibility violation (axe-core, run in
//! the same browser) on any page.
//!
//! Needs `chromium` and `chromium-driver` (Debian's packages;
//! `JOBSTORE_CHROMEDRIVER` and `JOBSTORE_CHROMIUM` override the paths) and
//! axe-core (`.ci/node/node_modules/axe-core/axe.min.js`, from `npm install
//! --prefix .ci/node axe-core`, or `JOBSTORE_AXE_JS`). Skipped with a
//! notice when they are missing, unless `JOBSTORE_REQUIRE_BACKENDS` names
//! `browser`. With `JOBSTORE_SCREENSHOTS=DIR` the test saves the pages the
//! README shows (`scripts/screenshots.sh`).

mod support;

use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, Locator};
use jobstore_conformance::services;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};
use support::*;

const ADMIN: &str = "dashboard-admin-token-0123456789";
const ACME: &str = "dashboard-acme-token-0123456789";
const OTHER: &str = "dashboard-other-token-0123456789";
const WAIT: Duration = Duration::from_secs(60);

/// What the browser test needs, or why it cannot run.
struct Tools {
    chromedriver: PathBuf,
    chromium: PathBuf,
    axe: String,
}

fn tools() -> Result<Tools, String> {
    let path = |var: &str, default: &str| {
        std::env::var_os(var).map_or_else(|| PathBuf::from(default), PathBuf::from)
    };
    let chromedriver = path("JOBSTORE_CHROMEDRIVER", "/usr/bin/chromedriver");
    let chromium = path("JOBSTORE_CHROMIUM", "/usr/bin/chromium");
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let axe = path(
        "JOBSTORE_AXE_JS",
        workspace
            .join(".ci/node/node_modules/axe-core/axe.min.js")
            .to_str()
            .unwrap(),
    );
    for p in [&chromedriver, &chromium, &axe] {
        if !p.exists() {
            return Err(format!("{} is missing", p.display()));
        }
    }
    let axe = std::fs::read_to_string(&axe).map_err(|e| format!("{}: {e}", axe.display()))?;
    Ok(Tools {
        chromedriver,
        chromium,
        axe,
    })
}

/// A ChromeDriver process on a free port, in a process group of its own
/// with the browsers it starts: dropping it (also when a test fails before
/// closing its sessions) kills the whole group, so no browser outlives it.
struct Driver {
    child: Child,
    url: String,
}

impl Driver {
    async fn start(tools: &Tools) -> Driver {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(&tools.chromedriver)
            .arg(format!("--port={port}"))
            .process_group(0)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let url = format!("http://127.0.0.1:{port}");
        let c = http();
        eventually(WAIT, "chromedriver ready", || async {
            let r = c.get(format!("{url}/status")).send().await.ok()?;
            let v: Value = r.json().await.ok()?;
            v["value"]["ready"].as_bool().filter(|r| *r)
        })
        .await;
        Driver { child, url }
    }

    /// A new headless browser session.
    async fn browser(&self, tools: &Tools) -> Client {
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".into(),
            json!({
                "binary": tools.chromium,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--window-size=1280,1000"],
            }),
        );
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        Client::with_capabilities_and_connector(&self.url, &caps, connector)
            .await
            .expect("a browser session")
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let group = Pid::from_raw(-(self.child.id() as i32));
        let _ = kill(group, Signal::SIGKILL);
        let _ = self.child.wait();
    }
}

/// The text of the page's `<main>` and status line.
async fn page_text(b: &Client) -> String {
    let main = b
        .find(Locator::Css("main"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let status = b
        .find(Locator::Css("#status"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    format!("{status}\n{main}")
}

/// Waits until the page shows `needle` (reloading nothing: the page
/// refreshes itself, or the caller navigated).
async fn wait_for_text(b: &Client, needle: &str) -> String {
    let deadline = Instant::now() + WAIT;
    loop {
        let text = page_text(b).await;
        if text.contains(needle) {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "the page never showed {needle:?}; it shows:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn go(b: &Client, base: &str, hash: &str) {
    b.goto(&format!("{base}/ui/{hash}")).await.unwrap();
}

async fn sign_in(b: &Client, base: &str, token: &str, who: &str) {
    go(b, base, "").await;
    let field = b
        .wait()
        .at_most(WAIT)
        .for_element(Locator::Css("#token"))
        .await
        .unwrap();
    field.send_keys(token).await.unwrap();
    b.find(Locator::Css("form.signin button"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_for_text(b, "Overview").await;
    let shown = b
        .find(Locator::Css("#who"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        shown.contains(who),
        "signed in as {shown:?}, wanted {who:?}"
    );
}

/// Clicks the button labelled `label` in the table row that contains
/// `row_text`, and accepts the confirmation, returning its text.
async fn click_in_row(b: &Client, row_text: &str, label: &str) -> String {
    let rows = b.find_all(Locator::Css("main tbody tr")).await.unwrap();
    for row in rows {
        if !row.text().await.unwrap().contains(row_text) {
            continue;
        }
        for button in row.find_all(Locator::Css("button")).await.unwrap() {
            if button.text().await.unwrap() == label {
                button.click().await.unwrap();
                return accept(b).await;
            }
        }
    }
    panic!(
        "no {label:?} button in a row with {row_text:?}:\n{}",
        page_text(b).await
    );
}

/// Accepts the confirmation dialog that is (or is about to be) open.
async fn accept(b: &Client) -> String {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Ok(text) = b.get_alert_text().await {
            b.accept_alert().await.unwrap();
            return text;
        }
        assert!(Instant::now() < deadline, "no confirmation was asked");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Runs axe-core on the current page: no serious or critical violation.
async fn check_accessibility(b: &Client, tools: &Tools, page: &str) {
    b.execute(&format!("{}\nreturn true;", tools.axe), vec![])
        .await
        .expect("load axe-core");
    let found = b
        .execute_async(
            "const done = arguments[arguments.length - 1];
             axe.run(document, { resultTypes: ['violations'] })
               .then(r => done(r.violations.map(v => ({
                   id: v.id, impact: v.impact, help: v.help,
                   nodes: v.nodes.map(n => n.target.join(' ')) }))))
               .catch(e => done([{ id: 'axe-error', impact: 'critical', help: String(e), nodes: [] }]));",
            vec![],
        )
        .await
        .expect("run axe-core");
    let serious: Vec<&Value> = found
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| matches!(v["impact"].as_str(), Some("serious" | "critical")))
        .collect();
    let all: Vec<String> = found
        .as_array()
        .unwrap()
        .iter()
        .map(|v| format!("{} ({}): {}", v["id"], v["impact"], v["nodes"]))
        .collect();
    report(format!(
        "axe-core on the {page} page: {} violation(s), {} serious or critical {all:?}",
        all.len(),
        serious.len()
    ));
    assert!(
        serious.is_empty(),
        "axe-core on the {page} page: {serious:#?}"
    );
}

async fn screenshot(b: &Client, name: &str) {
    let Some(dir) = std::env::var_os("JOBSTORE_SCREENSHOTS") else {
        return;
    };
    b.execute("window.scrollTo(0, 0); return true;", vec![])
        .await
        .unwrap();
    let png = b.screenshot().await.expect("screenshot");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(Path::new(&dir).join(name), png).unwrap();
}

async fn add(base: &str, token: &str, client: &str, jobtype: &str, payloads: &[String]) {
    let (s, v) = json(
        http()
            .post(format!("{base}/{client}/job/{jobtype}/add"))
            .bearer_auth(token)
            .body(payloads.join("\n")),
    )
    .await;
    assert_eq!(s, 200, "add: {v}");
}

async fn set_handler(base: &str, token: &str, client: &str, jobtype: &str, body: &str) {
    let (s, v) = json(
        http()
            .post(format!("{base}/{client}/handler/add/{jobtype}/add"))
            .bearer_auth(token)
            .json(&json!({"method": "process", "body": body})),
    )
    .await;
    assert_eq!(s, 200, "set handler: {v}");
}

async fn archived(base: &str, jobtype: &str, code: &str) -> u64 {
    let (_, v) = json(http().get(format!("{base}/acme/stats")).bearer_auth(ADMIN)).await;
    v["jobtypes"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|j| j["type"] == jobtype)
        .and_then(|j| j["archived"][code].as_u64())
        .unwrap_or(0)
}

#[test]
fn dashboard_in_a_real_browser() {
    let tools = match tools() {
        Ok(t) => t,
        Err(why) => {
            services::skip::<()>("browser", &why);
            return;
        }
    };
    block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let fixed = dir.path().join("fixed");
        let config = token_config(
            &dir.path().join("jobstore.toml"),
            "",
            Some(ADMIN),
            &[("acme", ACME), ("other", OTHER)],
        );
        let d = DaemonProc::start(
            &dir.path().join("data"),
            &Start::store(None)
                .arg("--config")
                .arg(config.to_str().unwrap())
                .arg("--allow-process-handlers")
                .arg("--poll")
                .arg("200ms")
                .env("FIXED", fixed.to_str().unwrap()),
        );
        let base = d.url.clone();

        // The page's own answers: a strict policy, no framing, no sniffing.
        let r = http().get(format!("{base}/ui/")).send().await.unwrap();
        assert_eq!(r.status(), 200);
        let csp = r.headers()["content-security-policy"]
            .to_str()
            .unwrap()
            .to_owned();
        assert!(
            csp.contains("default-src 'none'") && csp.contains("script-src 'self'"),
            "{csp}"
        );
        assert_eq!(r.headers()["x-frame-options"], "DENY");
        let r = http().get(format!("{base}/")).send().await.unwrap();
        assert_eq!(r.url().path(), "/ui/", "/ leads to the dashboard");

        set_handler(
            &base,
            ADMIN,
            "acme",
            "mail",
            "read n; sleep 0.05; echo sent $n",
        )
        .await;
        set_handler(
            &base,
            ADMIN,
            "acme",
            "import",
            r#"read n
if [ -f "$FIXED" ] || [ $((n % 5)) -ne 0 ]; then echo "imported $n"; else echo "S: 404"; echo "connection refused: db:5432"; fi"#,
        )
        .await;
        add(&base, OTHER, "other", "secret", &["hidden".into()]).await;

        let driver = Driver::start(&tools).await;
        let b = driver.browser(&tools).await;

        // Sign in as the admin; counts move as jobs run.
        sign_in(&b, &base, ADMIN, "admin").await;
        let url = b.current_url().await.unwrap();
        assert!(
            !url.as_str().contains(ADMIN),
            "the token is in the URL {url}"
        );
        add(
            &base,
            ADMIN,
            "acme",
            "mail",
            &(0..20).map(|n| n.to_string()).collect::<Vec<_>>(),
        )
        .await;
        wait_for_text(&b, "ok 20").await;
        check_accessibility(&b, &tools, "overview").await;

        // 50 imports, 10 fail: filter the failed ones, open one.
        add(
            &base,
            ADMIN,
            "acme",
            "import",
            &(0..50).map(|n| n.to_string()).collect::<Vec<_>>(),
        )
        .await;
        eventually(WAIT, "50 imports archived", || async {
            (archived(&base, "import", "ok").await + archived(&base, "import", "failed").await
                == 50)
                .then_some(())
        })
        .await;
        go(
            &b,
            &base,
            "#/jobs?client=acme&type=import&state=archived&code=failed",
        )
        .await;
        wait_for_text(&b, "archived jobs of acme").await;
        let rows = b.find_all(Locator::Css("main tbody tr")).await.unwrap();
        assert_eq!(rows.len(), 10, "{}", page_text(&b).await);
        check_accessibility(&b, &tools, "jobs").await;
        screenshot(&b, "jobs.png").await;
        b.find(Locator::Css("main tbody tr a"))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
        let text = wait_for_text(&b, "History").await;
        assert!(text.contains("connection refused: db:5432"), "{text}");
        assert!(text.contains("archived: failed 404"), "{text}");
        assert!(text.contains("claimed"), "{text}");
        check_accessibility(&b, &tools, "job").await;
        screenshot(&b, "failed-job.png").await;

        // The failure group: run it again once fixed; it turns ok.
        go(&b, &base, "#/failures?client=acme").await;
        let text = wait_for_text(&b, "grouped by jobtype").await;
        assert!(
            text.contains("10 import failed 404 connection refused: db:5432"),
            "{text}"
        );
        check_accessibility(&b, &tools, "failures").await;
        std::fs::write(&fixed, "").unwrap();
        let asked = click_in_row(&b, "connection refused", "Run again").await;
        assert_eq!(
            asked, "Run again 10 job(s)?",
            "the dry-run count comes first"
        );
        wait_for_text(&b, "Run again: 10 done").await;
        eventually(WAIT, "the group turned ok", || async {
            (archived(&base, "import", "ok").await == 50).then_some(())
        })
        .await;
        assert_eq!(archived(&base, "import", "failed").await, 0);

        // Pause and resume from the overview.
        go(&b, &base, "#/").await;
        wait_for_text(&b, "Client acme").await;
        let asked = click_in_row(&b, "mail", "Pause").await;
        assert!(asked.contains("Pause mail"), "{asked}");
        wait_for_text(&b, "Paused mail.").await;
        let (_, paused) = json(http().get(format!("{base}/acme/paused")).bearer_auth(ADMIN)).await;
        assert_eq!(paused["paused"], json!(["mail"]), "{paused}");
        add(&base, ADMIN, "acme", "mail", &["held".into()]).await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(
            archived(&base, "mail", "ok").await,
            20,
            "a paused jobtype runs nothing"
        );
        screenshot(&b, "overview.png").await;
        click_in_row(&b, "mail", "Resume").await;
        wait_for_text(&b, "Resumed mail.").await;
        eventually(WAIT, "the held job ran", || async {
            (archived(&base, "mail", "ok").await == 21).then_some(())
        })
        .await;

        // Schedules: listed with their next slots; pause, resume, run now.
        let (st, v) = json(
            http()
                .put(format!("{base}/acme/schedules/daily"))
                .bearer_auth(ADMIN)
                .json(&json!({"rule": "0 6 * * *", "type": "mail", "data": "digest"})),
        )
        .await;
        assert_eq!(st, 200, "{v}");
        go(&b, &base, "#/schedules?client=acme").await;
        let text = wait_for_text(&b, "Schedules of acme").await;
        assert!(
            text.contains("0 6 * * *") && text.contains("active"),
            "{text}"
        );
        assert!(text.contains(v["next"][0].as_str().unwrap()), "{text}");
        check_accessibility(&b, &tools, "schedules").await;
        let asked = click_in_row(&b, "daily", "Pause").await;
        assert!(asked.contains("Pause schedule daily"), "{asked}");
        wait_for_text(&b, "Pause: daily.").await;
        let (_, s) = json(
            http()
                .get(format!("{base}/acme/schedules/daily"))
                .bearer_auth(ADMIN),
        )
        .await;
        assert_eq!(s["paused"], true, "{s}");
        wait_for_text(&b, "paused").await;
        click_in_row(&b, "daily", "Resume").await;
        wait_for_text(&b, "Resume: daily.").await;
        // The page drawn after the resume once showed it still paused;
        // draw it again until it shows the schedule active.
        eventually(WAIT, "the schedule shown active again", || {
            let (b, base) = (&b, &base);
            async move {
                go(b, base, "#/handlers?client=acme").await;
                wait_for_text(b, "Handlers of acme").await;
                go(b, base, "#/schedules?client=acme").await;
                let text = wait_for_text(b, "Schedules of acme").await;
                text.contains("active").then_some(())
            }
        })
        .await;
        click_in_row(&b, "daily", "Run now").await;
        let text = wait_for_text(&b, "Run now: daily → job daily@trigger-").await;
        assert!(!text.contains("paused"), "{text}");
        eventually(WAIT, "the triggered job ran", || async {
            (archived(&base, "mail", "ok").await == 22).then_some(())
        })
        .await;

        // A job with a unique key shows it, held while the job is live.
        let (s, v) = json(
            http()
                .post(format!(
                    "{base}/acme/job/keyed/add?unique_key=nightly-report&delay_ms=3600000"
                ))
                .bearer_auth(ADMIN)
                .body("r"),
        )
        .await;
        assert_eq!(s, 200, "{v}");
        let id = ids(&v).remove(0);
        go(&b, &base, &format!("#/job?client=acme&id={id}")).await;
        let text = wait_for_text(&b, "History").await;
        assert!(text.contains("Unique key\nnightly-report (held)"), "{text}");
        b.close().await.unwrap();

        // A client's token sees its own client only.
        let b = driver.browser(&tools).await;
        sign_in(&b, &base, ACME, "client acme").await;
        let text = wait_for_text(&b, "Client acme").await;
        assert!(
            !text.contains("other") && !text.contains("secret"),
            "{text}"
        );
        go(&b, &base, "#/jobs?client=other&state=waiting").await;
        let text = wait_for_text(&b, "acme").await;
        assert!(!text.contains("hidden"), "{text}");
        let status = b
            .find(Locator::Css("#status"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(!status.is_empty(), "the refusal is shown");
        b.close().await.unwrap();

        // No token reached the daemon's log.
        let log = d.log();
        for token in [ADMIN, ACME, OTHER] {
            assert!(!log.contains(token), "a token is in the daemon's log");
        }
    });
}
