//! Item 2: exec tools never see taskgate's secrets; item 10 (exec): the spool
//! folder is checked before use, and `result.json` is read with a cap.
//!
//! The attacker is the tool's program (or whoever wrote it, or an argument that
//! steers it): it reads what its parent process and its own environment hold,
//! and, run as another user, what it can reach of the server and the spool. A
//! second one is another local user who made the spool folder writable to all,
//! or a tool that leaves a gigabyte as its result.

use std::io::Write as _;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::{json, Value};

use crate::common::{self, toml_str, tool_entry, wait_for, Server, Setup, KEY_SECRET};

const LONG: Duration = Duration::from_secs(30);

/// A secret-like variable of the server's environment (a cloud credential).
const CLOUD_VAR: &str = "AWS_SECRET_ACCESS_KEY";
const CLOUD_SECRET: &str = "wJalrXUtnFEMI-K7MDENG-bPxRfiCY-exec-env-secret";

/// The unprivileged user a `run_as` tool runs as (nobody:nogroup).
const NOBODY: u32 = 65534;

/// An exec setup (engine `local`, no tools yet) with `tools` appended to its
/// configuration and the cloud secret in the server's environment.
fn setup_with(tools: impl FnOnce(&Setup) -> String) -> Setup {
    let mut setup = Setup::with_tools(&[]);
    let text = tools(&setup);
    std::fs::OpenOptions::new()
        .append(true)
        .open(&setup.config)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .expect("append to the config");
    setup
        .extra_env
        .push((CLOUD_VAR.to_owned(), CLOUD_SECRET.to_owned()));
    setup
}

/// `target = { command = [SCRIPT] , EXTRA }` for a script in `tests/tools/`.
fn script_target(script: &str, extra: &str) -> String {
    format!(
        "command = [{}]{}",
        toml_str(&common::tool_script(script)),
        common::more_fields(extra)
    )
}

/// `target = { command = [COPY] , EXTRA }` for a copy of a script of
/// `tests/tools/` in the setup's folder, which is opened to other users (0711,
/// so they also reach the spool below it, which itself stays unlistable):
/// a `run_as` user reaches it wherever the checkout lies.
fn shared_script_target(setup: &Setup, script: &str, extra: &str) -> String {
    std::fs::set_permissions(setup.dir.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    let copy = setup.dir.path().join(script);
    std::fs::copy(common::tool_script(script), &copy).unwrap();
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755)).unwrap();
    format!(
        "command = [{}]{}",
        toml_str(&copy),
        common::more_fields(extra)
    )
}

/// Every regular file under `dir`.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(files_under(&path));
        } else {
            out.push(path);
        }
    }
    out
}

/// True when the test process runs as root (the owner of `/proc/self` is the
/// effective user).
fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// True when the test may go on as root; otherwise it is skipped, or fails
/// under `TASKGATE_REQUIRE_E2E=1` (CI runs as root).
fn root_or_skip(why: &str) -> bool {
    if is_root() {
        return true;
    }
    assert!(
        std::env::var("TASKGATE_REQUIRE_E2E").as_deref() != Ok("1"),
        "{why} needs root (TASKGATE_REQUIRE_E2E=1)"
    );
    eprintln!("skipping: {why} needs root");
    false
}

#[tokio::test]
async fn a_tool_finds_no_secret_of_the_server_in_its_parent_its_environment_or_the_spool() {
    let setup = setup_with(|_| {
        tool_entry(
            "dump_env",
            "dumps what it can see",
            "local",
            "{ type = \"object\" }",
            &script_target("dump_env.sh", ""),
        )
    });
    let server = Server::start(&setup).await;
    let client = server.client();
    let task = client.start_task("dump_env", json!({})).await;
    let done = client.wait_terminal(&task, LONG).await;
    assert_eq!(done["result"]["isError"], false, "{done}");

    let run = setup.only_run();
    let read = |name: &str| std::fs::read_to_string(run.join(name)).expect(name);
    // The parent it read is its supervisor, the process taskgate started.
    let supervisor: Value = serde_json::from_str(&read("supervisor.json")).unwrap();
    assert_eq!(
        read("parent-pid").trim(),
        supervisor["pid"].to_string(),
        "the tool's parent is its supervisor"
    );
    let parent = read("parent-env");
    let own = read("own-env");
    assert!(!parent.is_empty(), "the supervisor's environ was read");
    for (what, text) in [("the supervisor's", &parent), ("its own", &own)] {
        assert!(
            !text.contains(KEY_SECRET),
            "the seal key is in {what} environment:\n{text}"
        );
        assert!(
            !text.contains(CLOUD_SECRET),
            "{CLOUD_VAR} is in {what} environment:\n{text}"
        );
        assert!(
            !text.lines().any(|l| l.starts_with("HOME=")),
            "HOME is passed by default ({what} environment):\n{text}"
        );
    }
    // What it needs is there: PATH (passed) and its own TASKGATE_ paths.
    assert!(own.lines().any(|l| l.starts_with("PATH=")), "{own}");
    assert!(own.contains("TASKGATE_RESULT_FILE="), "{own}");
    // No file of the spool (which the tool can read as the same user) holds a
    // secret value.
    for file in files_under(&setup.spool) {
        let bytes = std::fs::read(&file).unwrap_or_default();
        let text = String::from_utf8_lossy(&bytes);
        assert!(
            !text.contains(KEY_SECRET) && !text.contains(CLOUD_SECRET),
            "{} holds a secret",
            file.display()
        );
    }
}

