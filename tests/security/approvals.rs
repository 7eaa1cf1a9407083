//! Item 4: approvals are given by someone allowed to approve.
//!
//! Stands where the starter of a run stands (approving their own run, or
//! approving inside the call that started it) and where another caller stands
//! (one the tool's `answer_access` does not admit, or one holding only a task
//! handle that is not theirs), and asserts each refusal through the built
//! binary, with exec tools that ask through their request file:
//!
//! - `deploy` (async, `ask.sh`): its question `approve` is marked an approval
//!   (`approval_inputs`), `four_eyes` is on; alice and carol may call it,
//!   alice and bob may answer it (`answer_access`);
//! - `gate` (hybrid, `ask.sh`, `input_wait`): an approval without four eyes;
//! - `form` (hybrid, `ask_form.sh`, `input_wait`): an ordinary question, still
//!   answered inside the creating call (MRTR).

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{json, Value};

use crate::common::{
    self, toml_str, tool_script, wait_for, Bearer, Client, Options, Server, Setup, LABEL_SCHEMA,
};

const LIMIT: Duration = Duration::from_secs(30);

fn tool(name: &str, mode: &str, script: &str, extra: &str) -> String {
    format!(
        "[[tools]]\nname = \"{name}\"\ndescription = \"test tool {name}\"\nengine = \"local\"\n\
         mode = \"{mode}\"\npoll_interval = \"200ms\"\nkeep_alive = \"1h\"\n\
         input_schema = {LABEL_SCHEMA}\ntarget = {{ command = [{}] }}\n{extra}\n",
        toml_str(&tool_script(script))
    )
}

struct Fixture {
    setup: Setup,
    server: Server,
}

impl Fixture {
    async fn start() -> Self {
        let deploy = tool(
            "deploy",
            "async",
            "ask.sh",
            "approval_inputs = [\"approve\"]\nfour_eyes = true\n\
             access = [{ callers = [\"alice\", \"carol\"] }]\n\
             answer_access = [{ callers = [\"alice\", \"bob\"] }]",
        );
        let gate = tool(
            "gate",
            "hybrid",
            "ask.sh",
            "approval_inputs = [\"approve\"]\ninput_wait = \"20s\"\nmax_wait = \"20s\"",
        );
        let form = tool("form", "hybrid", "ask_form.sh", "input_wait = \"20s\"");
        let setup = Setup::with(Options {
            bearer: vec![
                Bearer::new("alice"),
                Bearer::new("bob"),
                Bearer::new("carol"),
            ],
            extra: format!("{deploy}{gate}{form}"),
            ..Options::default()
        });
        let server = setup.server().await;
        Self { setup, server }
    }

    fn as_(&self, who: &str) -> Client {
        self.server.client().with_token(&Bearer::new(who).token)
    }

    /// Every answer file the exec engine wrote into the spool (an answer that
    /// reached the run).
    fn answers_delivered(&self) -> Vec<PathBuf> {
        fn walk(dir: &std::path::Path, out: &mut Vec<PathBuf>) {
            for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                let path = entry.path();
                if path.is_dir() {
                    walk(&path, out);
                } else if path.to_string_lossy().ends_with(".response.json") {
                    out.push(path);
                }
            }
        }
        let mut out = Vec::new();
        walk(&self.setup.spool, &mut out);
        out
    }

    /// The audit events the server wrote so far, without terminal colours.
    fn audit(&self) -> Vec<String> {
        self.server
            .stderr_text()
            .lines()
            .filter(|l| l.contains("taskgate::audit"))
            .map(plain)
            .collect()
    }
}

/// `line` without its ANSI colour sequences (`ESC [ … m`).
fn plain(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn accept() -> Value {
    json!({ "action": "accept", "content": { "ok": true } })
}

/// The approval ticket an input request carries, if any.
fn ticket_of(request: &Value) -> Option<String> {
    request["params"]["_meta"]["taskgate/approval"]["ticket"]
        .as_str()
        .map(str::to_owned)
}

/// A 2026-07-28 `tools/call` declaring form elicitation but not the tasks
/// extension (a synchronous call that takes questions).
async fn sync_call(client: &Client, mut params: Value) -> common::Reply {
    params["_meta"] = common::modern_meta(false);
    params["_meta"]["io.modelcontextprotocol/clientCapabilities"] =
        json!({ "elicitation": { "form": {} } });
    let headers = Client::headers_for("tools/call", &params);
    let id = client.next_id();
    let body = json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params });
    client.post_raw(&headers, body.to_string()).await
}

