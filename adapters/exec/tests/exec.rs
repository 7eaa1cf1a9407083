//! The exec engine against real processes: real supervisors, real signals, a
//! real spool folder. No mocks, no sleeps-and-hope: every wait is a condition
//! polled up to a deadline.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use taskgate_engine::{
    Content, Engine, EngineError, InputAction, InputResponse, Pipeline, RunState, Snapshot,
    StartRequest, ToolDecl, TraceContext,
};

const DEADLINE: Duration = Duration::from_secs(30);

fn tool(script: &str) -> String {
    format!("{}/tests/tools/{script}", env!("CARGO_MANIFEST_DIR"))
}

async fn engine(spool: &Path, extra: Value) -> Arc<dyn Engine> {
    let mut settings = json!({
        "spool_dir": spool,
        "supervisor": [env!("CARGO_BIN_EXE_taskgate-exec-supervisor")],
        "grace_period": "1s",
    });
    for (k, v) in extra.as_object().unwrap() {
        settings[k] = v.clone();
    }
    taskgate_exec::build(settings).await.unwrap()
}

fn bind(engine: &Arc<dyn Engine>, target: Value) -> Arc<dyn Pipeline> {
    engine
        .bind(&ToolDecl {
            input_schema: serde_json::json!({"type": "object"}),
            name: "t".into(),
            target,
            keep_alive: None,
        })
        .unwrap()
}

fn request(run_name: &str, arguments: Value) -> StartRequest {
    StartRequest {
        run_name: run_name.into(),
        arguments,
        caller_tag: "0".repeat(16),
        keep_alive: None,
        trace: None,
    }
}

