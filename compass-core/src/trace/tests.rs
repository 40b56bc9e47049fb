use super::*;

fn opts() -> ReadOptions {
    ReadOptions::default()
}

fn trace_err(text: &str) -> (String, u64, String, String) {
    match read_str(text, "t.csv", &opts()) {
        Err(CoreError::Trace {
            file,
            line,
            field,
            why,
        }) => (file, line, field, why),
        other => panic!("expected a trace error, got {other:?}"),
    }
}

#[test]
fn canonical_with_and_without_optional_columns() {
    let t = read_str(
        "job_id,submit_s,duration_s,num_inst,gpus_per_inst\na,0,10.5,2,4\nb,3,1,1,8\n",
        "t.csv",
        &opts(),
    )
    .unwrap();
    assert_eq!(t.format, TraceFormat::Canonical);
    assert_eq!(t.jobs.len(), 2);
    assert_eq!(
        (t.jobs[0].shape, t.jobs[0].duration_s, t.jobs[0].line),
        (JobShape::new(2, 4), 10.5, 2)
    );
    assert!(t.jobs[1].resumable && t.jobs[1].account.is_none());

    let t = read_str(
        "job_id,submit_s,duration_s,num_inst,gpus_per_inst,account,min_runtime_s,resumable\n\
         a,0,10,1,1,physics,600,false\nb,1,10,1,1,,,\n",
        "t.csv",
        &opts(),
    )
    .unwrap();
    assert_eq!(t.jobs[0].account.as_deref(), Some("physics"));
    assert_eq!(
        (t.jobs[0].min_runtime_s, t.jobs[0].resumable),
        (Some(600.0), false)
    );
    assert_eq!(
        (
            t.jobs[1].min_runtime_s,
            t.jobs[1].resumable,
            t.jobs[1].account.clone()
        ),
        (None, true, None)
    );
}

#[test]
fn malformed_rows_name_file_line_and_field() {
    let h = "job_id,submit_s,duration_s,num_inst,gpus_per_inst\n";
    let e = trace_err(&format!("{h}a,0,10,1,1\nb,x,10,1,1\n"));
    assert_eq!((e.0.as_str(), e.1, e.2.as_str()), ("t.csv", 3, "submit_s"));
    assert!(e.3.contains("not a number"), "{}", e.3);
    assert_eq!(trace_err(&format!("{h}a,0,-1,1,1\n")).2, "duration_s");
    assert_eq!(trace_err(&format!("{h}a,0,1,0,1\n")).2, "num_inst");
    assert_eq!(trace_err(&format!("{h}a,0,1,1,9\n")).2, "gpus_per_inst");
    assert_eq!(trace_err(&format!("{h}a,0,1,1,2.5\n")).2, "gpus_per_inst");
    assert_eq!(trace_err(&format!("{h}a,0,1,1,\n")).2, "gpus_per_inst");
    assert_eq!(trace_err(&format!("{h}a,0,inf,1,1\n")).2, "duration_s");
    let dup = trace_err(&format!("{h}a,0,1,1,1\na,0,1,1,1\n"));
    assert_eq!((dup.1, dup.2.as_str()), (3, "job_id"));
    assert!(dup.3.contains("line 2"));
    let short = trace_err(&format!("{h}a,0,1\n"));
    assert_eq!(short.1, 2);
    assert!(short.3.contains("3 fields"), "{}", short.3);
    let b =
        trace_err("job_id,submit_s,duration_s,num_inst,gpus_per_inst,resumable\na,0,1,1,1,maybe\n");
    assert_eq!((b.1, b.2.as_str()), (2, "resumable"));
    let unknown = trace_err("a,b,c\n1,2,3\n");
    assert_eq!((unknown.1, unknown.2.as_str()), (1, "header"));
    // A forced format with a missing column.
    let forced = read_str(
        "job_id,submit_s\n",
        "t.csv",
        &ReadOptions {
            format: Some(TraceFormat::Canonical),
            ..opts()
        },
    );
    assert!(
        matches!(forced, Err(CoreError::Trace { field, line: 1, .. }) if field == "duration_s")
    );
}

