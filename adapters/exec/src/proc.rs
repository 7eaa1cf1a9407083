//! What the kernel says about processes: start times from `/proc`, and signals
//! to process groups.

use nix::errno::Errno;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

use crate::layout::ProcRecord;

/// The start time (field 22 of `/proc/<pid>/stat`, clock ticks since boot) of
/// the live process `pid`; `None` when there is no such process or it is a
/// zombie (dead, not yet reaped).
pub(crate) fn start_time(pid: i32) -> Option<u64> {
    start_time_with(pid, &mut crate::buffer::Buffer::new())
}

/// [`start_time`], reading into `buffer` (a read of many records reuses one).
pub(crate) fn start_time_with(pid: i32, buffer: &mut crate::buffer::Buffer) -> Option<u64> {
    use std::io::Write as _;
    let mut path = [0u8; 32];
    let len = {
        let mut cursor = std::io::Cursor::new(&mut path[..]);
        write!(cursor, "/proc/{pid}/stat").ok()?;
        usize::try_from(cursor.position()).ok()?
    };
    let path = std::str::from_utf8(&path[..len]).ok()?;
    let file = std::fs::File::open(path).ok()?;
    // The kernel writes the whole line on the first read of a large enough
    // buffer.
    parse_stat_bytes(crate::buffer::read_whole(file, buffer).ok()?)
}

/// Parses a `/proc/<pid>/stat` line into the start time of a live process.
/// The command name (field 2) is in parentheses and may itself contain spaces,
/// parentheses and any bytes, so fields are counted from the last `)`; the
/// fields after it are ASCII, so nothing needs to be valid UTF-8.
fn parse_stat_bytes(stat: &[u8]) -> Option<u64> {
    let (state, start) = parse_stat_fields(stat)?;
    (!matches!(state, b"Z" | b"X" | b"x")).then_some(start)
}

/// The state (field 3) and start time (field 22) of a `/proc/<pid>/stat` line.
/// The kernel separates the fields after the command name by one space each,
/// so field `k` starts after the `(k - 2)`th space following the last `)`.
fn parse_stat_fields(stat: &[u8]) -> Option<(&[u8], u64)> {
    let rest = &stat[memchr::memrchr(b')', stat)? + 1..];
    let mut spaces = memchr::memchr_iter(b' ', rest);
    let state_at = spaces.next()? + 1;
    let state_end = spaces.next()?;
    let start_at = spaces.nth(17)? + 1;
    let start_end =
        memchr::memchr2(b' ', b'\n', &rest[start_at..]).map_or(rest.len(), |n| start_at + n);
    let start = std::str::from_utf8(&rest[start_at..start_end])
        .ok()?
        .parse()
        .ok()?;
    Some((&rest[state_at..state_end], start))
}

/// The start time of `pid` even when it is a zombie: for recording a child
/// that may already have exited before its parent looked.
pub(crate) fn start_time_any(pid: i32) -> Option<u64> {
    let stat = std::fs::read(format!("/proc/{pid}/stat")).ok()?;
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
        assert_eq!(parse_stat_bytes(line.as_bytes()), Some(987_654));
        let zombie = "1234 (sh) Z 1 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 0 0";
        assert_eq!(parse_stat_bytes(zombie.as_bytes()), None);
        assert_eq!(parse_stat_bytes(b"garbage"), None);
        // A name that is not UTF-8 does not matter.
        let odd = b"77 (\xff\xfe) R 1 77 77 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 4242 0 0";
        assert_eq!(parse_stat_bytes(odd), Some(4242));
        // The start time as the last field, before the line's end; too few fields.
        let last = b"9 (x) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 4242\n";
        assert_eq!(parse_stat_bytes(last), Some(4242));
        assert_eq!(parse_stat_bytes(&last[..last.len() - 6]), None);
        assert_eq!(parse_stat_bytes(b"9 (x) S 1 2"), None);
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

/// The capabilities `run_as` needs: CAP_CHOWN (0), CAP_DAC_OVERRIDE (1),
/// CAP_FOWNER (3), CAP_SETGID (6), CAP_SETUID (7).
const RUN_AS_CAPS: [(u32, &str); 5] = [
    (0, "CAP_CHOWN"),
    (1, "CAP_DAC_OVERRIDE"),
    (3, "CAP_FOWNER"),
    (6, "CAP_SETGID"),
    (7, "CAP_SETUID"),
];

/// A capability set of this process from `/proc/self/status` (`CapEff`,
/// `CapAmb`, …); `None` where the kernel does not say.
fn capability_set(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    parse_capability_set(&status, field)
}

fn parse_capability_set(status: &str, field: &str) -> Option<u64> {
    status.lines().find_map(|line| {
        let hex = line.strip_prefix(field)?.strip_prefix(':')?.trim();
        u64::from_str_radix(hex, 16).ok()
    })
}

/// Why this process cannot run a tool as another user, or `None` when it can:
/// it must be root or hold the capabilities of [`RUN_AS_CAPS`].
pub(crate) fn run_as_problem() -> Option<String> {
    let effective = capability_set("CapEff").unwrap_or(0);
    let missing: Vec<&str> = RUN_AS_CAPS
        .iter()
        .filter(|(bit, _)| effective & (1 << bit) == 0)
        .map(|(_, name)| *name)
        .collect();
    (!missing.is_empty()).then(|| {
        format!(
            "run_as needs the server to run as root or to hold {} (missing: {})",
            RUN_AS_CAPS.map(|(_, n)| n).join(", "),
            missing.join(", ")
        )
    })
}

/// Why a tool must not be started as another user from this process: ambient
/// capabilities pass on to the tool's program across `exec` (they would let it
/// become the server's user again). `None` when there are none.
pub(crate) fn ambient_problem() -> Option<String> {
    match capability_set("CapAmb") {
        Some(0) | None => None,
        Some(set) => Some(format!(
            "this supervisor holds ambient capabilities ({set:#x}) that would pass to the \
             process: give taskgate file capabilities instead, or run it as root"
        )),
    }
}

#[cfg(test)]
mod capability_tests {
    use super::parse_capability_set;

    #[test]
    fn capability_sets_are_read_from_status() {
        let status = "Name:\tx\nCapEff:\t00000000000000c0\nCapAmb:\t0000000000000000\n";
        assert_eq!(parse_capability_set(status, "CapEff"), Some(0xc0));
        assert_eq!(parse_capability_set(status, "CapAmb"), Some(0));
        assert_eq!(parse_capability_set(status, "CapBnd"), None);
    }
}
