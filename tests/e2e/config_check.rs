//! `taskgate check-config` (and `serve`) on a file with several independent
//! mistakes: every one is reported, each naming the file and its key path, and
//! the command exits 2 before anything is served.

use std::process::Command;

fn run(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_taskgate"))
        .args(args)
        .env_remove("TASKGATE_CONFIG")
        .output()
        .expect("run taskgate");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const KEYS: &str =
    "[keys]\nseal = [{ id = \"k1\", dev_secret = \"vTRHpl+4/0UG9wvp1uo+C+txdKTR6CE3YmN6dm9cBTQ=\" }]\n";

#[test]
fn three_independent_mistakes_are_all_reported() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("three.toml");
    // 1. a tool naming an engine that does not exist; 2. a poll interval of
    // zero on another tool; 3. an exec engine setting out of range.
    let text = format!(
        "{KEYS}
[engines.local]
kind = \"exec\"
tail_bytes = 0

[[tools]]
name = \"a\"
engine = \"nowhere\"
target = {{ command = [\"/bin/true\"] }}

[[tools]]
name = \"b\"
engine = \"local\"
poll_interval = \"0s\"
target = {{ command = [\"/bin/true\"] }}
"
    );
    std::fs::write(&path, text).unwrap();
    let file = path.display().to_string();
    for command in ["check-config", "serve"] {
        let (code, _stdout, stderr) = run(&[command, "--config", &file]);
        assert_eq!(code, Some(2), "{command}: {stderr}");
        assert!(stderr.contains("3 config errors"), "{command}: {stderr}");
        for key in [
            "tools[0].engine",
            "tools[1].poll_interval",
            "engines.local.tail_bytes",
        ] {
            let line = stderr
                .lines()
                .find(|l| l.contains(key))
                .unwrap_or_else(|| panic!("{command}: {key} is not reported: {stderr}"));
            assert!(line.contains(&file), "{command}: the file is named: {line}");
        }
    }
}

#[test]
fn two_mistakes_of_one_tool_are_both_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("one.toml");
    std::fs::write(
        &path,
        format!("{KEYS}[[tools]]\nname = \"a b\"\nengine = \"nowhere\"\n"),
    )
    .unwrap();
    let (code, _, stderr) = run(&["check-config", "--config", &path.display().to_string()]);
    assert_eq!(code, Some(2), "{stderr}");
    // The bad name and the unknown engine of the same tool are both named.
    assert!(stderr.contains("tools[0].name"), "{stderr}");
    assert!(stderr.contains("tools[0].engine"), "{stderr}");
}

#[test]
fn server_bounds_of_zero_are_each_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("zeros.toml");
    let text = format!(
        "{KEYS}
[server]
workers = 0
max_batch = 0
header_read_timeout = \"0s\"
"
    );
    std::fs::write(&path, text).unwrap();
    let file = path.display().to_string();
    let (code, _stdout, stderr) = run(&["check-config", "--config", &file]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("3 config errors"), "{stderr}");
    for (key, why) in [
        ("server.workers", "at least 1"),
        ("server.max_batch", "at least 1"),
        ("server.header_read_timeout", "longer than 0s"),
    ] {
        let line = stderr
            .lines()
            .find(|l| l.contains(key))
            .unwrap_or_else(|| panic!("{key} is not reported: {stderr}"));
        assert!(line.contains(&file) && line.contains(why), "{line}");
    }
}