#[track_caller]
fn assert_refused(reply: &common::Reply, words: &str) {
    assert_eq!(reply.status, 403, "{}", reply.raw);
    assert_eq!(reply.error()["code"], -32602, "{}", reply.raw);
    assert!(reply.message().contains(words), "{}", reply.raw);
}

/// With four eyes, the caller who started a run cannot approve it (neither
/// through its task handle nor with the ticket); a caller who may call the
/// tool but whom `answer_access` does not admit cannot either; the approver
/// cannot open the starter's task, yet approves with the ticket, and the
/// audit trail names both.
#[tokio::test]
async fn four_eyes_keep_the_starter_from_approving_and_let_an_allowed_approver_in() {
    let f = Fixture::start().await;
    let alice = f.as_("alice");
    let bob = f.as_("bob");
    let carol = f.as_("carol");
    let task = alice.start_task("deploy", json!({ "label": "prod" })).await;
    let asked = alice.until_status(&task, "input_required", LIMIT).await;
    let request = &asked["inputRequests"]["approve"];
    assert_eq!(
        request["params"]["_meta"]["taskgate/approval"]["fourEyes"], true,
        "{asked}"
    );
    let ticket = ticket_of(request).unwrap_or_else(|| panic!("no approval ticket: {asked}"));

    // The starter, through the task handle: refused, nothing forwarded.
    let own = alice.update(&task, json!({ "approve": accept() })).await;
    assert_refused(&own, "four eyes");
    // The starter, with the ticket: refused alike.
    let own = alice.update(&ticket, json!({ "approve": accept() })).await;
    assert_refused(&own, "four eyes");
    // A caller of the tool whom answer_access does not admit: refused.
    let stranger = carol.update(&ticket, json!({ "approve": accept() })).await;
    assert_refused(&stranger, "Not allowed");
    assert!(
        f.answers_delivered().is_empty(),
        "a refused answer reached the run: {:?}",
        f.answers_delivered()
    );
    assert_eq!(alice.get(&task).await["status"], "input_required");

    // The approver cannot open the starter's task handle: the binding holds.
    let foreign = bob.get_reply(&task).await;
    assert_eq!(foreign.error()["code"], -32602, "{}", foreign.raw);
    assert!(foreign.message().contains("not found"), "{}", foreign.raw);
    // The ticket shows the approver the one question, not the run's result.
    let seen = bob.get(&ticket).await;
    assert_eq!(seen["status"], "input_required", "{seen}");
    assert_eq!(
        seen["inputRequests"]["approve"]["params"]["message"], "Deploy prod?",
        "{seen}"
    );
    // A ticket altered by one character opens nothing.
    let mut forged = ticket.clone().into_bytes();
    let at = forged.len() - 4;
    forged[at] = if forged[at] == b'A' { b'B' } else { b'A' };
    let forged = String::from_utf8(forged).unwrap();
    let nothing = bob.update(&forged, json!({ "approve": accept() })).await;
    assert_eq!(nothing.error()["code"], -32602, "{}", nothing.raw);
    assert!(f.answers_delivered().is_empty());

    // The approver answers with the ticket: the run goes on.
    let approved = bob.update(&ticket, json!({ "approve": accept() })).await;
    assert_eq!(approved.status, 200, "{}", approved.raw);
    assert_eq!(
        approved.result()["resultType"],
        "complete",
        "{}",
        approved.raw
    );
    let done = alice.wait_terminal(&task, LIMIT).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(
        done["result"]["structuredContent"]["answer"]["content"]["ok"], true,
        "{done}"
    );

    // The audit trail: who started, who approved, who was refused and why.
    let audit = wait_for("the approval's audit event", LIMIT, async || {
        let audit = f.audit();
        let approved = audit.iter().any(|l| {
            l.contains("action=\"answer\"")
                && l.contains("caller=\"bob\"")
                && l.contains("starter=\"alice\"")
                && l.contains("approver=\"bob\"")
                && l.contains("outcome=\"ok\"")
        });
        if approved {
            Ok(audit)
        } else {
            Err(audit.join("\n"))
        }
    })
    .await;
    let refused = |caller: &str, reason: &str| {
        audit.iter().any(|l| {
            l.contains("action=\"answer\"")
                && l.contains(&format!("caller=\"{caller}\""))
                && l.contains("starter=\"alice\"")
                && l.contains("outcome=\"refused\"")
                && l.contains(&format!("reason=\"{reason}\""))
        })
    };
    assert!(refused("alice", "four_eyes"), "{}", audit.join("\n"));
    assert!(refused("carol", "access_rule"), "{}", audit.join("\n"));
    for line in &audit {
        assert!(
            !line.contains(&ticket),
            "a ticket in the audit trail: {line}"
        );
    }
}

