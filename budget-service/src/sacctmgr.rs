//! A first budget tree from the site's Slurm account hierarchy
//! (`compass budget import --from-sacctmgr`, issue 12). Pure: parses the
//! output of
//!
//! ```text
//! sacctmgr -P -n show assoc format=Account,ParentName,User,Fairshare
//! ```
//!
//! (`-p` with its trailing `|`, a header line, and the `tree` option's
//! indented account names are accepted too) and maps it onto compass's tree:
//!
//! - every Slurm account is a node named after it, under its parent account
//!   (`ParentName`); the `root` account is the root (share 1);
//! - an account without sub-accounts is a leaf charged to that account; its
//!   users are folded into it (compass budgets accounts; within one, jobs
//!   go by priority);
//! - an account with sub-accounts *and* users gets a leaf `<account>-users`
//!   for the jobs charged to it directly, with the sum of its users'
//!   fair-share numbers as its raw share (1 when every user says `parent`);
//! - `Fairshare=parent` on an account: as in Slurm, its children compete
//!   with its siblings, under the first ancestor that is not `parent`;
//! - a node's share is its raw fair-share number over the sum of its
//!   siblings' (Slurm's normalised shares), so siblings sum to 1.

use compass_core::fairshare::NodeSpec;
use std::collections::BTreeMap;

use crate::error::{BudgetError, Result};

/// The `sacctmgr` command that prints what [`tree_from_sacctmgr`] reads.
pub const SACCTMGR_ARGS: [&str; 5] = [
    "-P",
    "-n",
    "show",
    "assoc",
    "format=Account,ParentName,User,Fairshare",
];

/// The text to read: the file `path` (`-`: stdin), or, without one, the
/// output of `sacctmgr` itself ([`SACCTMGR_ARGS`]); and where it came from.
pub fn read_source(path: Option<&std::path::Path>) -> Result<(String, String)> {
    use std::io::Read;
    match path {
        Some(p) if p.as_os_str() == "-" => {
            let mut s = String::new();
            std::io::stdin()
                .read_to_string(&mut s)
                .map_err(|e| BudgetError::Config {
                    path: "stdin".into(),
                    why: e.to_string(),
                })?;
            Ok((s, "sacctmgr output on stdin".into()))
        }
        Some(p) => std::fs::read_to_string(p)
            .map(|s| (s, format!("sacctmgr output in {}", p.display())))
            .map_err(|e| BudgetError::Config {
                path: p.display().to_string(),
                why: e.to_string(),
            }),
        None => run_sacctmgr(
            "sacctmgr",
            &SACCTMGR_ARGS,
            std::time::Duration::from_secs(SACCTMGR_TIMEOUT_S),
        ),
    }
}

/// How long `sacctmgr` may take before it is stopped (it retries a missing
/// slurm.conf or slurmdbd for a minute).
pub const SACCTMGR_TIMEOUT_S: u64 = 30;

/// Runs `program args` (`sacctmgr` [`SACCTMGR_ARGS`]) and returns its
/// output; stopped after `timeout`.
pub(crate) fn run_sacctmgr(
    program: &str,
    args: &[&str],
    timeout: std::time::Duration,
) -> Result<(String, String)> {
    use std::io::Read;
    use std::process::{Command, Stdio};
    let cmd = format!("{program} {}", args.join(" "));
    let hint =
        "sacctmgr needs slurmdbd; or save its output elsewhere and pass --from-sacctmgr FILE";
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| BudgetError::Slurm(format!("cannot run `{cmd}`: {e} ({hint})")))?;
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = r.read_to_end(&mut v);
            String::from_utf8_lossy(&v).into_owned()
        })
    };
    let out = child.stdout.take().map(|o| drain(Box::new(o)));
    let err = child.stderr.take().map(|e| drain(Box::new(e)));
    let start = std::time::Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break st,
            Ok(None) if start.elapsed() < timeout => {
                std::thread::sleep(std::time::Duration::from_millis(50))
            }
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                let why = err.and_then(|h| h.join().ok()).unwrap_or_default();
                return Err(BudgetError::Slurm(format!(
                    "`{cmd}` did not finish in {} s: {} ({hint})",
                    timeout.as_secs(),
                    why.lines().next().unwrap_or("no output").trim()
                )));
            }
            Err(e) => return Err(BudgetError::Slurm(format!("`{cmd}`: {e}"))),
        }
    };
    let stdout = out.and_then(|h| h.join().ok()).unwrap_or_default();
    let stderr = err.and_then(|h| h.join().ok()).unwrap_or_default();
    if !status.success() {
        return Err(BudgetError::Slurm(format!(
            "`{cmd}` failed ({status}): {} ({hint})",
            stderr.trim().lines().last().unwrap_or("no output")
        )));
    }
    Ok((stdout, format!("`{cmd}`")))
}

