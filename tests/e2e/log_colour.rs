//! Log colour through the built binary: log lines written to a pipe (a file,
//! a pod's log) carry no ANSI escape; on a terminal (a pseudo-terminal made
//! with `openpty`) text logs are coloured, unless `NO_COLOR` is set to a
//! non-empty value; JSON logs never are.
//!
//! The line used is the warning `--audit-log off` logs at start (its level,
//! `WARN`, is the part a coloured log paints), made by `check-config` on a
//! missing file, which then exits without serving anything.

use crate::common;

use std::io::Read as _;
use std::process::{Command, Stdio};
use std::time::Duration;

const WARNING: &str = "the audit trail is off";
const ESC: u8 = 0x1b;

/// `taskgate --audit-log off [extra] check-config` on a missing file, in an
/// environment without the variables that change its logs.
fn command(extra: &[&str], env: &[(&str, &str)]) -> Command {
    let mut cmd = Command::new(common::bin());
    cmd.args(["--audit-log", "off"]).args(extra).args([
        "check-config",
        "--config",
        "/nonexistent/taskgate.toml",
    ]);
    for var in [
        "NO_COLOR",
        "TASKGATE_LOG_FORMAT",
        "TASKGATE_LOG",
        "TASKGATE_AUDIT_LOG",
    ] {
        cmd.env_remove(var);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.stdin(Stdio::null()).stdout(Stdio::null());
    cmd
}

/// What the command writes to stderr when stderr is a pseudo-terminal.
fn stderr_on_a_terminal(mut cmd: Command) -> Vec<u8> {
    let pty = nix::pty::openpty(None, None).expect("openpty");
    cmd.stderr(Stdio::from(pty.slave));
    let mut child = cmd.spawn().expect("spawn taskgate");
    // The command holds the parent's copy of the terminal's slave side: close
    // it, so that reading ends (EIO) once the child has exited.
    drop(cmd);
    let mut master = std::fs::File::from(pty.master);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut all = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n @ 1..) = master.read(&mut buf) {
            all.extend_from_slice(&buf[..n]);
        }
        let _ = tx.send(all);
    });
    let out = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the terminal closes within 30 s");
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(2), "a missing config exits 2");
    out
}

fn has_escape(bytes: &[u8]) -> bool {
    bytes.contains(&ESC)
}

fn shown(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).escape_debug().to_string()
}

#[test]
fn logs_to_a_pipe_carry_no_escape_codes() {
    for format in ["text", "json"] {
        let out = command(&["--log-format", format], &[])
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let stderr = out.stderr;
        assert!(
            String::from_utf8_lossy(&stderr).contains(WARNING),
            "{format}: {}",
            shown(&stderr)
        );
        assert!(!has_escape(&stderr), "{format}: {}", shown(&stderr));
    }
}

#[test]
fn a_terminal_gets_colour_unless_no_color_is_set() {
    let coloured = stderr_on_a_terminal(command(&[], &[]));
    assert!(
        String::from_utf8_lossy(&coloured).contains(WARNING),
        "{}",
        shown(&coloured)
    );
    assert!(has_escape(&coloured), "coloured: {}", shown(&coloured));

    let plain = stderr_on_a_terminal(command(&[], &[("NO_COLOR", "1")]));
    assert!(
        String::from_utf8_lossy(&plain).contains(WARNING),
        "{}",
        shown(&plain)
    );
    assert!(!has_escape(&plain), "NO_COLOR=1: {}", shown(&plain));

    // An empty NO_COLOR does not count (no-color.org).
    let empty = stderr_on_a_terminal(command(&[], &[("NO_COLOR", "")]));
    assert!(has_escape(&empty), "NO_COLOR empty: {}", shown(&empty));
}

#[test]
fn json_logs_on_a_terminal_are_plain_json() {
    let out = stderr_on_a_terminal(command(&["--log-format", "json"], &[]));
    assert!(!has_escape(&out), "{}", shown(&out));
    let text = String::from_utf8_lossy(&out);
    let line = text
        .lines()
        .find(|l| l.contains(WARNING))
        .unwrap_or_else(|| panic!("{}", shown(&out)));
    let event: serde_json::Value = serde_json::from_str(line.trim_end_matches('\r'))
        .unwrap_or_else(|e| panic!("{e}: {line:?}"));
    assert_eq!(event["level"], "WARN", "{event}");
}
