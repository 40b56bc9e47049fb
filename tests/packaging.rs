//! Packaging and operations, checked without building packages:
//! - `compass --version` names the Slurm the build found (against dpkg);
//! - the `[package.metadata.deb]` sections (contrib/build-debs.sh, cargo-deb)
//!   name files that exist or that cargo builds, ship no path twice, and
//!   their maintainer scripts parse;
//! - the slurm.conf / plugstack.conf fragments in contrib/slurm/ name what
//!   the plugins are and where the packages install them;
//! - the systemd unit passes `systemd-analyze verify` and agrees with the
//!   package and the default config;
//! - every shell script parses (`bash -n`, and shellcheck when installed);
//! - `contrib/demo.sh` preflight errors, and `stop` never removes a
//!   directory the demo did not make nor stops a process it did not start;
//! - `contrib/slurm-lab.sh down` stops a lab's jobs, not a `tail -f` of it;
//! - `contrib/build-slurm.sh` never replaces a prefix it did not make, and
//!   `contrib/prepare-slurm-source.sh` fetches the source again after a
//!   Debian update;
//! - `contrib/install-compass-slurm.sh --etc-only`: the site's files kept,
//!   the state directory declared for SlurmUser;
//! - `contrib/install-slurm-deps.sh --sources-only`: the deb-src lines;
//! - `etc/job_submit.lua` refuses `--min-runtime` above the site cap (in a
//!   Lua 5.1 interpreter, as slurmctld's job_submit/lua).

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| text(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

fn on_path(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// A scratch directory removed on drop, even when the test fails.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("compass-pkg-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A process this test started, killed on drop (panics included).
struct Kid(std::process::Child);

impl Kid {
    fn spawn(cmd: &mut Command) -> Kid {
        Kid(cmd
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}")))
    }

    fn running(&mut self) -> bool {
        self.0.try_wait().unwrap().is_none()
    }
}

impl Drop for Kid {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Whether `pid` is a live process (a zombie is not: nobody may reap an
/// orphan in a container).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(") ").map(|(_, r)| !r.starts_with('Z')))
        .unwrap_or(false)
}

/// Waits up to 10 s for `p` to exist.
fn wait_for_file(p: &Path) {
    let t0 = std::time::Instant::now();
    while !p.exists() {
        assert!(
            t0.elapsed().as_secs() < 10,
            "{} never appeared",
            p.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

fn write_exe(p: &Path, body: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, body).unwrap();
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// PATH with `dir` first (stubs of apt-get and friends).
fn path_with(dir: &Path) -> String {
    format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

// ------------------------------------------------------------ --version

#[test]
fn version_names_the_slurm_the_build_found() {
    let out = Command::new(env!("CARGO_BIN_EXE_compass"))
        .arg("--version")
        .output()
        .unwrap();
    assert!(out.status.success());
    let line = text(&out.stdout);
    let line = line.trim();
    let slurm = line
        .strip_prefix(&format!("compass {} (Slurm ", env!("CARGO_PKG_VERSION")))
        .and_then(|r| r.strip_suffix(')'))
        .unwrap_or_else(|| panic!("unexpected --version line: {line}"));
    // The build needs libslurm-dev (the CLI links the budget tools), so the
    // version is the installed package's upstream version.
    let dpkg = Command::new("dpkg-query")
        .args(["-W", "-f=${Version}", "libslurm-dev"])
        .output();
    match dpkg {
        Ok(o) if o.status.success() => {
            let v = text(&o.stdout);
            let upstream = v.split('-').next().unwrap_or_default();
            assert_eq!(slurm, upstream, "--version vs dpkg's libslurm-dev {v}");
        }
        _ => {
            let parts: Vec<&str> = slurm.split('.').collect();
            assert!(
                parts.len() == 3 && parts.iter().all(|p| p.parse::<u32>().is_ok()),
                "not a Slurm version: {slurm}"
            );
        }
    }
}

// ------------------------------------------------------------ deb metadata

/// One package: its crate dir and `[package.metadata.deb]`.
struct Deb {
    crate_dir: PathBuf,
    manifest: toml::Table,
    meta: toml::Table,
}

impl Deb {
    fn load(rel: &str) -> Deb {
        let crate_dir = root().join(rel);
        let manifest: toml::Table = read(&crate_dir.join("Cargo.toml")).parse().unwrap();
        let meta = manifest["package"]["metadata"]["deb"]
            .as_table()
            .unwrap_or_else(|| panic!("{rel}/Cargo.toml has no [package.metadata.deb]"))
            .clone();
        Deb {
            crate_dir,
            manifest,
            meta,
        }
    }

    fn name(&self) -> String {
        self.meta
            .get("name")
            .or(self.manifest["package"].get("name"))
            .and_then(|v| v.as_str())
            .unwrap()
            .to_string()
    }

    /// (source, destination without leading '/', mode)
    fn assets(&self) -> Vec<(String, String, String)> {
        self.meta["assets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| {
                let a = a.as_array().unwrap();
                let s = |i: usize| a[i].as_str().unwrap().to_string();
                (s(0), s(1), s(2))
            })
            .collect()
    }

    /// Absolute installed path of the asset whose source ends with `src`.
    fn dest_of(&self, src: &str) -> String {
        let (_, d, _) = self
            .assets()
            .into_iter()
            .find(|(s, _, _)| s.ends_with(src))
            .unwrap_or_else(|| panic!("package {} ships no {src}", self.name()));
        format!("/{d}")
    }

    fn rel_path(&self, key: &str) -> Option<PathBuf> {
        self.meta
            .get(key)
            .and_then(|v| v.as_str())
            .map(|p| self.crate_dir.join(p))
    }
}

fn debs() -> Vec<Deb> {
    ["", "slurm-plugin/select", "budget-service"]
        .iter()
        .map(|d| Deb::load(d))
        .collect()
}

/// What cargo builds into target/release for a crate: its bins and, for a
/// cdylib, `lib<name>.so`.
fn built_files(crate_rel: &str) -> Vec<String> {
    let m: toml::Table = read(&root().join(crate_rel).join("Cargo.toml"))
        .parse()
        .unwrap();
    let mut out: Vec<String> = m
        .get("bin")
        .and_then(|b| b.as_array())
        .into_iter()
        .flatten()
        .map(|b| b["name"].as_str().unwrap().to_string())
        .collect();
    if let Some(lib) = m.get("lib") {
        let cdylib = lib
            .get("crate-type")
            .and_then(|t| t.as_array())
            .is_some_and(|t| t.iter().any(|x| x.as_str() == Some("cdylib")));
        if cdylib {
            out.push(format!("lib{}.so", lib["name"].as_str().unwrap()));
        }
    }
    out
}

/// Checks a generated asset (`man/*.1`, `completions/compass`) against what
/// the generator wrote into `dir`; returns its destination, for a glob the
/// directory. Man pages must cover every subcommand, completions be
/// non-empty scripts that name the subcommands.
fn check_generated(dir: &Scratch, gen: &str, dest: &str) -> String {
    if let Some(pattern) = gen.strip_suffix("*.1") {
        assert_eq!(dest, "usr/share/man/man1/", "{gen}");
        let pages: Vec<String> = std::fs::read_dir(dir.0.join(pattern))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        for page in [
            "compass.1",
            "compass-why.1",
            "compass-budget-show.1",
            "compass-node-list.1",
            "compass-simulate.1",
        ] {
            assert!(
                pages.contains(&page.to_string()),
                "{page} not generated: {pages:?}"
            );
        }
        let why = read(&dir.0.join(pattern).join("compass-why.1"));
        assert!(why.contains("\n.TH compass-why 1 "), "{why}");
        assert!(why.contains("COMPASS_BUDGET_URL"), "{why}");
        return dest.trim_end_matches('/').to_string();
    }
    let script = read(&dir.0.join(gen));
    assert!(script.len() > 1000, "{gen}: {script}");
    for sub in ["budget", "why", "node", "completions"] {
        assert!(script.contains(sub), "{gen} does not complete `{sub}`");
    }
    assert!(!dest.ends_with('/'), "{dest}");
    dest.to_string()
}

#[test]
fn deb_assets_exist_or_are_built_and_never_collide() {
    let built: Vec<String> = [
        "",
        "budget-service",
        "slurm-plugin/select",
        "slurm-plugin/spank",
    ]
    .iter()
    .flat_map(|c| built_files(c))
    .collect();
    assert!(built.contains(&"compass".to_string()), "{built:?}");
    let generated = Scratch::new("generated");
    let o = Command::new(root().join("contrib/generate-man-completions.sh"))
        .arg(env!("CARGO_BIN_EXE_compass"))
        .arg(&generated.0)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(
        read(&root().join("contrib/build-debs.sh")).contains(
            "./contrib/generate-man-completions.sh \"$TARGET/release/compass\" \"$TARGET/release/generated\""
        ),
        "build-debs.sh must generate what the packages ship"
    );
    // Every schema migration is shipped with the service (the binary
    // carries them too; the files are there for admins to read).
    let budget = debs()
        .into_iter()
        .find(|d| d.name() == "compass-budget")
        .expect("compass-budget package");
    for e in std::fs::read_dir(root().join("sql")).unwrap() {
        let file = e.unwrap().file_name().to_string_lossy().into_owned();
        let dest = format!("usr/share/compass-budget/sql/{file}");
        assert!(
            budget.assets().iter().any(|(_, d, _)| *d == dest),
            "compass-budget does not ship sql/{file}"
        );
    }
    let mut owner: BTreeMap<String, String> = BTreeMap::new();
    for deb in debs() {
        let name = deb.name();
        assert!(!deb.assets().is_empty(), "{name}: no assets");
        for key in ["maintainer", "copyright", "section", "depends"] {
            assert!(deb.meta.contains_key(key), "{name}: no {key}");
        }
        for (src, dest, mode) in deb.assets() {
            if let Some(gen) = src.strip_prefix("target/release/generated/") {
                // Man pages and completions: what build-debs.sh generates.
                let dest = check_generated(&generated, gen, &dest);
                if let Some(other) = owner.insert(dest.clone(), name.clone()) {
                    panic!("/{dest} shipped by both {other} and {name}");
                }
                continue;
            } else if let Some(file) = src.strip_prefix("target/release/") {
                assert!(
                    built.contains(&file.to_string()),
                    "{name}: {src} is not built by any crate ({built:?})"
                );
            } else {
                let p = deb.crate_dir.join(&src);
                assert!(p.is_file(), "{name}: asset {} missing", p.display());
            }
            assert!(
                !dest.starts_with('/') && !dest.ends_with('/'),
                "{name}: {dest}"
            );
            assert!(
                ["644", "755"].contains(&mode.as_str()),
                "{name}: {dest} mode {mode}"
            );
            if let Some(other) = owner.insert(dest.clone(), name.clone()) {
                panic!("/{dest} shipped by both {other} and {name}");
            }
        }
        // Maintainer scripts: POSIX sh that parses and is executable.
        if let Some(dir) = deb.rel_path("maintainer-scripts") {
            let mut n = 0;
            for e in std::fs::read_dir(&dir).unwrap() {
                let p = e.unwrap().path();
                let f = p.file_name().unwrap().to_str().unwrap().to_string();
                if !["preinst", "postinst", "prerm", "postrm"].contains(&f.as_str()) {
                    continue;
                }
                n += 1;
                assert!(read(&p).starts_with("#!/bin/sh\n"), "{}", p.display());
                let mode =
                    std::os::unix::fs::PermissionsExt::mode(&p.metadata().unwrap().permissions());
                assert_eq!(mode & 0o111, 0o111, "{} not executable", p.display());
                let o = Command::new("sh").arg("-n").arg(&p).output().unwrap();
                assert!(o.status.success(), "{}: {}", p.display(), text(&o.stderr));
            }
            assert!(n > 0, "{name}: no maintainer scripts in {}", dir.display());
        }
        if let Some(t) = deb.rel_path("triggers-file") {
            for line in read(&t)
                .lines()
                .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            {
                let dir = line
                    .strip_prefix("interest-noawait /")
                    .unwrap_or_else(|| panic!("{line}"));
                assert!(!dir.contains(' '), "{line}");
            }
        }
    }
}

#[test]
fn plugin_package_depends_on_the_slurm_it_is_built_for() {
    let deb = Deb::load("slurm-plugin/select");
    let depends = deb.meta["depends"].as_str().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_compass"))
        .arg("--version")
        .output()
        .unwrap();
    let line = text(&out.stdout);
    let built = line
        .split("(Slurm ")
        .nth(1)
        .unwrap()
        .trim()
        .trim_end_matches(')');
    let parts: Vec<u32> = built.split('.').map(|p| p.parse().unwrap()).collect();
    let lower = format!("slurm-wlm-basic-plugins (>= {built})");
    let upper = format!(
        "slurm-wlm-basic-plugins (<< {}.{:02}.{})",
        parts[0],
        parts[1],
        parts[2] + 1
    );
    assert!(
        depends.contains(&lower) && depends.contains(&upper),
        "the plugins are built for Slurm {built}; Depends must pin it: want `{lower}, {upper}`, have `{depends}`"
    );
}

// ------------------------------------------------------------ build-debs.sh releases

/// A Slurm prefix holding only the `slurm_version.h` of `version` (what
/// build-debs.sh reads to choose and name the release).
fn fake_prefix(dir: &Path, version: (u32, u32, u32)) -> PathBuf {
    let inc = dir.join("include/slurm");
    std::fs::create_dir_all(&inc).unwrap();
    let (x, y, z) = version;
    std::fs::write(
        inc.join("slurm_version.h"),
        format!(
            "#ifndef _SLURM_VERSION_H_\n#define SLURM_VERSION_NUMBER 0x{:02x}{:02x}{:02x}\n#endif\n",
            x, y, z
        ),
    )
    .unwrap();
    dir.to_path_buf()
}

/// `contrib/build-debs.sh --dry-run ARGS` with `COMPASS_SLURM_PREFIX` set
/// (or removed when `None`).
fn build_debs_plan(prefix: Option<&Path>, args: &[&str]) -> Output {
    let mut cmd = Command::new(root().join("contrib/build-debs.sh"));
    cmd.arg("--dry-run")
        .args(args)
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("COMPASS_STOCK_PLUGIN_DIR")
        .env_remove("OUT");
    match prefix {
        Some(p) => cmd.env("COMPASS_SLURM_PREFIX", p),
        None => cmd.env_remove("COMPASS_SLURM_PREFIX"),
    };
    cmd.output().expect("run contrib/build-debs.sh")
}

fn plan_line<'a>(out: &'a str, prefix: &str) -> &'a str {
    out.lines()
        .map(str::trim)
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no `{prefix}` line in:\n{out}"))
}

#[test]
fn build_debs_chooses_the_release_and_names_the_packages_by_it() {
    let v = env!("CARGO_PKG_VERSION");
    let dir = Scratch::new("debs-release");
    let p24 = fake_prefix(&dir.0.join("s24"), (24, 11, 5));
    let p22 = fake_prefix(&dir.0.join("s22"), (22, 5, 8));

    // The release from the prefix's headers, or named: same plan.
    for args in [&[][..], &["--slurm", "24.11"][..], &["--slurm=24.11"][..]] {
        let o = build_debs_plan(Some(&p24), args);
        let out = text(&o.stdout);
        assert!(o.status.success(), "{args:?}: {out}{}", text(&o.stderr));
        assert!(
            plan_line(&out, "release ").starts_with(&format!(
                "release 24.11: Slurm 24.11.5 in {}, target directory target/slurm-24.11,",
                p24.display()
            )),
            "{out}"
        );
        for p in ["compass-slurm-plugins", "compass-budget", "compass"] {
            plan_line(&out, &format!("{p}_{v}+slurm24.11_amd64.deb"));
        }
        assert_eq!(
            plan_line(&out, "compass-slurm-plugins Depends:"),
            "compass-slurm-plugins Depends: libc6, slurm-wlm-basic-plugins (>= 24.11.5), \
             slurm-wlm-basic-plugins (<< 24.11.6), slurmctld | slurmd | slurm-client"
        );
        // Built against a private prefix: Debian 13's libslurm by name.
        assert!(
            plan_line(&out, "compass-budget Depends (libslurm):")
                .ends_with("libslurm42t64 (>= 24.11.5)"),
            "{out}"
        );
        // ... and Debian 13's cons_tres as the default stock plugin, not the
        // private prefix's (slurmctld would refuse to start on Debian 13).
        assert_eq!(
            plan_line(&out, "compass-slurm-plugins stock_plugin default:"),
            "compass-slurm-plugins stock_plugin default: \
             /usr/lib/x86_64-linux-gnu/slurm-wlm/select_cons_tres.so"
        );
    }
    // Another directory for the hosts the packages are for: named.
    let o = Command::new(root().join("contrib/build-debs.sh"))
        .arg("--dry-run")
        .env("COMPASS_SLURM_PREFIX", &p24)
        .env("COMPASS_STOCK_PLUGIN_DIR", "/srv/slurm/lib/slurm")
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("OUT")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(plan_line(
        &text(&o.stdout),
        "compass-slurm-plugins stock_plugin default:"
    )
    .ends_with(" /srv/slurm/lib/slurm/select_cons_tres.so"));
    // 22.05 from another prefix: its own range and libslurm38.
    let o = build_debs_plan(Some(&p22), &[]);
    let out = text(&o.stdout);
    assert!(o.status.success(), "{out}{}", text(&o.stderr));
    plan_line(
        &out,
        &format!("compass-slurm-plugins_{v}+slurm22.05_amd64.deb"),
    );
    assert!(plan_line(&out, "compass-slurm-plugins Depends:")
        .contains("(>= 22.05.8), slurm-wlm-basic-plugins (<< 22.05.9)"));
    assert!(
        plan_line(&out, "compass-budget Depends (libslurm):").ends_with("libslurm38 (>= 22.05.8)")
    );

    // Refused, with one line that says why: an unknown release, a prefix
    // of another release than the one named, a prefix without headers.
    let empty = dir.0.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    for (prefix, args, want) in [
        (
            Some(p24.as_path()),
            &["--slurm", "25.05"][..],
            "Slurm 25.05 is not a supported release (22.05, 24.11)",
        ),
        (
            Some(p24.as_path()),
            &["--slurm", "22.05"][..],
            "--slurm 22.05, but",
        ),
        (
            Some(empty.as_path()),
            &["--slurm", "24.11"][..],
            "Slurm 24.11: no headers in",
        ),
        (Some(empty.as_path()), &[][..], "no Slurm headers in"),
        (None, &["--slurm"][..], "--slurm needs a release"),
        (None, &["--bogus"][..], "unknown argument: --bogus"),
    ] {
        let o = build_debs_plan(prefix, args);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: want `{want}` in:\n{err}");
        assert!(text(&o.stdout).is_empty() || !text(&o.stdout).contains(".deb"));
    }
}

/// With no release named, the packages are Debian 12's 22.05 from `/usr`:
/// the plan's plugin Depends is the `depends` of the crate's
/// `[package.metadata.deb]` (one range, in both places).
#[test]
fn build_debs_defaults_to_debian_12s_slurm_and_its_depends() {
    if !Path::new("/usr/include/slurm/slurm_version.h").exists() {
        // The workspace cannot build without them either.
        panic!("/usr/include/slurm missing: run contrib/install-slurm-deps.sh");
    }
    let o = build_debs_plan(None, &[]);
    let out = text(&o.stdout);
    assert!(o.status.success(), "{out}{}", text(&o.stderr));
    assert!(
        plan_line(&out, "release ").starts_with("release 22.05: Slurm 22.05."),
        "{out}"
    );
    assert!(plan_line(&out, "release ").contains(" in /usr, target directory target,"));
    let deb = Deb::load("slurm-plugin/select");
    assert_eq!(
        plan_line(&out, "compass-slurm-plugins Depends:"),
        format!(
            "compass-slurm-plugins Depends: {}",
            deb.meta["depends"].as_str().unwrap()
        )
    );
    assert!(
        !out.contains("compass-budget Depends (libslurm):"),
        "from /usr, dpkg-shlibdeps names libslurm: {out}"
    );
}

// ------------------------------------------------------------ fragments

/// `Key=Value` lines of a slurm.conf fragment (first `=` splits).
fn slurm_conf(p: &Path) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    for line in read(p).lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(rest) = line.strip_prefix("Include ") {
            m.insert("Include".to_string(), rest.trim().to_string());
            continue;
        }
        let (k, v) = line
            .split_once('=')
            .unwrap_or_else(|| panic!("{}: bad line {line}", p.display()));
        assert!(
            m.insert(k.to_string(), v.to_string()).is_none(),
            "{k} twice in {}",
            p.display()
        );
    }
    m
}

/// The plugin_type string the select plugin exports.
fn select_plugin_type() -> String {
    let src = read(&root().join("slurm-plugin/select/src/lib.rs"));
    let at = src
        .find("pub static plugin_type")
        .expect("plugin_type in select/src/lib.rs");
    let rest = &src[at..];
    let start = rest.find("b\"").unwrap() + 2;
    let end = rest[start..].find("\\0\"").unwrap();
    rest[start..start + end].to_string()
}

#[test]
fn slurm_conf_fragment_matches_the_plugins_and_the_package() {
    let plugins = Deb::load("slurm-plugin/select");
    let conf = slurm_conf(&root().join("contrib/slurm/slurm.conf.compass"));
    assert_eq!(conf["SelectType"], select_plugin_type());
    assert!(
        conf["SelectType"].starts_with("select/cons_tres"),
        "slurmctld string-matches cons_tres"
    );

    let select_so = plugins.dest_of("libselect_cons_tres_compass.so");
    let spank_so = plugins.dest_of("libcompass_spank.so");
    let dir = &conf["PluginDir"];
    // Slurm loads select/<x> from <PluginDir>/select_<x>.so.
    let expected_so = format!("{dir}/{}.so", conf["SelectType"].replace('/', "_"));
    assert_eq!(select_so, expected_so);
    assert_eq!(Path::new(&spank_so).parent().unwrap(), Path::new(dir));
    assert_ne!(
        dir, "/usr/lib/x86_64-linux-gnu/slurm-wlm",
        "must be a private PluginDir"
    );
    assert_eq!(conf["JobSubmitPlugins"], "lua");
    assert_eq!(conf["JobRequeue"], "1");
    assert_eq!(conf["GresTypes"], "gpu");

    // The budget lines are included from the file the package ships, which
    // is etc/slurm-budget.conf: priority/multifactor. It ships every other
    // weight at 0 (compass then needs the smallest margin between its site
    // factors, so the most distinct keys); a site may keep its own weights
    // (admin guide, "Living with the site's Slurm setup").
    assert_eq!(conf["Include"], plugins.dest_of("etc/slurm-budget.conf"));
    let budget = slurm_conf(&root().join("etc/slurm-budget.conf"));
    assert_eq!(budget["PriorityType"], "priority/multifactor");
    for (k, v) in &budget {
        if k.starts_with("PriorityWeight") {
            assert_eq!(v, "0", "{k}: the shipped file sets every other weight to 0");
        }
    }

    // plugstack.conf line: the SPANK plugin where the package puts it, with
    // the compass.conf the package installs.
    let plugstack = read(&root().join("contrib/slurm/plugstack.conf.compass"));
    let line = plugstack
        .lines()
        .find(|l| !l.starts_with('#') && !l.trim().is_empty())
        .unwrap();
    let words: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(
        words,
        [
            "required",
            spank_so.as_str(),
            &format!("conf={}", plugins.dest_of("etc/compass.conf"))
        ]
    );
    assert_eq!(
        plugins.dest_of("etc/compass.conf"),
        "/etc/slurm/compass.conf",
        "slurmctld's default"
    );

    // /run/compass (tmpfiles.d) is where compass.conf's state file lives.
    let compass_conf: toml::Table = read(&root().join("etc/compass.conf")).parse().unwrap();
    let state = compass_conf["select"]["state_file"].as_str().unwrap();
    let tmpfiles = read(&root().join("contrib/tmpfiles/compass.conf"));
    let d = tmpfiles.lines().find(|l| l.starts_with("d ")).unwrap();
    let f: Vec<&str> = d.split_whitespace().collect();
    assert_eq!(Path::new(state).parent().unwrap(), Path::new(f[1]));
    assert_eq!(
        f[3..5],
        ["slurm", "slurm"],
        "slurmctld runs as SlurmUser and writes there"
    );
    assert_eq!(
        plugins.dest_of("contrib/tmpfiles/compass.conf"),
        "/usr/lib/tmpfiles.d/compass.conf"
    );
}

// ------------------------------------------------------------ systemd

#[test]
fn systemd_unit_verifies_and_matches_package_and_config() {
    let unit_path = root().join("contrib/systemd/compass-budgetd.service");
    let unit = read(&unit_path);
    let budget = Deb::load("budget-service");
    let key = |k: &str| {
        unit.lines()
            .find_map(|l| l.strip_prefix(&format!("{k}=")))
            .unwrap_or_else(|| panic!("no {k}= in the unit"))
            .to_string()
    };
    let exec = key("ExecStart");
    let words: Vec<&str> = exec.split_whitespace().collect();
    assert_eq!(words[0], budget.dest_of("target/release/compass-budgetd"));
    assert_eq!(words[1], "--config");
    assert_eq!(words[2], budget.dest_of("etc/compass-budgetd.toml"));
    assert_eq!(
        budget.dest_of("contrib/systemd/compass-budgetd.service"),
        "/lib/systemd/system/compass-budgetd.service"
    );
    // The default config's database lies in the unit's StateDirectory.
    let cfg: toml::Table = read(&root().join("etc/compass-budgetd.toml"))
        .parse()
        .unwrap();
    let db = cfg["db"].as_str().unwrap();
    assert_eq!(
        Path::new(db).parent().unwrap(),
        Path::new("/var/lib").join(key("StateDirectory"))
    );
    assert_eq!(key("Type"), "simple");
    assert_eq!(key("Restart"), "on-failure");
    // The unit runs as slurm: the package depends on the one whose preinst
    // creates that user (Debian: slurm-wlm-basic-plugins, which also holds
    // the auth/munge plugin libslurm loads).
    assert_eq!(key("User"), "slurm");
    let depends = budget.meta["depends"].as_str().unwrap();
    assert!(
        depends
            .split(',')
            .any(|d| d.trim() == "slurm-wlm-basic-plugins"),
        "compass-budget runs as slurm but does not depend on slurm-wlm-basic-plugins: {depends}"
    );

    if !on_path("systemd-analyze") {
        eprintln!("systemd-analyze not installed: unit parsed by hand only");
        return;
    }
    // Verify a copy whose ExecStart is a binary that exists here (the path
    // itself is checked above); any warning (unknown key, bad value) fails.
    let scratch = Scratch::new("unit");
    let copy = scratch.0.join("compass-budgetd.service");
    std::fs::write(&copy, unit.replace(words[0], "/bin/true")).unwrap();
    let o = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&copy)
        .output()
        .unwrap();
    assert!(
        o.status.success() && text(&o.stderr).trim().is_empty(),
        "systemd-analyze verify: {}{}",
        text(&o.stdout),
        text(&o.stderr)
    );
}

// ------------------------------------------------------------ scripts

fn shell_scripts() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(root().join("contrib"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "sh"))
        .collect();
    v.sort();
    v
}