/// A fair-share number or `parent`.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Share {
    Raw(f64),
    Parent,
}

#[derive(Debug, Default)]
struct Account {
    parent: Option<String>,
    share: Option<Share>,
    users: BTreeMap<String, Share>,
    children: Vec<String>,
    line: usize,
}

/// The tree built from sacctmgr's output, and what the mapping folded or
/// changed (printed before the diff).
#[derive(Debug, PartialEq)]
pub struct Imported {
    pub nodes: Vec<NodeSpec>,
    pub notes: Vec<String>,
}

/// An error at `line` of the input (0: about the whole input).
fn bad(line: usize, why: impl Into<String>) -> BudgetError {
    BudgetError::Malformed {
        field: Some(match line {
            0 => "sacctmgr output".to_string(),
            l => format!("sacctmgr output, line {l}"),
        }),
        why: why.into(),
    }
}

fn parse_share(line: usize, s: &str) -> Result<Share> {
    let s = s.trim();
    if s.eq_ignore_ascii_case("parent") {
        return Ok(Share::Parent);
    }
    match s.parse::<u64>() {
        Ok(n) => Ok(Share::Raw(n as f64)),
        Err(_) => Err(bad(
            line,
            format!("Fairshare `{s}` is neither a whole number nor `parent`"),
        )),
    }
}

/// Builds a budget tree from `sacctmgr -P -n show assoc
/// format=Account,ParentName,User,Fairshare` (see the module docs).
pub fn tree_from_sacctmgr(text: &str) -> Result<Imported> {
    let mut accounts: BTreeMap<String, Account> = BTreeMap::new();
    let mut user_rows = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        if raw.trim().is_empty() {
            continue;
        }
        let mut f: Vec<&str> = raw.split('|').collect();
        // `-p` ends every row with `|`.
        if f.len() == 5 && f[4].trim().is_empty() {
            f.pop();
        }
        if f.len() != 4 {
            return Err(bad(
                line,
                format!(
                    "expected 4 fields Account|ParentName|User|Fairshare, got {} in `{raw}` \
                     (run: sacctmgr {})",
                    f.len(),
                    SACCTMGR_ARGS.join(" ")
                ),
            ));
        }
        let (acct, parent, user, share) = (
            f[0].trim().to_ascii_lowercase(),
            f[1].trim().to_ascii_lowercase(),
            f[2].trim().to_string(),
            f[3].trim(),
        );
        if line == 1 && acct == "account" {
            continue; // the header of a run without -n
        }
        if acct.is_empty() {
            return Err(bad(line, "empty Account"));
        }
        let share = parse_share(line, share)?;
        if user.is_empty() {
            let a = accounts.entry(acct.clone()).or_default();
            let parent = (!parent.is_empty()).then_some(parent);
            if a.share.is_some() && (a.parent != parent || a.share != Some(share)) {
                return Err(bad(
                    line,
                    format!(
                        "account `{acct}` is listed again with another parent or Fairshare \
                         (line {}; several clusters? select one with `cluster=NAME`)",
                        a.line
                    ),
                ));
            }
            a.parent = parent;
            a.share = Some(share);
            a.line = line;
        } else {
            user_rows.push((line, acct, user, share));
        }
    }
    for (line, acct, user, share) in user_rows {
        let a = accounts.get_mut(&acct).ok_or_else(|| {
            bad(
                line,
                format!("user `{user}` is in account `{acct}`, which has no account line"),
            )
        })?;
        match a.users.get(&user) {
            Some(s) if *s != share => {
                return Err(bad(
                    line,
                    format!(
                        "user `{user}` of account `{acct}` is listed again with another Fairshare"
                    ),
                ))
            }
            _ => {
                a.users.insert(user, share);
            }
        }
    }
    if accounts.is_empty() {
        return Err(bad(0, "no associations: is this sacctmgr's output?"));
    }
    let names: Vec<String> = accounts.keys().cloned().collect();
    for n in &names {
        if let Some(p) = accounts[n].parent.clone() {
            let line = accounts[n].line;
            let pa = accounts.get_mut(&p).ok_or_else(|| {
                bad(
                    line,
                    format!("account `{n}` has parent `{p}`, which has no account line"),
                )
            })?;
            pa.children.push(n.clone());
        }
    }
    let roots: Vec<String> = accounts
        .iter()
        .filter(|(_, a)| a.parent.is_none())
        .map(|(n, _)| n.clone())
        .collect();
    let root = match roots.as_slice() {
        [r] => r.clone(),
        [] => return Err(bad(0, "no root account (an account without ParentName)")),
        _ => {
            return Err(bad(
                0,
                format!("several root accounts: {}", roots.join(", ")),
            ))
        }
    };
    // Every account reachable from the root (no cycle).
    let mut seen = std::collections::BTreeSet::new();
    let mut stack = vec![root.clone()];
    while let Some(n) = stack.pop() {
        if seen.insert(n.clone()) {
            stack.extend(accounts[&n].children.iter().cloned());
        }
    }
    if let Some(lost) = names.iter().find(|n| !seen.contains(*n)) {
        return Err(bad(
            accounts[lost].line,
            format!("account `{lost}` is not under the root `{root}` (a parent cycle)"),
        ));
    }

    let mut out = Imported {
        nodes: vec![NodeSpec {
            name: root.clone(),
            parent: None,
            share: 1.0,
            managers: vec![],
            account: None,
        }],
        notes: Vec::new(),
    };
    let taken: std::collections::BTreeSet<String> = accounts.keys().cloned().collect();
    build(&accounts, &taken, &root, &root, &mut out)?;
    if out.nodes.len() == 1 {
        // Only the root: it is the one leaf.
        out.nodes[0].account = Some(root.clone());
    }
    Ok(out)
}