/// An approval answered inside the `tools/call` that started the run (the
/// MRTR retry carrying `inputResponses`) is refused and reaches nothing; a
/// task-capable call is not offered the approval at all: it gets its task,
/// whose approval someone answers later.
#[tokio::test]
async fn an_approval_is_not_taken_inside_the_creating_call() {
    let f = Fixture::start().await;
    let alice = f.as_("alice");
    // A synchronous caller (elicitation, no tasks extension): the question
    // comes back as input_required, with its ticket.
    let first = sync_call(
        &alice,
        json!({ "name": "gate", "arguments": { "label": "prod" } }),
    )
    .await;
    assert_eq!(first.status, 200, "{}", first.raw);
    let result = first.result().clone();
    assert_eq!(result["resultType"], "input_required", "{result}");
    assert!(
        ticket_of(&result["inputRequests"]["approve"]).is_some(),
        "{result}"
    );
    let retry = sync_call(
        &alice,
        json!({
            "name": "gate",
            "arguments": { "label": "prod" },
            "inputResponses": { "approve": accept() },
            "requestState": result["requestState"],
        }),
    )
    .await;
    assert_refused(&retry, "inside the call");
    assert!(
        f.answers_delivered().is_empty(),
        "an in-call approval reached the run: {:?}",
        f.answers_delivered()
    );

    // A task-capable call: no input_required round trip for an approval, the
    // task is created, and its approval is answered afterwards.
    let call = alice.call("gate", json!({ "label": "staging" })).await;
    assert_eq!(call.status, 200, "{}", call.raw);
    assert_eq!(call.result()["resultType"], "task", "{}", call.raw);
    let task = call.result()["taskId"].as_str().unwrap().to_owned();
    let asked = alice.until_status(&task, "input_required", LIMIT).await;
    assert!(
        ticket_of(&asked["inputRequests"]["approve"]).is_some(),
        "{asked}"
    );
    let later = alice.update(&task, json!({ "approve": accept() })).await;
    assert_eq!(later.status, 200, "{}", later.raw);
    let done = alice.wait_terminal(&task, LIMIT).await;
    assert_eq!(done["status"], "completed", "{done}");
    let audit = f.audit();
    assert!(
        audit
            .iter()
            .any(|l| l.contains("reason=\"approval_in_call\"") && l.contains("starter=\"alice\"")),
        "{}",
        audit.join("\n")
    );
}

/// Ordinary questions (forms) are still answered inside the creating call,
/// as the 2026-07-28 multi round-trip flow intends, and carry no ticket.
#[tokio::test]
async fn a_form_is_still_answered_inside_the_creating_call() {
    let f = Fixture::start().await;
    let alice = f.as_("alice");
    let first = alice.call("form", json!({ "label": "x" })).await;
    let result = first.result().clone();
    assert_eq!(result["resultType"], "input_required", "{}", first.raw);
    let request = &result["inputRequests"]["form"];
    assert!(
        ticket_of(request).is_none(),
        "a form has no ticket: {request}"
    );
    let retry = alice
        .request(
            "tools/call",
            json!({
                "name": "form",
                "arguments": { "label": "x" },
                "inputResponses": { "form": { "action": "accept", "content": { "env": "staging", "count": 2 } } },
                "requestState": result["requestState"],
            }),
        )
        .await;
    assert_eq!(retry.status, 200, "{}", retry.raw);
    assert_eq!(retry.result()["resultType"], "task", "{}", retry.raw);
    let task = retry.result()["taskId"].as_str().unwrap().to_owned();
    let done = alice.wait_terminal(&task, LIMIT).await;
    assert_eq!(
        done["result"]["structuredContent"]["answer"]["content"]["env"], "staging",
        "{done}"
    );
}