#[test]
fn shell_scripts_parse_and_pass_shellcheck() {
    let scripts = shell_scripts();
    assert!(scripts.iter().any(|p| p.ends_with("contrib/demo.sh")));
    for s in &scripts {
        let o = Command::new("bash").arg("-n").arg(s).output().unwrap();
        assert!(o.status.success(), "{}: {}", s.display(), text(&o.stderr));
    }
    if !on_path("shellcheck") {
        eprintln!("shellcheck not installed (contrib/test.sh installs it): bash -n only");
        return;
    }
    let mut all = scripts.clone();
    for pkg in ["compass-slurm-plugins", "compass-budget"] {
        for e in std::fs::read_dir(root().join("contrib/debian").join(pkg)).unwrap() {
            let p = e.unwrap().path();
            if read(&p).starts_with("#!") {
                all.push(p);
            }
        }
    }
    let o = Command::new("shellcheck").args(&all).output().unwrap();
    assert!(o.status.success(), "shellcheck:\n{}", text(&o.stdout));
}

// ------------------------------------------------------------ demo.sh

fn demo(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(root().join("contrib/demo.sh"));
    c.args(args);
    // Clear of a demo that may be running on this machine (18080, 18100+, 18200+).
    c.env("DEMO_COMPASS_PORT", "29100")
        .env("DEMO_STOCK_PORT", "29200")
        .env("DEMO_BUDGET_PORT", "29080")
        .env("DEMO_STOCK_BUDGET_PORT", "29081");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

/// Why demo.sh's root-only preflight paths cannot be exercised here.
fn demo_skip() -> Option<&'static str> {
    if !is_root() {
        return Some("not root");
    }
    let os = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
    if !(os.contains("ID=debian") && os.contains("VERSION_ID=\"12\"")) {
        return Some("not Debian 12");
    }
    if !on_path("ss") || !on_path("flock") {
        return Some("ss or flock missing");
    }
    None
}

