//! `taskgate call` and `taskgate tasks`, driven as people and scripts use them:
//! through pipes (no terminal: `--json`, `--answer`, SIGINT) and in a real
//! terminal (a tmux pane: the spinner, an input prompt answered with keys,
//! Ctrl-C and the cancel menu), against the built binary serving the exec
//! scripts in `tests/tools/`.
//!
//! Every wait polls a condition against a deadline.

use crate::common;

use common::group_members;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

const KEY_VAR: &str = "TASKGATE_CLI_TEST_KEY";
const KEY_SECRET: &str = "54ybxbwdm1+dC/Jv3BzcesVe9ZNN7U6cxGH/8e8NEgs=";
const TOKEN_VAR: &str = "TASKGATE_CLI_TEST_TOKEN";
const TOKEN: &str = "cli-test-token-0123456789";

fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_taskgate"))
}

fn script(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/tools")
        .join(name);
    serde_json::to_string(&p.display().to_string()).unwrap()
}

/// A temporary config (exec engine, the test scripts as tools) and its spool.
struct Setup {
    dir: tempfile::TempDir,
    config: PathBuf,
    spool: PathBuf,
}

impl Setup {
    fn new(bearer: bool) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("taskgate-cli-")
            .tempdir()
            .unwrap();
        let spool = dir.path().join("spool");
        let config = dir.path().join("taskgate.toml");
        let label = r#"label = { type = "string", pattern = "^[A-Za-z0-9_-]+$" }"#;
        let tool = |name: &str, mode: &str, script_name: &str, schema: &str, extra: &str| {
            format!(
                "[[tools]]\nname = \"{name}\"\nengine = \"local\"\nmode = \"{mode}\"\npoll_interval = \"200ms\"\n\
                 input_schema = {schema}\ntarget = {{ command = [{}] }}\n{extra}\n",
                script(script_name)
            )
        };
        let labelled =
            format!("{{ type = \"object\", required = [\"label\"], properties = {{ {label} }} }}");
        let work = format!(
            "{{ type = \"object\", required = [\"label\"], properties = {{ {label}, seconds = {{ type = \"integer\", minimum = 0, maximum = 60 }} }} }}"
        );
        let mut text = format!(
            "[server]\nlisten = \"127.0.0.1:0\"\ncall_timeout = \"10s\"\nmax_wait = \"30s\"\n\n\
             [keys]\nseal = [{{ id = \"k1\", secret_env = \"{KEY_VAR}\" }}]\n\n\
             [engines.local]\nkind = \"exec\"\nspool_dir = {}\ngrace_period = \"1s\"\n\n",
            serde_json::to_string(&spool.display().to_string()).unwrap()
        );
        if bearer {
            text.push_str(&format!(
                "[auth]\nbearer = [{{ caller = \"ci\", token_env = \"{TOKEN_VAR}\" }}]\n\n"
            ));
        }
        text.push_str(&tool("work", "hybrid", "work.sh", &work, ""));
        text.push_str(&tool("fail", "hybrid", "fail.sh", &labelled, ""));
        text.push_str(&tool("ask", "async", "ask.sh", &labelled, ""));
        text.push_str(&tool(
            "ask_first",
            "async",
            "ask.sh",
            &labelled,
            "input_wait = \"20s\"\n",
        ));
        text.push_str(&tool(
            "sleeper",
            "async",
            "sleeper.sh",
            "{ type = \"object\" }",
            "",
        ));
        text.push_str(&tool(
            "form",
            "async",
            "ask_form.sh",
            "{ type = \"object\" }",
            "",
        ));
        std::fs::write(&config, text).unwrap();
        Self { dir, config, spool }
    }

    fn runs(&self) -> Vec<PathBuf> {
        let Ok(entries) = std::fs::read_dir(&self.spool) else {
            return Vec::new();
        };
        let mut runs: Vec<PathBuf> = entries
            .flatten()
            .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
            .map(|e| e.path())
            .filter(|p| p.is_dir())
            .collect();
        runs.sort();
        runs
    }

    /// The process group of the only run (its recorded pid).
    fn only_run_group(&self) -> i32 {
        let runs = self.runs();
        assert_eq!(runs.len(), 1, "expected one run, found {runs:?}");
        let file = runs[0].join("pid.json");
        let pid = wait_for("the run's pid.json", Duration::from_secs(20), || {
            let text = std::fs::read_to_string(&file).ok()?;
            serde_json::from_str::<Value>(&text).ok()?["pid"].as_i64()
        });
        pid as i32
    }

    /// A `taskgate` command with pipes for all three streams closed or captured.
    fn cli(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(bin());
        cmd.args(args)
            .env(KEY_VAR, KEY_SECRET)
            .env("CLICOLOR_FORCE", "1")
            .env("TERM", "xterm-256color")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        // Runs outlive servers by design: end the ones this setup started.
        for run in self.runs() {
            for file in ["pid.json", "supervisor.json"] {
                let pid = std::fs::read_to_string(run.join(file))
                    .ok()
                    .and_then(|t| serde_json::from_str::<Value>(&t).ok())
                    .and_then(|v| v["pid"].as_i64());
                if let Some(pid) = pid.filter(|p| *p > 1) {
                    let pid = nix::unistd::Pid::from_raw(pid as i32);
                    let _ = nix::sys::signal::killpg(pid, nix::sys::signal::Signal::SIGKILL);
                }
            }
        }
    }
}