#[tokio::test]
async fn a_tool_run_as_another_user_cannot_read_the_server_nor_the_spool() {
    if !root_or_skip("run_as (setuid to 65534)") {
        return;
    }
    let schema = "{ type = \"object\", properties = { server_pid = { type = \"integer\" }, other_run = { type = \"string\" } } }";
    let setup = setup_with(|setup| {
        tool_entry(
            "dump_env",
            "dumps what it can see",
            "local",
            "{ type = \"object\" }",
            &script_target("dump_env.sh", ""),
        ) + &tool_entry(
            "probe",
            "what another user can reach",
            "local",
            schema,
            &shared_script_target(
                setup,
                "run_as_probe.sh",
                &format!("run_as = \"{NOBODY}:{NOBODY}\""),
            ),
        ) + &tool_entry(
            "ask_as",
            "asks a question as another user",
            "local",
            common::LABEL_SCHEMA,
            &shared_script_target(setup, "ask.sh", &format!("run_as = \"{NOBODY}:{NOBODY}\"")),
        )
    });
    let server = Server::start(&setup).await;
    let client = server.client();

    // A run of the server's own user first: the probe must not get into it.
    let first = client.start_task("dump_env", json!({})).await;
    client.wait_terminal(&first, LONG).await;
    let other = setup.only_run();
    let other_name = other.file_name().unwrap().to_string_lossy().into_owned();

    let task = client
        .start_task(
            "probe",
            json!({ "server_pid": server.pid(), "other_run": other_name }),
        )
        .await;
    let done = client.wait_terminal(&task, LONG).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["result"]["isError"], false, "{done}");
    let seen = &done["result"]["structuredContent"];
    assert_eq!(seen["uid"], NOBODY, "runs as the run_as user: {seen}");
    assert_eq!(seen["gid"], NOBODY, "{seen}");
    assert_eq!(
        seen["groups"],
        NOBODY.to_string(),
        "no supplementary group kept: {seen}"
    );
    for (key, what) in [
        ("server_environ", "the server's /proc/PID/environ"),
        ("parent_environ", "the supervisor's /proc/PID/environ"),
        ("command", "the run's command.json"),
        ("meta", "the run's meta.json"),
        ("pid", "the run's pid.json"),
        ("replace_meta", "replacing the run's meta.json"),
        ("list_spool", "listing the spool"),
        ("other_run", "another run's folder"),
    ] {
        assert_eq!(seen[key], false, "{what} must be out of reach: {seen}");
    }
    assert_eq!(seen["args"], true, "it reads its own arguments: {seen}");
    // Separated, it still works: it asks (a request in the shared input
    // folder), reads the answer taskgate writes, and leaves its result.
    let asking = client.start_task("ask_as", json!({ "label": "v9" })).await;
    client.until_status(&asking, "input_required", LONG).await;
    let ack = client
        .update(
            &asking,
            json!({ "approve": { "action": "accept", "content": { "ok": true } } }),
        )
        .await;
    assert_eq!(ack.status, 200, "{}", ack.raw);
    let answered = client.wait_terminal(&asking, LONG).await;
    assert_eq!(answered["result"]["isError"], false, "{answered}");
    assert_eq!(
        answered["result"]["structuredContent"]["answer"]["content"],
        json!({ "ok": true }),
        "{answered}"
    );

    // The result it wrote is its own; taskgate's records stay taskgate's.
    let probe_run = setup
        .runs_of("probe")
        .pop()
        .expect("the probe's run folder");
    use std::os::unix::fs::MetadataExt;
    for name in ["meta.json", "command.json", "pid.json", "exit.json"] {
        let meta = std::fs::metadata(probe_run.join(name)).unwrap();
        assert_eq!(meta.uid(), 0, "{name}");
        assert_eq!(meta.mode() & 0o077, 0, "{name} is private");
    }
}