/// Every time of every format is at most `MAX_TRACE_S` (1e10 s): beyond,
/// the simulators' clocks lose their steps in rounding (a replay at 1e19 s
/// never ended, a chart up to 1e307 s never drew). The error names the row
/// and the field.
#[test]
fn times_past_the_limit_are_refused_in_every_format() {
    let too_late = ["1e19", "10000000001", "1e307"];
    for v in too_late {
        let h = "job_id,submit_s,duration_s,num_inst,gpus_per_inst,min_runtime_s\n";
        for (row, field) in [
            (format!("a,0,1,1,1,0\nb,{v},1,1,1,0\n"), "submit_s"),
            (format!("a,0,1,1,1,0\nb,0,{v},1,1,0\n"), "duration_s"),
            (format!("a,0,1,1,1,0\nb,0,1,1,1,{v}\n"), "min_runtime_s"),
        ] {
            let e = trace_err(&format!("{h}{row}"));
            assert_eq!((e.1, e.2.as_str()), (3, field), "{v}");
            assert!(e.3.contains(v) && e.3.contains("1e10"), "{}", e.3);
        }
        let e = trace_err(&format!(
            "job_id,arrival_s,service_sec,gpu_count\n1,0,1,1\n2,{v},1,1\n"
        ));
        assert_eq!((e.1, e.2.as_str()), (3, "arrival_s"));
        let e = trace_err(&format!(
            "job_id,arrival_s,service_sec,gpu_count\n1,0,{v},1\n"
        ));
        assert_eq!((e.1, e.2.as_str()), (2, "service_sec"));
        let h = "name,num_gpu,gpu_milli,creation_time,deletion_time,scheduled_time\n";
        for (row, field) in [
            (format!("p,1,1000,{v},{v},{v}\n"), "creation_time"),
            (format!("p,1,1000,0,{v},0\n"), "deletion_time"),
            (format!("p,1,1000,0,{v},{v}\n"), "scheduled_time"),
        ] {
            let e = trace_err(&format!("{h}{row}"));
            assert_eq!((e.1, e.2.as_str()), (2, field), "{v}");
        }
    }
    // The limit itself is a time.
    let t = read_str(
        "job_id,submit_s,duration_s,num_inst,gpus_per_inst\na,1e10,10000000000,1,1\n",
        "t.csv",
        &opts(),
    )
    .unwrap();
    assert_eq!(
        (t.jobs[0].submit_s, t.jobs[0].duration_s),
        (MAX_TRACE_S, MAX_TRACE_S)
    );
}

#[test]
fn venus_jobs_split_into_whole_nodes() {
    let t = read_str(
        "job_id,arrival_s,service_sec,gpu_count\n1#1,5.0,100.0,3\n2#1,6,10,8\n3#1,7,10,12\n4#1,8,10,128\n",
        "v.csv",
        &opts(),
    )
    .unwrap();
    assert_eq!(t.format, TraceFormat::Venus);
    let shapes: Vec<JobShape> = t.jobs.iter().map(|j| j.shape).collect();
    assert_eq!(
        shapes,
        vec![
            JobShape::new(1, 3),
            JobShape::new(1, 8),
            JobShape::new(2, 8),
            JobShape::new(16, 8)
        ]
    );
    assert_eq!(venus::venus_shape(12, 4), JobShape::new(3, 4));
    let e = trace_err("job_id,arrival_s,service_sec,gpu_count\n1#1,5.0,100.0,0\n");
    assert_eq!((e.1, e.2.as_str()), (2, "gpu_count"));
}

