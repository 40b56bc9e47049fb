//! The dashboard in headless Chromium (Debian `chromium`): the real daemon
//! with seeded data (tree, ledger, demand, a file-backed Slurm snapshot), the
//! page loaded under a reverse-proxy path prefix (`/compass/`, as behind
//! nginx's `location /compass/ { proxy_pass http://daemon/; }`: a small proxy
//! in this test strips the prefix and answers 404 outside it), first with its
//! embedded data, then through the API refresh path, the numbers shown
//! checked against hand-computed values (the cluster-over-time charts drawn
//! from seeded cycle-history rows), and screenshots (`dashboard.png`,
//! `dashboard-queue-page-2.png`) saved to `$COMPASS_SCREENSHOT_DIR` if set
//! (the docs' images in `docs/images/` come from there), else to
//! `$CARGO_TARGET_TMPDIR`.

mod common;

use common::{Daemon, TempDir};
use compass_budget::cli::parse_budgets_toml;
use compass_budget::db::{CycleSample, Db};
use compass_budget::slurm::{SlurmJob, SlurmSnapshot};
use compass_core::fairshare::{Interval, Kind};
use compass_core::model::JobId;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A reverse proxy serving `upstream` under the path prefix `prefix`
/// (e.g. `/compass/`), one request per connection (`Connection: close`),
/// GET only. Requests outside the prefix get a 404 and are recorded in
/// `outside` (what a page with absolute paths would ask for).
struct PrefixProxy {
    url: String,
    outside: Arc<Mutex<Vec<String>>>,
    /// Every path forwarded, prefix stripped.
    seen: Arc<Mutex<Vec<String>>>,
}

impl PrefixProxy {
    fn start(upstream: &str, prefix: &'static str) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}{prefix}", listener.local_addr().unwrap());
        let upstream = upstream.trim_start_matches("http://").to_string();
        let outside = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (out, sn) = (outside.clone(), seen.clone());
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let (upstream, out, sn) = (upstream.clone(), out.clone(), sn.clone());
                std::thread::spawn(move || {
                    let _ = proxy_one(client, &upstream, prefix, &out, &sn);
                });
            }
        });
        PrefixProxy { url, outside, seen }
    }
}

fn proxy_one(
    mut client: TcpStream,
    upstream: &str,
    prefix: &str,
    outside: &Mutex<Vec<String>>,
    seen: &Mutex<Vec<String>>,
) -> std::io::Result<()> {
    client.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut reader = BufReader::new(client.try_clone()?);
    let mut request_line = String::new();
    reader.read_line(&mut request_line)?;
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 || h == "\r\n" {
            break;
        }
        let name = h.split(':').next().unwrap_or("").to_ascii_lowercase();
        if name != "connection" && name != "keep-alive" {
            headers.push(h);
        }
    }
    let mut parts = request_line.split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let Some(rest) = target.strip_prefix(prefix) else {
        if target != "/favicon.ico" {
            outside.lock().unwrap().push(target.to_string());
        }
        client.write_all(
            b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        )?;
        return Ok(());
    };
    seen.lock().unwrap().push(format!("/{rest}"));
    let mut up = TcpStream::connect(upstream)?;
    let mut req = format!("{method} /{rest} HTTP/1.1\r\n");
    for h in headers {
        req.push_str(&h);
    }
    req.push_str("Connection: close\r\n\r\n");
    up.write_all(req.as_bytes())?;
    let mut resp = Vec::new();
    up.read_to_end(&mut resp)?;
    client.write_all(&resp)?;
    Ok(())
}