/// A child of a compass node before normalisation: its name, raw share,
/// the Slurm account whose subtree it is, and whether it is the leaf of
/// that account's own jobs.
struct Kid {
    name: String,
    raw: f64,
    account: String,
    own_jobs: bool,
}

/// Children of account `a` as compass sees them, with `Fairshare=parent`
/// accounts replaced by their own children.
fn kids_of(
    accounts: &BTreeMap<String, Account>,
    taken: &std::collections::BTreeSet<String>,
    a: &str,
    notes: &mut Vec<String>,
) -> Result<Vec<Kid>> {
    let acc = &accounts[a];
    let mut kids = Vec::new();
    if !acc.children.is_empty() && !acc.users.is_empty() {
        let name = format!("{a}-users");
        if taken.contains(&name) {
            return Err(bad(
                acc.line,
                format!("account `{a}` has users and sub-accounts, and its users' leaf `{name}` is also an account name"),
            ));
        }
        let raw: f64 = acc
            .users
            .values()
            .filter_map(|s| match s {
                Share::Raw(x) => Some(*x),
                Share::Parent => None,
            })
            .sum();
        let all_parent = acc.users.values().all(|s| *s == Share::Parent);
        notes.push(format!(
            "account `{a}` has sub-accounts and {} user(s): its own jobs get leaf `{name}` (raw share {})",
            acc.users.len(),
            if all_parent { 1.0 } else { raw }
        ));
        kids.push(Kid {
            name,
            raw: if all_parent { 1.0 } else { raw },
            account: a.to_string(),
            own_jobs: true,
        });
    }
    for c in &acc.children {
        // Every account has a share: accounts come from account lines.
        match accounts[c].share.unwrap_or(Share::Raw(1.0)) {
            Share::Parent => {
                notes.push(format!(
                    "account `{c}` has Fairshare=parent: its children compete under `{a}`"
                ));
                kids.extend(kids_of(accounts, taken, c, notes)?);
                if accounts[c].children.is_empty() {
                    // A leaf with `parent`: its jobs compete as one sibling
                    // of weight 1.
                    kids.push(Kid {
                        name: c.clone(),
                        raw: 1.0,
                        account: c.clone(),
                        own_jobs: false,
                    });
                }
            }
            Share::Raw(x) => kids.push(Kid {
                name: c.clone(),
                raw: x,
                account: c.clone(),
                own_jobs: false,
            }),
        }
    }
    Ok(kids)
}