#[test]
fn alibaba_keeps_whole_gpu_pods_only() {
    let text = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n\
        p0,1,1,1,1000,,LS,Running,0,100,10\n\
        p1,1,1,1,460,,LS,Running,5,100,5\n\
        p2,1,1,0,0,,LS,Running,5,100,5\n\
        p3,1,1,8,1000,,LS,Pending,7,100,\n\
        p4,1,1,4,1000,,LS,Failed,20,50,20\n";
    let t = read_str(text, "a.csv", &opts()).unwrap();
    assert_eq!(t.format, TraceFormat::Alibaba);
    let got: Vec<(&str, f64, f64, JobShape)> = t
        .jobs
        .iter()
        .map(|j| (j.name.as_str(), j.submit_s, j.duration_s, j.shape))
        .collect();
    assert_eq!(
        got,
        vec![
            ("p0", 0.0, 90.0, JobShape::new(1, 1)),
            ("p4", 20.0, 30.0, JobShape::new(1, 4))
        ]
    );
    assert_eq!(t.skipped_total(), 3);
    assert_eq!(t.skipped.len(), 3);
    // A pod deleted before it started.
    let bad = text.replace(
        "p4,1,1,4,1000,,LS,Failed,20,50,20",
        "p4,1,1,4,1000,,LS,Failed,20,50,60",
    );
    match read_str(&bad, "a.csv", &opts()) {
        Err(CoreError::Trace { line, field, .. }) => {
            assert_eq!((line, field.as_str()), (6, "deletion_time"))
        }
        other => panic!("{other:?}"),
    }
    // Lists without times are refused with a clear error.
    let e = read_str(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,1,1,1,1000\n",
        "m.csv",
        &opts(),
    )
    .unwrap_err();
    assert!(
        e.to_string().contains("creation_time") && e.to_string().contains("m.csv:1"),
        "{e}"
    );
}

#[test]
fn detection_and_names() {
    assert_eq!(
        TraceFormat::detect("job_id,arrival_s,service_sec,gpu_count"),
        Some(TraceFormat::Venus)
    );
    assert_eq!(
        TraceFormat::parse_name("alibaba").unwrap().name(),
        "alibaba"
    );
    assert!(TraceFormat::parse_name("gfs").is_err());
    assert!(matches!(
        read_str(
            "",
            "e.csv",
            &ReadOptions {
                gpus_per_node: 3,
                ..opts()
            }
        ),
        Err(CoreError::BadNodeCapacity(3))
    ));
}

/// The real traces, when the checkout sits next to `shared/traces` (as in
/// the project layout) or `COMPASS_TRACES` points at them.
fn shared_trace(rel: &str) -> Option<(String, String)> {
    let root = std::env::var("COMPASS_TRACES")
        .unwrap_or_else(|_| format!("{}/../../shared/traces", env!("CARGO_MANIFEST_DIR")));
    let path = format!("{root}/{rel}");
    match std::fs::read_to_string(&path) {
        Ok(text) => Some((path, text)),
        Err(_) => {
            eprintln!("skipping: {path} not found (set COMPASS_TRACES)");
            None
        }
    }
}

#[test]
fn real_venus_sample_reads_completely() {
    let Some((path, text)) = shared_trace("venus/venus_sample.csv") else {
        return;
    };
    let t = read_str(&text, &path, &opts()).unwrap();
    assert_eq!(t.format, TraceFormat::Venus);
    assert_eq!(t.jobs.len(), 62_735);
    assert_eq!(t.skipped_total(), 0);
    assert!(t
        .jobs
        .iter()
        .all(|j| j.shape.gpus <= 8 && j.duration_s > 0.0));
    let max = t.jobs.iter().map(|j| j.shape.total_gpus()).max().unwrap();
    assert_eq!(max, 200);
}

#[test]
fn real_alibaba_default_list_reads_whole_gpu_pods() {
    let Some((path, text)) = shared_trace("alibaba-pai-2023/openb_pod_list_default.csv") else {
        return;
    };
    let t = read_str(&text, &path, &opts()).unwrap();
    assert_eq!(t.format, TraceFormat::Alibaba);
    // 3,986 whole-GPU pods, of which 356 were never scheduled.
    assert_eq!(t.jobs.len(), 3_986 - 356);
    assert_eq!(t.jobs.len() as u64 + t.skipped_total(), 8_152);
    let Some((path, text)) = shared_trace("alibaba-pai-2023/openb_pod_list_multigpu50.csv") else {
        return;
    };
    assert!(matches!(
        read_str(&text, &path, &opts()),
        Err(CoreError::Trace { line: 1, .. })
    ));
}