/// A 2025-06-18 client (stdio, the local user) whose call waits: the
/// question comes as `elicitation/create` with its ticket. Answering it with
/// the request's own id is an answer inside the creating call; answering it
/// with the ticket is the starter approving their own run under four eyes:
/// both are dropped (a JSON-RPC response gets no reply), audited, and reach
/// nothing.
#[tokio::test]
async fn a_waiting_legacy_call_cannot_approve_its_own_run() {
    let gate = tool(
        "gate",
        "hybrid",
        "ask.sh",
        "approval_inputs = [\"approve\"]\nfour_eyes = true\nlegacy = \"wait\"\nmax_wait = \"60s\"",
    );
    let setup = Setup::with(Options {
        extra: gate,
        ..Options::default()
    });
    let mut server = common::StdioServer::start(&setup);
    let init = server
        .request_raw(
            "initialize",
            json!({ "protocolVersion": "2025-06-18", "capabilities": { "elicitation": {} },
                    "clientInfo": { "name": "legacy-stdio", "version": "1" } }),
        )
        .await;
    assert_eq!(init["result"]["protocolVersion"], "2025-06-18", "{init}");
    server
        .send_line(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
        .await;
    let call = server
        .send_request(
            "tools/call",
            json!({ "name": "gate", "arguments": { "label": "prod" } }),
        )
        .await;
    // The question arrives on stdout while the call waits.
    let asked: Value = wait_for("the elicitation/create request", LIMIT, async || {
        server.request_raw("ping", json!({})).await;
        server
            .seen
            .iter()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|m| m["method"] == "elicitation/create")
            .ok_or_else(|| server.seen.join("\n"))
    })
    .await;
    let ticket = asked["params"]["_meta"]["taskgate/approval"]["ticket"]
        .as_str()
        .unwrap_or_else(|| panic!("no approval ticket: {asked}"))
        .to_owned();
    let answer = json!({ "action": "accept", "content": { "ok": true } });
    for id in [asked["id"].clone(), json!(ticket)] {
        server
            .send(&json!({ "jsonrpc": "2.0", "id": id, "result": answer }))
            .await;
    }
    let audit = wait_for("both refusals in the audit trail", LIMIT, async || {
        server.request_raw("ping", json!({})).await;
        let audit: Vec<String> = server
            .stderr_text()
            .lines()
            .filter(|l| l.contains("taskgate::audit"))
            .map(plain)
            .collect();
        let has = |reason: &str| {
            audit
                .iter()
                .any(|l| l.contains("outcome=\"refused\"") && l.contains(reason))
        };
        if has("reason=\"approval_in_call\"") && has("reason=\"four_eyes\"") {
            Ok(audit)
        } else {
            Err(audit.join("\n"))
        }
    })
    .await;
    assert!(
        !audit
            .iter()
            .any(|l| l.contains("action=\"answer\"") && l.contains("outcome=\"ok\"")),
        "{}",
        audit.join("\n")
    );
    let mut delivered = Vec::new();
    for run in setup.runs() {
        for entry in std::fs::read_dir(run.join("input"))
            .into_iter()
            .flatten()
            .flatten()
        {
            if entry
                .file_name()
                .to_string_lossy()
                .ends_with(".response.json")
            {
                delivered.push(entry.path());
            }
        }
    }
    assert!(
        delivered.is_empty(),
        "an answer reached the run: {delivered:?}"
    );
    // The call is still waiting: no response to it has been written.
    assert!(
        !server
            .seen
            .iter()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .any(|m| m["id"] == call && m.get("method").is_none()),
        "the call finished: {}",
        server.seen.join("\n")
    );
}

/// The terminal client approves with a ticket as it answers a task:
/// `taskgate tasks result --answer … TICKET`. The starter's attempt is refused
/// under four eyes; the approver's lets the run finish.
#[tokio::test]
async fn the_terminal_client_approves_with_a_ticket_and_refuses_the_starter() {
    let f = Fixture::start().await;
    let alice = f.as_("alice");
    let task = alice.start_task("deploy", json!({ "label": "cli" })).await;
    let asked = alice.until_status(&task, "input_required", LIMIT).await;
    let ticket = ticket_of(&asked["inputRequests"]["approve"])
        .unwrap_or_else(|| panic!("no approval ticket: {asked}"));
    let cli = |who: &str| {
        let bearer = Bearer::new(who);
        let mut cmd = f.setup.command(&[
            "tasks",
            "result",
            "--url",
            &f.server.url(),
            "--token-env",
            &bearer.var,
            "--json",
            "--answer",
            "ok=true",
            &ticket,
        ]);
        cmd.env(&bearer.var, &bearer.token);
        cmd.stdin(std::process::Stdio::null());
        cmd
    };
    let starter = tokio::task::spawn_blocking({
        let mut cmd = cli("alice");
        move || cmd.output().expect("run taskgate")
    })
    .await
    .unwrap();
    assert!(!starter.status.success(), "{starter:?}");
    let said = String::from_utf8_lossy(&starter.stderr);
    assert!(said.contains("four eyes"), "{said}");
    assert!(f.answers_delivered().is_empty());
    let approver = tokio::task::spawn_blocking({
        let mut cmd = cli("bob");
        move || cmd.output().expect("run taskgate")
    })
    .await
    .unwrap();
    assert!(approver.status.success(), "{approver:?}");
    let done = alice.wait_terminal(&task, LIMIT).await;
    assert_eq!(done["status"], "completed", "{done}");
}
