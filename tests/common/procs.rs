//! The processes a run left behind: recorded pids, process groups, liveness.

use std::path::Path;

use serde_json::Value;

/// The pid in a spool `pid.json` / `supervisor.json`.
pub fn recorded_pid(file: &Path) -> Option<i32> {
    let text = std::fs::read_to_string(file).ok()?;
    let v: Value = serde_json::from_str(&text).ok()?;
    v.get("pid")?.as_i64().map(|p| p as i32)
}

/// The live (not zombie) processes whose process group is `pgid`.
pub fn group_members(pgid: i32) -> Vec<i32> {
    let mut members = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return members;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some(close) = stat.rfind(')') else {
            continue;
        };
        let mut fields = stat[close + 1..].split_ascii_whitespace();
        let state = fields.next().unwrap_or("");
        let _ppid = fields.next();
        let pgrp: i32 = fields.next().and_then(|f| f.parse().ok()).unwrap_or(0);
        if pgrp == pgid && !matches!(state, "Z" | "X" | "x") {
            members.push(pid);
        }
    }
    members
}

/// True when `pid` is a live (not zombie) process.
pub fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat
                .rfind(')')
                .and_then(|i| stat[i + 1..].split_ascii_whitespace().next())
                .unwrap_or("");
            !matches!(state, "Z" | "X" | "x")
        }
        Err(_) => false,
    }
}

/// SIGKILLs the process group `pgid` (or the process, when it leads no group)
/// if anything of it is still there.
pub fn kill_group_if_present(pgid: i32) {
    use nix::sys::signal::{kill, killpg, Signal};
    use nix::unistd::Pid;
    if pgid <= 1 {
        return;
    }
    if !group_members(pgid).is_empty() {
        let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
    } else if alive(pgid) {
        let _ = kill(Pid::from_raw(pgid), Signal::SIGKILL);
    }
}
