//! The web UI (`/ui/`, issue 53) in a real headless Chromium, driven through its
//! WebDriver (`chromedriver`, with the `fantoccini` client), against three agents set
//! up as the README's secure setup: TLS from a CA made at test time, ACL on. The
//! browser trusts that CA properly: it is added to an NSS database in the browser's
//! own temporary home (`certutil`), as a user adds a private CA on Linux.
//!
//! The walk: log in with a read token (the servers hidden, a banner says why; the
//! token in session storage only), the plugin table against `schedstate plugin
//! status`, a fingerprint write seen within 2 s, one plugin, the volumes and one
//! volume's claim, nodes, jobs; log out and in with the management token (the
//! servers shown); two agents killed (the no-leader banner), the third (unreachable).
//!
//! Without `chromium`, `chromedriver` or `certutil` the test says so and passes,
//! unless `SCHEDSTATE_UI_TEST=required` (set by `.ci/run`, which installs them).
//! Screenshots of each page go to `target/ui-screenshots/`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use schedstate::model::AclScope;
use schedstate::state::Command as StateCommand;
use schedstate_agent::ReadOptions;
use schedstate_agent::api::AclTokenRequest;
use serde_json::{Value, json};

use crate::agent_procs::{ProcCluster, free_ports};
use crate::support::schedstate;

const ROOT: &str = "root-secret-of-the-ui-test";

/// How long the page may take to show something (a cold browser start included).
const SHOWN: Duration = Duration::from_secs(15);

/// The programs the test needs, found on `PATH`.
struct Browser {
    chromium: PathBuf,
    driver: PathBuf,
    certutil: PathBuf,
}

fn on_path(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .flat_map(|d| names.iter().map(move |n| d.join(n)))
        .find(|p| p.is_file())
}

fn browser() -> Option<Browser> {
    Some(Browser {
        chromium: on_path(&["chromium", "chromium-browser"])?,
        driver: on_path(&["chromedriver"])?,
        certutil: on_path(&["certutil"])?,
    })
}

/// `chromedriver` in a process group of its own, so that the browsers it starts go
/// with it: the whole group is SIGKILLed when dropped.
struct Driver(Child);

impl Drop for Driver {
    fn drop(&mut self) {
        use nix::sys::signal::{Signal, killpg};
        use nix::unistd::Pid;
        if let Ok(pid) = i32::try_from(self.0.id()) {
            let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
        }
        let _ = self.0.wait();
    }
}

/// A home for the browser whose NSS database trusts `ca` (a PEM file).
fn trusting_home(certutil: &Path, dir: &Path, ca: &Path) -> PathBuf {
    let home = dir.join("browser-home");
    let db = home.join(".pki/nssdb");
    std::fs::create_dir_all(&db).expect("nssdb dir");
    let db_arg = format!("sql:{}", db.display());
    for args in [
        vec!["-N", "-d", &db_arg, "--empty-password"],
        vec!["-A", "-d", &db_arg, "-n", "schedstate test CA", "-t", "C,,"],
    ] {
        let mut cmd = Command::new(certutil);
        cmd.args(&args);
        if args[0] == "-A" {
            cmd.arg("-i").arg(ca);
        }
        let out = cmd.output().expect("certutil runs");
        assert!(out.status.success(), "certutil {args:?}: {out:?}");
    }
    home
}

async fn start_driver(b: &Browser, home: &Path) -> (Driver, Client) {
    use std::os::unix::process::CommandExt;
    let port = free_ports(1)[0];
    let log = std::fs::File::create(home.join("chromedriver.log")).expect("driver log");
    let child = Command::new(&b.driver)
        .arg(format!("--port={port}"))
        .env("HOME", home)
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .process_group(0)
        .spawn()
        .expect("chromedriver starts");
    let driver = Driver(child);
    let caps: serde_json::Map<String, Value> = serde_json::from_value(json!({
        "browserName": "chrome",
        "goog:chromeOptions": {
            "binary": b.chromium,
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1200,800", "--no-first-run", "--disable-extensions"],
        },
    }))
    .expect("capabilities");
    let start = Instant::now();
    loop {
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        match ClientBuilder::new(connector)
            .capabilities(caps.clone())
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
        {
            Ok(c) => return (driver, c),
            // chromedriver takes a moment to listen.
            Err(_) if start.elapsed() < SHOWN => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("no WebDriver session: {e}"),
        }
    }
}

/// Saves a screenshot of the page as `target/ui-screenshots/<name>.png`.
async fn screenshot(c: &Client, name: &str) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/ui-screenshots");
    std::fs::create_dir_all(&dir).expect("screenshot dir");
    let png = c.screenshot().await.expect("screenshot");
    std::fs::write(dir.join(format!("{name}.png")), png).expect("screenshot written");
}