fn chromium(profile: &Path, extra: &[String], url: &str) -> String {
    let out = Command::new("timeout")
        .arg("90")
        .arg("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--disable-dev-shm-usage",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(extra)
        .arg(url)
        .output()
        .expect("chromium not found: install the Debian package `chromium`");
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The text of the cells of `<tr id="ID">` in a dumped DOM.
fn cells(dom: &str, id: &str) -> Vec<String> {
    let start = dom
        .find(&format!("<tr id=\"{id}\">"))
        .unwrap_or_else(|| panic!("row {id} not rendered"));
    let row = &dom[start..start + dom[start..].find("</tr>").unwrap()];
    row.split("<td")
        .skip(1)
        .map(|c| {
            let c = &c[c.find('>').unwrap() + 1..];
            c[..c.find("</td>").unwrap()]
                .replace("&nbsp;", " ")
                .replace('\u{a0}', " ")
                .trim()
                .to_string()
        })
        .collect()
}

/// The charged GPU-hours of the usage chart's bars of `team`, oldest day
/// first (`data-gpu-hours` of `<rect id="usage-TEAM-K">`).
fn usage_bars(dom: &str, team: &str) -> Vec<f64> {
    (0..7)
        .map(|k| {
            let at = dom
                .find(&format!("id=\"usage-{team}-{k}\""))
                .unwrap_or_else(|| panic!("usage bar {team} {k} not drawn"));
            let tag = &dom[at..at + dom[at..].find('>').unwrap()];
            let v = &tag[tag.find("data-gpu-hours=\"").unwrap() + 16..];
            v[..v.find('"').unwrap()].parse().unwrap()
        })
        .collect()
}

/// The values a history line chart draws (`data-values` of `<path
/// id="ID-line">`), oldest first; checks `data-points` counts them.
fn line_values(dom: &str, id: &str) -> Vec<f64> {
    let at = dom
        .find(&format!("id=\"{id}-line\""))
        .unwrap_or_else(|| panic!("line chart {id} not drawn"));
    let tag = &dom[at..at + dom[at..].find('>').unwrap()];
    let attr = |name: &str| {
        let v = &tag[tag.find(&format!("{name}=\"")).unwrap() + name.len() + 2..];
        v[..v.find('"').unwrap()].to_string()
    };
    let values: Vec<f64> = attr("data-values")
        .split(',')
        .map(|x| x.parse().unwrap())
        .collect();
    assert_eq!(attr("data-points"), values.len().to_string(), "{id}");
    assert!(tag.contains(" d=\"M"), "{id}: a path is drawn");
    values
}

#[test]
fn dashboard_shows_seeded_numbers_in_headless_chromium() {
    let dir = TempDir::new("dash");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let base = (now / 3600 - 49) * 3600;
    {
        let mut db = Db::open(&dir.path().join("budget.db")).unwrap();
        let doc = parse_budgets_toml(include_str!("../../etc/budgets.example.toml")).unwrap();
        db.edit_tree("root", "import", "seed", now, |_| Ok(doc.nodes.clone()))
            .unwrap();
        let iv = |job: u64, acct: &str, gpus: u32, start: i64, end: i64, kind: Kind| Interval {
            job: JobId(job),
            account: acct.into(),
            gpus,
            start,
            end: Some(end),
            kind,
            weight: 1.0,
        };
        db.ingest(
            &[
                // nlp-a: 8 GPUs for 47 h, charged, and it wanted exactly that.
                iv(1, "nlp-a", 8, base, base + 47 * 3600, Kind::Allocated),
                // vision: 2 GPUs for 24 h while demanding 4.
                iv(2, "vision", 2, base, base + 24 * 3600, Kind::Allocated),
                // platform: free time only.
                iv(3, "platform", 4, base, base + 10 * 3600, Kind::Unallocated),
            ],
            now,
        )
        .unwrap();
        for h in 0..47 {
            db.add_demand(base + h * 3600, &[("nlp-a".into(), 8.0 * 3600.0)])
                .unwrap();
        }
        for h in 0..24 {
            db.add_demand(base + h * 3600, &[("vision".into(), 4.0 * 3600.0)])
                .unwrap();
        }
        // The cycle history: three days of the past week, a minute each
        // (the running daemon adds its own samples, now: 0 GPUs allocated,
        // 4 pending, no N*SIF as no select state file is configured).
        for (days_ago, alloc, pending, wait, median, n_sif) in [
            (3, 32.0, 10.0, 3600.0, Some(600.0), 1.5),
            (2, 16.0, 20.0, 7200.0, Some(1800.0), 0.5),
            (1, 48.0, 5.0, 1800.0, None, 2.0),
        ] {
            db.record_cycle_sample(&CycleSample {
                at: now - days_ago * 86400,
                gpus_allocated: alloc,
                capacity_gpus: 64.0,
                pending_jobs: pending,
                longest_wait_s: Some(wait),
                median_wait_s: median,
                n_sif: Some(n_sif),
                partial_nodes: Some(1.0),
            })
            .unwrap();
        }
    }
    let job = |id: u64, acct: &str, min_rt: u64| SlurmJob {
        job: JobId(id),
        account: acct.into(),
        user: String::new(),
        gpus: 1,
        min_runtime_s: min_rt,
        resumable: true,
        priority: 0,
        submit: now - 60,
        start: None,
        end: None,
        alloc: Vec::new(),
        instances: 0,
        eligible: true,
        begin_after: None,
        gpu_types: Default::default(),
        tier: 0,
        qos: String::new(),
        qos_priority: 0,
    };
    // The vision job asks for an a100, weighted 2.5 by `[gpu_weights]`.
    let mut vision = job(103, "vision", 600);
    vision.gpu_types.insert("a100".into(), 1);
    let snap = SlurmSnapshot {
        pending: vec![
            job(101, "nlp-a", 600),
            job(102, "nlp-b", 600),
            vision,
            job(104, "platform", 0),
        ],
        running: vec![],
        ended: vec![],
        capacity_gpus: None,
        nodes: vec![],
        site_factors: vec![],
        job_needs: vec![],
        priority_offsets: vec![],
        ..SlurmSnapshot::default()
    };
    let snap_path = dir.path().join("slurm.json");
    std::fs::write(&snap_path, serde_json::to_string(&snap).unwrap()).unwrap();
    let cfg = dir.path().join("budgetd.toml");
    std::fs::write(
        &cfg,
        format!(
            "db = \"{}\"\ncapacity_gpus = 64\ncycle_s = 1\nslurm = \"file\"\nslurm_file = \"{}\"\n\
             [gpu_weights]\na100 = 2.5\n",
            dir.path().join("budget.db").display(),
            snap_path.display()
        ),
    )
    .unwrap();
    let d = Daemon::start(&cfg);
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    // GETs `path` until `done` holds of its JSON (20 s at most in all).
    let start = Instant::now();
    let wait_for = |path: &str, what: &str, done: &dyn Fn(&serde_json::Value) -> bool| loop {
        let v: serde_json::Value = serde_json::from_str(
            &agent
                .get(format!("{}{path}", d.url))
                .call()
                .unwrap()
                .body_mut()
                .read_to_string()
                .unwrap(),
        )
        .unwrap();
        if done(&v) {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "{what}: {v}");
        std::thread::sleep(Duration::from_millis(100));
    };
    wait_for("/api/v1/queue", "no cycle ran", &|v| {
        v["jobs"].as_array().is_some_and(|j| j.len() == 4)
    });
    // The cycle records its history sample after it publishes the queue:
    // wait for the daemon's own sample too (beside the three seeded days).
    wait_for(
        "/api/v1/history?window_s=604800",
        "no history sample of the daemon",
        &|v| v["points"].as_array().is_some_and(|p| p.len() >= 4),
    );

    // The page as users reach it: behind a proxy, under `/compass/`.
    let proxy = PrefixProxy::start(&d.url, "/compass/");
    let profile = TempDir::new("chromium-profile");
    let embedded = chromium(profile.path(), &["--dump-dom".to_string()], &proxy.url);
    // The same page re-rendered from the API (the 30 s refresh path).
    let dom = chromium(
        profile.path(),
        &[
            "--dump-dom".to_string(),
            "--virtual-time-budget=10000".to_string(),
        ],
        &format!("{}#refresh", proxy.url),
    );
    assert!(
        dom.contains("data-refreshed=\"1\""),
        "the API refresh ran and rendered"
    );
    assert_eq!(
        *proxy.outside.lock().unwrap(),
        Vec::<String>::new(),
        "the page asked for paths outside its prefix /compass/"
    );
    // The refresh asks for one page of the queue, never the whole of it.
    let queue_reads: Vec<String> = (proxy.seen.lock().unwrap().iter())
        .filter(|p| p.starts_with("/api/v1/queue"))
        .cloned()
        .collect();
    assert_eq!(queue_reads, ["/api/v1/queue?limit=50&offset=0"]);

    // Page 2 of a queue paged by 2: jobs 3 and 4 (101, 104), from the API.
    let page2 = chromium(
        profile.path(),
        &[
            "--dump-dom".to_string(),
            "--virtual-time-budget=10000".to_string(),
        ],
        &format!("{}?queue_page_size=2&queue_page=2", proxy.url),
    );
    assert!(page2.contains("data-queue-page=\"2\""), "page 2 fetched");
    assert!(page2.contains("page 2: jobs 3\u{2013}4 of 4"), "pager text");
    assert_eq!(cells(&page2, "job-101")[..2], ["3", "101"]);
    assert_eq!(cells(&page2, "job-104")[..2], ["4", "104"]);
    for j in [103, 102] {
        assert!(
            !page2.contains(&format!("id=\"job-{j}\"")),
            "job {j} is on page 1"
        );
    }
    assert!(
        (proxy.seen.lock().unwrap().iter()).any(|p| p == "/api/v1/queue?limit=2&offset=2"),
        "page 2 read through the API's paging"
    );
    for id in ["node-team-nlp-a", "node-platform", "job-103", "owed-vision"] {
        assert_eq!(
            cells(&embedded, id),
            cells(&dom, id),
            "{id}: embedded data and API agree"
        );
    }

    // Tree: team-nlp-a = 1.0 x 0.6 x 0.5 x 0.7 = 21% of 64 GPUs = 13.44 GPUs;
    // 8 x 47 = 376 charged GPU-h; ratio 376 / (13.44 x 168 h) = 0.167.
    let a = cells(&dom, "node-team-nlp-a");
    assert_eq!(
        a[1..],
        ["0.700", "21.0%", "13.44", "376.0", "0.0", "0.167"],
        "{a:?}"
    );
    let p = cells(&dom, "node-platform");
    assert_eq!(
        (p[4].as_str(), p[5].as_str(), p[6].as_str()),
        ("0.0", "40.0", "0.000"),
        "{p:?}"
    );
    // Queue: vision (ratio 0.015) beats nlp (0.117) inside research; nlp-b
    // (0) before nlp-a; the unallocated platform job last.
    let order: Vec<usize> = [103, 102, 101, 104]
        .iter()
        .map(|j| dom.find(&format!("id=\"job-{j}\"")).unwrap())
        .collect();
    assert!(
        order.windows(2).all(|w| w[0] < w[1]),
        "queue rendered out of order"
    );
    assert_eq!(cells(&dom, "job-103")[..2], ["1", "103"]);
    assert_eq!(cells(&dom, "job-103")[6], "0.015");
    assert_eq!(cells(&dom, "job-104")[3], "unallocated");
    // GPU weights: the a100 job's weight, 1 for the untyped ones, and the
    // table in the header line.
    assert_eq!(cells(&dom, "job-103")[7], "2.50");
    assert_eq!(cells(&dom, "job-101")[7], "1.00");
    assert!(
        dom.contains("capacity 64.0 weighted GPUs (GPU weights: a100 x2.5; other GPUs x1)"),
        "weights shown"
    );
    // Owed vs delivered over 30 days: nlp-a owed min(13.44, 8) x 47 h = 376,
    // delivered 376; vision owed min(19.2, 4) x 24 = 96, delivered 48.
    assert_eq!(
        cells(&dom, "owed-team-nlp-a")[1..],
        ["376.0", "376.0", "100.0%"]
    );
    assert_eq!(cells(&dom, "owed-vision")[1..], ["96.0", "48.0", "50.0%"]);
    assert!(dom.contains("<rect"), "charts drawn");
    // Usage over time: one bar per day over the last 7 days; nlp-a's 47 h
    // on 8 GPUs and vision's 24 h on 2 all fall inside them, whatever the
    // day boundaries, in the embedded data and through /api/v1/usage.
    for page in [&embedded, &dom] {
        let nlp = usage_bars(page, "team-nlp-a");
        assert!((nlp.iter().sum::<f64>() - 376.0).abs() < 0.01, "{nlp:?}");
        assert!(
            nlp[..4].iter().all(|h| *h == 0.0),
            "older days are empty: {nlp:?}"
        );
        let vision = usage_bars(page, "vision");
        assert!(
            (vision.iter().sum::<f64>() - 48.0).abs() < 0.01,
            "{vision:?}"
        );
        assert!(
            usage_bars(page, "platform").iter().all(|h| *h == 0.0),
            "free time is not charged"
        );
    }
    assert!(
        (proxy.seen.lock().unwrap().iter()).any(|p| p.starts_with("/api/v1/usage?from=")),
        "the refresh reads usage windows from the API"
    );

    // The cluster over time (issue 14): the seeded days, then the running
    // daemon's own samples (0% allocated, 4 pending jobs waiting about a
    // minute, no N*SIF), in the embedded data and through /api/v1/history.
    for page in [&embedded, &dom] {
        let occ = line_values(page, "history-occupancy");
        assert_eq!(occ[..3], [50.0, 25.0, 75.0], "{occ:?}");
        assert!(
            occ.len() >= 4 && occ[3..].iter().all(|x| *x == 0.0),
            "{occ:?}"
        );
        let pending = line_values(page, "history-pending");
        assert_eq!(pending[..3], [10.0, 20.0, 5.0], "{pending:?}");
        assert!(pending[3..].iter().all(|x| *x == 4.0), "{pending:?}");
        let wait = line_values(page, "history-wait");
        assert_eq!(wait[..3], [1.0, 2.0, 0.5], "hours: {wait:?}");
        assert!(wait[3..].iter().all(|x| *x < 0.1), "{wait:?}");
        assert_eq!(line_values(page, "history-median-wait"), [0.167, 0.5]);
        assert_eq!(line_values(page, "history-nsif"), [1.5, 0.5, 2.0]);
    }
    assert!(
        (proxy.seen.lock().unwrap().iter()).any(|p| p.starts_with("/api/v1/history?from=")),
        "the refresh reads the history from the API"
    );

    // Screenshots: into $COMPASS_SCREENSHOT_DIR when set (the docs'
    // images, docs/images/, come from here), else the target's tmp dir.
    let dir = std::env::var_os("COMPASS_SCREENSHOT_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_TARGET_TMPDIR")).to_path_buf());
    std::fs::create_dir_all(&dir).unwrap();
    for (name, query, size) in [
        ("dashboard.png", "", "1280,2900"),
        (
            "dashboard-queue-page-2.png",
            "?queue_page_size=2&queue_page=2",
            "1280,2000",
        ),
    ] {
        let shot = dir.join(name);
        let _ = std::fs::remove_file(&shot);
        chromium(
            profile.path(),
            &[
                format!("--screenshot={}", shot.display()),
                format!("--window-size={size}"),
                "--hide-scrollbars".to_string(),
                "--virtual-time-budget=5000".to_string(),
            ],
            &format!("{}{query}", proxy.url),
        );
        let png = std::fs::read(&shot).expect("screenshot written");
        assert!(
            png.len() > 10_000 && png.starts_with(b"\x89PNG"),
            "{name} is a real PNG"
        );
    }
}