fn one_error_line(o: &Output) -> String {
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}{}",
        text(&o.stdout),
        text(&o.stderr)
    );
    let err = text(&o.stderr);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "one error line expected: {err}");
    assert!(lines[0].starts_with("demo: "), "{err}");
    lines[0].to_string()
}

#[test]
fn demo_preflight_names_the_problem_and_the_fix() {
    let o = demo(&["bogus"], &[]);
    assert!(one_error_line(&o).contains("unknown command 'bogus'"));
    if let Some(why) = demo_skip() {
        eprintln!("demo preflight: {why}; only the usage error is checked");
        return;
    }
    let scratch = Scratch::new("demo-preflight");
    let dir = scratch.0.join("state");
    let dir = dir.to_str().unwrap();
    let trace = root().join("Cargo.toml");
    let trace = trace.to_str().unwrap();

    let o = demo(
        &["check"],
        &[
            ("TRACE", "/nonexistent/venus.csv"),
            ("COMPASS_DEMO_DIR", dir),
        ],
    );
    let e = one_error_line(&o);
    assert!(
        e.contains("/nonexistent/venus.csv not found") && e.contains("TRACE="),
        "{e}"
    );

    // A port held by someone else (this test): named, with the way out.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port().to_string();
    let o = demo(
        &["check"],
        &[
            ("TRACE", trace),
            ("COMPASS_DEMO_DIR", dir),
            ("DEMO_BUDGET_PORT", &port),
        ],
    );
    let e = one_error_line(&o);
    assert!(
        e.contains(&format!("port {port} is in use")) && e.contains("DEMO_BUDGET_PORT"),
        "{e}"
    );
    drop(l);

    // Another demo.sh on the same state directory: named, with the stop
    // command as it must be typed for that directory.
    let parent = scratch.0.to_str().unwrap();
    // The lock's holder is the process spawned (bash exec'ing sleep), so
    // killing it frees the lock.
    let mut holder = Command::new("bash")
        .args(["-c", r#"exec 9<"$0" && flock 9 && exec sleep 60"#, parent])
        .spawn()
        .unwrap();
    let t0 = std::time::Instant::now();
    while Command::new("flock")
        .args(["-n", parent, "true"])
        .status()
        .unwrap()
        .success()
    {
        assert!(t0.elapsed().as_secs() < 10, "flock holder did not start");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let o = demo(&["check"], &[("TRACE", trace), ("COMPASS_DEMO_DIR", dir)]);
    let _ = holder.kill();
    let _ = holder.wait();
    let e = one_error_line(&o);
    assert!(
        e.contains("another contrib/demo.sh is running")
            && e.contains(&format!(
                "stop it with: COMPASS_DEMO_DIR={dir} contrib/demo.sh stop"
            )),
        "{e}"
    );

    let o = demo(
        &["check"],
        &[
            ("TRACE", trace),
            ("COMPASS_DEMO_DIR", dir),
            ("DEMO_BUDGET_PORT", &port),
        ],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(text(&o.stdout).contains("preflight ok"));
    assert!(!Path::new(dir).exists(), "check must change nothing");
}

#[test]
fn demo_stop_removes_only_its_own_directory() {
    if let Some(why) = demo_skip() {
        eprintln!("demo stop: {why}; skipped");
        return;
    }
    let scratch = Scratch::new("demo-stop");
    // Not made by the demo: refused, untouched.
    let foreign = scratch.0.join("foreign");
    std::fs::create_dir_all(&foreign).unwrap();
    std::fs::write(foreign.join("keep.txt"), "x").unwrap();
    let o = demo(
        &["stop"],
        &[("COMPASS_DEMO_DIR", foreign.to_str().unwrap())],
    );
    assert!(one_error_line(&o).contains("not a demo directory"));
    assert!(foreign.join("keep.txt").exists());

    // The demo's (marker present, a stale PID file of a crashed cluster whose
    // PID is this test's own process, which must survive): removed.
    let mine = scratch.0.join("demo");
    std::fs::create_dir_all(mine.join("compass/run")).unwrap();
    std::fs::create_dir_all(mine.join("compass/log")).unwrap();
    std::fs::write(mine.join(".compass-demo"), "").unwrap();
    std::fs::write(
        mine.join("compass/run/slurmctld.pid"),
        std::process::id().to_string(),
    )
    .unwrap();
    // An admin following a log of the demo: not the demo's, never killed
    // (stop used to SIGKILL every process naming the directory).
    let log = mine.join("compass/log/slurmctld.log");
    std::fs::write(&log, "").unwrap();
    let mut tail = Kid::spawn(Command::new("tail").arg("-f").arg(&log));
    let o = demo(&["stop"], &[("COMPASS_DEMO_DIR", mine.to_str().unwrap())]);
    assert!(o.status.success(), "{}{}", text(&o.stdout), text(&o.stderr));
    let out = text(&o.stdout);
    assert!(
        out.contains("removed 1 stale PID file")
            && out.contains(&format!("demo: removed {}", mine.display())),
        "{out}"
    );
    assert!(!mine.exists());
    assert!(
        tail.running(),
        "demo stop killed a `tail -f` of its log: {out}"
    );
    assert!(!out.contains("killing leftover"), "{out}");

    // Nothing there: nothing to do.
    let o = demo(&["stop"], &[("COMPASS_DEMO_DIR", mine.to_str().unwrap())]);
    assert!(o.status.success());
    assert!(text(&o.stdout).contains("nothing to stop"));
}

// ------------------------------------------------- install-compass-slurm.sh

/// The user a scratch slurm.conf names as SlurmUser: `nobody` as root (so
/// that ownership is checked), else this user (who may only chown to self).
fn scratch_slurm_user() -> String {
    let me = Command::new("id").arg("-un").output().unwrap();
    if is_root()
        && Command::new("id")
            .arg("nobody")
            .output()
            .unwrap()
            .status
            .success()
    {
        "nobody".to_string()
    } else {
        text(&me.stdout).trim().to_string()
    }
}

/// `contrib/install-compass-slurm.sh --etc-only` into `etc`, with the state
/// directory `run/compass` and the tmpfiles.d directory beside `etc`; a
/// slurm.conf naming [`scratch_slurm_user`] is written when `etc` has none.
fn install_etc(etc: &Path) -> Output {
    let dir = etc.parent().unwrap();
    if !etc.join("slurm.conf").exists() {
        std::fs::create_dir_all(etc).unwrap();
        std::fs::write(
            etc.join("slurm.conf"),
            format!("ClusterName=x\nSlurmUser={}\n", scratch_slurm_user()),
        )
        .unwrap();
    }
    Command::new(root().join("contrib/install-compass-slurm.sh"))
        .arg("--etc-only")
        .env("SLURM_ETC", etc)
        .env("COMPASS_STATE_DIR", dir.join("run/compass"))
        .env("COMPASS_TMPFILES_DIR", dir.join("tmpfiles.d"))
        .output()
        .expect("run contrib/install-compass-slurm.sh --etc-only")
}

#[test]
fn install_script_never_overwrites_a_sites_config_files() {
    let dir = Scratch::new("install-etc");
    let etc = dir.0.join("etc");
    let ours_lua = read(&root().join("etc/job_submit.lua"));
    let ours_conf = read(&root().join("etc/compass.conf"));

    // Absent: both installed, nothing said.
    let out = install_etc(&etc);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(read(&etc.join("job_submit.lua")), ours_lua);
    assert_eq!(read(&etc.join("compass.conf")), ours_conf);
    assert_eq!(text(&out.stderr), "");

    // A site's job_submit.lua with our part merged into its own logic, and
    // its own compass.conf: both kept as they are, and the script says how
    // to compare the script with ours (the re-run after a Slurm upgrade
    // used to overwrite such a script with ours).
    let merged = format!("-- site: route jobs to partitions\n{ours_lua}\n-- site: end\n");
    std::fs::write(etc.join("job_submit.lua"), &merged).unwrap();
    std::fs::write(etc.join("compass.conf"), "[select]\nmigrate = false\n").unwrap();
    let out = install_etc(&etc);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(read(&etc.join("job_submit.lua")), merged);
    assert_eq!(
        read(&etc.join("compass.conf")),
        "[select]\nmigrate = false\n"
    );
    assert!(
        text(&out.stderr).contains("job_submit.lua kept; it differs"),
        "{}",
        text(&out.stderr)
    );

    // A site's own script without our part: kept, and told to merge.
    std::fs::write(etc.join("job_submit.lua"), "-- site only\n").unwrap();
    let out = install_etc(&etc);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(read(&etc.join("job_submit.lua")), "-- site only\n");
    assert!(
        text(&out.stderr).contains("merge etc/job_submit.lua into it by hand"),
        "{}",
        text(&out.stderr)
    );
}

/// The state directory of the select plugin (slurmctld writes it as
/// SlurmUser) is declared in tmpfiles.d for slurm.conf's SlurmUser, so it
/// comes back after a reboot, and made now with that owner; a re-run
/// changes nothing. (The script used to `mkdir -p` it: root's, and gone at
/// the next boot.)
#[test]
fn install_script_declares_the_state_directory_for_the_slurm_user() {
    use std::os::unix::fs::MetadataExt;
    let dir = Scratch::new("install-state");
    let etc = dir.0.join("etc");
    let user = scratch_slurm_user();
    std::fs::create_dir_all(&etc).unwrap();
    // Keys are case-insensitive in slurm.conf; a comment after the value.
    std::fs::write(
        etc.join("slurm.conf"),
        format!("ClusterName=x\nslurmuser = {user}   # who runs slurmctld\n"),
    )
    .unwrap();
    let id = |args: &[&str]| {
        let o = Command::new("id").args(args).output().unwrap();
        text(&o.stdout).trim().to_string()
    };
    let group = id(&["-gn", &user]);
    let state = dir.0.join("run/compass");
    for run in 0..2 {
        let out = install_etc(&etc);
        assert!(out.status.success(), "run {run}: {}", text(&out.stderr));
        let conf = read(&dir.0.join("tmpfiles.d/compass.conf"));
        let d: Vec<&str> = conf.lines().filter(|l| l.starts_with("d ")).collect();
        assert_eq!(
            d,
            [format!("d {} 0755 {user} {group} -", state.display())],
            "{conf}"
        );
        // The rest is contrib/tmpfiles/compass.conf's.
        let ours = read(&root().join("contrib/tmpfiles/compass.conf"));
        let rest = |t: &str| -> Vec<String> {
            t.lines()
                .filter(|l| !l.starts_with("d "))
                .map(str::to_string)
                .collect()
        };
        assert_eq!(rest(&conf), rest(&ours));
        let m = std::fs::metadata(&state).unwrap();
        assert!(m.is_dir());
        assert_eq!(
            m.uid().to_string(),
            id(&["-u", &user]),
            "owner of {}",
            state.display()
        );
        assert_eq!(m.mode() & 0o777, 0o755);
    }
}

// ------------------------------------------------- slurm-lab.sh down

/// `slurm-lab.sh down` stops what the lab started: a daemon (by its
/// executable, with the lab in its command line), a job's batch script and
/// the job's own process below it (which names no lab). Not an admin's
/// `tail -f` of a log or of a job script there, which it used to SIGKILL
/// with everything naming the lab (and `down` then failed when one of them
/// had exited meanwhile).
#[test]
fn lab_down_stops_its_jobs_but_no_other_process_naming_the_lab() {
    let scratch = Scratch::new("lab-down");
    let lab = scratch.0.join("lab");
    std::fs::create_dir_all(lab.join("bin")).unwrap();
    std::fs::create_dir_all(lab.join("log")).unwrap();
    // A daemon: `up` links LAB/bin/slurmctld to Slurm's binary and starts
    // it by that name; here the binary is sleep.
    let sleep = Command::new("sh")
        .args(["-c", "command -v sleep"])
        .output()
        .unwrap();
    let sleep = text(&sleep.stdout).trim().to_string();
    std::os::unix::fs::symlink(&sleep, lab.join("bin/slurmctld")).unwrap();
    let mut daemon = Kid::spawn(Command::new(lab.join("bin/slurmctld")).arg("300"));
    // A job's slurmstepd: renamed "slurmstepd: [7.batch]" (its title
    // overwrites its command line and environment), writing to the slurmd
    // log of the lab.
    std::os::unix::fs::symlink(&sleep, lab.join("bin/slurmstepd")).unwrap();
    let mut stepd = Kid::spawn(
        Command::new("bash")
            .arg("-c")
            .arg(r#"exec -a "slurmstepd: [7.batch]" "$0" 300 3>>"$1""#)
            .arg(lab.join("bin/slurmstepd"))
            .arg(lab.join("log/slurmd.n1.log"))
            .env_remove("SLURM_CONF"),
    );
    let stepd_cmdline = format!("/proc/{}/cmdline", stepd.0.id());
    let t0 = std::time::Instant::now();
    while !std::fs::read(&stepd_cmdline)
        .unwrap_or_default()
        .starts_with(b"slurmstepd: [")
    {
        assert!(
            t0.elapsed().as_secs() < 10,
            "the fake slurmstepd did not start"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // A job: its batch script where slurmd puts it, and the job's process.
    let script = lab.join("spool/n1/job00007/slurm_script");
    let task_pid = scratch.0.join("task.pid");
    write_exe(
        &script,
        &format!(
            "#!/bin/sh\nsleep 300 &\necho $! >{}.tmp && mv {0}.tmp {0}\nwait\n",
            task_pid.display()
        ),
    );
    let mut job = Kid::spawn(Command::new(&script).env("SLURM_JOB_ID", "7"));
    wait_for_file(&task_pid);
    let task: u32 = read(&task_pid).trim().parse().unwrap();
    assert!(alive(task));
    // An admin's processes on the lab's files.
    let log = lab.join("log/slurmctld.log");
    std::fs::write(&log, "").unwrap();
    let mut tail_log = Kid::spawn(Command::new("tail").arg("-f").arg(&log));
    let mut tail_script = Kid::spawn(Command::new("tail").arg("-f").arg(&script));

    let o = Command::new(root().join("contrib/slurm-lab.sh"))
        .arg("down")
        .arg(&lab)
        .env_remove("LAB_SLURM")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}{}", text(&o.stdout), text(&o.stderr));
    assert!(text(&o.stdout).contains("slurm-lab.sh: down"));
    let t0 = std::time::Instant::now();
    while (daemon.running() || stepd.running() || job.running() || alive(task))
        && t0.elapsed().as_secs() < 5
    {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(!daemon.running(), "the lab's daemon survived down");
    assert!(
        !stepd.running(),
        "the lab's renamed slurmstepd survived down"
    );
    assert!(!job.running(), "the job's batch script survived down");
    assert!(!alive(task), "the job's process survived down");
    assert!(
        tail_log.running(),
        "down killed a `tail -f` of the lab's log"
    );
    assert!(
        tail_script.running(),
        "down killed a `tail -f` of a job script"
    );

    // `pids` lists nothing more, and creates no lab.
    let o = Command::new(root().join("contrib/slurm-lab.sh"))
        .arg("pids")
        .arg(&lab)
        .env_remove("LAB_SLURM")
        .output()
        .unwrap();
    assert!(o.status.success());
    assert_eq!(text(&o.stdout), "");
    let none = scratch.0.join("none");
    let o = Command::new(root().join("contrib/slurm-lab.sh"))
        .arg("pids")
        .arg(&none)
        .env_remove("LAB_SLURM")
        .output()
        .unwrap();
    assert!(o.status.success() && !none.exists());
}

// ------------------------------------------------- Slurm source and prefix

/// `build-slurm.sh` replaces its prefix whole (restore, build): a
/// `COMPASS_SLURM_PREFIX` it did not make (the variable also names "where a
/// release's headers and libslurm are": /usr, a site's Slurm) is refused
/// before anything else, and left as it was. Its own prefix (the stamp), an
/// empty or a missing one pass that check (apt-get and apt-cache are stubs
/// that fail here, so nothing is fetched or built).
#[test]
fn build_slurm_never_replaces_a_prefix_it_did_not_make() {
    let scratch = Scratch::new("build-slurm-prefix");
    let bin = scratch.0.join("bin");
    for tool in ["apt-get", "apt-cache"] {
        write_exe(&bin.join(tool), "#!/bin/sh\necho \"stub $0\" >&2\nexit 1\n");
    }
    let run = |prefix: &Path| {
        Command::new(root().join("contrib/build-slurm.sh"))
            .arg("24.11")
            .env("COMPASS_SLURM_PREFIX", prefix)
            .env("COMPASS_CACHE", scratch.0.join("cache"))
            .env("COMPASS_SLURM_SRC", scratch.0.join("src"))
            .env("PATH", path_with(&bin))
            .output()
            .unwrap()
    };
    let site = fake_prefix(&scratch.0.join("site"), (24, 11, 5));
    std::fs::create_dir_all(site.join("lib")).unwrap();
    std::fs::write(site.join("lib/libslurm.so.42"), "the site's").unwrap();
    let o = run(&site);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "{} exists and was not made by this script",
            site.display()
        )) && err.contains("refusing to replace it"),
        "{err}"
    );
    assert!(!err.contains("stub"), "refused before apt: {err}");
    assert_eq!(read(&site.join("lib/libslurm.so.42")), "the site's");
    assert!(site.join("include/slurm/slurm_version.h").exists());

    let own = scratch.0.join("own");
    std::fs::create_dir_all(own.join("bin")).unwrap();
    std::fs::write(own.join(".compass-slurm-version"), "24.11.5-4+deb13u0\n").unwrap();
    let empty = scratch.0.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    for p in [own, empty, scratch.0.join("missing")] {
        let o = run(&p);
        let err = text(&o.stderr);
        assert!(!o.status.success(), "the stubs stop it: {err}");
        assert!(
            !err.contains("not made by this script"),
            "{}: {err}",
            p.display()
        );
    }
}

/// The installed Slurm's version, from dpkg.
fn dpkg_version(pkg: &str) -> Option<String> {
    let o = Command::new("dpkg-query")
        .args(["-W", "-f=${Version}", pkg])
        .output()
        .ok()?;
    let v = text(&o.stdout).trim().to_string();
    (o.status.success() && !v.is_empty()).then_some(v)
}

/// The source tree is named by the upstream version; after a Debian update
/// of the installed Slurm (same upstream, new revision: a security fix in
/// Debian's patches) it is fetched again, not the old source reconfigured
/// and stamped as the new. apt-get is a stub that unpacks a fake source.
#[test]
fn prepare_slurm_source_fetches_the_source_again_after_a_debian_update() {
    let Some(version) = dpkg_version("libslurm-dev") else {
        eprintln!("libslurm-dev not installed: prepare-slurm-source.sh cannot run");
        return;
    };
    let upstream = version.split('-').next().unwrap().to_string();
    let scratch = Scratch::new("prepare-source");
    let src = scratch.0.join("src");
    let tree = src.join(format!("slurm-wlm-{upstream}"));
    // The tree of the revision installed before, configured.
    let old = format!("{upstream}-0~old");
    std::fs::create_dir_all(tree.join("debian")).unwrap();
    std::fs::write(
        tree.join("debian/changelog"),
        format!("slurm-wlm ({old}) bookworm; urgency=medium\n"),
    )
    .unwrap();
    write_exe(
        &tree.join("configure"),
        "#!/bin/sh\necho configured the old source\n",
    );
    std::fs::write(tree.join(".compass-configured"), format!("{old}\n")).unwrap();
    // `apt-get source -q --only-source slurm-wlm=V`: V's source, in the cwd.
    let bin = scratch.0.join("bin");
    let calls = scratch.0.join("apt-get.calls");
    write_exe(
        &bin.join("apt-get"),
        &format!(
            r#"#!/bin/sh
echo "$*" >>{calls}
for a; do case $a in slurm-wlm=*) v=${{a#slurm-wlm=}} ;; esac; done
d=slurm-wlm-${{v%%-*}}
mkdir -p "$d/debian"
echo "slurm-wlm ($v) bookworm-security; urgency=medium" >"$d/debian/changelog"
printf '#!/bin/sh\necho configured the source of %s\n' "$v" >"$d/configure"
chmod +x "$d/configure"
"#,
            calls = calls.display()
        ),
    );
    let run = || {
        Command::new(root().join("contrib/prepare-slurm-source.sh"))
            .env("COMPASS_SLURM_SRC", &src)
            .env("PATH", path_with(&bin))
            .output()
            .unwrap()
    };
    let o = run();
    assert!(o.status.success(), "{}{}", text(&o.stdout), text(&o.stderr));
    assert!(
        text(&o.stdout).contains(&format!(
            "is the source of {old}, not {version}: fetching it again"
        )),
        "{}",
        text(&o.stdout)
    );
    assert_eq!(
        read(&src.join("configure.log")).trim(),
        format!("configured the source of {version}")
    );
    assert_eq!(read(&tree.join(".compass-configured")).trim(), version);
    assert_eq!(
        std::fs::read_link(src.join("current")).unwrap(),
        tree,
        "current -> the tree"
    );
    // Ready: a second run fetches nothing.
    let o = run();
    assert!(o.status.success());
    assert!(text(&o.stdout).contains("already configured"));
    assert_eq!(read(&calls).lines().count(), 1, "{}", read(&calls));
}

// ------------------------------------------------- install-slurm-deps.sh

/// `install-slurm-deps.sh --sources-only` into a scratch /etc/apt.
fn slurm_deps_sources(apt: &Path) -> Output {
    Command::new(root().join("contrib/install-slurm-deps.sh"))
        .arg("--sources-only")
        .env("COMPASS_APT_ETC", apt)
        .output()
        .unwrap()
}

/// The deb-src lines the script writes name bookworm-security too, at the
/// URI of the machine's own binary entry for it (a Slurm security update is
/// only there until a point release, and prepare-slurm-source.sh asks for
/// the installed version), and no such line when the machine has none.
#[test]
fn install_slurm_deps_adds_deb_src_of_the_security_suite_the_machine_uses() {
    let scratch = Scratch::new("slurm-deps-sources");
    let ours = "sources.list.d/compass-bookworm-src.sources";
    let main =
        "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm bookworm-updates\n\
                Components: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n";
    let stanzas =
        |t: &str| -> Vec<String> { t.split("\n\n").map(|s| s.trim().to_string()).collect() };

    // deb822, as Debian 12 installs it (a mirror of the security archive).
    let apt = scratch.0.join("deb822");
    std::fs::create_dir_all(apt.join("sources.list.d")).unwrap();
    std::fs::write(
        apt.join("sources.list.d/debian.sources"),
        format!(
            "{main}\n# security\nTypes: deb\nURIs: http://mirror.example/debian-security\n\
             Suites: bookworm-security\nComponents: main\n"
        ),
    )
    .unwrap();
    let o = slurm_deps_sources(&apt);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let written = read(&apt.join(ours));
    let s = stanzas(&written);
    assert_eq!(s.len(), 2, "{written}");
    assert!(s[0].contains("Types: deb-src") && s[0].contains("Suites: bookworm bookworm-updates"));
    assert!(
        s[1].starts_with(
            "Types: deb-src\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\n"
        ),
        "{written}"
    );
    // Idempotent: nothing rewritten.
    let o = slurm_deps_sources(&apt);
    assert!(o.status.success() && !text(&o.stdout).contains("wrote"));
    assert_eq!(read(&apt.join(ours)), written);

    // One-line format, with options.
    let apt = scratch.0.join("oneline");
    std::fs::create_dir_all(apt.join("sources.list.d")).unwrap();
    std::fs::write(
        apt.join("sources.list"),
        "deb http://deb.debian.org/debian bookworm main\n\
         deb [ arch=amd64 signed-by=/k.gpg ] http://security.example/ds bookworm-security main\n",
    )
    .unwrap();
    assert!(slurm_deps_sources(&apt).status.success());
    assert!(read(&apt.join(ours))
        .contains("URIs: http://security.example/ds\nSuites: bookworm-security"));

    // No binary security entry (or a disabled one): no deb-src for it, and
    // an older file of ours without it stays so.
    let apt = scratch.0.join("nosecurity");
    std::fs::create_dir_all(apt.join("sources.list.d")).unwrap();
    std::fs::write(
        apt.join("sources.list.d/debian.sources"),
        format!("{main}\nTypes: deb\nURIs: http://x/debian-security\nSuites: bookworm-security\nEnabled: no\n"),
    )
    .unwrap();
    assert!(slurm_deps_sources(&apt).status.success());
    let written = read(&apt.join(ours));
    assert_eq!(stanzas(&written).len(), 1, "{written}");
    assert!(!written.contains("bookworm-security"));

    // The machine's own deb-src lines: nothing written.
    let apt = scratch.0.join("own-src");
    std::fs::create_dir_all(apt.join("sources.list.d")).unwrap();
    std::fs::write(
        apt.join("sources.list.d/site.sources"),
        main.replace("Types: deb\n", "Types: deb deb-src\n"),
    )
    .unwrap();
    assert!(slurm_deps_sources(&apt).status.success());
    assert!(!apt.join(ours).exists());
}

// ------------------------------------------------- job_submit.lua

/// A Lua 5.1 interpreter, as slurmctld's job_submit/lua links liblua5.1:
/// `lua5.1` when installed, else a minimal one built with cc against
/// liblua5.1-0-dev (a build dependency of contrib/build-slurm.sh).
fn lua51(scratch: &Scratch) -> Option<PathBuf> {
    if on_path("lua5.1") {
        return Some(PathBuf::from("lua5.1"));
    }
    if !Path::new("/usr/include/lua5.1/lua.h").exists() || !on_path("cc") {
        return None;
    }
    let c = scratch.0.join("lua.c");
    std::fs::write(
        &c,
        "#include <lua5.1/lua.h>\n#include <lua5.1/lauxlib.h>\n#include <lua5.1/lualib.h>\n\
         #include <stdio.h>\n\
         int main(int argc, char **argv) {\n\
         \tlua_State *L = luaL_newstate();\n\
         \tluaL_openlibs(L);\n\
         \tif (argc != 2 || luaL_dofile(L, argv[1])) {\n\
         \t\tfprintf(stderr, \"%s\\n\", argc != 2 ? \"usage: lua FILE\" : lua_tostring(L, -1));\n\
         \t\treturn 1;\n\t}\n\treturn 0;\n}\n",
    )
    .unwrap();
    let exe = scratch.0.join("lua");
    let o = Command::new("cc")
        .arg("-o")
        .arg(&exe)
        .arg(&c)
        .arg("-llua5.1")
        .output()
        .unwrap();
    if !o.status.success() {
        eprintln!("cc against liblua5.1 failed: {}", text(&o.stderr));
        return None;
    }
    Some(exe)
}

/// Runs `slurm_job_submit` of etc/job_submit.lua on a job whose
/// spank_job_env is `env`, with slurmctld's `COMPASS_CONF=conf`: (return
/// code, AdminComment, what it logged).
struct JobSubmit {
    lua: PathBuf,
    driver: PathBuf,
}

impl JobSubmit {
    fn new(scratch: &Scratch) -> Option<JobSubmit> {
        let lua = lua51(scratch)?;
        let driver = scratch.0.join("driver.lua");
        std::fs::write(
            &driver,
            r#"local logs = {}
local function log(kind)
	return function(fmt, ...) logs[#logs + 1] = kind .. ": " .. string.format(fmt, ...) end
end
slurm = { SUCCESS = 0, ERROR = -1, log_user = log("user"), log_info = log("info"), log_error = log("error") }
assert(dofile(os.getenv("JOB_SUBMIT_LUA")) == slurm.SUCCESS)
local env = {}
for e in string.gmatch(os.getenv("SPANK_JOB_ENV"), "%S+") do env[#env + 1] = e end
local job = { spank_job_env = env, admin_comment = os.getenv("ADMIN_COMMENT") }
if os.getenv("SPANK_JOB_ENV") == "none" then job.spank_job_env = nil end
local rc = slurm_job_submit(job, {}, 1000)
io.write(rc, "\n", tostring(job.admin_comment), "\n", table.concat(logs, "\n"), "\n")
"#,
        )
        .unwrap();
        Some(JobSubmit { lua, driver })
    }

    fn run(&self, conf: &Path, env: &str) -> (i32, String, String) {
        let o = Command::new(&self.lua)
            .arg(&self.driver)
            .env("JOB_SUBMIT_LUA", root().join("etc/job_submit.lua"))
            .env("COMPASS_CONF", conf)
            .env("SPANK_JOB_ENV", env)
            .env_remove("ADMIN_COMMENT")
            .output()
            .unwrap();
        assert!(o.status.success(), "lua: {}", text(&o.stderr));
        let out = text(&o.stdout);
        let mut lines = out.lines();
        let rc = lines.next().unwrap().parse().unwrap();
        let comment = lines.next().unwrap().to_string();
        (rc, comment, lines.collect::<Vec<_>>().join("\n"))
    }
}

/// The site cap on --min-runtime holds in slurmctld too: a user may submit
/// with a plugstack.conf and compass.conf of their own, and their SPANK
/// plugin then stores any value. job_submit.lua reads spank.max_min_runtime
/// from slurmctld's compass.conf (every duration form, as compass parses
/// it) and refuses the job above it; values the plugin never writes are
/// refused (a `resumable` that would add a key to the AdminComment tag).
#[test]
fn job_submit_lua_refuses_a_min_runtime_above_the_site_cap() {
    let scratch = Scratch::new("job-submit-lua");
    let Some(js) = JobSubmit::new(&scratch) else {
        // The README's test command installs liblua5.1-0-dev and asks for
        // this test (contrib/test.sh): never skipped there.
        assert!(
            std::env::var_os("COMPASS_TEST_REQUIRE_LUA").is_none(),
            "no Lua 5.1 (lua5.1, or cc and liblua5.1-0-dev), and COMPASS_TEST_REQUIRE_LUA is set"
        );
        eprintln!("no Lua 5.1 (lua5.1, or cc and liblua5.1-0-dev): job_submit.lua not run");
        return;
    };
    let conf = |name: &str, body: &str| {
        let p = scratch.0.join(name);
        std::fs::write(&p, body).unwrap();
        p
    };
    let two_h = conf(
        "2h.conf",
        "# site\n[spank]\nmax_min_runtime = \"2h\"   # the cap\ndefault_min_runtime = \"0\"\n\n[select]\nmigrate = true\n",
    );
    let ok = js.run(
        &two_h,
        "COMPASS_MIN_RUNTIME=7200 COMPASS_RESUMABLE=1 COMPASS_MIGRATION_COST=300",
    );
    assert_eq!(
        ok,
        (
            0,
            "compass:min_runtime=7200,resumable=1,migration_cost=300".into(),
            String::new()
        )
    );
    let (rc, comment, log) = js.run(&two_h, "COMPASS_MIN_RUNTIME=7201 COMPASS_RESUMABLE=1");
    assert_eq!((rc, comment.as_str()), (-1, "nil"), "{log}");
    assert!(
        log.contains("user: compass: --min-runtime=2:00:01 exceeds the site cap of 2:00:00 (spank.max_min_runtime in "),
        "{log}"
    );
    // No protected time asks for no cap; no compass values: untouched.
    assert_eq!(
        js.run(&two_h, "COMPASS_MIN_RUNTIME=0 COMPASS_RESUMABLE=1")
            .0,
        0
    );
    assert_eq!(js.run(&two_h, "OTHER=1"), (0, "nil".into(), String::new()));
    assert_eq!(js.run(&two_h, "none"), (0, "nil".into(), String::new()));

    // No compass.conf: the default cap, 8 h.
    let missing = scratch.0.join("missing.conf");
    assert_eq!(js.run(&missing, "COMPASS_MIN_RUNTIME=28800").0, 0);
    assert_eq!(js.run(&missing, "COMPASS_MIN_RUNTIME=28801").0, -1);

    // Every duration form, as compass itself parses it.
    for form in [
        "90", "4:00:00", "90:30", "1-0", "1-2:30", "1-2:3:4", "30s", "4H", "2d", " 45 ",
    ] {
        let cap = compass_core::duration::parse(form).unwrap();
        let c = conf(
            "form.conf",
            &format!("[ spank ] # ours\nmax_min_runtime = '{form}'\n"),
        );
        assert_eq!(
            js.run(&c, &format!("COMPASS_MIN_RUNTIME={cap}")).0,
            0,
            "{form}"
        );
        let (rc, _, log) = js.run(&c, &format!("COMPASS_MIN_RUNTIME={}", cap + 1));
        assert_eq!(rc, -1, "{form}: {log}");
    }

    // A cap it cannot read: protected time refused (said to the user and in
    // slurmctld's log), other jobs not.
    for body in [
        "[spank]\nmax_min_runtime = \"soon\"\n",
        "spank.max_min_runtime = \"2h\"\n",
        "[spank]\nmax_min_runtime = 7200\n",
    ] {
        let c = conf("bad.conf", body);
        let (rc, _, log) = js.run(&c, "COMPASS_MIN_RUNTIME=60");
        assert_eq!(rc, -1, "{body}: {log}");
        assert!(
            log.contains("error: compass: job_submit.lua: ")
                && log.contains(
                    "user: compass: --min-runtime cannot be used: the site config is unusable"
                ),
            "{body}: {log}"
        );
        assert_eq!(
            js.run(&c, "COMPASS_MIN_RUNTIME=0 COMPASS_RESUMABLE=1").0,
            0,
            "{body}"
        );
    }

    // Values the SPANK plugin never writes.
    for env in [
        "COMPASS_MIN_RUNTIME=0 COMPASS_RESUMABLE=1,min_runtime=99999999",
        "COMPASS_MIN_RUNTIME=1e9",
        "COMPASS_MIN_RUNTIME=-1",
    ] {
        let (rc, comment, log) = js.run(&two_h, env);
        assert_eq!((rc, comment.as_str()), (-1, "nil"), "{env}: {log}");
    }
}