fn build(
    accounts: &BTreeMap<String, Account>,
    taken: &std::collections::BTreeSet<String>,
    node: &str,
    account: &str,
    out: &mut Imported,
) -> Result<()> {
    let kids = kids_of(accounts, taken, account, &mut out.notes)?;
    let sum: f64 = kids.iter().map(|k| k.raw).sum();
    for k in kids {
        let share = if sum > 0.0 { k.raw / sum } else { 0.0 };
        let leaf = k.own_jobs || accounts[&k.account].children.is_empty();
        if !k.own_jobs && leaf && !accounts[&k.account].users.is_empty() {
            out.notes.push(format!(
                "account `{}`: {} user(s) folded into it (compass budgets accounts)",
                k.account,
                accounts[&k.account].users.len()
            ));
        }
        out.nodes.push(NodeSpec {
            name: k.name.clone(),
            parent: Some(node.to_string()),
            share,
            managers: vec![],
            account: leaf.then(|| k.account.clone()),
        });
        if !leaf {
            build(accounts, taken, &k.name, &k.account, out)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use compass_core::fairshare::{diff, OrgTree, TreeChange};

    const SITE: &str = include_str!("../tests/fixtures/sacctmgr-site.txt");
    const SITE_TREE: &str = include_str!("../tests/fixtures/sacctmgr-site-tree.txt");

    fn node<'a>(i: &'a Imported, name: &str) -> &'a NodeSpec {
        i.nodes
            .iter()
            .find(|n| n.name == name)
            .unwrap_or_else(|| panic!("no node {name}: {:?}", i.nodes))
    }

    #[test]
    fn site_hierarchy_becomes_a_valid_tree_with_normalised_shares() {
        let i = tree_from_sacctmgr(SITE).unwrap();
        let t = OrgTree::build(&i.nodes).expect("a valid tree");
        assert_eq!(node(&i, "root").parent, None);
        // Under root: root's own user (1), physics 40, chemistry's children
        // (Fairshare=parent: chem-lab1 10, chem-lab2 30), cs 60.
        let sum = 1.0 + 40.0 + 10.0 + 30.0 + 60.0;
        for (name, raw, account) in [
            ("root-users", 1.0, Some("root")),
            ("physics", 40.0, None),
            ("chem-lab1", 10.0, Some("chem-lab1")),
            ("chem-lab2", 30.0, Some("chem-lab2")),
            ("cs", 60.0, Some("cs")),
        ] {
            let n = node(&i, name);
            assert_eq!(n.parent.as_deref(), Some("root"), "{n:?}");
            assert!((n.share - raw / sum).abs() < 1e-12, "{n:?}");
            assert_eq!(n.account.as_deref(), account, "{n:?}");
        }
        assert!(!i.nodes.iter().any(|n| n.name == "chemistry"));
        // Under physics: alice's own jobs (1), astro 3, hep 1.
        for (name, share) in [("physics-users", 0.2), ("astro", 0.6), ("hep", 0.2)] {
            let n = node(&i, name);
            assert_eq!(n.parent.as_deref(), Some("physics"));
            assert!((n.share - share).abs() < 1e-12, "{n:?}");
        }
        assert_eq!(
            node(&i, "physics-users").account.as_deref(),
            Some("physics")
        );
        assert_eq!(node(&i, "astro").account.as_deref(), Some("astro"));
        assert_eq!(i.nodes.len(), 9);
        // astro's fixed share of the cluster: 40/141 x 0.6.
        let astro = t.find("astro").unwrap();
        assert!((t.node(astro).abs_share - 40.0 / sum * 0.6).abs() < 1e-12);
        let notes = i.notes.join("\n");
        assert!(
            notes.contains("`chemistry` has Fairshare=parent"),
            "{notes}"
        );
        assert!(notes.contains("`astro`: 2 user(s) folded"), "{notes}");
        assert!(
            notes.contains("`physics` has sub-accounts and 1 user(s)"),
            "{notes}"
        );
    }

    #[test]
    fn header_trailing_bars_and_tree_indentation_read_the_same() {
        let a = tree_from_sacctmgr(SITE).unwrap();
        let b = tree_from_sacctmgr(SITE_TREE).unwrap();
        let sorted = |mut v: Vec<NodeSpec>| {
            v.sort_by(|x, y| x.name.cmp(&y.name));
            v
        };
        assert_eq!(sorted(a.nodes), sorted(b.nodes));
    }

    #[test]
    fn import_diff_against_an_existing_tree() {
        // A site that already has part of this tree: the diff adds, changes
        // and removes what the import's diff machinery shows.
        let i = tree_from_sacctmgr(SITE).unwrap();
        let mut old: Vec<NodeSpec> = i.nodes.clone();
        old.retain(|n| n.name != "hep");
        old.iter_mut().find(|n| n.name == "astro").unwrap().share = 0.5;
        old.push(NodeSpec {
            name: "retired".into(),
            parent: Some("root".into()),
            share: 0.0,
            managers: vec![],
            account: Some("retired".into()),
        });
        let d = diff(&old, &i.nodes);
        assert_eq!(d.len(), 3, "{d:?}");
        assert!(matches!(&d[0], TreeChange::Modify { new, .. } if new.name == "astro"));
        assert!(matches!(&d[1], TreeChange::Add { node } if node.name == "hep"));
        assert!(matches!(&d[2], TreeChange::Remove { node } if node.name == "retired"));
    }

    #[test]
    fn small_and_odd_hierarchies() {
        // Only root with users: root is the one leaf.
        let i = tree_from_sacctmgr("root|||1\nroot||alice|1\n").unwrap();
        assert_eq!(i.nodes.len(), 1);
        assert_eq!(i.nodes[0].account.as_deref(), Some("root"));
        OrgTree::build(&i.nodes).unwrap();
        // Zero shares everywhere: shares 0, still a valid tree.
        let i = tree_from_sacctmgr("root|||1\na|root||0\nb|root||0\n").unwrap();
        assert!(i.nodes.iter().skip(1).all(|n| n.share == 0.0));
        OrgTree::build(&i.nodes).unwrap();
        // Upper-case accounts are lower-cased (Slurm's database is).
        let i = tree_from_sacctmgr("root|||1\nLab|root||5\n").unwrap();
        assert_eq!(node(&i, "lab").account.as_deref(), Some("lab"));
        // A leaf with Fairshare=parent competes as weight 1 under its
        // grandparent; users with `parent` under an account with
        // sub-accounts give its own leaf weight 1.
        let i = tree_from_sacctmgr("root|||1\ng|root||3\ng||u|parent\nsub|g||parent\nx|g||1\n")
            .unwrap();
        OrgTree::build(&i.nodes).unwrap();
        for n in ["g-users", "sub", "x"] {
            assert!((node(&i, n).share - 1.0 / 3.0).abs() < 1e-12, "{n}");
        }
    }

    #[test]
    fn running_sacctmgr_fails_clearly_and_never_hangs() {
        let t = std::time::Duration::from_millis(300);
        let e = run_sacctmgr("sleep", &["10"], t).unwrap_err().to_string();
        assert!(
            e.contains("did not finish in 0 s") && e.contains("slurmdbd"),
            "{e}"
        );
        let e = run_sacctmgr(
            "sh",
            &["-c", "echo 'sacctmgr: fatal: no conf' >&2; exit 1"],
            t,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("sacctmgr: fatal: no conf"), "{e}");
        let e = run_sacctmgr("/nonexistent/sacctmgr", &[], t)
            .unwrap_err()
            .to_string();
        assert!(e.contains("cannot run"), "{e}");
        let (out, from) = run_sacctmgr(
            "sh",
            &["-c", "echo 'root|||1'"],
            std::time::Duration::from_secs(10),
        )
        .unwrap();
        assert_eq!(out, "root|||1\n");
        assert!(from.contains("sh -c"), "{from}");
    }

    #[test]
    fn bad_input_says_which_line_and_why() {
        for (text, want) in [
            ("root|||1\nphysics|root|40\n", "line 2"),
            ("root|||1\nphysics|root||forty\n", "neither a whole number"),
            ("root|||1\nphysics|root||-3\n", "neither a whole number"),
            ("root|||1\nastro|physics||3\n", "parent `physics`"),
            ("root|||1\nother|||1\n", "several root accounts"),
            ("physics|root||1\n", "parent `root`"),
            ("root|||1\nroot||alice|1\nghost||bob|1\n", "user `bob`"),
            ("root|||1\na|root||1\na|root||2\n", "listed again"),
            ("root|||1\na|root||1\na||u|1\na||u|2\n", "listed again"),
            ("", "no associations"),
            ("\n\n", "no associations"),
            ("root|||1\n|root||1\n", "empty Account"),
            ("root|||1\na|b||1\nb|a||1\n", "not under the root"),
            (
                "root|||1\nx|root||1\nx-users|x||1\nx||u|1\n",
                "also an account name",
            ),
        ] {
            let e = tree_from_sacctmgr(text).unwrap_err().to_string();
            assert!(e.contains(want), "{text:?}: {e}");
        }
        // The same account line twice (two clusters alike) is fine.
        tree_from_sacctmgr("root|||1\na|root||1\na|root||1\n").unwrap();
    }
}
