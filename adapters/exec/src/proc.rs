//! What the kernel says about processes: start times from `/proc`, and signals
//! to process groups.

use std::path::Path;

use nix::errno::Errno;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

use crate::layout::ProcRecord;

/// The start time (field 22 of `/proc/<pid>/stat`, clock ticks since boot) of
/// the live process `pid`; `None` when there is no such process or it is a
/// zombie (dead, not yet reaped).
pub(crate) fn start_time(pid: i32) -> Option<u64> {
    let stat = crate::layout::read_small(Path::new(&format!("/proc/{pid}/stat"))).ok()?;
    // The command name may hold any bytes; the fields after it are ASCII.
    parse_stat(&String::from_utf8_lossy(&stat))
}

/// Parses a `/proc/<pid>/stat` line into the start time of a live process.
/// The command name (field 2) is in parentheses and may itself contain spaces
/// and parentheses, so fields are counted from the last `)`.
pub(crate) fn parse_stat(stat: &str) -> Option<u64> {
    let (state, start) = parse_stat_fields(stat)?;
    (!matches!(state, "Z" | "X" | "x")).then_some(start)
}

/// The state (field 3) and start time (field 22) of a `/proc/<pid>/stat` line.
fn parse_stat_fields(stat: &str) -> Option<(&str, u64)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_ascii_whitespace();
    // Field 3 is the state; field 22 is 19 fields later.
    let state = fields.next()?;
    Some((state, fields.nth(18)?.parse().ok()?))
}

/// The start time of `pid` even when it is a zombie: for recording a child
/// that may already have exited before its parent looked.
pub(crate) fn start_time_any(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat_fields(&stat).map(|(_, start)| start)
}

/// True when the process recorded in `rec` is still the one running under
/// its pid.
pub(crate) fn is_alive(rec: &ProcRecord) -> bool {
    start_time(rec.pid) == Some(rec.start_time)
}

/// Sends `signal` to the process group `pgid`; `None` only checks that the
/// group has members. `Ok(false)` when the group is empty.
pub(crate) fn signal_group(pgid: i32, signal: Option<Signal>) -> Result<bool, Errno> {
    if pgid <= 1 {
        return Ok(false);
    }
    match killpg(Pid::from_raw(pgid), signal) {
        Ok(()) => Ok(true),
        Err(Errno::ESRCH) => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_field_22_after_a_tricky_name() {
        let line =
            "1234 (a) b (c) S 1 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10";
        assert_eq!(parse_stat(line), Some(987_654));
        let zombie = "1234 (sh) Z 1 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 0 0";
        assert_eq!(parse_stat(zombie), None);
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn this_process_is_alive() {
        let pid = i32::try_from(std::process::id()).unwrap();
        let me = ProcRecord {
            pid,
            start_time: start_time(pid).unwrap(),
        };
        assert!(is_alive(&me));
        assert!(!is_alive(&ProcRecord {
            start_time: me.start_time + 1,
            ..me
        }));
    }
}