/// Polls `check` until it gives a value; panics after `limit`.
fn wait_for<T>(what: &str, limit: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn assert_group_gone(pgid: i32) {
    wait_for(
        "the run's process group to end",
        Duration::from_secs(20),
        || group_members(pgid).is_empty().then_some(()),
    );
}

/// A running `taskgate serve` on a free loopback port.
struct Server {
    child: std::process::Child,
    url: String,
}

impl Server {
    fn start(setup: &Setup) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let log = std::fs::File::create(setup.dir.path().join("server.log")).unwrap();
        let child = Command::new(bin())
            .args(["serve", "--config"])
            .arg(&setup.config)
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .env(KEY_VAR, KEY_SECRET)
            .env(TOKEN_VAR, TOKEN)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        let mut server = Self {
            child,
            url: format!("http://127.0.0.1:{port}/mcp"),
        };
        let log = setup.dir.path().join("server.log");
        wait_for("the server's /healthz", Duration::from_secs(30), || {
            if let Ok(Some(status)) = server.child.try_wait() {
                panic!(
                    "the server exited ({status}): {}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
            let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
            use std::io::{Read as _, Write as _};
            write!(stream, "GET /healthz HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
            let mut answer = String::new();
            stream.read_to_string(&mut answer).ok()?;
            answer
                .lines()
                .next()
                .is_some_and(|l| l.contains(" 200 "))
                .then_some(())
        });
        server
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs a command to its end (at most 90 s).
fn run(mut cmd: Command) -> Output {
    let child = cmd.spawn().expect("spawn taskgate");
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(Duration::from_secs(90)) {
        Ok(out) => out.unwrap(),
        Err(_) => {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
            panic!("taskgate did not finish within 90 s");
        }
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Checks the exit code and that no escape code reached the pipes.
fn expect(out: &Output, code: i32) {
    assert_eq!(
        out.status.code(),
        Some(code),
        "exit code; stdout: {}\nstderr: {}",
        text(&out.stdout),
        text(&out.stderr)
    );
    for (name, bytes) in [("stdout", &out.stdout), ("stderr", &out.stderr)] {
        assert!(
            !bytes.contains(&0x1b),
            "an escape code on {name} (not a terminal): {:?}",
            text(bytes)
        );
    }
}

fn json_out(out: &Output) -> Value {
    let stdout = text(&out.stdout);
    assert_eq!(
        stdout.lines().count(),
        1,
        "one JSON line on stdout: {stdout:?}"
    );
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {stdout}"))
}

#[test]
fn json_run_through_a_pipe_completes_with_the_result_and_no_escape_codes() {
    let setup = Setup::new(false);
    let server = Server::start(&setup);
    let out = run(setup.cli(&[
        "call",
        "--url",
        &server.url,
        "--json",
        "work",
        "label=piped",
        "seconds=2",
    ]));
    expect(&out, 0);
    let v = json_out(&out);
    assert_eq!(v["status"], "completed", "{v}");
    assert!(v["taskId"].as_str().unwrap().starts_with("tg3."), "{v}");
    assert_eq!(v["result"]["structuredContent"]["rows"], 42, "{v}");
    assert_eq!(v["result"]["structuredContent"]["label"], "piped", "{v}");
    assert_eq!(v["result"]["isError"], false, "{v}");
    // Plain status lines on stderr: the status message as it changed.
    let stderr = text(&out.stderr);
    assert!(stderr.contains("work working: step 1 of 2"), "{stderr}");
    assert!(stderr.contains("completed after"), "{stderr}");
}

#[test]
fn pretty_output_prints_the_structured_result() {
    let setup = Setup::new(false);
    let server = Server::start(&setup);
    let out = run(setup.cli(&[
        "call",
        "--url",
        &server.url,
        "-q",
        "work",
        "label=pretty",
        "seconds=0",
    ]));
    expect(&out, 0);
    let stdout = text(&out.stdout);
    assert!(stdout.contains("\"rows\": 42"), "{stdout}");
}

#[test]
fn a_failing_tool_exits_1() {
    let setup = Setup::new(false);
    let server = Server::start(&setup);
    let out = run(setup.cli(&["call", "--url", &server.url, "--json", "fail", "label=nope"]));
    expect(&out, 1);
    let v = json_out(&out);
    let failed = v["status"] == "failed" || v["result"]["isError"] == true;
    assert!(failed, "{v}");
    assert!(v.to_string().contains("nope not found"), "{v}");
}

#[test]
fn bad_arguments_exit_2_and_start_nothing() {
    let setup = Setup::new(false);
    let server = Server::start(&setup);
    // Refused by the client: not an integer.
    let out = run(setup.cli(&[
        "call",
        "--url",
        &server.url,
        "work",
        "label=a",
        "seconds=soon",
    ]));
    expect(&out, 2);
    assert!(
        text(&out.stderr).contains("seconds"),
        "{}",
        text(&out.stderr)
    );
    // Refused by the server: the label's pattern.
    let out = run(setup.cli(&["call", "--url", &server.url, "work", "label=a b"]));
    expect(&out, 2);
    assert!(text(&out.stderr).contains("label"), "{}", text(&out.stderr));
    // No such tool.
    let out = run(setup.cli(&["call", "--url", &server.url, "nosuch"]));
    expect(&out, 2);
    assert!(text(&out.stderr).contains("work"), "{}", text(&out.stderr));
    assert!(setup.runs().is_empty(), "{:?}", setup.runs());
}

#[test]
fn input_is_answered_from_the_answer_flag() {
    let setup = Setup::new(false);
    let server = Server::start(&setup);
    let out = run(setup.cli(&[
        "call",
        "--url",
        &server.url,
        "--json",
        "--answer",
        "ok=yes",
        "ask",
        "label=flagged",
    ]));
    expect(&out, 0);
    let v = json_out(&out);
    assert_eq!(v["status"], "completed", "{v}");
    let answer = &v["result"]["structuredContent"]["answer"];
    assert!(answer.to_string().contains("\"ok\":true"), "{v}");
}

#[test]
fn input_without_a_terminal_exits_4_and_tasks_result_answers_it_later() {
    let setup = Setup::new(false);
    let server = Server::start(&setup);
    let out = run(setup.cli(&["call", "--url", &server.url, "--json", "ask", "label=later"]));
    expect(&out, 4);
    let v = json_out(&out);
    assert_eq!(v["status"], "input_required", "{v}");
    assert!(v["inputRequests"]["approve"].is_object(), "{v}");
    let handle = v["taskId"].as_str().unwrap().to_owned();
    assert!(
        text(&out.stderr).contains("--answer"),
        "{}",
        text(&out.stderr)
    );

    let out = run(setup.cli(&[
        "tasks",
        "result",
        "--url",
        &server.url,
        "--json",
        "--answer",
        "ok=false",
        &handle,
    ]));
    expect(&out, 0);
    let v = json_out(&out);
    assert!(
        v["result"]["structuredContent"]["answer"]
            .to_string()
            .contains("\"ok\":false"),
        "{v}"
    );

    let out = run(setup.cli(&["tasks", "get", "--url", &server.url, "--json", &handle]));
    expect(&out, 0);
    assert_eq!(json_out(&out)["status"], "completed");
}

#[test]
fn input_asked_before_the_task_exists_is_answered_then_the_call_retried() {
    let setup = Setup::new(false);
    let server = Server::start(&setup);
    // ask_first waits for the run's question before creating the task: the
    // answer goes with the retried tools/call, so the detached task needs
    // nothing more.
    let out = run(setup.cli(&[
        "call",
        "--url",
        &server.url,
        "--json",
        "--detach",
        "--answer",
        "ok=true",
        "ask_first",
        "label=early",
    ]));
    expect(&out, 0);
    let handle = json_out(&out)["taskId"].as_str().unwrap().to_owned();
    let out = run(setup.cli(&["tasks", "result", "--url", &server.url, "--json", &handle]));
    expect(&out, 0);
    let v = json_out(&out);
    assert!(
        v["result"]["structuredContent"]["answer"]
            .to_string()
            .contains("\"ok\":true"),
        "{v}"
    );
}

#[test]
fn sigint_without_a_terminal_cancels_the_task() {
    let setup = Setup::new(false);
    let server = Server::start(&setup);
    let mut cmd = setup.cli(&["call", "--url", &server.url, "--json", "sleeper"]);
    let mut child = cmd.spawn().unwrap();
    // Read stderr until the run reports its status.
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead as _;
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    let mut seen = Vec::new();
    wait_for("the status line", Duration::from_secs(30), || {
        seen.extend(rx.try_iter());
        seen.iter().any(|l| l.contains("sleeping")).then_some(())
    });
    let pgid = setup.only_run_group();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let status = wait_for("the client to exit", Duration::from_secs(60), || {
        child.try_wait().unwrap()
    });
    let mut stdout = String::new();
    use std::io::Read as _;
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    assert_eq!(status.code(), Some(3), "stdout: {stdout}; stderr: {seen:?}");
    let v: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["status"], "cancelled", "{v}");
    assert_group_gone(pgid);
}

#[test]
fn tasks_cancel_stops_a_detached_task() {
    let setup = Setup::new(false);
    let server = Server::start(&setup);
    let out = run(setup.cli(&["call", "--url", &server.url, "--detach", "sleeper"]));
    expect(&out, 0);
    let handle = text(&out.stdout).trim().to_owned();
    assert!(handle.starts_with("tg3."), "{handle}");
    let pgid = setup.only_run_group();

    let out = run(setup.cli(&["tasks", "get", "--url", &server.url, &handle]));
    expect(&out, 0);
    assert!(
        text(&out.stdout).contains("status: working"),
        "{}",
        text(&out.stdout)
    );

    let out = run(setup.cli(&["tasks", "cancel", "--url", &server.url, &handle]));
    expect(&out, 0);
    assert_group_gone(pgid);
    let out = run(setup.cli(&["tasks", "get", "--url", &server.url, "--json", &handle]));
    expect(&out, 0);
    assert_eq!(json_out(&out)["status"], "cancelled");
    // A watch of a cancelled task exits 3.
    let out = run(setup.cli(&["tasks", "result", "--url", &server.url, &handle]));
    expect(&out, 3);
}

#[test]
fn config_runs_the_server_over_stdio() {
    let setup = Setup::new(false);
    let config = setup.config.display().to_string();
    let out = run(setup.cli(&[
        "call",
        "--config",
        &config,
        "--json",
        "work",
        "label=stdio",
        "seconds=1",
    ]));
    expect(&out, 0);
    let v = json_out(&out);
    assert_eq!(v["result"]["structuredContent"]["label"], "stdio", "{v}");
    // The handle works with a later stdio server (the same local caller).
    let handle = v["taskId"].as_str().unwrap();
    let out = run(setup.cli(&["tasks", "get", "--config", &config, "--json", handle]));
    expect(&out, 0);
    assert_eq!(json_out(&out)["status"], "completed");
}

#[test]
fn bearer_tokens_come_from_the_named_variable() {
    let setup = Setup::new(true);
    let server = Server::start(&setup);
    let out = run(setup.cli(&["call", "--url", &server.url, "work", "label=t", "seconds=0"]));
    expect(&out, 5);
    assert!(
        text(&out.stderr).contains("--token-env"),
        "{}",
        text(&out.stderr)
    );
    assert!(
        text(&out.stderr).contains("bearer token"),
        "{}",
        text(&out.stderr)
    );

    let out = run(setup.cli(&[
        "call",
        "--url",
        &server.url,
        "--token-env",
        "TASKGATE_CLI_UNSET_VAR",
        "work",
        "label=t",
    ]));
    expect(&out, 2);

    let mut cmd = setup.cli(&[
        "call",
        "--url",
        &server.url,
        "--token-env",
        TOKEN_VAR,
        "--json",
        "work",
        "label=t",
        "seconds=0",
    ]);
    cmd.env(TOKEN_VAR, TOKEN);
    let out = run(cmd);
    expect(&out, 0);
    assert_eq!(json_out(&out)["status"], "completed");
}

#[test]
fn an_unreachable_server_exits_5() {
    let setup = Setup::new(false);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}/mcp");
    let out = run(setup.cli(&["call", "--url", &url, "work", "label=x"]));
    expect(&out, 5);
    assert!(
        text(&out.stderr).contains("cannot reach"),
        "{}",
        text(&out.stderr)
    );
}

// ---------------------------------------------------------------- in a terminal

/// tmux, or why not: without it these tests are skipped, unless
/// `TASKGATE_REQUIRE_E2E=1` (CI) makes that a failure.
fn tmux_ready() -> bool {
    let ok = Command::new("tmux")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var("TASKGATE_REQUIRE_E2E").as_deref() != Ok("1"),
            "tmux is required (TASKGATE_REQUIRE_E2E=1); .ci/run installs it"
        );
        eprintln!("skipped: tmux is not installed");
    }
    ok
}

static PANES: AtomicU64 = AtomicU64::new(0);

/// `taskgate ARGS` running in a tmux pane of a private tmux server (its own
/// socket), 110×40. The pane stays after the command ends; the exit code goes
/// to a file.
struct Pane {
    socket: String,
    exit_file: PathBuf,
}

impl Pane {
    fn start(setup: &Setup, args: &[&str]) -> Self {
        let n = PANES.fetch_add(1, Ordering::Relaxed);
        let socket = format!("taskgate-cli-{}-{n}", std::process::id());
        let exit_file = setup.dir.path().join(format!("exit-{n}"));
        let conf = setup.dir.path().join("tmux.conf");
        std::fs::write(
            &conf,
            "set -g remain-on-exit on\nset -g history-limit 2000\n",
        )
        .unwrap();
        let quoted: Vec<String> = std::iter::once(bin().display().to_string())
            .chain(args.iter().map(|a| (*a).to_owned()))
            .map(|a| format!("'{}'", a.replace('\'', r"'\''")))
            .collect();
        let runner = setup.dir.path().join(format!("pane-{n}.sh"));
        let exit = exit_file.display();
        std::fs::write(
            &runner,
            format!(
                "{}\necho $? > '{exit}.tmp' && mv '{exit}.tmp' '{exit}'\n",
                quoted.join(" ")
            ),
        )
        .unwrap();
        let status = Command::new("tmux")
            .args(["-L", &socket, "-f"])
            .arg(&conf)
            .args([
                "new-session",
                "-d",
                "-s",
                "t",
                "-x",
                "110",
                "-y",
                "40",
                "-e",
            ])
            .arg(format!("{KEY_VAR}={KEY_SECRET}"))
            .arg("bash")
            .arg(&runner)
            .status()
            .unwrap();
        assert!(status.success(), "tmux new-session failed");
        Self { socket, exit_file }
    }

    fn screen(&self) -> String {
        let out = Command::new("tmux")
            // The visible screen and the lines scrolled above it.
            .args([
                "-L",
                &self.socket,
                "capture-pane",
                "-p",
                "-S",
                "-200",
                "-t",
                "t",
            ])
            .output()
            .unwrap();
        text(&out.stdout)
    }

    /// The screen with wrapped lines joined.
    fn screen_joined(&self) -> String {
        let out = Command::new("tmux")
            .args([
                "-L",
                &self.socket,
                "capture-pane",
                "-p",
                "-J",
                "-S",
                "-200",
                "-t",
                "t",
            ])
            .output()
            .unwrap();
        text(&out.stdout)
    }

    fn keys(&self, keys: &[&str]) {
        let status = Command::new("tmux")
            .args(["-L", &self.socket, "send-keys", "-t", "t"])
            .args(keys)
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Waits until the screen shows every one of `needles`; returns it.
    fn wait_screen(&self, needles: &[&str]) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let last = self.screen();
            if needles.iter().all(|n| last.contains(n)) {
                return last;
            }
            assert!(
                Instant::now() < deadline,
                "the screen never showed {needles:?}; it shows:\n{last}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn exit_code(&self) -> i32 {
        wait_for(
            "the command in the pane to end",
            Duration::from_secs(60),
            || {
                std::fs::read_to_string(&self.exit_file)
                    .ok()?
                    .trim()
                    .parse()
                    .ok()
            },
        )
    }
}

impl Drop for Pane {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .status();
    }
}

#[test]
fn in_a_terminal_the_spinner_shows_status_and_elapsed_time() {
    if !tmux_ready() {
        return;
    }
    let setup = Setup::new(false);
    let server = Server::start(&setup);
    let pane = Pane::start(
        &setup,
        &[
            "call",
            "--url",
            &server.url,
            "work",
            "label=tty",
            "seconds=4",
        ],
    );
    let screen = pane.wait_screen(&["work", "working · step 1 of 4"]);
    let line = screen.lines().find(|l| l.contains("step 1 of 4")).unwrap();
    // The spinner line: a spinner glyph, the tool, the elapsed time, the status.
    assert!(
        line.split_whitespace()
            .any(|w| w.ends_with('s') && w[..w.len() - 1].parse::<u64>().is_ok()),
        "no elapsed time in {line:?}"
    );
    assert_eq!(pane.exit_code(), 0, "{}", pane.screen());
    let screen = pane.screen();
    assert!(screen.contains("completed after"), "{screen}");
    assert!(screen.contains("\"rows\": 42"), "{screen}");
    // The spinner is gone once the result is shown.
    assert!(!screen.contains("step 3 of 4"), "{screen}");
}

#[test]
fn in_a_terminal_an_input_request_is_asked_and_answered() {
    if !tmux_ready() {
        return;
    }
    let setup = Setup::new(false);
    let server = Server::start(&setup);
    let pane = Pane::start(&setup, &["call", "--url", &server.url, "ask", "label=tty"]);
    pane.wait_screen(&["Deploy tty?", "ok"]);
    pane.keys(&["y"]);
    pane.wait_screen(&["Send this answer?"]);
    pane.keys(&["Enter"]);
    assert_eq!(pane.exit_code(), 0, "{}", pane.screen());
    let screen = pane.screen();
    assert!(screen.contains("\"ok\": true"), "{screen}");
}

#[test]
fn in_a_terminal_ctrl_c_asks_and_cancels_the_task() {
    if !tmux_ready() {
        return;
    }
    let setup = Setup::new(false);
    let server = Server::start(&setup);
    let pane = Pane::start(&setup, &["call", "--url", &server.url, "sleeper"]);
    pane.wait_screen(&["sleeper", "sleeping"]);
    let pgid = setup.only_run_group();
    pane.keys(&["C-c"]);
    let screen = pane.wait_screen(&["Cancel the task?", "keep waiting"]);
    // The spinner line was cleared before the menu.
    assert!(!screen.contains("working · sleeping"), "{screen}");
    pane.keys(&["Enter"]);
    assert_eq!(pane.exit_code(), 3, "{}", pane.screen());
    assert!(
        pane.screen().contains("cancelled after"),
        "{}",
        pane.screen()
    );
    assert_group_gone(pgid);
}

#[test]
fn in_a_terminal_ctrl_c_at_a_prompt_can_keep_waiting_or_leave_the_task_running() {
    if !tmux_ready() {
        return;
    }
    let setup = Setup::new(false);
    let server = Server::start(&setup);
    let pane = Pane::start(
        &setup,
        &["call", "--url", &server.url, "ask", "label=later"],
    );
    pane.wait_screen(&["Deploy later?", "ok"]);
    pane.keys(&["C-c"]);
    pane.wait_screen(&["Cancel the task?"]);
    // "keep waiting": the question is asked again.
    pane.keys(&["Down", "Enter"]);
    wait_for("the question asked again", Duration::from_secs(30), || {
        (pane.screen().matches("Deploy later?").count() >= 2).then_some(())
    });
    pane.keys(&["C-c"]);
    wait_for("the menu again", Duration::from_secs(30), || {
        (pane.screen().matches("Cancel the task?").count() >= 2).then_some(())
    });
    // "leave it running and exit": 130, and the hint names the handle.
    pane.keys(&["Down", "Down", "Enter"]);
    assert_eq!(pane.exit_code(), 130, "{}", pane.screen());
    let screen = pane.screen_joined();
    let handle = screen
        .lines()
        .find(|l| l.contains("taskgate tasks result"))
        .and_then(|l| l.split_whitespace().last())
        .unwrap_or_else(|| panic!("no handle in {screen}"))
        .to_owned();
    assert!(handle.starts_with("tg3."), "{screen}");
    let out = run(setup.cli(&["tasks", "get", "--url", &server.url, "--json", &handle]));
    expect(&out, 0);
    assert_eq!(json_out(&out)["status"], "input_required");
}

#[test]
fn in_a_terminal_a_form_offers_choices_and_checks_what_is_typed() {
    if !tmux_ready() {
        return;
    }
    let setup = Setup::new(false);
    let server = Server::start(&setup);
    let pane = Pane::start(&setup, &["call", "--url", &server.url, "form"]);
    pane.wait_screen(&["Release details?", "count"]);
    // Out of the schema's bounds: refused as typed, asked again.
    pane.keys(&["9", "Enter"]);
    pane.wait_screen(&["9 is greater than the maximum of 5"]);
    pane.keys(&["3", "Enter"]);
    // The enum is a choice.
    pane.wait_screen(&["staging", "production"]);
    pane.keys(&["Down", "Enter"]);
    // Too long for maxLength, then left empty (it is optional).
    pane.wait_screen(&["note"]);
    pane.keys(&["much too long", "Enter"]);
    pane.wait_screen(&["longer than 10 characters"]);
    pane.keys(&["Enter"]);
    pane.wait_screen(&["Send this answer?"]);
    pane.keys(&["Enter"]);
    assert_eq!(pane.exit_code(), 0, "{}", pane.screen());
    let screen = pane.screen();
    assert!(screen.contains("\"count\": 3"), "{screen}");
    assert!(screen.contains("\"env\": \"production\""), "{screen}");
    assert!(!screen.contains("\"note\""), "{screen}");
}