/// Reads until `done` holds for the outcome, or fails with the last one.
async fn wait_for(
    p: &Arc<dyn Pipeline>,
    run: &str,
    what: &str,
    done: impl Fn(&Result<Snapshot, EngineError>) -> bool,
) -> Result<Snapshot, EngineError> {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let outcome = p.read(&run.to_owned()).await;
        if done(&outcome) {
            return outcome;
        }
        assert!(
            Instant::now() < deadline,
            "{run}: not {what} within {DEADLINE:?}; last read: {outcome:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn wait_terminal(p: &Arc<dyn Pipeline>, run: &str) -> RunState {
    wait_for(p, run, "terminal", |o| {
        o.as_ref().is_ok_and(|s| s.state.is_terminal())
    })
    .await
    .unwrap()
    .state
}

/// Waits for a plain condition on the machine (a process gone, a file there).
async fn wait_until(what: &str, cond: impl Fn() -> bool) {
    let deadline = Instant::now() + DEADLINE;
    while !cond() {
        assert!(Instant::now() < deadline, "not {what} within {DEADLINE:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn completed(state: &RunState) -> (String, bool, Option<Value>) {
    let RunState::Completed(out) = state else {
        panic!("not completed: {state:?}")
    };
    let Content::Text(text) = &out.content[0] else {
        panic!("not text")
    };
    (text.clone(), out.is_error, out.structured.clone())
}

/// True when `pid` runs and is not a zombie.
fn running(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        let state = stat[stat.rfind(')').unwrap() + 1..]
            .split_whitespace()
            .next();
        !matches!(state, Some("Z" | "X"))
    })
}

fn read_pid(path: &Path) -> i32 {
    let text = std::fs::read_to_string(path).unwrap();
    if let Ok(v) = serde_json::from_str::<Value>(&text) {
        if let Some(pid) = v.get("pid") {
            return i32::try_from(pid.as_i64().unwrap()).unwrap();
        }
    }
    text.trim().parse().unwrap()
}

/// Whether some open file description holds a lock on `path`: the
/// supervisor's hold on `pid.json` while its process runs.
fn held(path: &Path) -> bool {
    use nix::fcntl::{fcntl, FcntlArg};
    use nix::libc;
    let file = std::fs::File::open(path).unwrap();
    let mut probe = libc::flock {
        l_type: libc::F_WRLCK as libc::c_short,
        l_whence: libc::SEEK_SET as libc::c_short,
        l_start: 0,
        l_len: 0,
        l_pid: 0,
    };
    fcntl(&file, FcntlArg::F_OFD_GETLK(&mut probe)).unwrap();
    probe.l_type != libc::F_UNLCK as libc::c_short
}

fn run_dir(spool: &Path, run: &str) -> PathBuf {
    spool.join(run)
}

#[tokio::test]
async fn success_with_a_result_file_is_structured() {
    let spool = tempfile::tempdir().unwrap();
    let e = engine(spool.path(), json!({})).await;
    let p = bind(&e, json!({"command": [tool("args_to_result.sh")]}));
    let args = json!({"dataset": "d1", "n": 2});
    let run = p.start(request("tg-result", args.clone())).await.unwrap();
    assert_eq!(run, "tg-result");
    let snap = wait_for(&p, &run, "terminal", |o| {
        o.as_ref().is_ok_and(|s| s.state.is_terminal())
    })
    .await
    .unwrap();
    let (_, is_error, structured) = completed(&snap.state);
    assert!(!is_error);
    assert_eq!(structured, Some(args));
    // The supervisor let go of its record when it reaped the process.
    assert!(!held(&run_dir(spool.path(), &run).join("pid.json")));
    let (created, ended) = (snap.created_at.unwrap(), snap.ended_at.unwrap());
    assert!(created <= ended && ended <= snap.updated_at.unwrap());
}

#[tokio::test]
async fn success_without_a_result_file_is_its_standard_output() {
    let spool = tempfile::tempdir().unwrap();
    let e = engine(spool.path(), json!({})).await;
    let p = bind(&e, json!({"command": [tool("hello.sh")]}));
    let run = p
        .start(request("tg-hello", json!({"name": "Ada"})))
        .await
        .unwrap();
    let state = wait_terminal(&p, &run).await;
    assert_eq!(completed(&state), ("hello Ada\n".to_owned(), false, None));
}

#[tokio::test]
async fn non_zero_exit_is_a_tool_error_with_the_end_of_stderr() {
    let spool = tempfile::tempdir().unwrap();
    let e = engine(spool.path(), json!({})).await;
    let p = bind(&e, json!({"command": [tool("fail.sh")]}));
    let run = p
        .start(request("tg-fail", json!({"what": "disk"})))
        .await
        .unwrap();
    let (text, is_error, _) = completed(&wait_terminal(&p, &run).await);
    assert!(is_error);
    assert!(text.contains("exited with code 3"), "{text}");
    assert!(text.contains("something broke: disk"), "{text}");
    assert!(
        !text.contains("starting"),
        "stdout is not in the error: {text}"
    );
}

#[tokio::test]
async fn a_program_that_cannot_start_is_a_tool_error() {
    let spool = tempfile::tempdir().unwrap();
    let e = engine(spool.path(), json!({})).await;
    let p = bind(&e, json!({"command": ["/nonexistent/program"]}));
    let run = p.start(request("tg-nope", json!({}))).await.unwrap();
    let (text, is_error, _) = completed(&wait_terminal(&p, &run).await);
    assert!(is_error && text.contains("could not be started"), "{text}");
}

#[tokio::test]
async fn output_tails_are_bounded() {
    let spool = tempfile::tempdir().unwrap();
    let e = engine(spool.path(), json!({"tail_bytes": 1000})).await;
    let p = bind(&e, json!({"command": [tool("big.sh")]}));
    let run = p.start(request("tg-big", json!({}))).await.unwrap();
    let (text, is_error, _) = completed(&wait_terminal(&p, &run).await);
    assert!(!is_error);
    assert_eq!(text.len(), 1000);
    assert!(text.ends_with("aaaEND"), "{}", &text[990..]);
    let on_disk = std::fs::read(run_dir(spool.path(), &run).join("stdout.tail")).unwrap();
    // The header line names the stream offset of the first byte kept.
    let header = on_disk.iter().position(|b| *b == b'\n').unwrap() + 1;
    assert!(on_disk.starts_with(b"tg-tail "), "{:?}", &on_disk[..header]);
    assert_eq!(on_disk.len() - header, 1000);
}

#[tokio::test]
async fn arguments_are_never_interpreted_by_a_shell() {
    let spool = tempfile::tempdir().unwrap();
    let canary = spool.path().join("pwned");
    let text = format!(
        "$(touch {0}); `touch {0}` ; rm -rf {0} && echo \"'",
        canary.display()
    );
    let e = engine(spool.path(), json!({})).await;
    let p = bind(
        &e,
        json!({"command": [tool("show_env.sh"), "fixed arg; $(x)"], "env": {"FIXED": "f v"}}),
    );
    let args = json!({"text": text, "list": ["a b", {"c": "$(d)"}]});
    let run = p.start(request("tg-shell", args.clone())).await.unwrap();
    let (_, is_error, structured) = completed(&wait_terminal(&p, &run).await);
    assert!(!is_error);
    assert_eq!(structured, Some(args), "the arguments file is verbatim");
    let dir = run_dir(spool.path(), &run);
    let seen = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap();
    assert_eq!(seen("seen-text"), text);
    assert_eq!(seen("seen-list"), r#"["a b",{"c":"$(d)"}]"#);
    assert_eq!(seen("seen-fixed"), "f v");
    assert_eq!(seen("seen-argv"), "fixed arg; $(x)\n");
    assert_eq!(seen("seen-pwd").trim(), dir.to_str().unwrap());
    assert!(!canary.exists(), "a shell ran the argument");
    // Only the allowed part of the server's environment reaches the process.
    let env = seen("seen-env");
    assert!(env.lines().any(|l| l.starts_with("PATH=")), "{env}");
    assert!(!env.contains("CARGO_MANIFEST_DIR="), "{env}");
}

#[tokio::test]
async fn the_trace_context_reaches_the_run_over_the_tools_own_and_no_argument_sets_it() {
    let spool = tempfile::tempdir().unwrap();
    let e = engine(spool.path(), json!({})).await;
    let fixed = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let p = bind(
        &e,
        json!({"command": [tool("show_env.sh")],
               "env": {"FIXED": "f", "TRACEPARENT": fixed, "TRACESTATE": "fixed=1"}}),
    );
    let forged = "00-11111111111111111111111111111111-2222222222222222-01";
    let args = json!({"text": "t", "list": [], "TRACEPARENT": forged});
    let ours = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let mut traced = request("tg-traced", args.clone());
    traced.trace = Some(TraceContext::new(ours, Some("rojo=00f067aa0ba902b7")).unwrap());
    let env_of =
        |run: &str| std::fs::read_to_string(run_dir(spool.path(), run).join("seen-env")).unwrap();
    let line = |env: &str, name: &str| {
        env.lines()
            .filter_map(|l| l.strip_prefix(&format!("{name}=")))
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    let run = p.start(traced).await.unwrap();
    completed(&wait_terminal(&p, &run).await);
    let env = env_of(&run);
    assert_eq!(line(&env, "TRACEPARENT"), [ours], "{env}");
    assert_eq!(line(&env, "TRACESTATE"), ["rojo=00f067aa0ba902b7"], "{env}");
    assert_eq!(line(&env, "TASKGATE_ARG_TRACEPARENT"), [forged], "{env}");
    // A context without a tracestate leaves none behind (not the tool's).
    let mut bare = request("tg-traced-bare", args.clone());
    bare.trace = Some(TraceContext::new(ours, None).unwrap());
    let run = p.start(bare).await.unwrap();
    completed(&wait_terminal(&p, &run).await);
    let env = env_of(&run);
    assert_eq!(line(&env, "TRACEPARENT"), [ours], "{env}");
    assert!(line(&env, "TRACESTATE").is_empty(), "{env}");
    // Untraced, the tool's own values stand.
    let run = p.start(request("tg-untraced", args)).await.unwrap();
    completed(&wait_terminal(&p, &run).await);
    let env = env_of(&run);
    assert_eq!(line(&env, "TRACEPARENT"), [fixed], "{env}");
    assert_eq!(line(&env, "TRACESTATE"), ["fixed=1"], "{env}");
}

#[tokio::test]
async fn working_carries_the_status_file_then_cancel_kills_the_process_group() {
    let spool = tempfile::tempdir().unwrap();
    let e = engine(spool.path(), json!({})).await;
    let p = bind(&e, json!({"command": [tool("sleepy.sh")]}));
    let run = p.start(request("tg-cancel", json!({}))).await.unwrap();
    let snap = wait_for(&p, &run, "sleeping", |o| {
        matches!(o, Ok(Snapshot { state: RunState::Working { message: Some(m), .. }, .. }) if m == "sleeping")
    })
    .await
    .unwrap();
    let RunState::Working {
        progress: Some(progress),
        ..
    } = snap.state
    else {
        panic!()
    };
    assert_eq!((progress.done, progress.total), (3.0, Some(10.0)));
    let dir = run_dir(spool.path(), &run);
    let child = read_pid(&dir.join("pid.json"));
    let grandchild = read_pid(&dir.join("grandchild.pid"));
    assert!(running(child) && running(grandchild));

    p.cancel(&run).await.unwrap();
    assert!(matches!(
        p.read(&run).await.unwrap().state,
        RunState::Cancelled { .. }
    ));
    wait_until("the process group dead", || {
        !running(child) && !running(grandchild)
    })
    .await;
    wait_until("the exit recorded", || dir.join("exit.json").exists()).await;
    let snap = p.read(&run).await.unwrap();
    assert!(matches!(snap.state, RunState::Cancelled { .. }));
    assert!(snap.ended_at.is_some());
    // Cancelling again is fine; cancelling a finished run is a conflict.
    p.cancel(&run).await.unwrap();
    let q = bind(&e, json!({"command": [tool("hello.sh")]}));
    let done = q.start(request("tg-cancel-done", json!({}))).await.unwrap();
    wait_terminal(&q, &done).await;
    assert!(matches!(
        q.cancel(&done).await,
        Err(EngineError::Conflict { .. })
    ));
}

#[tokio::test]
async fn a_process_that_ignores_sigterm_gets_sigkill_after_the_grace_period() {
    let spool = tempfile::tempdir().unwrap();
    let e = engine(spool.path(), json!({"grace_period": "2s"})).await;
    let p = bind(
        &e,
        json!({"command": [tool("sleepy.sh")], "env": {"STUBBORN": "1"}}),
    );
    let run = p.start(request("tg-stubborn", json!({}))).await.unwrap();
    let dir = run_dir(spool.path(), &run);
    wait_until("the grandchild started", || {
        dir.join("grandchild.pid").exists()
    })
    .await;
    let child = read_pid(&dir.join("pid.json"));
    let grandchild = read_pid(&dir.join("grandchild.pid"));
    let cancelled_at = Instant::now();
    p.cancel(&run).await.unwrap();
    assert!(
        cancelled_at.elapsed() < Duration::from_secs(1),
        "cancel must not wait for the grace period"
    );
    assert!(
        running(child),
        "SIGTERM is ignored until the grace period ends"
    );
    wait_until("the stubborn group killed", || {
        !running(child) && !running(grandchild)
    })
    .await;
    wait_until("the exit recorded", || dir.join("exit.json").exists()).await;
    let exit: Value =
        serde_json::from_slice(&std::fs::read(dir.join("exit.json")).unwrap()).unwrap();
    assert_eq!(exit["signal"], 9, "{exit}");
}

#[tokio::test]
async fn a_run_survives_the_engine_being_dropped_and_rebuilt() {
    let spool = tempfile::tempdir().unwrap();
    let run = {
        let e = engine(spool.path(), json!({})).await;
        let p = bind(&e, json!({"command": [tool("wait_go.sh")]}));
        let run = p.start(request("tg-restart", json!({}))).await.unwrap();
        assert!(matches!(
            p.read(&run).await.unwrap().state,
            RunState::Working { .. }
        ));
        run
    };
    // A new server: same settings, nothing else.
    let e = engine(spool.path(), json!({})).await;
    let p = bind(&e, json!({"command": [tool("wait_go.sh")]}));
    assert!(matches!(
        p.read(&run).await.unwrap().state,
        RunState::Working { .. }
    ));
    assert_eq!(p.locate(&run).await.unwrap(), Some(run.clone()));
    std::fs::write(run_dir(spool.path(), &run).join("go"), b"").unwrap();
    let (text, is_error, _) = completed(&wait_terminal(&p, &run).await);
    assert_eq!((text.as_str(), is_error), ("done\n", false));
}

#[tokio::test]
async fn start_is_idempotent_and_other_arguments_conflict() {
    let spool = tempfile::tempdir().unwrap();
    let e = engine(spool.path(), json!({})).await;
    let p = bind(&e, json!({"command": [tool("wait_go.sh")]}));
    let run = p
        .start(request("tg-idem", json!({"a": 1, "b": 2})))
        .await
        .unwrap();
    let dir = run_dir(spool.path(), &run);
    let first = std::fs::read(dir.join("pid.json")).unwrap();
    let again = p
        .start(request("tg-idem", json!({"b": 2, "a": 1})))
        .await
        .unwrap();
    assert_eq!(again, run);
    assert_eq!(
        std::fs::read(dir.join("pid.json")).unwrap(),
        first,
        "launched once"
    );
    let err = p
        .start(request("tg-idem", json!({"a": 2})))
        .await
        .unwrap_err();
    assert!(matches!(err, EngineError::Conflict { .. }), "{err:?}");
    std::fs::write(dir.join("go"), b"").unwrap();
    wait_terminal(&p, &run).await;
    // Still the same run after it finished.
    assert_eq!(
        p.start(request("tg-idem", json!({"a": 1, "b": 2})))
            .await
            .unwrap(),
        run
    );
}

#[tokio::test]
async fn concurrent_starts_make_one_run() {
    let spool = tempfile::tempdir().unwrap();
    let e = engine(spool.path(), json!({})).await;
    let p = bind(&e, json!({"command": [tool("hello.sh")]}));
    let starts: Vec<_> = (0..4)
        .map(|_| {
            let p = Arc::clone(&p);
            tokio::spawn(async move { p.start(request("tg-race", json!({"name": "x"}))).await })
        })
        .collect();
    for start in starts {
        assert_eq!(start.await.unwrap().unwrap(), "tg-race");
    }
    let (text, _, _) = completed(&wait_terminal(&p, "tg-race").await);
    assert_eq!(text, "hello x\n", "one process wrote the output");
}

#[tokio::test]
async fn input_round_trip() {
    let spool = tempfile::tempdir().unwrap();
    let e = engine(spool.path(), json!({})).await;
    let p = bind(&e, json!({"command": [tool("ask.sh")]}));
    let run = p.start(request("tg-ask", json!({}))).await.unwrap();
    let snap = wait_for(&p, &run, "asking", |o| {
        matches!(
            o,
            Ok(Snapshot {
                state: RunState::InputRequired { .. },
                ..
            })
        )
    })
    .await
    .unwrap();
    let RunState::InputRequired { requests, .. } = snap.state else {
        panic!()
    };
    assert_eq!(requests["approve"].message, "Deploy?");
    assert_eq!(
        requests["approve"].requested_schema["required"],
        json!(["ok"])
    );

    let yes = InputResponse {
        action: InputAction::Accept,
        content: Some(json!({"ok": true})),
    };
    let wrong = p.answer(&run, "other", &yes).await.unwrap_err();
    assert!(matches!(wrong, EngineError::Conflict { .. }), "{wrong:?}");
    p.answer(&run, "approve", &yes).await.unwrap();
    let twice = p.answer(&run, "approve", &yes).await.unwrap_err();
    assert!(matches!(twice, EngineError::Conflict { .. }), "{twice:?}");

    let (_, is_error, structured) = completed(&wait_terminal(&p, &run).await);
    assert!(!is_error);
    assert_eq!(
        structured,
        Some(json!({"answer": {"action": "accept", "content": {"ok": true}}}))
    );
}

#[tokio::test]
async fn a_lost_process_reads_as_failed() {
    use nix::sys::signal::{kill, killpg, Signal};
    use nix::unistd::Pid;
    let spool = tempfile::tempdir().unwrap();
    let e = engine(spool.path(), json!({})).await;
    let p = bind(&e, json!({"command": [tool("sleepy.sh")]}));
    let run = p.start(request("tg-lost", json!({}))).await.unwrap();
    let dir = run_dir(spool.path(), &run);
    wait_until("the grandchild started", || {
        dir.join("grandchild.pid").exists()
    })
    .await;
    let supervisor = read_pid(&dir.join("supervisor.json"));
    let child = read_pid(&dir.join("pid.json"));
    assert!(
        held(&dir.join("pid.json")),
        "the supervisor holds its record"
    );
    kill(Pid::from_raw(supervisor), Signal::SIGKILL).unwrap();
    wait_until("the supervisor dead", || !running(supervisor)).await;
    // Its hold goes with it (once the kernel has closed its last thread's
    // files): the read below asks /proc, which finds the process.
    wait_until("the hold released", || !held(&dir.join("pid.json"))).await;
    assert!(
        matches!(p.read(&run).await.unwrap().state, RunState::Working { .. }),
        "the process itself still runs"
    );
    killpg(Pid::from_raw(child), Signal::SIGKILL).unwrap();
    let state = wait_terminal(&p, &run).await;
    assert!(
        matches!(&state, RunState::Failed { message } if message.contains("lost")),
        "{state:?}"
    );
    assert!(matches!(
        p.cancel(&run).await,
        Err(EngineError::Conflict { .. })
    ));
}

#[tokio::test]
async fn retention_expiry_reads_as_not_found_and_removes_the_folder() {
    let spool = tempfile::tempdir().unwrap();
    let e = engine(spool.path(), json!({})).await;
    let p = bind(&e, json!({"command": [tool("hello.sh")]}));
    let mut req = request("tg-keep", json!({"name": "k"}));
    req.keep_alive = Some(Duration::from_millis(1500));
    let run = p.start(req).await.unwrap();
    // Completed first (the retention runs from the end) ...
    wait_terminal(&p, &run).await;
    // ... then gone.
    wait_for(&p, &run, "expired", |o| {
        matches!(o, Err(EngineError::NotFound))
    })
    .await
    .unwrap_err();
    assert!(!run_dir(spool.path(), &run).exists());
    assert_eq!(p.locate(&run).await.unwrap(), None);
    // The name is free again.
    let again = p
        .start(request("tg-keep", json!({"name": "k2"})))
        .await
        .unwrap();
    assert_eq!(again, run);
}

#[tokio::test]
async fn unknown_and_malformed_runs_are_not_found() {
    let spool = tempfile::tempdir().unwrap();
    let e = engine(spool.path(), json!({})).await;
    let p = bind(&e, json!({"command": [tool("hello.sh")]}));
    for run in ["tg-unknown", "../etc", "", "tg/../x", ".staging"] {
        assert!(
            matches!(p.read(&run.to_owned()).await, Err(EngineError::NotFound)),
            "{run}"
        );
        assert!(
            matches!(p.cancel(&run.to_owned()).await, Err(EngineError::NotFound)),
            "{run}"
        );
    }
    assert_eq!(p.locate("tg-unknown").await.unwrap(), None);
    let caps = p.capabilities();
    assert!(caps.cancel && caps.input && caps.idempotent_start && caps.locate);
}

#[tokio::test]
async fn a_supervisor_that_cannot_launch_fails_the_start_and_leaves_nothing() {
    let spool = tempfile::tempdir().unwrap();
    let e = engine(
        spool.path(),
        json!({"supervisor": ["/nonexistent/taskgate", "supervise"]}),
    )
    .await;
    let p = bind(&e, json!({"command": [tool("hello.sh")]}));
    let err = p
        .start(request("tg-nosup", json!({"name": "n"})))
        .await
        .unwrap_err();
    assert!(matches!(err, EngineError::Unavailable { .. }), "{err:?}");
    assert!(!run_dir(spool.path(), "tg-nosup").exists());
    // A retry on a working engine starts the run.
    let e = engine(spool.path(), json!({})).await;
    let p = bind(&e, json!({"command": [tool("hello.sh")]}));
    let run = p
        .start(request("tg-nosup", json!({"name": "n"})))
        .await
        .unwrap();
    assert_eq!(completed(&wait_terminal(&p, &run).await).0, "hello n\n");
}

#[tokio::test]
async fn bad_settings_and_targets_name_their_key() {
    let err = taskgate_exec::build(json!({"spool_dir": "/x", "tail_byts": 1}))
        .await
        .err()
        .unwrap();
    assert_eq!(err.key, "tail_byts");
    // A spool folder others may write (here /tmp) is refused.
    let err = taskgate_exec::build(json!({"spool_dir": "/tmp"}))
        .await
        .err()
        .unwrap();
    assert_eq!(err.key, "spool_dir");
    assert!(
        err.message.contains("writable by group or others"),
        "{err:?}"
    );
    let spool = tempfile::tempdir().unwrap();
    let e = engine(spool.path(), json!({})).await;
    let err = e
        .bind(&ToolDecl {
            input_schema: serde_json::json!({"type": "object"}),
            name: "t".into(),
            target: json!({"command": []}),
            keep_alive: None,
        })
        .err()
        .unwrap();
    assert_eq!(err.key, "target.command");
}

#[tokio::test]
async fn wait_for_change_returns_as_soon_as_the_run_changes() {
    let spool = tempfile::tempdir().unwrap();
    let e = engine(spool.path(), json!({})).await;
    let p = bind(&e, json!({"command": [tool("wait_go.sh")]}));
    let run = p.start(request("tg-watch", json!({}))).await.unwrap();
    let last = p.read(&run).await.unwrap();
    // Nothing changes: it waits the whole (short) wait and returns the same.
    let same = p
        .wait_for_change(&run, &last, Duration::from_millis(300))
        .await
        .unwrap();
    assert_eq!(same.state, last.state);
    std::fs::write(run_dir(spool.path(), &run).join("go"), b"").unwrap();
    // Each change (running -> maybe finishing -> completed) ends a wait early.
    let began = Instant::now();
    let mut last = last;
    while !last.state.is_terminal() {
        let changed = p.wait_for_change(&run, &last, DEADLINE).await.unwrap();
        assert_ne!(changed.state, last.state, "a wait ended without a change");
        last = changed;
    }
    assert!(began.elapsed() < Duration::from_secs(10));
}

#[tokio::test]
async fn probe_and_check_report_what_they_found() {
    let spool = tempfile::tempdir().unwrap();
    let e = engine(&spool.path().join("new"), json!({})).await;
    let findings = e.probe().await.unwrap();
    assert!(findings[0].contains("writable"), "{findings:?}");
    let good = bind(
        &e,
        json!({"command": [tool("hello.sh")], "working_dir": "/tmp"}),
    );
    good.check().await.unwrap();
    let bad = bind(&e, json!({"command": ["/nonexistent/x"]}));
    assert!(matches!(
        bad.check().await,
        Err(EngineError::InvalidInput { .. })
    ));
    let broken = engine(
        spool.path(),
        json!({"supervisor": ["/nonexistent/taskgate"]}),
    )
    .await;
    assert!(broken.probe().await.is_err());
}

/// Item 9 of the security issue: a reference to another tool's run (both
/// tools on one engine, so one spool) reads as not found for read, cancel,
/// answer, logs and locate, and leaves that run alone.
#[tokio::test]
async fn a_reference_to_another_tools_run_is_not_found() {
    let spool = tempfile::tempdir().unwrap();
    let e = engine(spool.path(), json!({})).await;
    let owner = bind(&e, json!({"command": [tool("ask.sh")]}));
    let other = e
        .bind(&ToolDecl {
            input_schema: json!({"type": "object"}),
            name: "other".into(),
            target: json!({"command": [tool("ask.sh")]}),
            keep_alive: None,
        })
        .unwrap();
    let run = owner.start(request("tg-owned", json!({}))).await.unwrap();
    wait_for(&owner, &run, "asking", |o| {
        matches!(
            o,
            Ok(Snapshot {
                state: RunState::InputRequired { .. },
                ..
            })
        )
    })
    .await
    .unwrap();
    let yes = InputResponse {
        action: InputAction::Accept,
        content: Some(json!({"ok": true})),
    };
    let not_found = |r: Result<(), EngineError>, what: &str| {
        assert!(matches!(r, Err(EngineError::NotFound)), "{what}: {r:?}");
    };
    not_found(other.read(&run).await.map(|_| ()), "read");
    not_found(other.cancel(&run).await, "cancel");
    not_found(other.answer(&run, "approve", &yes).await, "answer");
    not_found(other.logs(&run, None, 10).await.map(|_| ()), "logs");
    assert_eq!(other.locate(&run).await.unwrap(), None);
    // The run is untouched: still asking, and its own tool answers it.
    assert!(matches!(
        owner.read(&run).await.unwrap().state,
        RunState::InputRequired { .. }
    ));
    owner.answer(&run, "approve", &yes).await.unwrap();
    let (_, is_error, _) = completed(&wait_terminal(&owner, &run).await);
    assert!(!is_error);
}

/// A quiet wait reads the run's folder when it begins, at each recheck and
/// when it ends; its own reads (opens of the run's files) never wake it
/// again. Before one watcher per engine, each wait's watcher took the opens of
/// its own reads for changes and read the folder over and over for the whole
/// wait.
#[tokio::test]
async fn a_quiet_wait_is_not_woken_by_its_own_reads() {
    use notify::event::{AccessKind, EventKind};
    use notify::Watcher as _;
    let spool = tempfile::tempdir().unwrap();
    let e = engine(spool.path(), json!({})).await;
    let p = bind(&e, json!({"command": [tool("wait_go.sh")]}));
    let run = p.start(request("tg-quiet", json!({}))).await.unwrap();
    let last = p.read(&run).await.unwrap();
    // Counts every open in the run's folder, as the kernel reports them.
    let opens = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = Arc::clone(&opens);
    let mut counter = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        if let Ok(event) = event {
            if matches!(event.kind, EventKind::Access(AccessKind::Open(_))) {
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        }
    })
    .unwrap();
    counter
        .watch(
            &run_dir(spool.path(), &run),
            notify::RecursiveMode::Recursive,
        )
        .unwrap();
    let same = p
        .wait_for_change(&run, &last, Duration::from_secs(1))
        .await
        .unwrap();
    assert_eq!(same.state, last.state);
    drop(counter);
    // Two reads (the first and the last) of a few files each; a wait woken by
    // its own opens makes hundreds.
    let opens = opens.load(std::sync::atomic::Ordering::SeqCst);
    assert!(
        opens <= 20,
        "{opens} opens in the run folder during a quiet 1 s wait"
    );
    std::fs::write(run_dir(spool.path(), &run).join("go"), b"").unwrap();
}
