//! What the file operations of one exec poll cost on this machine's kernel:
//! each kind the spool read makes, timed in a loop on a run-shaped folder.
//!
//! ```text
//! cargo run --release --example spool_cost            # 100,000 rounds each
//! cargo run --release --example spool_cost -- 20000
//! ```
//!
//! Prints nanoseconds per operation. The exec read of a running task makes,
//! through one descriptor of its run folder: the folder's open and close, two
//! records opened, read and closed (meta, pid), two opens of files that are not
//! there (exit, status), a stat of one more (cancelled), a stat of `input/`, an
//! fstat of the folder, and one `/proc/<pid>/stat` read.

use std::fs::File;
use std::hint::black_box;
use std::io::Read;
use std::time::Instant;

fn time(label: &str, rounds: u32, mut op: impl FnMut()) {
    let start = Instant::now();
    for _ in 0..rounds {
        op();
    }
    let ns = start.elapsed().as_nanos() / u128::from(rounds);
    println!("{label:<44} {ns:>7} ns");
}

fn main() -> std::io::Result<()> {
    let rounds: u32 = std::env::args()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(100_000);
    let run = tempfile::tempdir()?;
    let dir = run.path();
    std::fs::create_dir(dir.join("input"))?;
    std::fs::write(dir.join("pid.json"), br#"{"pid":1234,"start_time":5678}"#)?;
    let record = dir.join("pid.json");
    let missing = dir.join("exit.json");
    let input = dir.join("input");
    let stat = format!("/proc/{}/stat", std::process::id());
    let mut buffer = vec![0u8; 2048];

    println!("{rounds} rounds each, on {}", dir.display());
    time(
        "a bare system call (getpid; glibc does not cache it)",
        rounds,
        || {
            black_box(std::process::id());
        },
    );
    time("record: open, read, close", rounds, || {
        let mut file = File::open(&record).expect("record");
        black_box(file.read(&mut buffer).expect("read"));
    });
    time("open of a file that is not there", rounds, || {
        black_box(File::open(&missing).is_err());
    });
    time("stat of a file that is not there", rounds, || {
        black_box(std::fs::symlink_metadata(&missing).is_err());
    });
    time("stat of a folder", rounds, || {
        black_box(std::fs::symlink_metadata(&input).is_ok());
    });
    time("folder: open, close", rounds, || {
        black_box(File::open(dir).expect("folder"));
    });
    time(
        "list an empty folder (open, 2 reads, close)",
        rounds,
        || {
            black_box(std::fs::read_dir(&input).expect("input").count());
        },
    );
    time("/proc/<pid>/stat: open, read, close", rounds, || {
        let mut file = File::open(&stat).expect("stat");
        black_box(file.read(&mut buffer).expect("read"));
    });
    Ok(())
}
