//! `compass compare` writes its markdown table, JSON and PNG charts.

use std::path::PathBuf;
use std::process::Command;

struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn compare_writes_table_json_and_charts() {
    let s =
        Scratch(std::env::temp_dir().join(format!("compass-cli-compare-{}", std::process::id())));
    std::fs::create_dir_all(&s.0).unwrap();
    let trace = s.0.join("t.csv");
    std::fs::write(
        &trace,
        "job_id,submit_s,duration_s,num_inst,gpus_per_inst\na,0,100,1,4\nb,0,50,2,2\nc,5,30,1,8\nd,6,10,1,1\n",
    )
    .unwrap();
    let out_dir = s.0.join("out");
    let out = Command::new(env!("CARGO_BIN_EXE_compass"))
        .args([
            "compare",
            "--trace",
            trace.to_str().unwrap(),
            "--nodes",
            "2",
            "--policies",
            "compass",
        ])
        .args([
            "--queue",
            "fifo,backfill",
            "--out",
            out_dir.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        stdout.contains("## fifo queue") && stdout.contains("## backfill queue"),
        "{stdout}"
    );
    let md = std::fs::read_to_string(out_dir.join("compare.md")).unwrap();
    assert_eq!(md.matches("| compass | 2 | 4 |").count(), 2, "{md}");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("compare.json")).unwrap())
            .unwrap();
    let runs = json.as_array().unwrap();
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[0]["result"]["jobs"], 4);
    assert_eq!(runs[1]["queue"], "backfill");
    for q in ["fifo", "backfill"] {
        let png = std::fs::read(out_dir.join(format!("timeseries-{q}.png"))).unwrap();
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    }
}
