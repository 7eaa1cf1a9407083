//! The spool layout: file names inside a run folder and the records stored in
//! them. Shared by the engine (which reads and writes from the server) and the
//! supervisor (which writes from beside the process).
//!
//! ```text
//! <spool_dir>/<run_name>/
//!   meta.json         written by start: tool, args hash, created time, keep-alive
//!   args.json         the tool's arguments (TASKGATE_ARGS_FILE)
//!   command.json      argv, environment and working folder for the supervisor
//!   supervisor.json   the supervisor's pid and start time (it is alive)
//!   pid.json          the process's pid and start time (it was spawned)
//!   stdout.tail       the last `tail_bytes` bytes of standard output, after a
//!                     header line `tg-tail <offset>` (the stream offset of the
//!                     first byte kept)
//!   stderr.tail       the same of standard error
//!   exit.json         exit code or signal, or why the process could not start
//!   cancelled         marker written by cancel (its mtime is the cancel time)
//!   status.json       written by the process (TASKGATE_STATUS_FILE)
//!   result.json       written by the process (TASKGATE_RESULT_FILE)
//!   input/<key>.request.json   written by the process (TASKGATE_INPUT_DIR)
//!   input/<key>.response.json  written by answer
//! ```
//!
//! `input/` is made with an mtime of 0 (the Unix epoch), before the process
//! starts: the first file created in it moves its mtime to the present, so a
//! reader that finds 0 knows the folder is empty without listing it.
//!
//! Every file is written whole (to a temporary name, then renamed), so a reader
//! never sees half a record. taskgate's records are made mode 0600; only
//! `args.json` and the answers (`input/<key>.response.json`) are made 0640, for
//! a process that runs as another user (`run_as`) and shares the run folder's
//! group. Files the process writes are opened without following symbolic
//! links, only when they are regular files with one link, and read with a cap.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

pub(crate) const META: &str = "meta.json";
pub(crate) const ARGS: &str = "args.json";
pub(crate) const COMMAND: &str = "command.json";
pub(crate) const SUPERVISOR: &str = "supervisor.json";
pub(crate) const PID: &str = "pid.json";
pub(crate) const STDOUT_TAIL: &str = "stdout.tail";
pub(crate) const STDERR_TAIL: &str = "stderr.tail";
pub(crate) const EXIT: &str = "exit.json";
pub(crate) const CANCELLED: &str = "cancelled";
pub(crate) const STATUS: &str = "status.json";
pub(crate) const RESULT: &str = "result.json";
pub(crate) const INPUT_DIR: &str = "input";
pub(crate) const REQUEST_SUFFIX: &str = ".request.json";
pub(crate) const RESPONSE_SUFFIX: &str = ".response.json";

/// How a tail file starts: this, the stream offset of its first byte kept in
/// decimal, and a newline.
const TAIL_HEADER: &[u8] = b"tg-tail ";
/// The longest header line a tail file may have.
pub(crate) const MAX_TAIL_HEADER: usize = 32;

/// A tail file's bytes: the header naming `start`, then `kept`.
pub(crate) fn tail_record(start: u64, kept: &[u8]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(kept.len() + MAX_TAIL_HEADER);
    bytes.extend_from_slice(TAIL_HEADER);
    bytes.extend_from_slice(start.to_string().as_bytes());
    bytes.push(b'\n');
    bytes.extend_from_slice(kept);
    bytes
}

/// Splits the start of a tail file into the stream offset of its first byte
/// kept and the length of its header. A file without a header (written by an
/// older supervisor) starts at offset 0 with no header.
pub(crate) fn tail_header(bytes: &[u8]) -> (u64, usize) {
    let Some(rest) = bytes.strip_prefix(TAIL_HEADER) else {
        return (0, 0);
    };
    let Some(end) = rest.iter().take(MAX_TAIL_HEADER).position(|b| *b == b'\n') else {
        return (0, 0);
    };
    match std::str::from_utf8(&rest[..end])
        .ok()
        .and_then(|n| n.parse().ok())
    {
        Some(start) => (start, TAIL_HEADER.len() + end + 1),
        None => (0, 0),
    }
}

/// The output a tail file keeps, without its header.
pub(crate) fn tail_body(bytes: &[u8]) -> &[u8] {
    &bytes[tail_header(bytes).1..]
}

/// What start records about a run before anything is launched.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Meta {
    /// The tool's name.
    pub tool: String,
    /// Hash of the tool name and the canonical arguments (idempotency check).
    pub args_hash: String,
    /// When start created the run, in milliseconds since the Unix epoch.
    pub created_at_ms: u64,
    /// How long to keep the run after it ends, in milliseconds; `None` keeps it.
    #[serde(default)]
    pub keep_alive_ms: Option<u64>,
}

