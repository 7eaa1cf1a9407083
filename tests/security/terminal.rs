//! Item 11: the terminal client shows text, not escape codes. Standing where a
//! hostile argument stands: it is echoed by a pipeline into its status message
//! and into the question a person approves, carrying escape sequences that would
//! erase "production" from the line and retitle the window. Through the built
//! binary (`taskgate call` in a tmux pane, `taskgate tasks get` through a
//! pipe), the person sees the whole text and the codes do nothing. Also: a
//! token bound for plain `http://` off this machine is warned about, and an
//! answer larger than `--max-response-bytes` is refused.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::common::{self, Server, Setup};

/// The hostile argument: "production", then erase the line, go to column 1,
/// set the window title, ring the bell, and write the harmless-looking rest.
const WHERE: &str = "production\u{1b}[2K\u{1b}[1G\u{1b}]0;owned\u{7}\u{202e}gnigats";

/// A pipeline that echoes its `where` argument into its status message, then
/// asks "Deploy to <where>?" and, once answered, returns it.
const HOSTILE_SH: &str = r#"#!/bin/sh
set -eu
where=$(sed -n 's/.*"where":"\([^"]*\)".*/\1/p' "$TASKGATE_ARGS_FILE")
printf '{"message": "rolling out to %s"}' "$where" > "$TASKGATE_STATUS_FILE.tmp"
mv "$TASKGATE_STATUS_FILE.tmp" "$TASKGATE_STATUS_FILE"
sleep @HOLD@
req="$TASKGATE_INPUT_DIR/approve.request.json"
resp="$TASKGATE_INPUT_DIR/approve.response.json"
printf '{"message": "Deploy to %s?", "requestedSchema": {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}}' "$where" > "$req.tmp"
mv "$req.tmp" "$req"
i=0
while [ ! -e "$resp" ]; do
  i=$((i + 1)); [ "$i" -gt 1200 ] && exit 9
  sleep 0.1
done
printf '{"deployed_to": "%s"}' "$where" > "$TASKGATE_RESULT_FILE.tmp"
mv "$TASKGATE_RESULT_FILE.tmp" "$TASKGATE_RESULT_FILE"
"#;

/// A server whose exec tool `hostile` runs [`HOSTILE_SH`] (holding its status
/// `hold` seconds before asking).
async fn hostile_server(scripts: &Path, hold: u32) -> (Setup, Server) {
    let script = scripts.join("hostile.sh");
    std::fs::write(&script, HOSTILE_SH.replace("@HOLD@", &hold.to_string())).unwrap();
    let mut perms = std::fs::metadata(&script).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&script, perms).unwrap();
    let spool = scripts.join("spool");
    let body = format!(
        "[engines.local]\nkind = \"exec\"\nspool_dir = {}\ngrace_period = \"1s\"\n\n\
         [[tools]]\nname = \"hostile\"\nengine = \"local\"\nmode = \"async\"\npoll_interval = \"200ms\"\n\
         input_schema = {{ type = \"object\", required = [\"where\"], properties = {{ where = {{ type = \"string\" }} }} }}\n\
         target = {{ command = [{}] }}\n",
        common::toml_str(&spool),
        common::toml_str(&script)
    );
    let setup = Setup::config(&body, &[]);
    let server = setup.server().await;
    (setup, server)
}

fn run(mut cmd: Command) -> Output {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd.spawn().expect("taskgate").wait_with_output().unwrap()
}

fn bin() -> PathBuf {
    common::bin()
}

/// `taskgate tasks get HANDLE` on `url`: what it prints on stdout, once it
/// contains `needle`.
async fn tasks_get_showing(url: &str, handle: &str, needle: &str) -> String {
    common::wait_for(needle, Duration::from_secs(30), async || {
        let mut get = Command::new(bin());
        get.args(["tasks", "get", "--url", url, handle]);
        let out = tokio::task::spawn_blocking(move || run(get)).await.unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.contains(needle).then_some(text)
    })
    .await
}

fn assert_inert(shown: &str) {
    for c in shown.chars() {
        assert!(
            c == '\n' || !(c.is_control() || ('\u{202a}'..='\u{202e}').contains(&c)),
            "a control character {c:?} reached the terminal: {shown:?}"
        );
    }
    assert!(!shown.contains("owned"), "an OSC string was shown: {shown}");
}

#[tokio::test]
async fn a_status_message_and_question_read_through_a_pipe_carry_no_escape_codes() {
    let scripts = tempfile::tempdir().unwrap();
    let (_setup, server) = hostile_server(scripts.path(), 2).await;
    let url = server.url();
    let mut call = Command::new(bin());
    call.args(["call", "--url", &url, "--detach", "hostile"])
        .arg(format!("where={WHERE}"));
    let out = tokio::task::spawn_blocking(move || run(call))
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let handle = String::from_utf8(out.stdout).unwrap().trim().to_owned();

    let shown = tasks_get_showing(&url, &handle, "rolling out to production").await;
    assert_inert(&shown);
    let shown = tasks_get_showing(&url, &handle, "asks").await;
    assert_inert(&shown);
    assert!(shown.contains("Deploy to production"), "{shown}");
}