/// Runs `script` (a function body returning JSON) until `done` accepts its value, or
/// panics after `within` with the last value.
async fn until(c: &Client, within: Duration, script: &str, done: impl Fn(&Value) -> bool) -> Value {
    let start = Instant::now();
    loop {
        let v = c.execute(script, vec![]).await.expect("script runs");
        if done(&v) {
            return v;
        }
        assert!(
            start.elapsed() < within,
            "not within {within:?}: {script} gave {v}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Clicks what `locator` finds, found again if the page was rendered anew between the
/// lookup and the click (a live page may, on a change).
async fn click(c: &Client, locator: Locator<'_>) {
    let start = Instant::now();
    loop {
        let found = c.wait().at_most(SHOWN).for_element(locator).await;
        match found.expect("the element").click().await {
            Ok(()) => return,
            Err(e) if start.elapsed() < SHOWN => eprintln!("clicking again: {e}"),
            Err(e) => panic!("click: {e}"),
        }
    }
}

/// The rows of a table as the page shows them (each cell's `data-value`).
const ROWS: &str = "return [...document.querySelectorAll('#ID tbody tr')]\
    .map(r => [...r.cells].map(c => c.dataset.value));";

fn rows_of(id: &str) -> String {
    ROWS.replace("ID", id)
}

async fn open(c: &Client, base: &str, hash: &str) {
    c.goto(&format!("{base}/ui/{hash}")).await.expect("goto");
}

/// `schedstate plugin status` against the agent, with the read token: its rows split
/// on whitespace, without the header.
fn cli_plugin_rows(cluster: &ProcCluster, token: &str) -> Vec<Vec<String>> {
    let ca = cluster.root.path().join("ca.pem");
    let out = schedstate()
        .env_remove("SCHEDSTATE_ADDR")
        .env_remove("SCHEDSTATE_TOKEN_FILE")
        .env("SCHEDSTATE_TOKEN", token)
        .args([
            "plugin",
            "status",
            "--address",
            &cluster.address(0),
            "--ca-cert",
        ])
        .arg(ca)
        .output()
        .expect("runs");
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).expect("utf-8");
    text.lines()
        .skip(1)
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect()
}

#[test]
fn the_web_ui_shows_the_cluster_live_in_a_real_browser() {
    let Some(b) = browser() else {
        let required = std::env::var("SCHEDSTATE_UI_TEST").is_ok_and(|v| v == "required");
        assert!(
            !required,
            "SCHEDSTATE_UI_TEST=required but chromium, chromedriver or certutil is missing"
        );
        eprintln!(
            "skipped: the web UI's browser test needs chromium, chromedriver and certutil \
             (apt-get install chromium chromium-driver libnss3-tools); .ci/run installs them"
        );
        return;
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(run(&b));
}

async fn run(b: &Browser) {
    let mut cluster = ProcCluster::start_tls(3, Some(ROOT)).await;
    let admin = cluster.client(0);
    for command in crate::remote::commands() {
        admin
            .apply(&command)
            .await
            .unwrap_or_else(|e| panic!("{}: {e}\n{}", command.kind(), cluster.logs()));
    }
    let read = admin
        .acl_create_token(&AclTokenRequest {
            name: "dashboards".into(),
            scopes: vec![AclScope::Read],
            ..AclTokenRequest::default()
        })
        .await
        .expect("read token");
    let read_secret = read.secret_id.clone().expect("a new token's secret");
    let home = trusting_home(
        &b.certutil,
        cluster.root.path(),
        &cluster.root.path().join("ca.pem"),
    );
    let (_driver, c) = start_driver(b, &home).await;
    let base = cluster.address(0);

    // Log in with the read token: the token field, then the overview.
    open(&c, &base, "").await;
    let field = c
        .wait()
        .at_most(SHOWN)
        .for_element(Locator::Css("#token"))
        .await
        .expect("the login form");
    field.send_keys(&read_secret).await.expect("typed");
    click(&c, Locator::Css("#login-button")).await;
    let counts = until(
        &c,
        SHOWN,
        "const d = document.querySelector('#counts'); return d ? d.innerText : null;",
        |v| {
            v.as_str()
                .is_some_and(|t| t.contains("Nodes") && !t.contains('–'))
        },
    )
    .await;
    let counts = counts.as_str().unwrap_or_default().to_string();
    for want in ["Nodes\n2", "CSI plugins\n2", "CSI volumes\n3"] {
        assert!(counts.contains(want), "{want:?} in {counts:?}");
    }
    // The read token lacks the operator scope: the servers are not shown, and the
    // page says why.
    until(
        &c,
        SHOWN,
        "return !!document.querySelector('#banner-scope');",
        |v| v == &json!(true),
    )
    .await;
    // The token is in the tab's session storage only: not in the address, the page or
    // local storage.
    let url = c.current_url().await.expect("url");
    assert!(
        !url.as_str().contains(&read_secret),
        "the token is in the address: {url}"
    );
    let kept = c
        .execute(
            "return [sessionStorage.getItem('schedstate.token'), localStorage.length, \
             document.documentElement.outerHTML.includes(arguments[0])];",
            vec![json!(read_secret)],
        )
        .await
        .expect("storage read");
    assert_eq!(kept, json!([read_secret, 0, false]));
    screenshot(&c, "overview").await;

    // The plugin table: the CLI's, value for value.
    open(&c, &base, "#/plugins").await;
    let want = cli_plugin_rows(&cluster, &read_secret);
    let shown = until(&c, SHOWN, &rows_of("plugins-table"), |v| {
        v.as_array().is_some_and(|r| r.len() == want.len())
    })
    .await;
    let shown: Vec<Vec<String>> = serde_json::from_value(shown).expect("rows");
    assert_eq!(shown, want, "the page, then `schedstate plugin status`");
    screenshot(&c, "plugins").await;

    // A fingerprint write: node-2's ebs instance turns healthy; the page follows
    // within 2 s (a blocking query wakes on the change).
    let ebs_nodes = |rows: &Value| rows[0][3].as_str().map(str::to_string);
    let before = ebs_nodes(&c.execute(&rows_of("plugins-table"), vec![]).await.unwrap());
    assert_eq!(before.as_deref(), Some("1/3"));
    let mut node = admin
        .node("node-2", ReadOptions::default())
        .await
        .expect("node-2")
        .value
        .expect("node-2 exists");
    let ebs = node
        .csi_node_plugins
        .get("ebs")
        .expect("ebs on node-2")
        .clone();
    node.add_csi_plugin((*ebs).clone().with_health(true, "healthy"));
    let written = Instant::now();
    admin
        .apply(&StateCommand::UpsertNode { node })
        .await
        .expect("fingerprint");
    until(&c, Duration::from_secs(2), &rows_of("plugins-table"), |v| {
        ebs_nodes(v).as_deref() == Some("2/3")
    })
    .await;
    eprintln!(
        "the page showed the fingerprint {:?} after the write",
        written.elapsed()
    );
    open(&c, &base, "#/plugin/ebs").await;
    until(&c, SHOWN, &rows_of("instances-table"), |v| {
        v.as_array().is_some_and(|r| r.len() == 3)
    })
    .await;
    screenshot(&c, "plugin").await;

    // A volume and its claim.
    open(&c, &base, "#/volumes").await;
    until(&c, SHOWN, &rows_of("volumes-table"), |v| {
        v.as_array().is_some_and(|r| r.len() == 3)
    })
    .await;
    screenshot(&c, "volumes").await;
    click(&c, Locator::LinkText("web-001")).await;
    let claims = until(&c, SHOWN, &rows_of("claims-table"), |v| {
        v.as_array().is_some_and(|r| !r.is_empty())
    })
    .await;
    assert_eq!(claims[0][0], "alloc-app-1", "{claims}");
    assert_eq!(claims[0][1], "write", "{claims}");
    assert_eq!(claims[0][2], "node-1", "{claims}");
    screenshot(&c, "volume").await;
    open(&c, &base, "#/nodes").await;
    until(&c, SHOWN, &rows_of("nodes-table"), |v| {
        v.as_array().is_some_and(|r| r.len() == 2)
    })
    .await;
    screenshot(&c, "nodes").await;
    open(&c, &base, "#/jobs").await;
    until(&c, SHOWN, &rows_of("jobs-table"), |v| {
        v.as_array().is_some_and(|r| r.len() == 5)
    })
    .await;
    screenshot(&c, "jobs").await;

    // Log out (the token is forgotten), and in again with the management token: the
    // overview shows the servers and this agent's Raft state.
    click(&c, Locator::Css("#logout")).await;
    let gone = c
        .execute("return sessionStorage.getItem('schedstate.token');", vec![])
        .await
        .expect("storage read");
    assert_eq!(gone, Value::Null, "the token outlives the logout");
    c.find(Locator::Css("#token"))
        .await
        .expect("field")
        .send_keys(ROOT)
        .await
        .expect("typed");
    click(&c, Locator::Css("#login-button")).await;
    open(&c, &base, "#/overview").await;
    let servers = until(&c, SHOWN, &rows_of("servers-table"), |v| {
        v.as_array().is_some_and(|r| r.len() == 3)
    })
    .await;
    let roles: Vec<&str> = (0..3).filter_map(|i| servers[i][2].as_str()).collect();
    assert_eq!(
        roles.iter().filter(|r| **r == "leader").count(),
        1,
        "{servers}"
    );
    until(
        &c,
        SHOWN,
        "return document.querySelector('#cluster-facts').innerText;",
        |v| {
            v.as_str()
                .is_some_and(|t| t.contains("Term") && !t.contains("Term\n–"))
        },
    )
    .await;
    screenshot(&c, "overview-operator").await;

    // Two of three agents killed: the one the page reads knows no leader, and says so.
    open(&c, &base, "#/plugins").await;
    until(&c, SHOWN, &rows_of("plugins-table"), |v| {
        v.as_array().is_some_and(|r| r.len() == 2)
    })
    .await;
    cluster.kill(1);
    cluster.kill(2);
    until(
        &c,
        SHOWN,
        "return !!document.querySelector('#banner-no-leader');",
        |v| v == &json!(true),
    )
    .await;
    screenshot(&c, "no-leader").await;
    // And the last one: the page says the agent is unreachable, and keeps trying.
    cluster.kill(0);
    until(
        &c,
        SHOWN,
        "return !!document.querySelector('#banner-unreachable');",
        |v| v == &json!(true),
    )
    .await;
    screenshot(&c, "unreachable").await;
    let _ = c.close().await;
}