/// How the supervisor launches the process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct CommandSpec {
    /// The argv; the first element is the program.
    pub argv: Vec<String>,
    /// Variables set for the process (fixed ones from the target, the arguments
    /// and the `TASKGATE_*` paths).
    pub env: BTreeMap<String, String>,
    /// Names of variables passed through from the supervisor's own environment.
    pub pass_env: Vec<String>,
    /// The working folder, if configured.
    pub working_dir: Option<PathBuf>,
    /// How many bytes of each output stream to keep.
    pub tail_bytes: usize,
    /// How long a cancelled process gets between SIGTERM and SIGKILL, in ms.
    pub grace_ms: u64,
    /// The user and group the process runs as; `None`: the supervisor's own.
    #[serde(default)]
    pub run_as: Option<crate::config::RunAs>,
}

/// A process identity: a pid is reused by the kernel, the pair is not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ProcRecord {
    /// The process id.
    pub pid: i32,
    /// Field 22 of `/proc/<pid>/stat`: start time in clock ticks since boot.
    pub start_time: u64,
}

/// How the process ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub(crate) struct ExitRecord {
    /// The exit code, when it exited.
    #[serde(default)]
    pub code: Option<i32>,
    /// The signal that killed it, when one did.
    #[serde(default)]
    pub signal: Option<i32>,
    /// Why it could not be started, when it could not.
    #[serde(default)]
    pub error: Option<String>,
    /// When the supervisor saw it end, in milliseconds since the Unix epoch.
    pub ended_at_ms: u64,
}

/// What the process may write to `TASKGATE_STATUS_FILE`.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
pub(crate) struct StatusFile {
    /// A short human-readable status.
    #[serde(default)]
    pub message: Option<String>,
    /// Units done so far.
    #[serde(default)]
    pub progress: Option<f64>,
    /// Units in all.
    #[serde(default)]
    pub total: Option<f64>,
}

/// Milliseconds since the Unix epoch.
pub(crate) fn to_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The mtime `input/` is made with: no entry was ever created in (or removed
/// from) a folder that still has it.
pub(crate) const UNWRITTEN: SystemTime = UNIX_EPOCH;

/// Gives the folder `dir` the mtime [`UNWRITTEN`]. Done before anything may
/// write into it.
///
/// # Errors
///
/// The system's error when the folder cannot be opened or its times set.
pub(crate) fn mark_unwritten(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.set_modified(UNWRITTEN)
}

/// The time `ms` milliseconds after the Unix epoch.
pub(crate) fn from_ms(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

/// The mode of taskgate's own records: readable by the server's user alone.
pub(crate) const PRIVATE: u32 = 0o600;
/// The mode of what a process running as another user must read (its
/// arguments, its answers): also readable by the run folder's group.
pub(crate) const SHARED: u32 = 0o640;

/// Writes `bytes` to `dir/name` whole (mode [`PRIVATE`]): to a temporary file
/// in the same folder, then renamed over the target.
pub(crate) fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    write_atomic_mode(dir, name, bytes, PRIVATE)
}

/// Creates the new file `path` with `mode`; never opens an existing one (nor
/// follows a symbolic link someone put in its place).
fn create_new(path: &Path, mode: u32) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
}

/// [`write_atomic`] with the file's `mode`.
pub(crate) fn write_atomic_mode(
    dir: &Path,
    name: &str,
    bytes: &[u8],
    mode: u32,
) -> std::io::Result<()> {
    let tmp = temp_name(dir, name);
    let outcome = (|| {
        let mut file = create_new(&tmp, mode)?;
        file.write_all(bytes)?;
        file.sync_data()?;
        std::fs::rename(&tmp, dir.join(name))
    })();
    if outcome.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    outcome
}

/// Writes `bytes` to `dir/name` whole (mode [`SHARED`]: the answers a
/// process reads), failing with `AlreadyExists` when the target exists (a hard
/// link of a complete temporary file never replaces).
pub(crate) fn write_exclusive(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = temp_name(dir, name);
    let outcome = (|| {
        let mut file = create_new(&tmp, SHARED)?;
        file.write_all(bytes)?;
        file.sync_data()?;
        std::fs::hard_link(&tmp, dir.join(name))
    })();
    let _ = std::fs::remove_file(&tmp);
    outcome
}

fn temp_name(dir: &Path, name: &str) -> PathBuf {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    dir.join(format!(".{name}.{}.{nanos}.tmp", std::process::id()))
}

/// Serializes `value` and writes it with [`write_atomic`].
pub(crate) fn write_json<T: Serialize>(dir: &Path, name: &str, value: &T) -> std::io::Result<()> {
    let bytes = serde_json::to_vec(value).map_err(std::io::Error::other)?;
    write_atomic(dir, name, &bytes)
}