/// tmux, or why not: without it this test is skipped, unless
/// `TASKGATE_REQUIRE_E2E=1` makes that a failure.
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
        eprintln!("skipping: tmux is not installed");
    }
    ok
}

/// `taskgate ARGS` in a 110×40 pane of a private tmux server.
struct Pane {
    socket: String,
}

impl Pane {
    fn start(dir: &Path, args: &[&str]) -> Self {
        let socket = format!("taskgate-sec-{}", std::process::id());
        let quoted: Vec<String> = std::iter::once(bin().display().to_string())
            .chain(args.iter().map(|a| (*a).to_owned()))
            .map(|a| format!("'{}'", a.replace('\'', r"'\''")))
            .collect();
        let runner = dir.join("pane.sh");
        std::fs::write(&runner, format!("{}\nsleep 600\n", quoted.join(" "))).unwrap();
        let status = Command::new("tmux")
            .args([
                "-L",
                &socket,
                "-f",
                "/dev/null",
                "new-session",
                "-d",
                "-s",
                "t",
            ])
            .args(["-x", "110", "-y", "40", "bash"])
            .arg(&runner)
            .status()
            .unwrap();
        assert!(status.success(), "tmux new-session failed");
        Self { socket }
    }

    fn tmux(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .args(["-L", &self.socket])
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn screen(&self) -> String {
        self.tmux(&["capture-pane", "-p", "-J", "-S", "-200", "-t", "t"])
    }

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
}

impl Drop for Pane {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .status();
    }
}

#[tokio::test]
async fn in_a_terminal_a_hostile_status_and_question_show_production() {
    if !tmux_ready() {
        return;
    }
    let scripts = tempfile::tempdir().unwrap();
    let (_setup, server) = hostile_server(scripts.path(), 3).await;
    let url = server.url();
    let where_arg = format!("where={WHERE}");
    let pane = Pane::start(
        scripts.path(),
        &["call", "--url", &url, "hostile", &where_arg],
    );
    let shown = tokio::task::spawn_blocking(move || {
        pane.wait_screen(&["rolling out to production"]);
        let screen = pane.wait_screen(&["Deploy to production"]);
        let title = pane.tmux(&["display-message", "-p", "-t", "t", "#{pane_title}"]);
        (screen, title)
    })
    .await
    .unwrap();
    let (screen, title) = shown;
    assert!(
        !title.contains("owned"),
        "the window title was set: {title}"
    );
    assert!(!screen.contains("owned"), "{screen}");
}

#[tokio::test]
async fn a_token_for_plain_http_off_this_machine_is_warned_about() {
    let mut cmd = Command::new(bin());
    // TEST-NET-1: never answers; the warning comes before any connection.
    cmd.args([
        "tasks",
        "get",
        "--url",
        "http://192.0.2.1:9/mcp",
        "--token-env",
        "TG_SEC_TOKEN",
        "--timeout",
        "1s",
        "handle",
    ])
    .env("TG_SEC_TOKEN", "secret-token-value");
    let out = tokio::task::spawn_blocking(move || run(cmd)).await.unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{err}");
    assert!(err.contains("warning") && err.contains("http://"), "{err}");
    assert!(!err.contains("secret-token-value"), "{err}");

    // Loopback is this machine: no warning.
    let mut cmd = Command::new(bin());
    cmd.args([
        "tasks",
        "get",
        "--url",
        &format!("http://127.0.0.1:{}/mcp", common::free_port()),
        "--token-env",
        "TG_SEC_TOKEN",
        "--timeout",
        "1s",
        "handle",
    ])
    .env("TG_SEC_TOKEN", "secret-token-value");
    let out = tokio::task::spawn_blocking(move || run(cmd)).await.unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("warning"), "{err}");
}

#[tokio::test]
async fn an_answer_over_max_response_bytes_is_refused() {
    let scripts = tempfile::tempdir().unwrap();
    let (_setup, server) = hostile_server(scripts.path(), 0).await;
    let mut cmd = Command::new(bin());
    cmd.args([
        "call",
        "--url",
        &server.url(),
        "--max-response-bytes",
        "64",
        "hostile",
        "where=x",
    ]);
    let out = tokio::task::spawn_blocking(move || run(cmd)).await.unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{err}");
    assert!(err.contains("larger than 64 bytes"), "{err}");
    assert_eq!(server.engine_calls().await, 0, "a run was started");
}
