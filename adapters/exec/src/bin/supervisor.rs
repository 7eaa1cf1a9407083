//! `taskgate-exec-supervisor <run-dir>`: the exec engine's supervisor as a
//! standalone program, for this crate's tests (the taskgate binary runs the
//! same code as `taskgate supervise <run-dir>`).

use std::ffi::OsString;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    taskgate_exec::supervise_main(&args)
}