/// Opens `path` for reading without following a symbolic link and without
/// blocking on a FIFO, and only if it is a regular file with a single link (a
/// process running as another user cannot make taskgate read a file it could
/// not read itself). Returns the file and its size.
///
/// # Errors
///
/// The system's error; `InvalidData` for anything but a regular file with one
/// link.
pub(crate) fn open_plain(path: &Path) -> std::io::Result<(std::fs::File, u64)> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc_flags())
        .open(path)?;
    let size = plain_size(&file)?;
    Ok((file, size))
}

/// The flags every read of a run folder's files adds: no symbolic link
/// followed, no wait on a FIFO.
pub(crate) fn libc_flags() -> i32 {
    (nix::fcntl::OFlag::O_NOFOLLOW | nix::fcntl::OFlag::O_NONBLOCK).bits()
}

/// The size of `file` if it is a regular file with one link.
///
/// # Errors
///
/// `InvalidData` for anything else.
pub(crate) fn plain_size(file: &std::fs::File) -> std::io::Result<u64> {
    use std::os::unix::fs::MetadataExt;
    let meta = file.metadata()?;
    if !meta.file_type().is_file() || meta.nlink() != 1 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "not a regular file with a single link",
        ));
    }
    Ok(meta.len())
}

/// Reads a file whole with the fewest system calls: open, read to the end,
/// close. Unlike `std::fs::read` (and `File::read_to_end`) it does not ask for
/// the size first: the spool's records are small, and `/proc` files have none.
/// Reading through `take` keeps the size question away and reads into the
/// buffer's spare capacity without zeroing it first.
pub(crate) fn read_small(path: &Path) -> std::io::Result<Vec<u8>> {
    let file = std::fs::File::open(path)?;
    let mut bytes = Vec::with_capacity(4096);
    file.take(u64::MAX).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Reads and parses `path`; `Ok(None)` when it does not exist.
pub(crate) fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> std::io::Result<Option<T>> {
    match read_small(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// True for a run name taskgate may have produced: `[a-z][a-z0-9-]{0,63}`.
/// Anything else never becomes a path.
pub(crate) fn valid_run_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some('a'..='z'))
        && name.len() <= 64
        && chars.all(|c| matches!(c, 'a'..='z' | '0'..='9' | '-'))
}

/// True for an input key a process may use: `[A-Za-z0-9_-]{1,64}`.
pub(crate) fn valid_input_key(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= 64
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(valid_run_name("tg-abc123"));
        assert!(!valid_run_name("../etc"));
        assert!(!valid_run_name("Abc"));
        assert!(!valid_run_name(""));
        assert!(!valid_run_name("a/b"));
        assert!(valid_input_key("approve_1-x"));
        assert!(!valid_input_key("a.b"));
        assert!(!valid_input_key(""));
    }

    #[test]
    fn tail_headers() {
        let cases: [(&[u8], u64, &[u8]); 5] = [
            (b"tg-tail 0\nhello", 0, b"hello"),
            (b"tg-tail 123456\n", 123_456, b""),
            (b"plain output", 0, b"plain output"),
            (b"tg-tail x\nrest", 0, b"tg-tail x\nrest"),
            (b"tg-tail 12", 0, b"tg-tail 12"),
        ];
        for (file, start, body) in cases {
            assert_eq!(tail_header(file).0, start, "{file:?}");
            assert_eq!(tail_body(file), body, "{file:?}");
        }
        let record = tail_record(u64::MAX, b"x");
        assert_eq!(tail_header(&record), (u64::MAX, record.len() - 1));
    }

    #[test]
    fn writes_are_private_and_reads_refuse_links() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let mode = |name: &str| {
            std::fs::metadata(dir.path().join(name))
                .unwrap()
                .permissions()
                .mode()
                & 0o777
        };
        write_atomic(dir.path(), "r", b"{}").unwrap();
        assert_eq!(mode("r"), 0o600);
        write_exclusive(dir.path(), "a", b"{}").unwrap();
        assert_eq!(mode("a"), 0o640);
        assert_eq!(open_plain(&dir.path().join("r")).unwrap().1, 2);
        std::os::unix::fs::symlink("/etc/passwd", dir.path().join("s")).unwrap();
        assert!(open_plain(&dir.path().join("s")).is_err());
        std::fs::hard_link(dir.path().join("r"), dir.path().join("h")).unwrap();
        assert!(open_plain(&dir.path().join("h")).is_err());
        nix::unistd::mkfifo(&dir.path().join("f"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        assert!(open_plain(&dir.path().join("f")).is_err());
    }

    #[test]
    fn exclusive_write_never_replaces() {
        let dir = tempfile::tempdir().unwrap();
        write_exclusive(dir.path(), "x", b"1").unwrap();
        let err = write_exclusive(dir.path(), "x", b"2").unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::AlreadyExists);
        assert_eq!(std::fs::read(dir.path().join("x")).unwrap(), b"1");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
