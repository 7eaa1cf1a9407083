//! Unit tests of the spool: status files, argument variables, the run hash, and
//! which reads need a look at a process.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use taskgate_engine::RunState;

use super::read::*;
use super::start::*;
use super::*;
use crate::config::Settings;
use crate::folder::RunFolder;
use crate::layout::REQUEST_SUFFIX;
use crate::layout::{
    self, Meta, ProcRecord, CANCELLED, EXIT, INPUT_DIR, META, PID, STATUS, SUPERVISOR,
};
use crate::proc;
use serde_json::json;
use taskgate_engine::InputRequest;

#[test]
fn args_become_env_vars_by_the_shared_mapping() {
    let env = arg_env(&json!({
        "text": "$(touch /tmp/x); rm -rf /",
        "n": 3, "ok": true, "none": null,
        "list": [1, "a"], "obj": {"b": 1},
        "dash-name": "v"
    }))
    .unwrap();
    assert_eq!(env["TASKGATE_ARG_TEXT"], "$(touch /tmp/x); rm -rf /");
    assert_eq!(env["TASKGATE_ARG_N"], "3");
    assert_eq!(env["TASKGATE_ARG_OK"], "true");
    assert_eq!(env["TASKGATE_ARG_NONE"], "");
    assert_eq!(env["TASKGATE_ARG_LIST"], r#"[1,"a"]"#);
    assert_eq!(env["TASKGATE_ARG_OBJ"], r#"{"b":1}"#);
    assert_eq!(env["TASKGATE_ARG_DASH_NAME"], "v");
    assert!(arg_env(&json!([1])).unwrap().is_empty());
    // Two arguments on one name, and a NUL byte, are refused.
    assert!(arg_env(&json!({"targetEnv": "a", "targetenv": "b"})).is_err());
    assert!(arg_env(&json!({"nul": "a\u{0}b"})).is_err());
}

#[test]
fn hash_ignores_key_order_but_not_values_or_tool() {
    let a = args_hash("t", &json!({"a": 1, "b": {"c": 2, "d": 3}}));
    let b: Value = serde_json::from_str(r#"{"b": {"d": 3, "c": 2}, "a": 1}"#).unwrap();
    assert_eq!(a, args_hash("t", &b));
    assert_ne!(a, args_hash("t", &json!({"a": 2, "b": {"c": 2, "d": 3}})));
    assert_ne!(a, args_hash("u", &b));
}

#[test]
fn status_file_forms() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("s");
    let read_status = |path: &Path| {
        let mut folder = RunFolder::open(path.parent().unwrap()).unwrap().unwrap();
        let name = path.file_name().unwrap().to_str().unwrap();
        let (status, at) = status_of(folder.text(name, MAX_STATUS_BYTES));
        (status, at)
    };
    std::fs::write(&p, r#"{"message": "m", "progress": 3, "total": 10}"#).unwrap();
    let s = read_status(&p).0.unwrap();
    assert_eq!(
        (s.message.as_deref(), s.progress, s.total),
        (Some("m"), Some(3.0), Some(10.0))
    );
    std::fs::write(&p, "\n  step two \nmore").unwrap();
    assert_eq!(
        read_status(&p).0.unwrap().message.as_deref(),
        Some("step two")
    );
    std::fs::write(&p, r#""quoted""#).unwrap();
    assert_eq!(
        read_status(&p).0.unwrap().message.as_deref(),
        Some("quoted")
    );
    assert_eq!(read_status(&dir.path().join("none")), (None, None));
}

fn spool(dir: &Path) -> Spool {
    Spool::new(Arc::new(Settings {
        spool_dir: dir.to_owned(),
        tail_bytes: 1024,
        supervisor: vec!["/bin/false".to_owned()],
        grace_period: Duration::from_secs(1),
        max_result_bytes: 1024,
    }))
}

/// Sets the mtime of `path` to `ms` after the Unix epoch.
fn set_mtime(path: &Path, ms: u64) {
    let file = std::fs::File::open(path).unwrap();
    file.set_modified(layout::from_ms(ms)).unwrap();
}

/// A run folder under `spool_dir` holding only its meta record and `input/`.
fn meta_only_run(spool_dir: &Path) -> PathBuf {
    let dir = spool_dir.join("run");
    std::fs::create_dir_all(dir.join(INPUT_DIR)).unwrap();
    let meta = Meta {
        tool: "t".into(),
        args_hash: "h".into(),
        created_at_ms: 1_000,
        keep_alive_ms: None,
    };
    layout::write_json(&dir, META, &meta).unwrap();
    dir
}

#[test]
fn updated_at_is_the_newest_of_the_folders_and_the_status_file() {
    let spool_dir = tempfile::tempdir().unwrap();
    let dir = meta_only_run(spool_dir.path());
    std::fs::write(dir.join(STATUS), "step one").unwrap();
    let s = spool(spool_dir.path());
    for (run_dir, input, status, newest) in [
        (5_000, 4_000, 3_000, 5_000),
        (5_000, 9_000, 3_000, 9_000),
        // A status file rewritten in place changes no folder.
        (5_000, 4_000, 7_000, 7_000),
    ] {
        set_mtime(&dir.join(STATUS), status);
        set_mtime(&dir.join(INPUT_DIR), input);
        set_mtime(&dir, run_dir);
        let view = s.view(&dir).unwrap();
        assert_eq!(view.updated_at, Some(layout::from_ms(newest)));
        assert_eq!(
            view.status.and_then(|st| st.message).as_deref(),
            Some("step one")
        );
    }
    // A record renamed into the folder moves the folder's mtime.
    set_mtime(&dir, 5_000);
    set_mtime(&dir.join(STATUS), 3_000);
    layout::write_json(&dir, EXIT, &layout::ExitRecord::default()).unwrap();
    let view = s.view(&dir).unwrap();
    assert!(view.updated_at.unwrap() > layout::from_ms(9_000));
}

#[test]
fn an_input_folder_still_marked_unwritten_is_not_listed_and_the_first_request_clears_the_mark() {
    let spool_dir = tempfile::tempdir().unwrap();
    let dir = meta_only_run(spool_dir.path());
    let input = dir.join(INPUT_DIR);
    layout::mark_unwritten(&input).unwrap();
    set_mtime(&dir, 5_000);
    let s = spool(spool_dir.path());
    let view = s.view(&dir).unwrap();
    assert!(view.requests.is_empty());
    // The mark is no change: the run folder's mtime is the newest.
    assert_eq!(view.updated_at, Some(layout::from_ms(5_000)));
    // The process asks: creating the request moves the folder off the mark.
    let request = InputRequest {
        message: "which region?".into(),
        requested_schema: serde_json::json!({"type": "object"}),
        approval: false,
    };
    layout::write_json(&input, &format!("ask{REQUEST_SUFFIX}"), &request).unwrap();
    assert_ne!(
        std::fs::metadata(&input).unwrap().modified().unwrap(),
        layout::UNWRITTEN
    );
    let view = s.view(&dir).unwrap();
    assert_eq!(view.requests.get("ask"), Some(&request));
    assert!(view.updated_at.unwrap() > layout::from_ms(5_000));
    // The mark alone decides: with it put back by hand, the folder is not
    // listed, so the request is not seen.
    layout::mark_unwritten(&input).unwrap();
    assert!(s.view(&dir).unwrap().requests.is_empty());
}

#[test]
fn a_running_process_needs_no_look_at_its_supervisor() {
    let spool_dir = tempfile::tempdir().unwrap();
    let dir = meta_only_run(spool_dir.path());
    let me = std::process::id() as i32;
    let record = ProcRecord {
        pid: me,
        start_time: proc::start_time(me).unwrap(),
    };
    layout::write_json(&dir, SUPERVISOR, &record).unwrap();
    layout::write_json(&dir, PID, &record).unwrap();
    let s = spool(spool_dir.path());
    let view = s.view(&dir).unwrap();
    assert_eq!(view.child_now, Some(record.start_time));
    assert_eq!(view.supervisor, None);
    assert_eq!(view.supervisor_now, None);
    assert!(matches!(
        s.read("run").unwrap().state,
        RunState::Working { .. }
    ));
    // Once it has ended, the supervisor is looked up (retention needs it).
    layout::write_json(&dir, EXIT, &layout::ExitRecord::default()).unwrap();
    assert_eq!(
        s.view(&dir).unwrap().supervisor_now,
        Some(record.start_time)
    );
}

#[test]
fn a_process_record_its_supervisor_holds_runs_without_a_look_at_proc() {
    let spool_dir = tempfile::tempdir().unwrap();
    let dir = meta_only_run(spool_dir.path());
    // A pid no process has (above the kernel's pid_max), so by `/proc` the
    // process is gone and, without a supervisor, the run is lost.
    let record = ProcRecord {
        pid: i32::MAX,
        start_time: 7,
    };
    layout::write_json(&dir, PID, &record).unwrap();
    let s = spool(spool_dir.path());
    assert!(matches!(
        s.read("run").unwrap().state,
        RunState::Failed { .. }
    ));
    // Held (as a supervisor holds it while its process runs): working,
    // and `/proc` was not asked.
    let holder = std::fs::File::open(dir.join(PID)).unwrap();
    crate::hold::take(&holder).unwrap();
    let view = s.view(&dir).unwrap();
    assert!(view.child_held);
    assert_eq!(view.child_now, None);
    assert_eq!(view.supervisor, None);
    assert!(matches!(
        s.read("run").unwrap().state,
        RunState::Working { .. }
    ));
    // Held and running, the run's own record is not read: one that no
    // longer parses changes nothing. Once the hold ends it is read again.
    let meta_text = std::fs::read(dir.join(META)).unwrap();
    std::fs::write(dir.join(META), "{not json").unwrap();
    assert!(s.view(&dir).unwrap().meta.is_none());
    assert!(matches!(
        s.read("run").unwrap().state,
        RunState::Working { .. }
    ));
    // …but a cancellation asked (or an exit recorded) is judged with it.
    std::fs::File::create(dir.join(CANCELLED)).unwrap();
    assert!(s.read("run").is_err(), "the record is read once cancelled");
    std::fs::remove_file(dir.join(CANCELLED)).unwrap();
    std::fs::write(dir.join(META), &meta_text).unwrap();
    // Let go (the supervisor reaped it, or died): judged by `/proc` again.
    drop(holder);
    assert!(!s.view(&dir).unwrap().child_held);
    assert!(matches!(
        s.read("run").unwrap().state,
        RunState::Failed { .. }
    ));
}