#[tokio::test]
async fn a_world_writable_spool_folder_is_refused_by_check_config_and_serve() {
    let setup = setup_with(|_| {
        tool_entry(
            "dump_env",
            "dumps what it can see",
            "local",
            "{ type = \"object\" }",
            &script_target("dump_env.sh", ""),
        )
    });
    // Another local user made (or opened) the spool folder for everyone.
    std::fs::create_dir(&setup.spool).unwrap();
    std::fs::set_permissions(&setup.spool, std::fs::Permissions::from_mode(0o777)).unwrap();
    let config = setup.config.to_string_lossy().into_owned();

    let out = setup
        .command(&["check-config", "--config", &config])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "check-config accepted it: {said}");
    assert!(
        said.contains("spool_dir") && said.contains("writable by group or others"),
        "{said}"
    );

    let mut serve = setup
        .command(&["serve", "--config", &config, "--listen", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status = wait_for("serve to refuse the spool", LONG, async || {
        serve.try_wait().ok().flatten()
    })
    .await;
    let _ = serve.kill();
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut serve.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(!status.success(), "{stderr}");
    assert!(stderr.contains("writable by group or others"), "{stderr}");
    // Nothing was created in it.
    assert!(setup.spool_has_no_files());

    // Owned by another user (root can make that), it is refused too.
    if is_root() {
        std::fs::set_permissions(&setup.spool, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::os::unix::fs::chown(&setup.spool, Some(NOBODY), Some(NOBODY)).unwrap();
        let out = setup
            .command(&["check-config", "--config", &config])
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{said}");
        assert!(said.contains(&format!("owned by uid {NOBODY}")), "{said}");
    }
}

/// Starts `tool` of `setup`, waits for its end and checks that it is a tool
/// error naming the cap `cap` and the result's `size`, and that later polls
/// answer at once (the file is never read).
async fn assert_result_refused(setup: &Setup, tool: &str, size: &str, cap: &str) {
    let server = Server::start(setup).await;
    let client = server.client();
    let task = client.start_task(tool, json!({})).await;
    let done = client.wait_terminal(&task, LONG).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["result"]["isError"], true, "{done}");
    let text = common::text(&done["result"]);
    assert!(
        text.contains("max_result_bytes") && text.contains(cap) && text.contains(size),
        "the error names the cap {cap} and the size {size}: {text}"
    );
    let started = std::time::Instant::now();
    for _ in 0..5 {
        let again = client.get(&task).await;
        assert_eq!(again["result"]["isError"], true, "{again}");
    }
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "five polls took {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_gigabyte_result_is_not_read_and_the_error_names_the_default_cap() {
    let setup = setup_with(|_| {
        tool_entry(
            "gigabyte",
            "leaves a 1 GiB result",
            "local",
            "{ type = \"object\" }",
            &script_target("big_result.sh", ""),
        )
    });
    assert_result_refused(&setup, "gigabyte", "1073741824", "4194304").await;
}

#[tokio::test]
async fn the_result_cap_is_an_engine_setting() {
    let setup = setup_with(|setup| {
        format!(
            "[engines.capped]\nkind = \"exec\"\nspool_dir = {}\nmax_result_bytes = 4096\n\n",
            toml_str(&setup.dir.path().join("spool-capped"))
        ) + &tool_entry(
            "eight_k",
            "leaves an 8 KiB result",
            "capped",
            "{ type = \"object\" }",
            &format!(
                "command = [{}, \"8K\"]",
                toml_str(&common::tool_script("big_result.sh"))
            ),
        )
    });
    assert_result_refused(&setup, "eight_k", "8192", "4096").await;
}

#[tokio::test]
async fn a_run_as_tool_cannot_make_taskgate_read_a_file_for_it() {
    if !root_or_skip("run_as (setuid to 65534)") {
        return;
    }
    let schema = "{ type = \"object\", properties = { target = { type = \"string\" } } }";
    let setup = setup_with(|setup| {
        tool_entry(
            "link",
            "links its result to another file",
            "local",
            schema,
            &shared_script_target(
                setup,
                "link_result.sh",
                &format!("run_as = \"{NOBODY}:{NOBODY}\""),
            ),
        )
    });
    // A file only the server's user may read, and valid JSON.
    let private = setup.dir.path().join("private.json");
    std::fs::write(&private, r#"{"secret": "only-root-reads-this"}"#).unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o600)).unwrap();

    let server = Server::start(&setup).await;
    let client = server.client();
    let task = client
        .start_task("link", json!({ "target": private.display().to_string() }))
        .await;
    let done = client.wait_terminal(&task, LONG).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["result"]["isError"], true, "{done}");
    assert!(
        !done.to_string().contains("only-root-reads-this"),
        "taskgate read a file for the tool: {done}"
    );
}
